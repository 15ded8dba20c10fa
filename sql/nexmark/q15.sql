-- q15: bidding statistics per day. The reference query's count(DISTINCT ...) FILTER (WHERE ...)
-- is written as count(DISTINCT CASE ... END), which counts the same (NULLs are not counted).
CREATE MATERIALIZED VIEW q15 AS
  SELECT to_char(date_time, '%Y-%m-%d') AS day,
         count(*) AS total_bids,
         count(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids,
         count(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids,
         count(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids,
         count(DISTINCT bidder) AS total_bidders,
         count(DISTINCT CASE WHEN price < 10000 THEN bidder END) AS rank1_bidders,
         count(DISTINCT CASE WHEN price >= 10000 AND price < 1000000 THEN bidder END) AS rank2_bidders,
         count(DISTINCT CASE WHEN price >= 1000000 THEN bidder END) AS rank3_bidders,
         count(DISTINCT auction) AS total_auctions,
         count(DISTINCT CASE WHEN price < 10000 THEN auction END) AS rank1_auctions,
         count(DISTINCT CASE WHEN price >= 10000 AND price < 1000000 THEN auction END) AS rank2_auctions,
         count(DISTINCT CASE WHEN price >= 1000000 THEN auction END) AS rank3_auctions
  FROM bid
  GROUP BY to_char(date_time, '%Y-%m-%d');
