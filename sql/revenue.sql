-- Materialized views kept up to date as orders and customers change:
--   psql -h 127.0.0.1 -p 4566 -d dev -U root -f sql/revenue.sql
DROP TABLE IF EXISTS orders, customers CASCADE;
CREATE TABLE orders (id BIGINT PRIMARY KEY, customer BIGINT, amount DOUBLE PRECISION, ts TIMESTAMP);
CREATE TABLE customers (id BIGINT PRIMARY KEY, region VARCHAR);
CREATE MATERIALIZED VIEW revenue AS
  SELECT c.region, count(*) AS n, sum(o.amount) AS total, max(o.amount) AS top
  FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region;
CREATE MATERIALIZED VIEW big_regions AS SELECT region, total FROM revenue WHERE total > 1000;

INSERT INTO customers VALUES (1, 'eu'), (2, 'us');
INSERT INTO orders VALUES (1, 1, 400, now()), (2, 1, 700, now()), (3, 2, 90, now());
FLUSH;
SELECT * FROM revenue ORDER BY region;
SELECT * FROM big_regions;

-- Delete the largest order: eu's maximum falls back to the next one, and eu leaves big_regions.
DELETE FROM orders WHERE id = 2;
UPDATE customers SET region = 'emea' WHERE id = 1;
FLUSH;
SELECT * FROM revenue ORDER BY region;
SELECT * FROM big_regions;
-- How the view runs: operators, exchanges between shards.
EXPLAIN CREATE MATERIALIZED VIEW revenue2 AS
  SELECT c.region, count(*) AS n FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region;
