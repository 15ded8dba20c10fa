-- q21: add channel id. Known channels get a fixed id, others the url's channel_id parameter.
CREATE MATERIALIZED VIEW q21 AS
  SELECT auction, bidder, price, channel,
         CASE
           WHEN lower(channel) = 'apple' THEN '0'
           WHEN lower(channel) = 'google' THEN '1'
           WHEN lower(channel) = 'facebook' THEN '2'
           WHEN lower(channel) = 'baidu' THEN '3'
           ELSE regexp_replace(url, '^.*channel_id=([^&]*).*$', '\1')
         END AS channel_id
  FROM bid
  WHERE price % 10 = 0;
