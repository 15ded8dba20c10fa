-- q20: expand bid with auction. Bids on category-10 auctions with the auction's columns.
CREATE MATERIALIZED VIEW q20 AS
  SELECT b.auction, b.bidder, b.price, b.channel, b.url, b.date_time AS bid_date_time,
         a.item_name, a.description, a.initial_bid, a.reserve, a.date_time AS auction_date_time,
         a.expires, a.seller, a.category
  FROM bid b JOIN auction a ON b.auction = a.id
  WHERE a.category = 10;
