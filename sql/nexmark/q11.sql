-- q11: user sessions. Bids per bidder per session (bids less than 10 s apart).
CREATE MATERIALIZED VIEW q11 AS
  SELECT bidder, count(*) AS bid_count, window_start AS starttime, window_end AS endtime
  FROM SESSION(bid, date_time, INTERVAL '10' SECOND, bidder)
  GROUP BY bidder, window_start, window_end;
