//! Test support: a real Weir server process on a free loopback port with its own data
//! directory, started from the binary cargo built for this test run.

#![allow(dead_code)]

pub mod cut_line;
pub mod kafka;
pub mod workload;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct TestServer {
    child: Option<Child>,
    pub port: u16,
    pub metrics_port: u16,
    pub data_dir: PathBuf,
    _temp: Option<tempfile::TempDir>,
    log: PathBuf,
    extra_args: Vec<String>,
    /// Environment variables the next start sets (e.g. `WEIR_FAULT`, see `src/fault.rs`).
    pub env: Vec<(String, String)>,
}

pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

impl TestServer {
    /// Starts a server on a fresh data directory and waits until it answers queries.
    pub fn start() -> TestServer {
        Self::start_with(&[])
    }

    pub fn start_with(extra_args: &[&str]) -> TestServer {
        Self::start_with_env(extra_args, &[])
    }

    /// Starts a server whose process has the environment variables `env` besides the tests'.
    pub fn start_with_env(extra_args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let temp = tempfile::tempdir().expect("tempdir");
        let data_dir = temp.path().join("data");
        Self::start_in(data_dir, temp, extra_args, env)
    }

    /// Starts a server with the config file `toml` (written beside its data directory) and
    /// `extra_args`.
    pub fn start_with_config(toml: &str, extra_args: &[&str]) -> TestServer {
        let temp = tempfile::tempdir().expect("tempdir");
        let config = temp.path().join("weir.toml");
        std::fs::write(&config, toml).expect("config file");
        let config = config.to_str().expect("a UTF-8 path").to_string();
        let mut args = vec!["--config", config.as_str()];
        args.extend_from_slice(extra_args);
        let data_dir = temp.path().join("data");
        Self::start_in(data_dir, temp, &args, &[])
    }

    /// Starts a server on an existing data directory, which the caller keeps.
    pub fn start_on(data_dir: &Path, extra_args: &[&str]) -> TestServer {
        Self::start_in(data_dir.to_path_buf(), tempfile::tempdir().expect("tempdir"), extra_args, &[])
    }

    /// Starts a server on `data_dir`, its log in `temp` (kept as long as the server).
    fn start_in(data_dir: PathBuf, temp: tempfile::TempDir, extra_args: &[&str], env: &[(&str, &str)]) -> TestServer {
        let log = temp.path().join("weir.log");
        let mut server = TestServer {
            child: None,
            port: 0,
            metrics_port: 0,
            data_dir,
            _temp: Some(temp),
            log,
            extra_args: extra_args.iter().map(|s| s.to_string()).collect(),
            env: env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        };
        server.spawn();
        server
    }

    /// Starts the server on free ports. A port chosen free can be taken by another test's
    /// server before this one binds it; then the server exits at startup, and it is started
    /// again on other ports.
    fn spawn(&mut self) {
        for attempt in 0.. {
            match self.spawn_once() {
                Ok(()) => return,
                Err(log) if attempt < 4 && log.contains("in use") => continue,
                Err(log) => panic!("weir exited during startup:\n{log}"),
            }
        }
    }

    fn spawn_once(&mut self) -> Result<(), String> {
        self.launch();
        self.wait_ready()
    }

    /// Starts the process on free ports, without waiting for it.
    fn launch(&mut self) {
        self.port = free_port();
        self.metrics_port = free_port();
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).expect("log file");
        let child = Command::new(env!("CARGO_BIN_EXE_weir"))
            .arg("--listen")
            .arg(format!("127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(&self.data_dir)
            .arg("--metrics-listen")
            .arg(format!("127.0.0.1:{}", self.metrics_port))
            .args(&self.extra_args)
            // WEIR_TEST_LOG: another filter for the servers' logs (say, debug for one module).
            .env("WEIR_LOG", std::env::var("WEIR_TEST_LOG").unwrap_or_else(|_| "info".into()))
            .envs(self.env.iter().map(|(k, v)| (k.as_str(), v.as_str())))
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("spawn weir");
        self.child = Some(child);
    }

    /// SIGKILLs the server and starts it again, waiting until it answers or exits: for a server
    /// armed with a fault point (`env`), which may die before it is ready.
    pub fn restart_armed(&mut self) {
        self.kill();
        // A port chosen free may be taken by another test's server before this one binds it:
        // it then exits at once, and starts again on other ports. Any other early exit (the
        // armed fault already fired) is for the test to judge.
        for attempt in 0..5 {
            self.launch();
            match self.wait_ready() {
                Err(log) if attempt < 4 && log.lines().last().is_some_and(|l| l.contains("in use")) => continue,
                _ => return,
            }
        }
    }

    /// Waits until the server takes connections; the log if it exited first.
    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    return Err(format!("({status})\n{}", self.log_text()));
                }
            }
            // Its own log must say it listens on this port: a port chosen free may have been
            // taken by another test's server, which would answer the connect instead.
            let ours = self.log_text().contains(&format!("Weir is ready: psql -h 127.0.0.1 -p {} ", self.port));
            if ours && std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                panic!("weir did not start within 60s:\n{}", self.log_text());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("the server runs").id()
    }

    /// The whole HTTP response of `GET /metrics` (status line, headers, Prometheus text).
    pub fn metrics_text(&self) -> String {
        self.http_get("/metrics")
    }

    /// The whole HTTP response of `GET path` on the metrics port (status line, headers, body).
    pub fn http_get(&self, path: &str) -> String {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.metrics_port)).unwrap();
        write!(s, "GET {path} HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        body
    }

    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    /// A libpq-style connection string for this server.
    pub fn conn_str(&self) -> String {
        format!("host=127.0.0.1 port={} user=root dbname=dev", self.port)
    }

    pub fn url(&self) -> String {
        format!("postgresql://root@127.0.0.1:{}/dev", self.port)
    }

    /// SIGKILL: no shutdown code runs.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Waits up to `timeout` for the server to exit on its own (a fault point firing); true if
    /// it did.
    pub fn wait_exit(&mut self, timeout: Duration) -> bool {
        self.exit_status(timeout).is_some()
    }

    /// Waits up to `timeout` for the server to exit; how it exited, if it did.
    pub fn exit_status(&mut self, timeout: Duration) -> Option<std::process::ExitStatus> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Some(child) = self.child.as_mut() {
                if let Ok(Some(status)) = child.try_wait() {
                    self.child = None;
                    return Some(status);
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }

    /// Sends SIGTERM and returns at once: the server goes on stopping.
    pub fn terminate(&self) {
        let pid = self.pid().to_string();
        Command::new("kill").arg("-TERM").arg(pid).status().expect("kill");
    }

    /// SIGTERM, and waits for the server to exit (its shutdown code runs); how it exited.
    pub fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let _ = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status();
        child.wait().ok()
    }

    /// Starts the server again on the same data directory (after `kill` or `stop`).
    pub fn start_again(&mut self) {
        self.spawn();
    }

    /// Starts the server again on the same data directory (after `kill`).
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        connect(&self.conn_str()).await
    }

    /// SIGKILLs the server, starts it again on the same data directory and connects.
    pub async fn sigkill_and_reconnect(&mut self) -> tokio_postgres::Client {
        self.restart();
        self.connect().await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.kill();
        // WEIR_TEST_KEEP_LOGS=dir: the whole log of a server whose test failed is kept there.
        if let (true, Ok(dir)) = (std::thread::panicking(), std::env::var("WEIR_TEST_KEEP_LOGS")) {
            let _ = std::fs::create_dir_all(&dir);
            let _ = std::fs::copy(&self.log, Path::new(&dir).join(format!("weir-{}.log", self.port)));
        }
    }
}

/// A client on `conn` (a libpq-style connection string), its connection driven in the background.
pub async fn connect(conn: &str) -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(conn, tokio_postgres::NoTls).await.unwrap_or_else(|e| panic!("connect to {conn}: {e}"));
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// A new, empty bucket on the S3-compatible server the tests use: `$WEIR_TEST_S3_ENDPOINT`
/// (scripts/test.sh starts it), or the one `scripts/s3-server.sh start` starts now. Returns the
/// endpoint and the bucket's name.
pub fn s3_bucket(name: &str) -> (String, String) {
    use std::io::{Read, Write};
    let endpoint = service("WEIR_TEST_S3_ENDPOINT", "s3-server.sh");
    let bucket = format!("{name}-{}-{}", std::process::id(), free_port());
    // CreateBucket is an unsigned PUT on a local test server.
    let host = endpoint.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(host).expect("the S3 test server");
    write!(stream, "PUT /{bucket} HTTP/1.1\r\nHost: {host}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    assert!(response.starts_with("HTTP/1.1 200"), "creating bucket {bucket}: {response}");
    (endpoint, bucket)
}

/// A small deterministic generator (xorshift), so a failing run can be replayed.
pub struct Rng(pub u64);
impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    pub fn below(&mut self, n: u64) -> i64 {
        (self.next() % n) as i64
    }
}

/// A query's rows, each as its columns joined by `|` (NULL as `NULL`), sorted.
pub async fn rows(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    let mut out: Vec<String> = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| match e.as_db_error() {
            Some(db) => panic!("{sql}: {} {}", db.code().code(), db.message()),
            None => panic!("{sql}: {e}"),
        })
        .into_iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).unwrap_or("NULL").to_string()).collect::<Vec<_>>().join("|"))
            }
            _ => None,
        })
        .collect();
    out.sort();
    out
}

/// Where a service the tests use answers: `$variable` (scripts/test.sh starts every service
/// and sets it), or what `scripts/<script> start` prints after starting it now.
fn service(variable: &str, script: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts").join(script);
        let out = Command::new(path).arg("start").output().unwrap_or_else(|e| panic!("scripts/{script}: {e}"));
        assert!(out.status.success(), "scripts/{script} start: {}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8(out.stdout).unwrap().trim().to_string()
    })
}

/// The Kafka-compatible broker the tests use (scripts/kafka-server.sh): its bootstrap servers.
pub fn kafka_bootstrap() -> String {
    service("WEIR_TEST_KAFKA", "kafka-server.sh")
}

/// The PostgreSQL server the tests write to (scripts/pg-server.sh): its URL.
pub fn postgres_url() -> String {
    service("WEIR_TEST_POSTGRES", "pg-server.sh")
}

/// The CA file the test PostgreSQL's server certificate chains to (scripts/pg-server.sh ca).
pub fn postgres_ca() -> String {
    postgres_url();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/pg-server.sh");
    let out = Command::new(path).arg("ca").output().expect("scripts/pg-server.sh ca");
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// The Python the test doubles and clients run with: the project's pinned environment
/// (scripts/python-env.sh), or the machine's `python3` when it has not been made.
pub fn test_python() -> PathBuf {
    let python = std::env::var("WEIR_TEST_PYTHON").map(PathBuf::from).unwrap_or_else(|_| {
        let venv = std::env::var("WEIR_TEST_VENV").unwrap_or_else(|_| "/var/tmp/weir-test-venv".into());
        Path::new(&venv).join("bin/python")
    });
    if python.exists() {
        python
    } else {
        PathBuf::from("python3")
    }
}

/// The test certificates (tests/doubles/certs.py: a CA, server certificates for localhost and
/// for another name, a client certificate, an untrusted CA), made once per test process.
pub fn test_certs() -> &'static Path {
    static DIR: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("weir-test-certs-{}", std::process::id()));
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doubles/certs.py");
        let out = Command::new(test_python()).arg(script).arg(&dir).output().expect("tests/doubles/certs.py");
        assert!(out.status.success(), "certs.py: {}", String::from_utf8_lossy(&out.stderr));
        dir
    })
}

/// A test double (`tests/doubles/<script>`: a secured Kafka front, a schema registry) running as
/// a process of the test Python, stopped when dropped.
pub struct TestDouble {
    child: Child,
    pub port: u16,
}

impl TestDouble {
    /// Starts `tests/doubles/<script>` listening on 127.0.0.1:`port` (a free one when None),
    /// with `args` besides `--listen`, and waits until it says it is ready.
    pub fn start(script: &str, port: Option<u16>, args: &[String]) -> TestDouble {
        use std::io::BufRead;
        let port = port.unwrap_or_else(free_port);
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/doubles").join(script);
        let mut child = Command::new(test_python())
            .arg(path)
            .args(["--listen", &format!("127.0.0.1:{port}")])
            .args(args)
            .stdout(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("start tests/doubles/{script}: {e}"));
        let stdout = child.stdout.take().unwrap();
        let (said, heard) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut line = String::new();
            let _ = std::io::BufReader::new(stdout).read_line(&mut line);
            let _ = said.send(line);
        });
        let line = heard.recv_timeout(Duration::from_secs(30)).unwrap_or_default();
        let mut double = TestDouble { child, port };
        if line.trim() != "ready" {
            let _ = double.child.kill();
            panic!("tests/doubles/{script} did not start within 30 s");
        }
        double
    }
}

impl Drop for TestDouble {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A new database on the test PostgreSQL; returns a client of it and its JDBC URL.
pub async fn postgres_database(name: &str) -> (tokio_postgres::Client, String) {
    let db = format!("{name}_{}_{}", std::process::id(), free_port());
    let admin = connect(&postgres_url()).await;
    admin.batch_execute(&format!("CREATE DATABASE {db}")).await.unwrap();
    let url = postgres_url();
    let base = url.rsplit_once('/').unwrap().0;
    let client = connect(&format!("{base}/{db}")).await;
    let host_port = base.trim_start_matches("postgresql://").trim_start_matches("postgres@");
    (client, format!("jdbc:postgresql://{host_port}/{db}?user=postgres"))
}

/// Waits until `sql` answers `expected` (rows as [`rows`] gives them); fails after 30 s.
pub async fn assert_eventually(client: &tokio_postgres::Client, sql: &str, expected: &[&str]) {
    let want: Vec<String> = expected.iter().map(|r| r.to_string()).collect();
    let got = rows_eventually(client, sql, &want, Duration::from_secs(30)).await;
    assert_eq!(got, want, "{sql}");
}

/// Runs `sql`, which must fail with SQLSTATE `code`.
pub async fn assert_sqlstate(client: &tokio_postgres::Client, sql: &str, code: &str) {
    let e = client.batch_execute(sql).await.expect_err(sql);
    assert_eq!(e.code().map(|s| s.code()), Some(code), "{sql}: {e:?}");
}

/// The rows of `sql` (as [`rows`] gives them) once they equal `want`, or whatever they are
/// after `timeout`: for outputs that catch up asynchronously (sinks, sources).
pub async fn rows_eventually(
    client: &tokio_postgres::Client,
    sql: &str,
    want: &[String],
    timeout: Duration,
) -> Vec<String> {
    let deadline = Instant::now() + timeout;
    loop {
        let got = rows(client, sql).await;
        if got == want || Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Each query's EXPLAIN has the given `RelationScanExec` line (what its scan reads).
pub async fn assert_scan_lines(client: &tokio_postgres::Client, golden: &[(&str, &str)]) {
    for (query, scan) in golden {
        let plan = rows(client, &format!("EXPLAIN {query}")).await.join("\n");
        let line = plan.lines().map(str::trim).find(|l| l.starts_with("RelationScanExec"));
        assert_eq!(line, Some(*scan), "{query}:\n{plan}");
    }
}
