//! Real client programs against a real server: psql's meta-commands, psycopg 3, SQLAlchemy's
//! inspector and asyncpg (Python: pinned versions, and the current releases), pgjdbc (Java),
//! node-postgres (Node.js), and the statements BI tools send (Grafana, Metabase, DBeaver, Tableau, Superset), installed by
//! scripts/install-deps.sh.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::TestServer;

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e} (run scripts/install-deps.sh)"));
    let stdout = String::from_utf8_lossy(&out.stdout).to_string();
    let stderr = String::from_utf8_lossy(&out.stderr).to_string();
    assert!(out.status.success(), "{cmd:?} failed:\nstdout:\n{stdout}\nstderr:\n{stderr}");
    stdout
}

fn psql(server: &TestServer, command: &str) -> String {
    run(Command::new("psql")
        .args(["-X", "-v", "ON_ERROR_STOP=1", "-h", "127.0.0.1", "-U", "root", "-d", "dev"])
        .arg("-p")
        .arg(server.port.to_string())
        .arg("-c")
        .arg(command))
}

fn clients_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients")
}

/// The Pythons the client programs run with: the project's pinned environment, and (with
/// `latest`) the one with the clients' current releases (scripts/python-env.sh; made by
/// scripts/install-deps.sh test), each where it exists; the machine's `python3` when neither does.
fn pythons(latest: bool) -> Vec<PathBuf> {
    let venv = |variable: &str, default: &str| {
        let dir = std::env::var(variable).unwrap_or_else(|_| default.to_string());
        Path::new(&dir).join("bin/python")
    };
    let mut candidates = vec![venv("WEIR_TEST_VENV", "/var/tmp/weir-test-venv")];
    if latest {
        candidates.push(venv("WEIR_TEST_VENV_LATEST", "/var/tmp/weir-test-venv-latest"));
    }
    let found: Vec<PathBuf> = candidates.into_iter().filter(|p| p.exists()).collect();
    if found.is_empty() {
        vec![PathBuf::from("python3")]
    } else {
        found
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_meta_commands() {
    let server = TestServer::start();
    psql(&server, "CREATE TABLE t (id INT PRIMARY KEY, name VARCHAR, price DOUBLE PRECISION, ts TIMESTAMP)");
    psql(&server, "INSERT INTO t VALUES (1, 'a', 1.5, '2026-01-01 00:00:01')");

    let dt = psql(&server, "\\dt");
    assert!(dt.contains(" t ") && dt.contains("table"), "\\dt:\n{dt}");
    let d = psql(&server, "\\d t");
    for expected in ["id", "name", "price", "ts", "integer", "double precision", "\"t_pkey\" PRIMARY KEY, btree (id)"] {
        assert!(d.contains(expected), "\\d t lacks {expected}:\n{d}");
    }
    let l = psql(&server, "\\l");
    assert!(l.contains("dev"), "\\l:\n{l}");
    let dn = psql(&server, "\\dn");
    assert!(dn.contains("public"), "\\dn:\n{dn}");
    psql(&server, "CREATE MATERIALIZED VIEW spend AS SELECT name, sum(price) AS total FROM t GROUP BY name");
    let dm = psql(&server, "\\dm");
    assert!(dm.contains("spend") && dm.contains("materialized view"), "\\dm:\n{dm}");
    let d_all = psql(&server, "\\d");
    assert!(d_all.contains(" t "), "\\d:\n{d_all}");
    let rows = psql(&server, "SELECT name, sum(price) FROM t GROUP BY name ORDER BY 1");
    assert!(rows.contains("a    |  1.5") || rows.contains("1.5"), "{rows}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psycopg_application() {
    for python in pythons(true) {
        // A server each: the check creates its tables.
        let server = TestServer::start();
        let out = run(Command::new(&python).arg(clients_dir().join("psycopg_check.py")).arg(server.url()));
        assert!(out.contains("psycopg ok"), "{python:?}: {out}\n{}", server.log_text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlalchemy_inspector_and_asyncpg() {
    // The pinned SQLAlchemy 2.0 and the current release (2.1's inspector reads a column's
    // identity options with a subquery selecting the outer row inside CASE: `outer_conditions`).
    for python in pythons(true) {
        // A server each: the check creates its tables.
        let server = TestServer::start();
        let out = run(Command::new(&python)
            .arg(clients_dir().join("sqlalchemy_check.py"))
            .arg("127.0.0.1")
            .arg(server.port.to_string()));
        assert!(out.contains("sqlalchemy and asyncpg ok"), "{python:?}: {out}\n{}", server.log_text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn node_postgres_application() {
    let dir = std::env::var("WEIR_TEST_NODE").unwrap_or_else(|_| "/var/tmp/weir-test-node".to_string());
    let modules = Path::new(&dir).join("node_modules");
    assert!(modules.join("pg").exists(), "{} lacks pg: run scripts/install-deps.sh", modules.display());
    let server = TestServer::start();
    let out = run(Command::new("node")
        .env("NODE_PATH", &modules)
        .arg(clients_dir().join("node_pg_check.js"))
        .arg("127.0.0.1")
        .arg(server.port.to_string()));
    assert!(out.contains("node-postgres ok"), "{out}\n{}", server.log_text());
}

/// The statements Grafana, Metabase, DBeaver, Tableau and Superset send to list schemas,
/// tables, columns and keys and to draw a chart (tests/clients/bi_tools_check.py; issue 18).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bi_tools_introspection_and_charts() {
    for python in pythons(false) {
        let server = TestServer::start();
        let out = run(Command::new(&python)
            .arg(clients_dir().join("bi_tools_check.py"))
            .arg("127.0.0.1")
            .arg(server.port.to_string()));
        assert!(out.contains("BI statements ok"), "{python:?}: {out}\n{}", server.log_text());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jdbc_application() {
    let server = TestServer::start();
    let jar = "/usr/share/java/postgresql.jar";
    assert!(Path::new(jar).exists(), "{jar} missing: run scripts/install-deps.sh");
    let classes = tempfile::tempdir().unwrap();
    run(Command::new("javac").args(["-cp", jar, "-d"]).arg(classes.path()).arg(clients_dir().join("JdbcCheck.java")));
    let cp = format!("{jar}:{}", classes.path().display());
    let out = run(Command::new("java")
        .args(["-cp", &cp, "JdbcCheck"])
        .arg(format!("jdbc:postgresql://127.0.0.1:{}/dev", server.port)));
    assert!(out.contains("jdbc ok"), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_when_configured() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("server.crt"), dir.path().join("server.key"));
    run(Command::new("openssl")
        .args(["req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert));
    let config = dir.path().join("weir.toml");
    std::fs::write(&config, format!("[tls]\ncert = {:?}\nkey = {:?}\n", cert, key)).unwrap();
    let server = TestServer::start_with(&["--config", config.to_str().unwrap()]);
    let out = run(Command::new("psql")
        .arg(format!("host=127.0.0.1 port={} user=root dbname=dev sslmode=require", server.port))
        .args(["-X", "-At", "-c", "SELECT 42", "-c", "\\conninfo"]));
    assert!(out.contains("42"), "{out}");
    assert!(out.contains("SSL connection"), "{out}");
}
