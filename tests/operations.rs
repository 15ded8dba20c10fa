//! What an operator relies on outside SQL: logs a pipeline can parse, the Grafana dashboard's
//! queries naming metrics the server exports, and backups taken and restored with
//! `weir checkpoint`.

mod common;

use common::TestServer;

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
