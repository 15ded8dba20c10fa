-- q6: average selling price per seller, over each seller's last 10 auctions (by expiry) that
-- had a bid while open. A Top-N (ROW_NUMBER) over q4's winning bids, as RisingWave writes it;
-- `id` breaks ties so the answer is deterministic.
CREATE MATERIALIZED VIEW q6 AS
  SELECT seller, avg(final) AS avg_price
  FROM (
    SELECT seller, final,
           ROW_NUMBER() OVER (PARTITION BY seller ORDER BY expires DESC, id DESC) AS rownum
    FROM (
      SELECT a.id, a.seller, a.expires, max(b.price) AS final
      FROM auction a JOIN bid b ON a.id = b.auction
      WHERE b.date_time BETWEEN a.date_time AND a.expires
      GROUP BY a.id, a.seller, a.expires
    ) winning
  ) ranked
  WHERE rownum <= 10
  GROUP BY seller;
