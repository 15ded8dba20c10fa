-- q5: hot items. The auctions with the most bids in each 10 s window, every 2 s.
CREATE MATERIALIZED VIEW q5 AS
  SELECT auction_bids.auction, auction_bids.num
  FROM (
    SELECT auction, count(*) AS num, window_start AS starttime
    FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
    GROUP BY window_start, auction
  ) AS auction_bids
  JOIN (
    SELECT max(count_bids.num) AS maxn, count_bids.starttime_c
    FROM (
      SELECT count(*) AS num, window_start AS starttime_c
      FROM HOP(bid, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
      GROUP BY auction, window_start
    ) AS count_bids
    GROUP BY count_bids.starttime_c
  ) AS max_bids
  ON auction_bids.starttime = max_bids.starttime_c AND auction_bids.num >= max_bids.maxn;
