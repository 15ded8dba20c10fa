//! What an operator relies on outside SQL: logs a pipeline can parse, the Grafana dashboard's
//! queries naming metrics the server exports, backups taken and restored with
//! `weir checkpoint`, and what a running view has done (`EXPLAIN ANALYZE MATERIALIZED VIEW`).

mod common;

use common::TestServer;

/// `EXPLAIN ANALYZE MATERIALIZED VIEW` shows the running view's operators as a tree, each with
/// the rows it took and gave since the view started and its state, under the view's epochs; by
/// the simple and the extended protocol alike.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_what_each_operator_of_a_running_view_did() {
    let server = TestServer::start();
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE orders (id INT PRIMARY KEY, customer INT, amount INT);
         CREATE TABLE customers (id INT PRIMARY KEY, region VARCHAR);
         CREATE MATERIALIZED VIEW by_region AS
           SELECT c.region, count(*) AS n FROM orders o JOIN customers c ON o.customer = c.id GROUP BY c.region;
         INSERT INTO customers VALUES (1, 'north'), (2, 'south');
         INSERT INTO orders VALUES (10, 1, 5), (11, 1, 7), (12, 2, 9), (13, 3, 1);
         FLUSH;",
    )
    .await
    .unwrap();
    let simple: Vec<String> = c
        .simple_query("EXPLAIN ANALYZE MATERIALIZED VIEW by_region")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => Some(r.get(0).unwrap().to_string()),
            _ => None,
        })
        .collect();
    let extended = plan_by_extended_protocol(&c).await;
    let text = simple.join("\n");
    assert!(
        simple[0].starts_with("Materialize by_region: ") && simple[0].contains(" epochs, barrier latency last "),
        "{text}"
    );
    let line = |prefix: &str| {
        simple.iter().find(|l| l.trim_start().starts_with(prefix)).unwrap_or_else(|| panic!("no {prefix} in:\n{text}"))
    };
    // The orders: four rows in; the join: six in (four orders, two customers), three matches out.
    assert!(line("Source orders").contains("[rows in 4, out 4, time "), "{text}");
    let join = line("HashJoin: Inner");
    assert!(join.contains("[rows in 6, out 3, time ") && join.contains(" keys, "), "{text}");
    // The aggregate keeps its two groups.
    assert!(line("HashAgg").contains("out 2, time "), "{text}");
    // Inputs under what they feed.
    let depth = |prefix: &str| line(prefix).len() - line(prefix).trim_start().len();
    assert!(depth("Source orders") > depth("HashJoin") && depth("HashJoin") > depth("HashAgg"), "{text}");
    assert_eq!(extended.len(), simple.len());
    // A CREATE of the same name fails after its plan was built and checked: the running view's
    // figures stay.
    let duplicate =
        "CREATE MATERIALIZED VIEW by_region AS SELECT customer, count(*) AS n FROM orders GROUP BY customer";
    c.batch_execute(duplicate).await.unwrap_err();
    let again = plan_by_extended_protocol(&c).await;
    assert!(again.iter().any(|l| l.contains("HashJoin") && l.contains("[rows in 6, out 3, time ")), "{again:?}");
    // Only a materialized view has operators.
    let error = c.simple_query("EXPLAIN ANALYZE MATERIALIZED VIEW orders").await.unwrap_err();
    assert_eq!(error.code(), Some(&tokio_postgres::error::SqlState::WRONG_OBJECT_TYPE));
}

/// `EXPLAIN ANALYZE MATERIALIZED VIEW by_region`'s lines, in order, by the extended protocol.
async fn plan_by_extended_protocol(c: &tokio_postgres::Client) -> Vec<String> {
    let rows = c.query("EXPLAIN ANALYZE MATERIALIZED VIEW by_region", &[]).await.unwrap();
    rows.iter().map(|r| r.get::<_, String>(0)).collect()
}

/// With `--log-format json` every line is one JSON object, and a view's warning names the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_naming_the_view() {
    let mut server = TestServer::start_with(&["--log-format", "json"]);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (x INT);
         CREATE MATERIALIZED VIEW inverse AS SELECT 1 / x AS y FROM t;
         INSERT INTO t VALUES (0), (1);
         FLUSH;",
    )
    .await
    .unwrap();
    server.stop();
    let log = server.log_text();
    let lines: Vec<serde_json::Value> = log
        .lines()
        .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}")))
        .collect();
    assert!(lines.iter().all(|l| l["timestamp"].is_string() && l["level"].is_string() && l["message"].is_string()));
    let warning = lines
        .iter()
        .find(|l| l["level"] == "WARN" && l["message"].as_str().unwrap().contains("Divide by zero"))
        .unwrap_or_else(|| panic!("no warning of the failing expression:\n{log}"));
    assert_eq!(warning["span"]["view"], "inverse", "{warning}");
    assert!(lines.iter().any(|l| l["message"] == "state flushed"), "{log}");
}

/// Every `weir_*` name in `expr` (a PromQL expression), with the labels matched right after it
/// (`name{label="..."}`).
fn metrics_named(expr: &str) -> Vec<(String, Vec<String>)> {
    let mut found = Vec::new();
    let mut rest = expr;
    while let Some(at) = rest.find("weir_") {
        let tail = &rest[at..];
        let end = tail.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(tail.len());
        let name = tail[..end].to_string();
        let mut labels = Vec::new();
        if let Some(selector) = tail[end..].strip_prefix('{') {
            let selector = &selector[..selector.find('}').expect("a closed selector")];
            for matcher in selector.split(',') {
                let label = matcher.split(['=', '!', '~']).next().unwrap().trim();
                labels.push(label.to_string());
            }
        }
        found.push((name, labels));
        rest = &tail[end..];
    }
    found
}

/// The Grafana dashboard (deploy/grafana/weir.json) is valid JSON whose every query names a
/// metric `/metrics` exports (histograms by their `_bucket` series), with labels it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grafana_dashboard_queries_metrics_the_server_exports() {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/grafana/weir.json");
    let dashboard: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let server = TestServer::start();
    let c = server.connect().await;
    // Labelled series appear once something has a view, a source and a sink.
    c.batch_execute(
        "CREATE TABLE t (k INT, x INT);
         CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n FROM t GROUP BY k;
         INSERT INTO t VALUES (1, 1), (2, 0);
         FLUSH;",
    )
    .await
    .unwrap();
    let exposition = server.metrics_text();
    let mut kinds = std::collections::BTreeMap::new();
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix("# TYPE ") {
            let (name, kind) = rest.split_once(' ').unwrap();
            kinds.insert(name.to_string(), kind.to_string());
        }
    }
    assert!(kinds.len() > 30, "{exposition}");
    let mut queries = 0;
    let mut ids = std::collections::BTreeSet::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        assert!(ids.insert(panel["id"].as_i64().unwrap()), "panel ids are unique");
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = target["expr"].as_str().unwrap();
            assert!(target["refId"].is_string(), "{target}");
            let named = metrics_named(expr);
            assert!(!named.is_empty(), "a query without a Weir metric: {expr}");
            for (name, labels) in named {
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|suffix| {
                        name.strip_suffix(suffix).filter(|base| kinds.get(*base).is_some_and(|k| k == "histogram"))
                    })
                    .unwrap_or(&name);
                assert!(kinds.contains_key(family), "{expr}: {family} is not exported");
                // Labels matched must be the metric's own (instance comes from Prometheus).
                let samples: Vec<&str> = exposition.lines().filter(|l| l.starts_with(&format!("{name}{{"))).collect();
                for label in labels.iter().filter(|l| *l != "instance") {
                    let has = samples.iter().any(|s| s.contains(&format!("{label}=\"")));
                    assert!(samples.is_empty() || has, "{expr}: {name} has no label {label}");
                }
                queries += 1;
            }
        }
    }
    assert!(queries >= 30, "{queries} queries");
    let variables: Vec<&str> =
        dashboard["templating"]["list"].as_array().unwrap().iter().map(|v| v["name"].as_str().unwrap()).collect();
    assert_eq!(variables, ["datasource", "instance"]);
}

/// `weir checkpoint ...` with `args`: its exit code and what it printed.
fn weir_checkpoint(args: &[&str]) -> (i32, String) {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_weir")).arg("checkpoint").args(args).output().unwrap();
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    (out.status.code().unwrap_or(-1), text)
}

/// The epochs `weir checkpoint list` shows as complete, oldest first.
fn complete_epochs(url: &str) -> Vec<String> {
    let (code, out) = weir_checkpoint(&["list", "--checkpoint-url", url]);
    assert_eq!(code, 0, "{out}");
    out.lines().filter(|l| l.ends_with("complete")).map(|l| l.split_whitespace().next().unwrap().to_string()).collect()
}

/// A backup restored: `list` shows the checkpoints, `verify` finds them whole, `restore` puts an
/// older one into a new data directory, where a server (with a store of its own) has the rows
/// and views as of that checkpoint; a damaged file makes `verify` exit 1 naming it, and
/// `restore` refuses a directory that holds a store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_checkpoint_is_listed_verified_and_restored_into_a_new_data_directory() {
    let store = tempfile::tempdir().unwrap();
    let url = store.path().join("checkpoints").to_str().unwrap().to_string();
    // Checkpoints only at DDL and at the stop, so each holds a known set of rows.
    let args = ["--checkpoint-url", &url, "--checkpoint-interval", "off", "--checkpoint-keep", "10"];
    let mut server = TestServer::start_with(&args);
    let c = server.connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT, x INT);
         CREATE MATERIALIZED VIEW per_k AS SELECT k, count(*) AS n, sum(x) AS total FROM t GROUP BY k;
         INSERT INTO t SELECT i % 7, i FROM generate_series(1, 1000) AS s(i);
         CREATE TABLE marker (x INT);",
    )
    .await
    .unwrap();
    // The checkpoint the last DDL completed with holds the first rows; it is uploaded in the
    // background: wait until the store lists it.
    let taken: i64 = c.query_one("SELECT max(epoch)::BIGINT FROM weir_catalog.checkpoints", &[]).await.unwrap().get(0);
    let with_first = taken.to_string();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !complete_epochs(&url).contains(&with_first) {
        assert!(std::time::Instant::now() < deadline, "checkpoint {with_first} is not uploaded");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    c.batch_execute("INSERT INTO t SELECT i % 7, i FROM generate_series(1001, 3000) AS s(i);").await.unwrap();
    server.stop();
    let epochs = complete_epochs(&url);
    assert!(epochs.len() >= 3 && epochs.last() != Some(&with_first), "{epochs:?}");

    let (code, out) = weir_checkpoint(&["verify", "--checkpoint-url", &url]);
    assert_eq!(code, 0, "{out}");
    assert_eq!(out.lines().filter(|l| l.contains(": whole (")).count(), epochs.len(), "{out}");

    // Each restore goes into a new data directory, and its server checkpoints elsewhere.
    for (epoch, rows) in [(Some(with_first.as_str()), 1000), (None, 3000)] {
        let target = tempfile::tempdir().unwrap();
        let to = target.path().join("data");
        let mut restore = vec!["restore", "--checkpoint-url", &url, "--to", to.to_str().unwrap()];
        restore.extend(epoch.iter().flat_map(|e| ["--epoch", e]));
        let (code, out) = weir_checkpoint(&restore);
        assert_eq!(code, 0, "{out}");
        assert!(out.starts_with(&format!("restored checkpoint {}", epoch.unwrap_or(epochs.last().unwrap()))), "{out}");
        let (code, out) = weir_checkpoint(&restore);
        assert_eq!(code, 1, "a second restore into the same directory: {out}");
        assert!(out.contains("already holds a store"), "{out}");
        let own = target.path().join("own-checkpoints");
        let restored = TestServer::start_on(&to, &["--checkpoint-url", own.to_str().unwrap()]);
        let r = restored.connect().await;
        assert_eq!(r.query_one("SELECT count(*) FROM t", &[]).await.unwrap().get::<_, i64>(0), rows);
        let view = common::rows(&r, "SELECT k, n, total FROM per_k").await;
        let query = common::rows(&r, "SELECT k, count(*), sum(x) FROM t GROUP BY k").await;
        assert_eq!(view, query, "the restored view is its query over the restored rows");
    }

    // One object damaged (same size, other bytes): verify names it and fails.
    let object = walk(&store.path().join("checkpoints"))
        .into_iter()
        .find(|p| !p.to_string_lossy().contains("manifest") && std::fs::metadata(p).unwrap().len() > 100)
        .expect("a checkpoint file");
    let mut bytes = std::fs::read(&object).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0xff;
    std::fs::write(&object, bytes).unwrap();
    let (code, out) = weir_checkpoint(&["verify", "--checkpoint-url", &url]);
    assert_eq!(code, 1, "{out}");
    assert!(out.contains("does not match its checksum"), "{out}");
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            files.extend(walk(&path));
        } else {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// `podman` with the runtime this machine needs, and what it printed (its exit checked).
fn podman(args: &[&str]) -> String {
    let out = std::process::Command::new("podman").arg("--runtime").arg("/usr/sbin/runc").args(args).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).trim().to_string();
    assert!(out.status.success(), "podman {args:?}: {}{text}", String::from_utf8_lossy(&out.stderr));
    text
}

/// The container image (deploy/Dockerfile, built by scripts/container-image.sh on a Debian base
/// made here) runs Weir as a non-root user: it becomes healthy, takes a view over psql, stops
/// cleanly at SIGTERM (exit 0), and a new container on the same volume serves the view.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_container_image_serves_and_keeps_its_volume_across_a_stop() {
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/container-image.sh");
    let tag = format!("localhost/weir:test-{}", std::process::id());
    let built = std::process::Command::new(script).arg(env!("CARGO_BIN_EXE_weir")).arg(&tag).output().unwrap();
    assert!(built.status.success(), "{}", String::from_utf8_lossy(&built.stderr));
    let volume = format!("weir-test-{}", std::process::id());
    podman(&["volume", "create", &volume]);
    let _cleanup = Containers { volume: volume.clone(), tag: tag.clone() };
    let (port, metrics) = (common::free_port(), common::free_port());
    // Host networking: the machine's loopback, without a container network to set up.
    let run = |name: &str| {
        podman(&[
            "run",
            "-d",
            "--name",
            name,
            "--network",
            "host",
            "-e",
            &format!("WEIR_LISTEN=127.0.0.1:{port}"),
            "-e",
            &format!("WEIR_METRICS_LISTEN=127.0.0.1:{metrics}"),
            "-v",
            &format!("{volume}:/var/lib/weir"),
            &tag,
        ])
    };
    let conn = format!("host=127.0.0.1 port={port} user=weir dbname=dev");
    let connect = || async {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            match tokio_postgres::connect(&conn, tokio_postgres::NoTls).await {
                Ok((client, connection)) => {
                    tokio::spawn(connection);
                    return client;
                }
                Err(e) if std::time::Instant::now() > deadline => panic!("the container does not serve: {e}"),
                Err(_) => tokio::time::sleep(std::time::Duration::from_millis(200)).await,
            }
        }
    };
    let (first, second) = (format!("{volume}-1"), format!("{volume}-2"));
    run(&first);
    let c = connect().await;
    c.batch_execute(
        "CREATE TABLE t (k INT, x INT);
         CREATE MATERIALIZED VIEW per_k AS SELECT k, sum(x) AS total FROM t GROUP BY k;
         INSERT INTO t SELECT i % 3, i FROM generate_series(1, 300) AS s(i);
         FLUSH;",
    )
    .await
    .unwrap();
    let want = common::rows(&c, "SELECT k, total FROM per_k").await;
    assert_eq!(want, ["0|15150", "1|14950", "2|15050"]);
    // The image's HEALTHCHECK (`weir ready`) passes, and Weir runs as the image's own user.
    podman(&["healthcheck", "run", &first]);
    assert_eq!(podman(&["exec", &first, "id", "-un"]), "weir");
    podman(&["stop", "-t", "75", &first]);
    assert_eq!(podman(&["inspect", &first, "--format", "{{.State.ExitCode}}"]), "0");
    let logs = podman(&["logs", &first]);
    assert!(!logs.contains('\u{1b}'), "no colours in a container's log");
    run(&second);
    let c = connect().await;
    assert_eq!(common::rows(&c, "SELECT k, total FROM per_k").await, want);
}

/// Removes a test's containers (named after its volume), volume and image, passed or failed.
struct Containers {
    volume: String,
    tag: String,
}

impl Drop for Containers {
    fn drop(&mut self) {
        let podman = || {
            let mut c = std::process::Command::new("podman");
            c.arg("--runtime")
                .arg("/usr/sbin/runc")
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null());
            c
        };
        for n in 1..=2 {
            let _ = podman().args(["rm", "-f", &format!("{}-{n}", self.volume)]).status();
        }
        let _ = podman().args(["volume", "rm", "-f", &self.volume]).status();
        let _ = podman().args(["rmi", "-f", &self.tag]).status();
        // The build's intermediate stage (the binary's), left untagged.
        let _ = podman().args(["image", "prune", "-f"]).status();
    }
}

/// What scripts/check-kubernetes.py says of the kustomization in `dir` (under the repository),
/// which it must pass.
fn check_kubernetes(dir: &str) -> String {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let venv = std::env::var("WEIR_TEST_VENV").unwrap_or_else(|_| "/var/tmp/weir-test-venv".into());
    let out = std::process::Command::new(format!("{venv}/bin/python"))
        .arg(root.join("scripts/check-kubernetes.py"))
        .arg(root.join(dir))
        .output()
        .expect("the test virtual environment (scripts/install-deps.sh test)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{text}");
    text
}

/// deploy/kubernetes validates against Kubernetes' schema and its pieces agree
/// (scripts/check-kubernetes.py), and its weir.toml is a configuration this build accepts.
#[test]
fn the_kubernetes_manifests_are_valid_and_agree_with_each_other() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    check_kubernetes("deploy/kubernetes");
    let config = weir::config::Config::resolve(Some(&root.join("deploy/kubernetes/weir.toml")), Default::default())
        .unwrap_or_else(|e| panic!("deploy/kubernetes/weir.toml: {e}"));
    assert_eq!(config.data_dir, std::path::PathBuf::from("/var/lib/weir"));
    assert_eq!(config.log_format, weir::config::LogFormat::Json);
    // The example config files too.
    weir::config::Config::resolve(Some(&root.join("deploy/weir.toml")), Default::default()).unwrap();
}

/// deploy/kubernetes/cluster (the base as a three-node cluster with a reference etcd) validates
/// and agrees with itself (scripts/check-kubernetes.py), and the flags its pods get are flags
/// this build accepts, with the base's weir.toml.
#[test]
fn the_kubernetes_cluster_overlay_is_valid_and_its_flags_are_accepted() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = check_kubernetes("deploy/kubernetes/cluster");
    let line = text.lines().find_map(|l| l.strip_prefix("cluster-flags: ")).expect("the pods' cluster flags");
    let words: Vec<&str> = line.split(' ').collect();
    let flag = |name: &str| words.iter().position(|w| *w == name).map(|i| words[i + 1]);
    let config =
        weir::config::Config::resolve(Some(&root.join("deploy/kubernetes/weir.toml")), Default::default()).unwrap();
    let lease = flag("--cluster-lease").unwrap().trim_end_matches('s').parse().unwrap();
    let cluster = weir::config::ClusterConfig::parse(
        flag("--cluster").unwrap(),
        flag("--node-id"),
        flag("--advertise"),
        config.listen,
        flag("--exchange-listen"),
        Some(std::time::Duration::from_secs(lease)),
    )
    .unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(cluster.endpoints.len(), 3);
    assert_eq!(cluster.prefix, "/weir/weir/");
    assert_eq!(cluster.advertise, "weir-0.weir-headless.default.svc:4566");
    assert_eq!(cluster.exchange, "weir-0.weir-headless.default.svc:4567");
}

/// Runs `sql` (an example's text) with psql as its comment says, stopping at the first error;
/// what psql printed (unaligned, `|` between values).
fn psql_file(server: &TestServer, name: &str, sql: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join(name);
    std::fs::write(&file, sql).unwrap();
    let port = server.port.to_string();
    let out = std::process::Command::new("psql")
        .args(["-X", "-A", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-p", &port, "-U", "root", "-d", "dev", "-f"])
        .arg(&file)
        .output()
        .expect("psql (scripts/install-deps.sh test)");
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "sql/{name} failed:\n{text}");
    text
}

/// Every example in sql/ (the Nexmark queries have their own test, tests/oracle.rs) runs with
/// psql as its comment says, and shows what its comments promise; the Kafka pipeline's against
/// the test broker and PostgreSQL (topics and database its own), until rows reach both sinks.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_sql_example_runs_as_its_comment_says() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("sql");
    let mut examples: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".sql"))
        .collect();
    examples.sort();
    assert_eq!(examples, ["kafka_pipeline.sql", "quickstart.sql", "revenue.sql", "windows.sql"], "a new example?");
    let server = TestServer::start();
    let read = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap();

    let out = psql_file(&server, "quickstart.sql", &read("quickstart.sql"));
    assert!(out.contains("a|2|8\nb|1|7.5\n"), "the view after the last insert:\n{out}");
    // Twice, as a user trying it again would (IF NOT EXISTS).
    psql_file(&server, "quickstart.sql", &read("quickstart.sql"));

    let out = psql_file(&server, "revenue.sql", &read("revenue.sql"));
    assert!(out.contains("eu|2|1100|700\nus|1|90|90\n"), "{out}");
    assert!(out.contains("emea|1|400|400\nus|1|90|90\n"), "after the delete and the move:\n{out}");
    assert!(out.contains("Exchange") || out.contains("exchange"), "EXPLAIN shows the plan:\n{out}");

    let out = psql_file(&server, "windows.sql", &read("windows.sql"));
    assert!(out.contains("1|14|5|2026-01-01 00:00:02|per_10s|2026-01-01 00:00:00"), "the late row kept:\n{out}");

    // The pipeline, on topics and a database of its own, on a server of its own (its `bids` is
    // a source; windows.sql's a table).
    let server = TestServer::start();
    let (bids, per_auction) =
        (common::kafka::topic("ex_bids", 4).await, common::kafka::topic("ex_per_auction", 4).await);
    let (pg, jdbc) = common::postgres_database("example").await;
    let servers = common::kafka_bootstrap();
    let sql = read("kafka_pipeline.sql")
        .replace("topic = 'bids'", &format!("topic = '{bids}'"))
        .replace("topic = 'per_auction'", &format!("topic = '{per_auction}'"))
        .replace("'127.0.0.1:9092'", &format!("'{servers}'"))
        .replace("jdbc:postgresql://127.0.0.1:5433/analytics?user=postgres", &jdbc);
    assert_ne!(sql, read("kafka_pipeline.sql"));
    psql_file(&server, "kafka_pipeline.sql", &sql);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    loop {
        let windows = pg.query("SELECT count(*) FROM per_auction", &[]).await.map(|r| r[0].get::<_, i64>(0));
        if windows.as_ref().is_ok_and(|n| *n > 0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no window reached PostgreSQL: {windows:?}");
        tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    }
    let c = server.connect().await;
    let states = common::rows(&c, "SELECT sink_name, state FROM weir_catalog.sinks").await;
    assert_eq!(
        states,
        ["bids_to_kafka|running", "expensive|running", "to_kafka|running", "to_pg|running"],
        "every sink runs"
    );
}
