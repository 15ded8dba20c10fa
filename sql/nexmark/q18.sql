-- q18: each bidder's last bid on each auction. Ties on time are broken by the bid's other
-- columns, so the answer is deterministic (ROW_NUMBER over ties is arbitrary in SQL).
CREATE MATERIALIZED VIEW q18 AS
  SELECT auction, bidder, price, channel, url, date_time, extra
  FROM (
    SELECT *, ROW_NUMBER() OVER (
      PARTITION BY bidder, auction ORDER BY date_time DESC, price DESC, channel, url
    ) AS rank_number
    FROM bid
  ) ranked
  WHERE rank_number <= 1;
