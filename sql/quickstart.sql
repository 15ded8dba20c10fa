-- The first five minutes with Weir: psql -h 127.0.0.1 -p 4566 -d dev -U root -f sql/quickstart.sql
CREATE TABLE IF NOT EXISTS t (id INT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP);
INSERT INTO t VALUES (1, 'a', 1.5, '2026-01-01 00:00:01'), (2, 'b', 2.5, now()), (3, 'a', 4.0, now());
UPDATE t SET price = 3 WHERE id = 1;
DELETE FROM t WHERE id = 2;
-- An INSERT of an existing key replaces the row.
INSERT INTO t VALUES (3, 'a', 5.0, now());
SELECT name, count(*) AS n, sum(price) AS total FROM t GROUP BY name ORDER BY 1;
-- A view that stays equal to its query as the table changes.
CREATE MATERIALIZED VIEW IF NOT EXISTS spend AS SELECT name, count(*) AS n, sum(price) AS total FROM t GROUP BY name;
INSERT INTO t VALUES (4, 'b', 7.5, now());
FLUSH;
SELECT * FROM spend ORDER BY name;
