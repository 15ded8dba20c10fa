-- q0: pass-through. Every bid, unchanged.
CREATE MATERIALIZED VIEW q0 AS SELECT auction, bidder, price, date_time, extra FROM bid;
