-- hot: bids per auction, where one hot auction takes half the bids (the generator's default
-- nexmark.hot.auction.ratio = 2): that auction's rows all meet in one shard.
CREATE MATERIALIZED VIEW hot AS
  SELECT auction, count(*) AS bids, max(price) AS top, sum(price) AS total FROM bid GROUP BY auction;
