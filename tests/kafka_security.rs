//! Kafka over TLS and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512), sources and exactly-once sinks,
//! through `tests/doubles/kafka_front.py`: a TEST DOUBLE of a secured broker that terminates TLS
//! and performs SASL itself in front of the plain test broker (which speaks neither TLS nor
//! SCRAM), rewriting the broker addresses in metadata so that clients stay behind it. Weir's
//! side is librdkafka as with any broker: these tests say nothing about the double's broker.
//!
//! Covered: secrets from environment variables and files (`.ref`), kept out of the log and of
//! SHOW CREATE; mutual
//! TLS; a wrong password, an untrusted certificate, a certificate for another host and a plain
//! client on a TLS port each fail CREATE with a clear 08001; a broker that later refuses the
//! credentials shows in `weir_catalog.sources` and the retry metric, and the source catches up
//! once it takes them again.

mod common;

use std::time::{Duration, Instant};

use common::kafka::{producer, send, topic, upsert_rows};
use common::{
    assert_eventually, assert_sqlstate, free_port, kafka_bootstrap, rows, test_certs, TestDouble, TestServer,
};

/// The secured-broker test double, in front of the test broker.
struct Front(TestDouble);

impl Front {
    /// A front on `port` (a free one when None) with `args` (`--tls`, `--client-ca`, `--sasl`,
    /// `--user`).
    fn start(port: Option<u16>, args: &[String]) -> Front {
        let upstream = ["--upstream".to_string(), kafka_bootstrap(), "--advertise".into(), "localhost".into()];
        Front(TestDouble::start("kafka_front.py", port, &[&upstream[..], args].concat()))
    }

    fn bootstrap(&self) -> String {
        format!("localhost:{}", self.0.port)
    }
}

fn cert(name: &str) -> String {
    test_certs().join(name).display().to_string()
}

/// The front's arguments: TLS with the certificate `name` (server, wrong_host, untrusted).
fn tls(name: &str) -> Vec<String> {
    vec!["--tls".into(), cert(&format!("{name}.pem")), cert(&format!("{name}.key"))]
}

fn sasl(mechanism: &str, user: &str, password: &str) -> Vec<String> {
    vec!["--sasl".into(), mechanism.into(), "--user".into(), format!("{user}:{password}")]
}

/// CREATE SOURCE `name` of `topic` through `front`, with `security` (`, key = 'value'...`).
fn source_sql(name: &str, topic: &str, front: &Front, security: &str) -> String {
    format!(
        "CREATE SOURCE {name} (id BIGINT, v BIGINT) WITH (connector = 'kafka', topic = '{topic}', \
         properties.bootstrap.server = '{}', scan.startup.mode = 'earliest', kafka.retry.ms = '200', \
         kafka.timeout.ms = '5000'{security}) FORMAT PLAIN ENCODE JSON",
        front.bootstrap()
    )
}

fn messages(first: i64, n: i64) -> Vec<(i32, String)> {
    (first..first + n).map(|id| ((id % 2) as i32, format!(r#"{{"id": {id}, "v": {}}}"#, id * 10))).collect()
}

/// The message of `sql`'s error, which must have SQLSTATE `code`.
async fn error_of(client: &tokio_postgres::Client, sql: &str, code: &str) -> String {
    let e = client.batch_execute(sql).await.expect_err(sql);
    let db = e.as_db_error().unwrap_or_else(|| panic!("{sql}: {e}"));
    assert_eq!(db.code().code(), code, "{sql}: {}", db.message());
    db.message().to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scram_over_tls_reads_and_writes_exactly_once_with_secrets_from_env_and_file() {
    let password = "Wonder-land-7";
    let front = Front::start(None, &[tls("server"), sasl("SCRAM-SHA-512", "alice", password)].concat());
    let secrets = tempfile::tempdir().unwrap();
    let password_file = secrets.path().join("kafka-password");
    std::fs::write(&password_file, format!("{password}\n")).unwrap();
    let secrets_dir = secrets.path().display().to_string();
    let server = TestServer::start_with_env(
        &["--secrets-dir", &secrets_dir],
        &[
            ("WEIR_SECRET_KAFKA", password),
            ("WEIR_TEST_NOT_FOR_SQL", password),
            ("WEIR_LOG", "info,weir::server::session=debug"),
        ],
    );
    let client = server.connect().await;
    let input = topic("secure_in", 2).await;
    let output = topic("secure_out", 1).await;
    send(&producer(None), &input, &messages(0, 100));

    let security = |password: &str| {
        format!(
            ", properties.security.protocol = 'SASL_SSL', properties.sasl.mechanism = 'SCRAM-SHA-512', \
             properties.sasl.username = 'alice', {password}, properties.ssl.ca.location = '{}'",
            cert("ca.pem")
        )
    };
    let from_env = security("properties.sasl.password.ref = 'env:WEIR_SECRET_KAFKA'");
    client.batch_execute(&source_sql("bids", &input, &front, &from_env)).await.unwrap();
    // References reach only WEIR_SECRET_* variables and files in the secrets directory, and
    // only for secret options.
    let outside = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(outside.path(), password).unwrap();
    for reference in [
        "properties.sasl.password.ref = 'env:WEIR_TEST_NOT_FOR_SQL'".to_string(),
        format!("properties.sasl.password.ref = 'file:{}'", outside.path().display()),
        format!("properties.sasl.password.ref = 'file:{secrets_dir}/../{}'", outside.path().display()),
    ] {
        assert_sqlstate(&client, &source_sql("refused", &input, &front, &security(&reference)), "22023").await;
    }
    let topic_by_reference =
        source_sql("refused", "x", &front, ", topic.ref = 'env:WEIR_SECRET_KAFKA'").replace(" topic = 'x',", "");
    let e = client.batch_execute(&topic_by_reference).await.unwrap_err();
    assert!(!e.to_string().contains(password), "{e}");
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW per_group AS SELECT id % 3 AS g, count(*) AS n, sum(v) AS total FROM bids GROUP BY g",
        )
        .await
        .unwrap();
    assert_eventually(&client, "SELECT g, n, total FROM per_group", &["0|34|16830", "1|33|16170", "2|33|16500"]).await;

    // The sink writes through the front too: transactions, the marker's consumer group.
    let from_file = security(&format!("properties.sasl.password.ref = 'file:{}'", password_file.display()));
    client
        .batch_execute(&format!(
            "CREATE SINK per_group_out FROM per_group WITH (connector = 'kafka', topic = '{output}', \
             properties.bootstrap.server = '{}', primary_key = 'g'{from_file}) FORMAT UPSERT ENCODE JSON",
            front.bootstrap()
        ))
        .await
        .unwrap();
    send(&producer(None), &input, &messages(100, 50));
    let want = ["0|50|36750", "1|50|37250", "2|50|37750"];
    assert_eventually(&client, "SELECT g, n, total FROM per_group", &want).await;
    let deadline = Instant::now() + Duration::from_secs(30);
    while upsert_rows(&output, &["g", "n", "total"]) != want {
        assert!(
            Instant::now() < deadline,
            "the sink did not deliver: {:?}",
            upsert_rows(&output, &["g", "n", "total"])
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // A password written in the statement works too, and the log never shows it.
    let literal = security(&format!("properties.sasl.password = '{password}'"));
    client.batch_execute(&source_sql("bids_again", &input, &front, &literal)).await.unwrap();
    let shown = rows(&client, "SHOW CREATE SOURCE bids_again").await.join("\n");
    assert!(shown.contains("properties.sasl.password = '[redacted]'") && !shown.contains(password), "{shown}");
    let shown = rows(&client, "SHOW CREATE SOURCE bids").await.join("\n");
    assert!(shown.contains("properties.sasl.password.ref = 'env:WEIR_SECRET_KAFKA'"), "{shown}");
    let shown = rows(&client, "SHOW CREATE SINK per_group_out").await.join("\n");
    assert!(shown.contains("properties.sasl.password.ref = 'file:"), "{shown}");
    let log = server.log_text();
    assert!(log.contains("bids_again"), "statements are logged (at debug level)");
    assert!(!log.contains(password), "the password is in the log:\n{log}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_sasl_and_mutual_tls() {
    let server = TestServer::start();
    let client = server.connect().await;
    let input = topic("secure_plain", 2).await;
    send(&producer(None), &input, &messages(0, 10));

    let sasl_front = Front::start(None, &sasl("PLAIN", "bob", "builder"));
    let plain = ", properties.security.protocol = 'SASL_PLAINTEXT', properties.sasl.mechanism = 'PLAIN', \
                 properties.sasl.username = 'bob', properties.sasl.password = 'builder'";
    client.batch_execute(&source_sql("by_plain", &input, &sasl_front, plain)).await.unwrap();

    let mtls_front = Front::start(None, &[tls("server"), vec!["--client-ca".into(), cert("ca.pem")]].concat());
    let ca = format!(", properties.security.protocol = 'SSL', properties.ssl.ca.location = '{}'", cert("ca.pem"));
    let with_cert = format!(
        "{ca}, properties.ssl.certificate.location = '{}', properties.ssl.key.location = '{}'",
        cert("client.pem"),
        cert("client.key")
    );
    client.batch_execute(&source_sql("by_mtls", &input, &mtls_front, &with_cert)).await.unwrap();
    client
        .batch_execute(
            "CREATE MATERIALIZED VIEW plain_count AS SELECT count(*) AS n FROM by_plain; \
             CREATE MATERIALIZED VIEW mtls_count AS SELECT count(*) AS n FROM by_mtls",
        )
        .await
        .unwrap();
    assert_eventually(&client, "SELECT n FROM plain_count", &["10"]).await;
    assert_eventually(&client, "SELECT n FROM mtls_count", &["10"]).await;

    // Without its certificate the client is turned away at the handshake.
    let message = error_of(&client, &source_sql("no_cert", &input, &mtls_front, &ca), "08001").await;
    assert!(message.contains("SSL"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_connections_fail_create_with_a_clear_error() {
    let server = TestServer::start();
    let client = server.connect().await;
    let input = topic("secure_refused", 2).await;
    let front = Front::start(None, &[tls("server"), sasl("SCRAM-SHA-256", "alice", "right")].concat());
    let scram = |password: &str, ca: &str| {
        format!(
            ", properties.security.protocol = 'SASL_SSL', properties.sasl.mechanism = 'SCRAM-SHA-256', \
             properties.sasl.username = 'alice', properties.sasl.password = '{password}', \
             properties.ssl.ca.location = '{}'",
            cert(ca)
        )
    };
    client.batch_execute(&source_sql("good", &input, &front, &scram("right", "ca.pem"))).await.unwrap();

    let wrong_password =
        error_of(&client, &source_sql("s1", &input, &front, &scram("wrongpass", "ca.pem")), "08001").await;
    assert!(wrong_password.contains("SASL authentication error"), "{wrong_password}");
    assert!(!wrong_password.contains("wrongpass"), "{wrong_password}");

    let untrusted =
        error_of(&client, &source_sql("s2", &input, &front, &scram("right", "other_ca.pem")), "08001").await;
    assert!(untrusted.contains("certificate verify failed"), "{untrusted}");

    // A certificate the trusted CA issued for another host: refused, unless verification of
    // the host name is turned off (which shows that it is what refused it).
    let other_host = Front::start(None, &tls("wrong_host"));
    let ssl = format!(", properties.security.protocol = 'SSL', properties.ssl.ca.location = '{}'", cert("ca.pem"));
    let wrong_host = error_of(&client, &source_sql("s3", &input, &other_host, &ssl), "08001").await;
    assert!(wrong_host.contains("certificate verify failed"), "{wrong_host}");
    let unverified = format!("{ssl}, properties.ssl.endpoint.identification.algorithm = 'none'");
    client.batch_execute(&source_sql("s3", &input, &other_host, &unverified)).await.unwrap();

    // Plain text spoken to a TLS port.
    let plain = ", properties.security.protocol = 'SASL_PLAINTEXT', properties.sasl.mechanism = 'SCRAM-SHA-256', \
                 properties.sasl.username = 'alice', properties.sasl.password = 'right'";
    let mismatch = error_of(&client, &source_sql("s4", &input, &front, plain), "08001").await;
    assert!(mismatch.contains("Disconnected"), "{mismatch}");

    // A secret reference to nothing.
    let unset = ", properties.sasl.password.ref = 'env:WEIR_TEST_NOT_SET_ANYWHERE'";
    assert_sqlstate(&client, &source_sql("s5", &input, &front, unset), "22023").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_later_refuses_the_credentials_shows_in_the_source_state() {
    let server = TestServer::start();
    let client = server.connect().await;
    let input = topic("secure_later", 2).await;
    send(&producer(None), &input, &messages(0, 10));
    let port = free_port();
    let front = Front::start(Some(port), &[tls("server"), sasl("SCRAM-SHA-256", "carol", "first")].concat());
    let security = format!(
        ", properties.security.protocol = 'SASL_SSL', properties.sasl.mechanism = 'SCRAM-SHA-256', \
         properties.sasl.username = 'carol', properties.sasl.password = 'first', properties.ssl.ca.location = '{}'",
        cert("ca.pem")
    );
    client.batch_execute(&source_sql("rotated", &input, &front, &security)).await.unwrap();
    client.batch_execute("CREATE MATERIALIZED VIEW seen AS SELECT count(*) AS n FROM rotated").await.unwrap();
    assert_eventually(&client, "SELECT n FROM seen", &["10"]).await;

    // The broker's password changes under the running source.
    drop(front);
    let front = Front::start(Some(port), &[tls("server"), sasl("SCRAM-SHA-256", "carol", "second")].concat());
    send(&producer(None), &input, &messages(10, 10));
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let state = rows(&client, "SELECT state, error FROM weir_catalog.sources WHERE source_name = 'rotated'").await;
        if state.first().is_some_and(|s| s.starts_with("retrying|") && s.contains("SASL authentication error")) {
            break;
        }
        assert!(Instant::now() < deadline, "the refusal does not show: {state:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let metrics = server.metrics_text();
    let retries = metrics.lines().find(|l| l.starts_with("weir_source_retries_total{source=\"rotated\"}"));
    assert!(retries.is_some_and(|l| !l.ends_with(" 0")), "{retries:?}");

    // It takes them again: the source catches up, nothing lost.
    drop(front);
    let _front = Front::start(Some(port), &[tls("server"), sasl("SCRAM-SHA-256", "carol", "first")].concat());
    assert_eventually(&client, "SELECT n FROM seen", &["20"]).await;
    assert_eventually(&client, "SELECT state FROM weir_catalog.sources WHERE source_name = 'rotated'", &["running"])
        .await;
}
