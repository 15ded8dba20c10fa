-- q10: log to file system. Bids with the date and the minute they fall in (Weir keeps them in a
-- view; a file sink will come with the sink work).
CREATE MATERIALIZED VIEW q10 AS
  SELECT auction, bidder, price, date_time, extra,
         to_char(date_time, '%Y-%m-%d') AS date, to_char(date_time, '%H:%M') AS time
  FROM bid;
