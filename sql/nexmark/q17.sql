-- q17: auction statistics per day.
CREATE MATERIALIZED VIEW q17 AS
  SELECT auction, to_char(date_time, '%Y-%m-%d') AS day,
         count(*) AS total_bids,
         count(CASE WHEN price < 10000 THEN 1 END) AS rank1_bids,
         count(CASE WHEN price >= 10000 AND price < 1000000 THEN 1 END) AS rank2_bids,
         count(CASE WHEN price >= 1000000 THEN 1 END) AS rank3_bids,
         min(price) AS min_price, max(price) AS max_price, avg(price) AS avg_price, sum(price) AS sum_price
  FROM bid
  GROUP BY auction, to_char(date_time, '%Y-%m-%d');
