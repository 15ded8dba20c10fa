-- q13: bounded side input join. Bids joined with a side table (here a table, filled once).
CREATE TABLE side_input (key BIGINT PRIMARY KEY, value VARCHAR);
INSERT INTO side_input SELECT i, 'side-' || CAST(i AS VARCHAR) FROM generate_series(0, 9999) AS i;
CREATE MATERIALIZED VIEW q13 AS
  SELECT b.auction, b.bidder, b.price, b.date_time, s.value
  FROM bid b JOIN side_input s ON b.auction % 10000 = s.key;
