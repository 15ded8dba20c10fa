-- q1: currency conversion. Bid prices in euros.
CREATE MATERIALIZED VIEW q1 AS SELECT auction, bidder, 0.908 * price AS price, date_time, extra FROM bid;
