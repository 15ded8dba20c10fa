//! `ENCODE AVRO` for Kafka sources and sinks and `ENCODE PROTOBUF` for sources, against a schema
//! registry: messages produced and read by Confluent's own Python serializers
//! (tests/clients/avro_client.py, tests/clients/protobuf_client.py), through
//! `tests/doubles/schema_registry.py`, a TEST DOUBLE of a Confluent Schema Registry's REST API
//! (no schema registry server is installable here).
//!
//! Protobuf: columns of every kind from the registry's latest schema (its imports fetched as
//! references); messages written with an older schema (a field since deleted, an `int32` since
//! widened) and framed with another message index; another message type, an unknown schema id,
//! a body that does not decode and an unframed value as dead letters; the source's descriptors
//! kept through SIGKILL while the registry is away, and read on once it is back; bare messages
//! under a descriptor file into declared columns, and CREATE's errors.
//!
//! Avro: columns from the registry's latest schema; messages written with an older schema
//! (a field it lacks, a type promotion) and a newer one (a field deleted, one added) resolved
//! against the reader schema the source keeps, also after SIGKILL and after the registry's
//! latest schema changed; an unknown schema id and a body that does not decode as dead letters;
//! a registry that goes away (the source retries, says why) and comes back (it catches up),
//! one over HTTPS with a private CA;
//! bare bodies under a fixed schema; an UPSERT sink whose keys and values a consumer decodes,
//! subject naming, registry basic auth.

mod common;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::kafka::topic;
use common::{assert_eventually, free_port, kafka_bootstrap, rows, test_python, TestDouble, TestServer};

/// The schema-registry test double.
struct Registry(TestDouble);

impl Registry {
    /// A registry on `port` (a free one when None), with `extra` arguments (`--user`, `--data`).
    fn start(port: Option<u16>, extra: &[&str]) -> Registry {
        let extra: Vec<String> = extra.iter().map(|a| a.to_string()).collect();
        Registry(TestDouble::start("schema_registry.py", port, &extra))
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.0.port)
    }
}

/// Runs tests/clients/avro_client.py with `args`; its output.
fn avro_client(args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/avro_client.py");
    let out = Command::new(test_python()).arg(script).args(args).output().expect("tests/clients/avro_client.py");
    assert!(out.status.success(), "avro_client.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Produces `records` (a JSON list) to `topic` with `schema`, serialized through `registry`:
/// the schema's id.
fn produce(topic: &str, schema: &str, records: &str, registry: &Registry) -> String {
    let bootstrap = kafka_bootstrap();
    let url = registry.url();
    let args = ["produce", "--bootstrap", &bootstrap, "--topic", topic, "--schema", schema, "--records", records];
    avro_client(&[&args[..], &["--registry", &url]].concat())
}

/// Produces `records` framed by hand: with schema id `id`, or bare bodies when None.
fn produce_framed(topic: &str, schema: &str, records: &str, id: Option<u32>) -> String {
    let bootstrap = kafka_bootstrap();
    let args = ["produce", "--bootstrap", &bootstrap, "--topic", topic, "--schema", schema, "--records", records];
    match id {
        Some(id) => avro_client(&[&args[..], &["--id", &id.to_string()]].concat()),
        None => avro_client(&[&args[..], &["--raw"]].concat()),
    }
}

/// Waits (at most 30 s) until `source` shows `retrying` because the schema registry cannot
/// be asked.
async fn until_retrying_for_the_registry(client: &tokio_postgres::Client, source: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    let query = format!("SELECT state, error FROM weir_catalog.sources WHERE source_name = '{source}'");
    loop {
        let state = rows(client, &query).await;
        if state.first().is_some_and(|s| s.starts_with("retrying|") && s.contains("schema registry")) {
            return;
        }
        assert!(Instant::now() < deadline, "the registry's absence does not show: {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Sends `value` as it is.
fn produce_bytes(topic: &str, value: &[u8]) {
    let producer = common::kafka::producer(None);
    producer.send(rdkafka::producer::BaseRecord::<'_, (), [u8]>::to(topic).payload(value)).map_err(|(e, _)| e).unwrap();
    rdkafka::producer::Producer::flush(&producer, common::kafka::TIMEOUT).unwrap();
}

const V1: &str = r#"{"type": "record", "name": "Bid", "fields": [{"name": "id", "type": "long"},
  {"name": "price", "type": "long"}, {"name": "bidder", "type": ["null", "string"], "default": null}]}"#;
/// Older: no bidder, price an int (promoted to long).
const V0: &str = r#"{"type": "record", "name": "Bid", "fields": [{"name": "id", "type": "long"},
  {"name": "price", "type": "int"}]}"#;
/// Newer: bidder deleted, channel added.
const V2: &str = r#"{"type": "record", "name": "Bid", "fields": [{"name": "id", "type": "long"},
  {"name": "price", "type": "long"}, {"name": "channel", "type": "string", "default": "web"}]}"#;
/// Latest later: price gone.
const V3: &str = r#"{"type": "record", "name": "Bid", "fields": [{"name": "id", "type": "long"},
  {"name": "bidder", "type": ["null", "string"], "default": null}]}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_avro_source_resolves_older_and_newer_schemas_and_keeps_bad_values_as_dead_letters() {
    let registry = Registry::start(None, &[]);
    let bids = topic("avro_bids", 1).await;
    let v1 = produce(
        &bids,
        V1,
        r#"[{"id": 1, "price": 10, "bidder": "ann"}, {"id": 2, "price": 20, "bidder": null}]"#,
        &registry,
    );
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms"]);
    let client = server.connect().await;
    let source = |name: &str| {
        format!(
            "CREATE SOURCE {name} WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}', \
             kafka.retry.ms = '200') FORMAT PLAIN ENCODE AVRO (schema.registry = '{}')",
            kafka_bootstrap(),
            registry.url()
        )
    };
    client.batch_execute(&source("bids")).await.unwrap();
    let columns =
        rows(&client, "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'bids'").await;
    assert_eq!(columns, ["bidder|text", "id|bigint", "price|bigint"], "the columns are the latest schema's");
    client.batch_execute("CREATE MATERIALIZED VIEW seen AS SELECT id, price, bidder FROM bids").await.unwrap();

    produce(&bids, V0, r#"[{"id": 3, "price": 30}]"#, &registry);
    produce(&bids, V2, r#"[{"id": 4, "price": 40, "channel": "app"}]"#, &registry);
    produce_framed(&bids, V1, r#"[{"id": 5, "price": 50, "bidder": "eve"}]"#, Some(9999));
    let mut garbage = vec![0u8];
    garbage.extend_from_slice(&v1.parse::<u32>().unwrap().to_be_bytes());
    garbage.extend_from_slice(&[0x02, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff]);
    produce_bytes(&bids, &garbage);
    produce_bytes(&bids, b"{\"id\": 6}");
    produce(&bids, V1, r#"[{"id": 7, "price": 70, "bidder": "bob"}]"#, &registry);

    let want = ["1|10|ann", "2|20|NULL", "3|30|NULL", "4|40|NULL", "7|70|bob"];
    assert_eventually(&client, "SELECT id, price, bidder FROM seen", &want).await;
    let dead = rows(&client, "SELECT error FROM weir_catalog.dead_letters").await;
    assert_eq!(dead.len(), 3, "{dead:?}");
    assert!(dead.iter().any(|e| e.contains("schema id 9999 is not in the schema registry")), "{dead:?}");
    assert!(dead.iter().any(|e| e.contains("does not decode")), "{dead:?}");
    assert!(dead.iter().any(|e| e.contains("wire format")), "{dead:?}");

    // The registry's latest schema drops price, which the source's reader schema needs (it
    // has no default): its messages cannot be read as the source's rows (dead letters). The
    // source keeps its reader schema through SIGKILL and a restart; a new source takes the new
    // latest.
    produce(&bids, V3, r#"[{"id": 8, "bidder": "cy"}]"#, &registry);
    produce(&bids, V1, r#"[{"id": 9, "price": 90, "bidder": "dee"}]"#, &registry);
    let want = ["1|10|ann", "2|20|NULL", "3|30|NULL", "4|40|NULL", "7|70|bob", "9|90|dee"];
    assert_eventually(&client, "SELECT id, price, bidder FROM seen", &want).await;
    let dead = rows(&client, "SELECT error FROM weir_catalog.dead_letters").await;
    assert!(dead.iter().any(|e| e.contains("cannot be read as the source's schema")), "{dead:?}");
    drop(client);
    let client = server.sigkill_and_reconnect().await;
    assert_eventually(&client, "SELECT id, price, bidder FROM seen", &want).await;
    client.batch_execute(&source("bids_now")).await.unwrap();
    let columns =
        rows(&client, "SELECT column_name FROM information_schema.columns WHERE table_name = 'bids_now'").await;
    assert_eq!(columns, ["bidder", "id"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn values_that_do_not_fit_are_dead_letters_and_spoil_nothing_after_them() {
    let registry = Registry::start(None, &[]);
    let bids = topic("avro_misfits", 1).await;
    let records = r#"[{"id": 1, "price": 10, "bidder": "ann"}, {"id": 2, "price": 100000, "bidder": "big"},
                      {"id": 3, "price": 30, "bidder": null}]"#;
    let v1: u32 = produce(&bids, V1, records, &registry).parse().unwrap();
    // V1's {"id": 4, "price": 40, "bidder": null} by hand: zigzag longs 8 and 80, union branch 0.
    let frame = [&[0u8][..], &v1.to_be_bytes(), &[0x08, 0x50, 0x00]].concat();
    produce_bytes(&bids, &frame[..5]);
    produce_bytes(&bids, &[frame.clone(), frame].concat());
    produce(&bids, V1, r#"[{"id": 5, "price": 50, "bidder": "eve"}]"#, &registry);
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE narrow (id BIGINT, price SMALLINT, bidder TEXT NOT NULL) WITH (connector = 'kafka', \
             topic = '{bids}', properties.bootstrap.server = '{}') FORMAT PLAIN ENCODE AVRO (schema.registry = '{}')",
            kafka_bootstrap(),
            registry.url()
        ))
        .await
        .unwrap();
    assert_eventually(&client, "SELECT id, price, bidder FROM narrow", &["1|10|ann", "5|50|eve"]).await;
    let dead =
        rows(&client, "SELECT position, error FROM weir_catalog.dead_letters WHERE source_name = 'narrow'").await;
    assert_eq!(dead.len(), 4, "{dead:?}");
    for (offset, why) in [(1, "fit"), (2, "NOT NULL"), (3, "no body"), (4, "holds 2 values")] {
        assert!(
            dead.iter().any(|d| d.starts_with(&format!("{bids}:0:{offset}|")) && d.contains(why)),
            "{offset}: {dead:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_that_goes_away_holds_the_source_until_it_is_back() {
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("registry.json").display().to_string();
    let port = free_port();
    let registry = Registry::start(Some(port), &["--data", &file]);
    let bids = topic("avro_away", 1).await;
    produce(&bids, V1, r#"[{"id": 1, "price": 10, "bidder": "ann"}]"#, &registry);
    let server = TestServer::start();
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bids (id BIGINT, price BIGINT) WITH (connector = 'kafka', topic = '{bids}', \
             properties.bootstrap.server = '{}', kafka.retry.ms = '200') \
             FORMAT PLAIN ENCODE AVRO (schema.registry = '{}');
             CREATE MATERIALIZED VIEW total AS SELECT count(*) AS n, sum(price) AS s FROM bids",
            kafka_bootstrap(),
            registry.url()
        ))
        .await
        .unwrap();
    assert_eventually(&client, "SELECT n, s FROM total", &["1|10"]).await;

    // A schema registered, then the registry gone before the source has seen its id.
    let v2 = avro_client(&[
        "register",
        "--registry",
        &registry.url(),
        "--subject",
        &format!("{bids}-value"),
        "--schema",
        V2,
    ]);
    drop(registry);
    produce_framed(
        &bids,
        V2,
        r#"[{"id": 2, "price": 20, "channel": "app"}, {"id": 3, "price": 30, "channel": "web"}]"#,
        Some(v2.parse().unwrap()),
    );
    until_retrying_for_the_registry(&client, "bids").await;
    assert_eq!(rows(&client, "SELECT n, s FROM total").await, ["1|10"], "nothing read past the unknown schema");

    let _registry = Registry::start(Some(port), &["--data", &file]);
    assert_eventually(&client, "SELECT n, s FROM total", &["3|60"]).await;
    assert_eventually(&client, "SELECT state FROM weir_catalog.sources WHERE source_name = 'bids'", &["running"]).await;
    assert!(rows(&client, "SELECT * FROM weir_catalog.dead_letters").await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_avro_bodies_under_a_fixed_schema_and_create_errors() {
    let bids = topic("avro_bare", 1).await;
    produce_framed(
        &bids,
        V1,
        r#"[{"id": 1, "price": 10, "bidder": "ann"}, {"id": 2, "price": 20, "bidder": null}]"#,
        None,
    );
    let server = TestServer::start();
    let client = server.connect().await;
    let schema = V1.replace('\n', " ");
    client
        .batch_execute(&format!(
            "CREATE SOURCE bids WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE AVRO (schema = '{schema}')",
            kafka_bootstrap()
        ))
        .await
        .unwrap();
    assert_eventually(&client, "SELECT id, price, bidder FROM bids", &["1|10|ann", "2|20|NULL"]).await;
    let bad = client
        .batch_execute(&format!(
            "CREATE SOURCE nothing WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE AVRO",
            kafka_bootstrap()
        ))
        .await
        .unwrap_err();
    assert_eq!(bad.code().map(|c| c.code()), Some("22023"), "{bad:?}");
    let unreachable = client
        .batch_execute(&format!(
            "CREATE SOURCE nothing WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE AVRO (schema.registry = 'http://127.0.0.1:{}')",
            kafka_bootstrap(),
            free_port()
        ))
        .await
        .unwrap_err();
    assert_eq!(unreachable.code().map(|c| c.code()), Some("08001"), "a registry that cannot be asked: {unreachable:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_avro_sink_writes_keys_and_values_that_consumers_decode() {
    let registry = Registry::start(None, &["--user", "weir:registry-secret"]);
    let upserts = topic("avro_upserts", 1).await;
    let plain = topic("avro_plain", 1).await;
    let server = TestServer::start_with(&["--checkpoint-interval", "200ms"]);
    let client = server.connect().await;
    client
        .batch_execute(
            "CREATE TABLE accounts (id INT PRIMARY KEY, owner TEXT, balance NUMERIC(10, 2), opened TIMESTAMP);
             INSERT INTO accounts VALUES (1, 'ann', 10.50, '2026-01-02 03:04:05'), (2, NULL, 2.25, NULL);
             CREATE TABLE events (id BIGINT, kind TEXT) APPEND ONLY;
             INSERT INTO events VALUES (1, 'open'), (2, 'close');",
        )
        .await
        .unwrap();
    let registry_options = |password: &str| {
        format!(
            "schema.registry = '{}', schema.registry.username = 'weir', schema.registry.password = '{password}'",
            registry.url()
        )
    };
    client.batch_execute("CREATE MATERIALIZED VIEW balances AS SELECT * FROM accounts").await.unwrap();
    let wrong = client
        .batch_execute(&format!(
            "CREATE SINK refused FROM balances WITH (connector = 'kafka', topic = '{upserts}', \
             properties.bootstrap.server = '{}', primary_key = 'id') FORMAT UPSERT ENCODE AVRO ({})",
            kafka_bootstrap(),
            registry_options("wrong")
        ))
        .await
        .unwrap_err();
    let db = wrong.as_db_error().unwrap();
    assert!(db.message().contains("401") && !db.message().contains("wrong"), "{}", db.message());
    client
        .batch_execute(&format!(
            "CREATE SINK balances_out FROM balances WITH (connector = 'kafka', topic = '{upserts}', \
             properties.bootstrap.server = '{0}', primary_key = 'id') FORMAT UPSERT ENCODE AVRO ({1});
             CREATE SINK events_out AS SELECT id, kind FROM events WITH (connector = 'kafka', topic = '{plain}', \
             properties.bootstrap.server = '{0}') FORMAT PLAIN ENCODE AVRO ({1}, \
             schema.registry.name.strategy = 'record_name_strategy', schema.registry.record.name = 'Event');",
            kafka_bootstrap(),
            registry_options("registry-secret")
        ))
        .await
        .unwrap();
    let (url, bootstrap) = (registry.url(), kafka_bootstrap());
    let auth = ["--auth", "weir:registry-secret"];
    let read = |topic: &str, count: &str| {
        let args = ["consume", "--bootstrap", &bootstrap, "--topic", topic, "--registry", &url, "--count", count];
        avro_client(&[&args[..], &auth[..]].concat())
    };
    let upserted = read(&upserts, "2");
    let mut lines: Vec<&str> = upserted.lines().collect();
    lines.sort();
    assert_eq!(
        lines,
        [
            r#"{"key": {"id": 1}, "value": {"balance": "10.50", "id": 1, "opened": "2026-01-02 03:04:05", "owner": "ann"}}"#,
            r#"{"key": {"id": 2}, "value": {"balance": "2.25", "id": 2, "opened": null, "owner": null}}"#,
        ],
        "{upserted}"
    );
    client.batch_execute("DELETE FROM accounts WHERE id = 2").await.unwrap();
    assert_eq!(read(&upserts, "1"), r#"{"key": {"id": 2}, "value": null}"#, "a tombstone");
    let events = read(&plain, "2");
    assert_eq!(
        events.lines().collect::<Vec<_>>(),
        [
            r#"{"key": null, "value": {"id": 1, "kind": "open"}}"#,
            r#"{"key": null, "value": {"id": 2, "kind": "close"}}"#
        ]
    );
    let subjects = avro_client(&[&["subjects", "--registry", &url][..], &auth[..]].concat());
    assert!(
        subjects.contains(&format!("\"{upserts}-key\"")) && subjects.contains(&format!("\"{upserts}-value\"")),
        "{subjects}"
    );
    assert!(subjects.contains("\"Event\""), "record_name_strategy names the subject by the record: {subjects}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_over_https_is_checked_against_its_ca() {
    let data = tempfile::tempdir().unwrap();
    let file = data.path().join("registry.json").display().to_string();
    let bids = topic("avro_https", 1).await;
    {
        let plain = Registry::start(None, &["--data", &file]);
        produce(&bids, V1, r#"[{"id": 1, "price": 10, "bidder": "ann"}]"#, &plain);
    }
    let certs = common::test_certs();
    let (cert, key) = (certs.join("server.pem").display().to_string(), certs.join("server.key").display().to_string());
    let https = Registry::start(None, &["--data", &file, "--tls", &cert, &key]);
    let url = format!("https://localhost:{}", https.0.port);
    let server = TestServer::start();
    let client = server.connect().await;
    let source = |name: &str, ca: &str| {
        format!(
            "CREATE SOURCE {name} WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}') \
             FORMAT PLAIN ENCODE AVRO (schema.registry = '{url}', schema.registry.ca.location = '{}')",
            kafka_bootstrap(),
            certs.join(ca).display()
        )
    };
    let untrusted = client.batch_execute(&source("untrusted", "other_ca.pem")).await.unwrap_err();
    assert_eq!(untrusted.code().map(|c| c.code()), Some("08001"), "{untrusted:?}");
    client.batch_execute(&source("bids", "ca.pem")).await.unwrap();
    assert_eventually(&client, "SELECT id, price, bidder FROM bids", &["1|10|ann"]).await;
}

/// Compiles tests/fixtures/protobuf/`version`/bid.proto (with common.proto and the well-known
/// types it imports) into a FileDescriptorSet in `dir`: its path.
fn descriptors(dir: &Path, version: &str) -> String {
    let fixtures = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/protobuf");
    let out = dir.join(format!("bid_{version}.pb"));
    let status = Command::new("protoc")
        .arg("--include_imports")
        .arg(format!("--descriptor_set_out={}", out.display()))
        .arg(format!("-I{}", fixtures.join(version).display()))
        .arg(format!("-I{}", fixtures.display()))
        .arg("bid.proto")
        .status()
        .expect("protoc (scripts/install-deps.sh installs protobuf-compiler and libprotobuf-dev)");
    assert!(status.success(), "protoc failed on {version}/bid.proto");
    out.display().to_string()
}

/// Produces `records` (JSON mappings of `message`, a JSON list) to `topic`: through `registry`
/// by ProtobufSerializer (its schema id), or bare messages when None.
fn produce_protobuf(topic: &str, set: &str, message: &str, records: &str, registry: Option<&Registry>) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/protobuf_client.py");
    let bootstrap = kafka_bootstrap();
    let mut args = vec![
        "produce".to_string(),
        "--bootstrap".into(),
        bootstrap,
        "--topic".into(),
        topic.into(),
        "--descriptors".into(),
        set.into(),
        "--message".into(),
        message.into(),
        "--records".into(),
        records.into(),
    ];
    match registry {
        Some(registry) => args.extend(["--registry".to_string(), registry.url()]),
        None => args.push("--raw".into()),
    }
    let out = Command::new(test_python()).arg(script).args(&args).output().expect("tests/clients/protobuf_client.py");
    assert!(out.status.success(), "protobuf_client.py {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_protobuf_source_reads_every_column_kind_older_schemas_and_keeps_bad_values_as_dead_letters() {
    let dir = tempfile::tempdir().unwrap();
    let (v1, v2) = (descriptors(dir.path(), "v1"), descriptors(dir.path(), "v2"));
    let file = dir.path().join("registry.json").display().to_string();
    let port = free_port();
    let registry = Registry::start(Some(port), &["--data", &file]);
    let bids = topic("protobuf_bids", 1).await;
    let full = r#"[{"id": 1, "price": 10, "bidder": "ann", "at": "2026-01-02T03:04:05.123456Z", "channel": "APP",
                   "tags": ["a", "b"], "place": {"city": "Oslo", "country": "NO"}, "note": "hi",
                   "extra": {"k": 5}, "big": "18446744073709551615"}]"#;
    let v1_id = produce_protobuf(&bids, &v1, "demo.Bid", full, Some(&registry));
    // The latest schema when the source is made: price widened, bidder deleted, region added,
    // Ask first in the file (Bid values framed with message index 1).
    let two = r#"[{"id": 2, "price": 3000000000, "region": "eu"}]"#;
    let v2_id = produce_protobuf(&bids, &v2, "demo.Bid", two, Some(&registry));
    let mut server = TestServer::start_with(&["--checkpoint-interval", "200ms"]);
    let client = server.connect().await;
    client
        .batch_execute(&format!(
            "CREATE SOURCE bids WITH (connector = 'kafka', topic = '{bids}', properties.bootstrap.server = '{}', \
             kafka.retry.ms = '200') FORMAT PLAIN ENCODE PROTOBUF (message = 'demo.Bid', schema.registry = '{}')",
            kafka_bootstrap(),
            registry.url()
        ))
        .await
        .unwrap();
    let columns = rows(
        &client,
        "SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'bids' ORDER BY ordinal_position",
    )
    .await;
    assert_eq!(
        columns,
        [
            "at|timestamp with time zone",
            "big|numeric(20,0)",
            "channel|text",
            "extra|jsonb",
            "id|bigint",
            "note|text",
            "place|jsonb",
            "price|bigint",
            "region|text",
            "tags|text[]"
        ],
        "the columns are the latest schema's"
    );
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW seen AS SELECT id, price, at, channel, tags, place ->> 'city' AS city, note, \
             extra ->> 'k' AS k, big, region FROM bids",
        )
        .await
        .unwrap();
    produce_protobuf(&bids, &v2, "demo.Ask", r#"[{"id": 3}]"#, Some(&registry));
    let mut unknown = vec![0u8, 0, 0, 0x27, 0x0f, 0];
    unknown.extend_from_slice(&[0x08, 0x04]);
    produce_bytes(&bids, &unknown);
    let mut garbage = vec![0u8];
    garbage.extend_from_slice(&v1_id.parse::<u32>().unwrap().to_be_bytes());
    garbage.extend_from_slice(&[0, 0x0a, 0xff, 0xff]);
    produce_bytes(&bids, &garbage);
    produce_bytes(&bids, b"{\"id\": 6}");
    produce_protobuf(&bids, &v1, "demo.Bid", r#"[{"id": 7, "price": 70, "bidder": "bob"}]"#, Some(&registry));

    let want = [
        "1|10|2026-01-02 03:04:05.123456+00|APP|{a,b}|Oslo|hi|5|18446744073709551615|",
        "2|3000000000|NULL|CHANNEL_UNSPECIFIED|{}|NULL|NULL|NULL|0|eu",
        "7|70|NULL|CHANNEL_UNSPECIFIED|{}|NULL|NULL|NULL|0|",
    ];
    let query = "SELECT id, price, at, channel, tags, city, note, k, big, region FROM seen";
    assert_eventually(&client, query, &want).await;
    let dead = rows(&client, "SELECT error FROM weir_catalog.dead_letters").await;
    assert_eq!(dead.len(), 4, "{dead:?}");
    for why in [
        "is a demo.Ask; the source reads demo.Bid",
        "schema id 9999 is not in the schema registry",
        "does not decode",
        "wire format",
    ] {
        assert!(dead.iter().any(|e| e.contains(why)), "{why}: {dead:?}");
    }

    // The registry goes away: a restarted source keeps its columns (the descriptors it kept),
    // waits on a schema id it has not seen since, and reads on once the registry is back.
    tokio::time::sleep(Duration::from_secs(1)).await; // a checkpoint past every message
    drop(registry);
    drop(client);
    let client = server.sigkill_and_reconnect().await;
    assert_eventually(&client, query, &want).await;
    // V2's Bid {id: 8, price: 80, channel: WEB} framed by hand: message index path [1].
    let v2_id: u32 = v2_id.parse().unwrap();
    let framed = [&[0u8][..], &v2_id.to_be_bytes(), &[0x02, 0x02, 0x08, 0x08, 0x10, 0x50, 0x28, 0x01]].concat();
    produce_bytes(&bids, &framed);
    until_retrying_for_the_registry(&client, "bids").await;
    let _registry = Registry::start(Some(port), &["--data", &file]);
    let mut more = want.to_vec();
    more.push("8|80|NULL|WEB|{}|NULL|NULL|NULL|0|");
    assert_eventually(&client, query, &more).await;
    assert_eq!(rows(&client, "SELECT count(*) FROM weir_catalog.dead_letters").await, ["4"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bare_protobuf_messages_under_a_descriptor_file_and_create_errors() {
    let dir = tempfile::tempdir().unwrap();
    let v1 = descriptors(dir.path(), "v1");
    let bids = topic("protobuf_bare", 1).await;
    let records = r#"[{"id": 1, "price": 10, "bidder": "ann", "at": "2026-01-02T03:04:05Z", "channel": "WEB"},
                      {"id": 2, "price": 40000}]"#;
    produce_protobuf(&bids, &v1, "demo.Bid", records, None);
    let server = TestServer::start();
    let client = server.connect().await;
    let create = |name: &str, columns: &str, encode: &str| {
        format!(
            "CREATE SOURCE {name} {columns} WITH (connector = 'kafka', topic = '{bids}', \
             properties.bootstrap.server = '{}') FORMAT PLAIN ENCODE PROTOBUF ({encode})",
            kafka_bootstrap()
        )
    };
    let location = format!("message = 'demo.Bid', schema.location = 'file://{v1}'");
    client
        .batch_execute(&create(
            "bids",
            "(id BIGINT, price SMALLINT, bidder TEXT, at TIMESTAMPTZ, channel TEXT)",
            &location,
        ))
        .await
        .unwrap();
    // 40000 does not fit a SMALLINT: a dead letter, the other row read.
    assert_eventually(
        &client,
        "SELECT id, price, bidder, at, channel FROM bids",
        &["1|10|ann|2026-01-02 03:04:05+00|WEB"],
    )
    .await;
    assert_eventually(&client, "SELECT count(*) FROM weir_catalog.dead_letters WHERE source_name = 'bids'", &["1"])
        .await;
    // SHOW CREATE shows the descriptors the source keeps, not only the file it read them from.
    let shown = rows(&client, "SHOW CREATE SOURCE bids").await.join(" ");
    assert!(shown.contains("schema.descriptor"), "{shown}");

    for (encode, state) in [
        (format!("schema.location = 'file://{v1}'"), "22023"),
        ("message = 'demo.Bid'".to_string(), "22023"),
        (format!("message = 'demo.Nope', schema.location = 'file://{v1}'"), "42704"),
        ("message = 'demo.Bid', schema.location = 'file:///nonexistent.pb'".to_string(), "22023"),
        (format!("message = 'demo.Bid', schema.location = 'file://{v1}', schema = '{{}}'"), "22023"),
        (format!("message = 'demo.Bid', schema.registry = 'http://127.0.0.1:{}'", free_port()), "08001"),
    ] {
        let e = client.batch_execute(&create("nothing", "", &encode)).await.unwrap_err();
        assert_eq!(e.code().map(|c| c.code()), Some(state), "{encode}: {e:?}");
    }
    let e = client.batch_execute(&create("nothing", "(id BIGINT, nope TEXT)", &location)).await.unwrap_err();
    assert_eq!(e.code().map(|c| c.code()), Some("42703"), "{e:?}");
}
