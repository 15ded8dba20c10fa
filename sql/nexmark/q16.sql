-- q16: channel statistics per day (as q15, per channel).
CREATE MATERIALIZED VIEW q16 AS
  SELECT channel, to_char(date_time, '%Y-%m-%d') AS day, max(to_char(date_time, '%H:%M')) AS minute,
         count(*) AS total_bids,
         count(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids,
         count(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids,
         count(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids,
         count(DISTINCT bidder) AS total_bidders,
         count(DISTINCT CASE WHEN price < 10000 THEN bidder END) AS rank1_bidders,
         count(DISTINCT auction) AS total_auctions
  FROM bid
  GROUP BY channel, to_char(date_time, '%Y-%m-%d');
