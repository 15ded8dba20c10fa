-- The headline pipeline: Kafka in, a windowed view, Kafka and PostgreSQL out, exactly once.
-- Against a local broker (scripts/kafka-server.sh start, or Apache Kafka / Redpanda on
-- 127.0.0.1:9092: see deploy/kafka.md) and PostgreSQL (scripts/pg-server.sh start: port 5433):
--
--   kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --create --topic bids --partitions 4
--   kafka-topics.sh --bootstrap-server 127.0.0.1:9092 --create --topic per_auction --partitions 4
--     (Redpanda: rpk topic create bids per_auction -p 4; other brokers: any Kafka admin client.
--      Weir refuses a source or sink on a topic that does not exist: 42704)
--   psql -h 127.0.0.1 -p 5433 -U postgres -c 'CREATE DATABASE analytics'
--   psql -h 127.0.0.1 -p 4566 -d dev -U root -f sql/kafka_pipeline.sql
--
-- Something must write bids to the topic. Here Weir does it itself: the built-in Nexmark
-- generator, 10,000 bids a second, delivered to `bids` by a PLAIN Kafka sink.
CREATE SOURCE nexmark_bid
  WITH (connector = 'nexmark', nexmark.table.type = 'bid', nexmark.event.num = '100000000',
        nexmark.events.per.second = '10000');
CREATE SINK bids_to_kafka AS SELECT auction, bidder, price, date_time FROM nexmark_bid
  WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '127.0.0.1:9092')
  FORMAT PLAIN ENCODE JSON;

-- The pipeline itself.
CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
  _kafka_partition INT, _kafka_offset BIGINT,
  WATERMARK FOR date_time AS date_time - INTERVAL '5' SECOND)
WITH (connector = 'kafka', topic = 'bids', properties.bootstrap.server = '127.0.0.1:9092',
      scan.startup.mode = 'earliest') FORMAT PLAIN ENCODE JSON;

CREATE MATERIALIZED VIEW per_auction AS
  SELECT window_start, auction, count(*) AS n, max(price) AS top
  FROM TUMBLE(bids, date_time, INTERVAL '10' SECOND)
  GROUP BY window_start, auction;

-- Each checkpoint's changes in one Kafka transaction: read per_auction with
-- isolation.level = read_committed; keys are {"window_start": ..., "auction": ...}.
CREATE SINK to_kafka FROM per_auction WITH (connector = 'kafka', topic = 'per_auction',
  properties.bootstrap.server = '127.0.0.1:9092', primary_key = 'window_start,auction')
  FORMAT UPSERT ENCODE JSON;

-- Each checkpoint's changes and the sink's marker in one PostgreSQL transaction; the table is
-- made on first use.
CREATE SINK to_pg FROM per_auction WITH (connector = 'jdbc',
  jdbc.url = 'jdbc:postgresql://127.0.0.1:5433/analytics?user=postgres', table.name = 'per_auction',
  primary_key = 'window_start,auction', auto_create = 'true');

-- A sink over a query: the expensive bids, as they come.
CREATE SINK expensive AS SELECT auction, bidder, price, date_time FROM bids WHERE price > 1000000
  WITH (connector = 'jdbc', jdbc.url = 'jdbc:postgresql://127.0.0.1:5433/analytics?user=postgres',
        table.name = 'expensive_bids', auto_create = 'true');

SHOW SINKS;
SELECT * FROM weir_catalog.sources;
SELECT * FROM weir_catalog.sinks;
