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
