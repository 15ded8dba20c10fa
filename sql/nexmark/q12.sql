-- q12: bids per bidder in 10 s processing-time windows. `bid.p_time` is declared
-- `AS PROCTIME()` (sources.sql): the time Weir stored the bid at, kept with it, so a view
-- rebuilt from the stored bids, or the same SELECT run as a batch, sees the same windows.
-- The watermark follows `date_time`, not `p_time`, so these windows are plain groups.
CREATE MATERIALIZED VIEW q12 AS
  SELECT bidder, count(*) AS bid_count, window_start, window_end
  FROM TUMBLE(bid, p_time, INTERVAL '10' SECOND)
  GROUP BY bidder, window_start, window_end;
