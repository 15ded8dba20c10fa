-- q19: the 10 highest bids of each auction, with their rank. Ties on price are broken by the
-- bid's other columns, so the answer is deterministic (ROW_NUMBER over ties is arbitrary in SQL).
CREATE MATERIALIZED VIEW q19 AS
  SELECT auction, bidder, price, channel, url, date_time, extra, rank_number
  FROM (
    SELECT *, ROW_NUMBER() OVER (
      PARTITION BY auction ORDER BY price DESC, date_time, bidder, channel, url
    ) AS rank_number
    FROM bid
  ) ranked
  WHERE rank_number <= 10;
