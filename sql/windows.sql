-- Event time: windows that close as the watermark passes, late rows kept in a table:
--   psql -h 127.0.0.1 -p 4566 -d dev -U root -f sql/windows.sql
DROP TABLE IF EXISTS bids, bids_late CASCADE;
CREATE TABLE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
  WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND) APPEND ONLY;

-- One row per auction per 10 s, once the window has closed; rows up to 30 s late correct it,
-- later ones land in bids_late.
CREATE MATERIALIZED VIEW per_10s AS
  SELECT window_start, window_end, auction, count(*) AS n, max(price) AS top
  FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
  GROUP BY window_start, window_end, auction
  EMIT ON WINDOW CLOSE ALLOW LATENESS INTERVAL '30' SECOND LATE ROWS TO bids_late;

-- Hot auctions over sliding 10 s windows, updated continuously.
CREATE MATERIALIZED VIEW hot AS
  SELECT window_start, auction, count(*) AS n
  FROM HOP(bids, date_time, INTERVAL '2' SECOND, INTERVAL '10' SECOND)
  GROUP BY window_start, auction;

-- Bidding sessions: a bidder's bids less than 20 s apart.
CREATE MATERIALIZED VIEW bidder_sessions AS
  SELECT bidder, window_start, window_end, count(*) AS bids
  FROM SESSION(bids, date_time, INTERVAL '20' SECOND, bidder)
  GROUP BY bidder, window_start, window_end;

INSERT INTO bids VALUES
  (1, 10, 100, '2026-01-01 00:00:01'), (1, 11, 120, '2026-01-01 00:00:04'),
  (2, 10, 300, '2026-01-01 00:00:08'), (1, 12, 130, '2026-01-01 00:00:12');
FLUSH;
-- The watermark is 00:00:07: no window has closed yet.
SELECT * FROM per_10s;
SELECT * FROM hot ORDER BY window_start, auction;

INSERT INTO bids VALUES (2, 11, 310, '2026-01-01 00:00:16');
FLUSH;
-- Watermark 00:00:11: [00:00:00, 00:00:10) has closed.
SELECT * FROM per_10s ORDER BY window_start, auction;

-- 00:00:03 is late but within 30 s: the window's row is corrected.
INSERT INTO bids VALUES (1, 13, 999, '2026-01-01 00:00:03');
FLUSH;
SELECT * FROM per_10s ORDER BY window_start, auction;

-- Jump ahead a minute: everything before 00:00:25 is final, and a row for it is late.
INSERT INTO bids VALUES (3, 10, 50, '2026-01-01 00:01:00');
INSERT INTO bids VALUES (1, 14, 5, '2026-01-01 00:00:02');
FLUSH;
SELECT * FROM per_10s ORDER BY window_start, auction;
SELECT auction, bidder, price, date_time, view_name, window_start FROM bids_late;
SELECT * FROM bidder_sessions ORDER BY bidder, window_start;
SELECT * FROM weir_catalog.event_time ORDER BY view_name;
