-- q7: highest bid. The bids with the highest price of their 10 s window.
CREATE MATERIALIZED VIEW q7 AS
  SELECT b.auction, b.price, b.bidder, b.date_time
  FROM bid b
  JOIN (
    SELECT max(price) AS maxprice, window_end AS date_time
    FROM TUMBLE(bid, date_time, INTERVAL '10' SECOND)
    GROUP BY window_end
  ) b1 ON b.price = b1.maxprice
  WHERE b.date_time > b1.date_time - INTERVAL '10' SECOND AND b.date_time <= b1.date_time;
