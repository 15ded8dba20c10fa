-- q9: winning bids. Each auction with its highest bid made while it was open (the earliest
-- such bid on a tie; `bidder` breaks a tie of both, so the answer is deterministic).
CREATE MATERIALIZED VIEW q9 AS
  SELECT id, item_name, description, initial_bid, reserve, date_time, expires, seller, category,
         auction, bidder, price, bid_date_time
  FROM (
    SELECT a.id, a.item_name, a.description, a.initial_bid, a.reserve, a.date_time, a.expires,
           a.seller, a.category, b.auction, b.bidder, b.price, b.date_time AS bid_date_time,
           ROW_NUMBER() OVER (PARTITION BY a.id ORDER BY b.price DESC, b.date_time, b.bidder) AS rownum
    FROM auction a JOIN bid b ON a.id = b.auction
    WHERE b.date_time BETWEEN a.date_time AND a.expires
  ) ranked
  WHERE rownum <= 1;
