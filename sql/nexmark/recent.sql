-- recent (not a Nexmark query; a temporal filter, ADR 13): the bids Weir stored in the last
-- 10 s of processing time (`bid.p_time`, sources.sql), counted and summed. Rows enter the view
-- as they are stored and leave it 10 s later, so its state is bounded by the window, however
-- long the stream runs.
CREATE MATERIALIZED VIEW recent AS
  SELECT count(*) AS bids, sum(price) AS volume FROM bid WHERE p_time > now() - INTERVAL '10' SECOND;
