//! Users keep their data: a data directory written by an earlier release opens with this build,
//! its views answer as they did when it stopped, and they continue exactly: after more changes
//! every view equals its query run as a batch. The same holds for a server restored into an
//! empty data directory from that release's checkpoints alone.
//!
//! Each release whose formats a user may still hold is a fixture in `tests/fixtures/upgrade/<commit>/`:
//! `data.tar.gz` (the data directory, checkpoints included, after a clean stop) and `views.txt`
//! (every view's rows at the stop). `make_upgrade_fixture` (ignored; run it with the release's
//! build) writes a new one:
//! `WEIR_FIXTURE=$(git rev-parse --short HEAD) cargo test --test upgrade -- --ignored make_upgrade_fixture`.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::workload::{
    check_event_time_views, check_views, create_tables, random_events, random_statement, EVENT_TABLE, EVENT_TIME_VIEWS,
    VIEWS,
};
use common::{rows, Rng, TestServer};

/// Views beyond the oracle's, for state the oracle's lists do not keep: (name, query).
const MORE_VIEWS: &[(&str, &str)] = &[
    ("top_two", "SELECT * FROM (SELECT k, g, v, ROW_NUMBER() OVER (PARTITION BY g ORDER BY v DESC, k) AS rn FROM a) t WHERE rn <= 2"),
    ("top_overall", "SELECT * FROM (SELECT k, v, ROW_NUMBER() OVER (ORDER BY v, k) AS rn FROM a) t WHERE rn <= 3"),
];

/// A small operator state cache, so operator state lives in RocksDB, not only in memory.
const CONFIG: &str = "[storage]\nstate_cache_entries = 16\n";

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upgrade")
}

/// Every view's rows, as `views.txt` keeps them: one `name<TAB>row` line per row, in order.
async fn all_view_rows(client: &tokio_postgres::Client) -> String {
    let names = VIEWS.iter().map(|(n, _)| *n).chain(MORE_VIEWS.iter().map(|(n, _)| *n));
    let names = names.chain(EVENT_TIME_VIEWS.iter().map(|(n, _, _)| *n)).chain(["ev_late"]);
    let mut out = String::new();
    for name in names {
        let order = if name == "ev_late" { " ORDER BY view_name, id" } else { "" };
        for row in rows(client, &format!("SELECT * FROM {name}{order}")).await {
            out.push_str(&format!("{name}\t{row}\n"));
        }
    }
    out
}

async fn check_more_views(client: &tokio_postgres::Client, context: &str) {
    for (name, query) in MORE_VIEWS {
        let view = rows(client, &format!("SELECT * FROM {name}")).await;
        assert_eq!(view, rows(client, query).await, "view {name} differs from its query {context}");
    }
}

fn start_config(dir: &Path) -> String {
    let config = dir.join("weir.toml");
    std::fs::write(&config, CONFIG).unwrap();
    config.to_str().unwrap().to_string()
}

/// Writes `tests/fixtures/upgrade/$WEIR_FIXTURE/` with this build.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn make_upgrade_fixture() {
    let name = std::env::var("WEIR_FIXTURE").expect("WEIR_FIXTURE names the release, e.g. its short commit");
    let work = tempfile::tempdir().unwrap();
    let config = start_config(work.path());
    let data = work.path().join("data");
    let mut server = TestServer::start_on(&data, &["--barrier-interval-ms", "50", "--config", &config]);
    let client = server.connect().await;
    create_tables(&client, 4, "(1, 1, 10), (2, 1, 20), (3, 2, 30)", "(1, 15), (2, 5)").await;
    client.batch_execute(EVENT_TABLE).await.unwrap();
    let mut rng = Rng(45);
    let mut next_id = 0;
    for _ in 0..10 {
        client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
    }
    for (name, query) in VIEWS.iter().chain(MORE_VIEWS) {
        client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query}")).await.unwrap();
    }
    for (name, query, clauses) in EVENT_TIME_VIEWS {
        client.batch_execute(&format!("CREATE MATERIALIZED VIEW {name} AS {query} {clauses}")).await.unwrap();
    }
    client.batch_execute("CREATE INDEX a_by_v ON a (v); CREATE INDEX by_group_s ON by_group (s)").await.unwrap();
    for step in 0..80 {
        client.batch_execute(&random_statement(&mut rng)).await.unwrap();
        client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
        if step % 10 == 0 {
            client.batch_execute("FLUSH").await.unwrap();
        }
    }
    check_views(&client, "(making the fixture)").await;
    check_more_views(&client, "(making the fixture)").await;
    check_event_time_views(&client, "(making the fixture)").await;
    let views = all_view_rows(&client).await;
    drop(client);
    server.stop();
    let out = fixtures().join(&name);
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("views.txt"), views).unwrap();
    let status = Command::new("tar")
        .args(["--sort=name", "--owner=0", "--group=0", "--numeric-owner", "-czf"])
        .arg(out.join("data.tar.gz"))
        .arg("-C")
        .arg(work.path())
        .arg("data")
        .status()
        .unwrap();
    assert!(status.success());
}

/// The fixture's data directory, unpacked into `into`.
fn unpack(fixture: &Path, into: &Path) -> PathBuf {
    let status = Command::new("tar").arg("-xzf").arg(fixture.join("data.tar.gz")).arg("-C").arg(into).status().unwrap();
    assert!(status.success(), "unpacking {}", fixture.display());
    into.join("data")
}

/// The views answer as the fixture's release left them, then follow new changes exactly.
async fn check_continues(server: &TestServer, fixture: &Path, how: &str) {
    let client = server.connect().await;
    let expected = std::fs::read_to_string(fixture.join("views.txt")).unwrap();
    let actual = all_view_rows(&client).await;
    for (e, a) in expected.lines().zip(actual.lines()) {
        assert_eq!(a, e, "{how}: a view's rows differ from the release's ({})", fixture.display());
    }
    assert_eq!(actual.lines().count(), expected.lines().count(), "{how}: rows of the views");
    let mut rng = Rng(4545);
    let next_id: Vec<String> = rows(&client, "SELECT max(id) + 1 FROM ev").await;
    let mut next_id: i64 = next_id[0].parse().unwrap();
    for step in 0..60 {
        client.batch_execute(&random_statement(&mut rng)).await.unwrap();
        client.batch_execute(&random_events(&mut rng, &mut next_id)).await.unwrap();
        if step % 20 == 19 {
            let context = format!("({how}, step {step})");
            check_views(&client, &context).await;
            check_more_views(&client, &context).await;
            check_event_time_views(&client, &context).await;
        }
    }
    // The indexes made by the release still answer.
    let by_v = rows(&client, "SELECT k FROM a WHERE v = 50 ORDER BY k").await;
    assert_eq!(by_v, rows(&client, "SELECT k FROM a WHERE v + 0 = 50 ORDER BY k").await, "{how}: index a_by_v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_directory_from_an_earlier_release_opens_and_its_views_continue() {
    let mut releases: Vec<PathBuf> =
        std::fs::read_dir(fixtures()).unwrap().map(|e| e.unwrap().path()).filter(|p| p.is_dir()).collect();
    releases.sort();
    assert!(!releases.is_empty(), "no fixtures in {}", fixtures().display());
    for fixture in releases {
        // The data directory as the release left it.
        let work = tempfile::tempdir().unwrap();
        let config = start_config(work.path());
        let data = unpack(&fixture, work.path());
        let server = TestServer::start_on(&data, &["--barrier-interval-ms", "50", "--config", &config]);
        check_continues(&server, &fixture, "its data directory").await;
        drop(server);

        // An empty data directory restored from the release's checkpoints alone.
        let work = tempfile::tempdir().unwrap();
        let config = start_config(work.path());
        let old = unpack(&fixture, work.path());
        let url = format!("file://{}", old.join("checkpoints").display());
        let fresh = work.path().join("fresh");
        let server = TestServer::start_on(
            &fresh,
            &["--barrier-interval-ms", "50", "--config", &config, "--checkpoint-url", &url],
        );
        check_continues(&server, &fixture, "restored from its checkpoints").await;
    }
}
