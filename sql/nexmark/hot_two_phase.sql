-- hot_two_phase: bids per auction in two phases: each shard counts its share of the hot
-- auction's bids (by a bucket of the row), one shard merges the shares.
CREATE MATERIALIZED VIEW hot_two_phase WITH (two_phase_aggregation = true) AS
  SELECT auction, count(*) AS bids, max(price) AS top, sum(price) AS total FROM bid GROUP BY auction;
