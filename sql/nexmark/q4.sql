-- q4: average winning price per category (the highest bid while the auction ran).
CREATE MATERIALIZED VIEW q4 AS
  SELECT q.category, avg(q.final) AS avg_price
  FROM (
    SELECT max(b.price) AS final, a.category
    FROM auction a JOIN bid b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
    GROUP BY a.id, a.category
  ) q
  GROUP BY q.category;
