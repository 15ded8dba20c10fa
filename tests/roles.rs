//! Roles, privileges and authentication over the wire against a real server: a read-only role
//! through psql, psycopg and pgjdbc; privileges after kill -9; a config that holds only a
//! verifier; wrong passwords tried many times; host rules, NOLOGIN and connection limits.

mod common;

use std::path::Path;
use std::process::Command;

use common::TestServer;

/// PostgreSQL 15's verifier of the password `pencil` (`SELECT rolpassword FROM pg_authid`):
/// the config holds it, never the password.
const ADMIN_VERIFIER: &str = "SCRAM-SHA-256$4096:0aYFYq0Sr2sG9l2KJSI9BQ==$S43U6UGQeDVKp61vXExyQKWGuOwo2m+9TrFgG0r8q14=:83lzLPEHph5c7hsFqfFb9Fxhpq7tm7LvQ52shjDYm4I=";

fn start(extra_config: &str) -> TestServer {
    TestServer::start_with_config(
        &format!("[auth]\nmethod = \"scram-sha-256\"\n{extra_config}\n[[auth.users]]\nname = \"admin\"\npassword = \"{ADMIN_VERIFIER}\"\n"),
        &[],
    )
}

fn conn(server: &TestServer, user: &str, password: &str) -> String {
    format!("host=127.0.0.1 port={} user={user} password='{password}' dbname=dev", server.port)
}

async fn refused(server: &TestServer, user: &str, password: &str) -> String {
    match tokio_postgres::connect(&conn(server, user, password), tokio_postgres::NoTls).await {
        Ok(_) => panic!("{user} logged in with {password}"),
        Err(e) => e.code().map(|c| c.code().to_string()).unwrap_or_else(|| e.to_string()),
    }
}

async fn setup(server: &TestServer) -> tokio_postgres::Client {
    let admin = common::connect(&conn(server, "admin", "pencil")).await;
    admin
        .batch_execute(
            "CREATE TABLE orders (id INT PRIMARY KEY, customer TEXT, amount INT);
             INSERT INTO orders VALUES (1, 'ann', 10), (2, 'bob', 20), (3, 'ann', 5);
             CREATE MATERIALIZED VIEW totals AS SELECT customer, sum(amount) AS total FROM orders GROUP BY customer;
             CREATE ROLE reader LOGIN PASSWORD 'read-only pw';
             GRANT SELECT ON totals TO reader;",
        )
        .await
        .unwrap();
    admin
}

async fn check_reader(server: &TestServer) {
    let reader = common::connect(&conn(server, "reader", "read-only pw")).await;
    assert_eq!(common::rows(&reader, "SELECT customer, total FROM totals ORDER BY 1").await, ["ann|15", "bob|20"]);
    for sql in [
        "SELECT * FROM orders",
        "INSERT INTO orders VALUES (4, 'x', 1)",
        "UPDATE orders SET amount = 0",
        "DELETE FROM orders",
        "DROP MATERIALIZED VIEW totals",
        "CREATE TABLE t (a INT)",
        "GRANT SELECT ON orders TO reader",
        "ALTER ROLE reader SUPERUSER",
        "SELECT rolpassword FROM pg_authid",
        "SET ROLE admin",
    ] {
        common::assert_sqlstate(&reader, sql, "42501").await;
    }
    // The prepared path checks too.
    let err = reader.query("SELECT amount FROM orders WHERE id = $1", &[&1i32]).await.unwrap_err();
    assert_eq!(err.code().map(|c| c.code()), Some("42501"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn read_only_role_through_clients_and_after_kill_9() {
    let mut server = start("");
    let admin = setup(&server).await;
    check_reader(&server).await;

    // psql, with the password from the environment (SCRAM).
    let psql = |sql: &str| {
        Command::new("psql")
            .args(["-X", "-At", "-h", "127.0.0.1", "-U", "reader", "-d", "dev", "-p"])
            .arg(server.port.to_string())
            .args(["-c", sql])
            .env("PGPASSWORD", "read-only pw")
            .output()
            .expect("psql (scripts/install-deps.sh)")
    };
    let ok = psql("SELECT total FROM totals WHERE customer = 'bob'");
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    assert_eq!(String::from_utf8_lossy(&ok.stdout).trim(), "20");
    let denied = psql("SELECT * FROM orders");
    assert!(!denied.status.success());
    assert!(String::from_utf8_lossy(&denied.stderr).contains("permission denied for table orders"));

    // psql's \du, as the admin.
    let du = Command::new("psql")
        .args(["-X", "-h", "127.0.0.1", "-U", "admin", "-d", "dev", "-p"])
        .arg(server.port.to_string())
        .args(["-c", "\\du"])
        .env("PGPASSWORD", "pencil")
        .output()
        .unwrap();
    let du = String::from_utf8_lossy(&du.stdout).to_string();
    assert!(du.contains("reader") && du.contains("admin") && du.contains("Superuser"), "{du}");

    // psycopg.
    let python = common::test_python();
    let script = format!(
        "import psycopg\n\
         c = psycopg.connect(host='127.0.0.1', port={}, dbname='dev', user='reader', password='read-only pw', autocommit=True)\n\
         assert c.execute('SELECT sum(total) FROM totals').fetchone()[0] == 35\n\
         try:\n    c.execute('DELETE FROM orders')\n    raise SystemExit('not refused')\n\
         except psycopg.errors.InsufficientPrivilege:\n    pass\n\
         print('psycopg read-only ok')\n",
        server.port
    );
    let out = Command::new(&python).args(["-c", &script]).output().expect("python");
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("psycopg read-only ok"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // pgjdbc.
    let jar = "/usr/share/java/postgresql.jar";
    assert!(Path::new(jar).exists(), "{jar} missing: run scripts/install-deps.sh");
    let classes = tempfile::tempdir().unwrap();
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/clients/ReadOnlyCheck.java");
    let javac = Command::new("javac").args(["-cp", jar, "-d"]).arg(classes.path()).arg(source).output().unwrap();
    assert!(javac.status.success(), "{}", String::from_utf8_lossy(&javac.stderr));
    let out = Command::new("java")
        .args(["-cp", &format!("{jar}:{}", classes.path().display()), "ReadOnlyCheck"])
        .arg(format!("jdbc:postgresql://127.0.0.1:{}/dev", server.port))
        .args(["reader", "read-only pw"])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("jdbc read-only ok"),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    drop(admin);

    // Roles and grants are durable: kill -9, restart, the same answers.
    server.restart();
    check_reader(&server).await;
    let admin = common::connect(&conn(&server, "admin", "pencil")).await;
    admin.batch_execute("REVOKE SELECT ON totals FROM reader").await.unwrap();
    server.restart();
    let reader = common::connect(&conn(&server, "reader", "read-only pw")).await;
    common::assert_sqlstate(&reader, "SELECT * FROM totals", "42501").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_verifier_from_weir_password_in_a_file_logs_in() {
    use std::io::Write;
    let mut child = Command::new(env!("CARGO_BIN_EXE_weir"))
        .arg("password")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(b"correct horse\n").unwrap();
    let out = child.wait_with_output().unwrap();
    let verifier = String::from_utf8(out.stdout).unwrap();
    assert!(verifier.starts_with("SCRAM-SHA-256$4096:") && !verifier.contains("horse"), "{verifier}");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("ops.verifier");
    std::fs::write(&file, &verifier).unwrap();
    let server = start(&format!("[[auth.users]]\nname = \"ops\"\npassword_file = \"{}\"", file.display()));
    let ops = common::connect(&conn(&server, "ops", "correct horse")).await;
    assert_eq!(common::rows(&ops, "SELECT rolsuper FROM pg_roles WHERE rolname = 'ops'").await, ["t"]);
    assert_eq!(refused(&server, "ops", "correct horse ").await, "28P01");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_passwords_change_nothing() {
    let server = start("");
    let admin = setup(&server).await;
    let before = common::rows(&admin, "SELECT rolname, rolpassword, rolcanlogin FROM pg_authid ORDER BY 1").await;
    for i in 0..40 {
        let code = refused(&server, "reader", &format!("guess{i}")).await;
        assert_eq!(code, "28P01");
    }
    // A name that is no role fails the same way, at the same step.
    assert_eq!(refused(&server, "mallory", "read-only pw").await, "28P01");
    assert_eq!(
        common::rows(&admin, "SELECT rolname, rolpassword, rolcanlogin FROM pg_authid ORDER BY 1").await,
        before
    );
    check_reader(&server).await;
    // The stored verifier is PostgreSQL's form, and no password appears in the data directory.
    assert!(before.iter().any(|r| r.starts_with("reader|SCRAM-SHA-256$4096:")), "{before:?}");
    let mut found = false;
    for entry in walk(server.data_dir()) {
        if std::fs::read(&entry).is_ok_and(|bytes| bytes.windows(12).any(|w| w == b"read-only pw")) {
            found = true;
        }
    }
    assert!(!found, "the password is stored somewhere in the data directory");
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn host_rules_login_and_connection_limits() {
    let rules = "max_connections = 5\n\
                 [[auth.hba]]\nuser = \"blocked\"\nmethod = \"reject\"\n\
                 [[auth.hba]]\nuser = \"tls_only\"\ntype = \"hostnossl\"\nmethod = \"reject\"\n\
                 [[auth.hba]]\naddress = \"127.0.0.1/32\"\nmethod = \"scram-sha-256\"\n";
    let server = start(rules);
    let admin = setup(&server).await;
    admin
        .batch_execute(
            "CREATE ROLE blocked LOGIN PASSWORD 'b';
             CREATE ROLE tls_only LOGIN PASSWORD 't';
             CREATE ROLE nologin PASSWORD 'n';
             CREATE ROLE limited LOGIN PASSWORD 'l' CONNECTION LIMIT 1;",
        )
        .await
        .unwrap();
    assert_eq!(refused(&server, "blocked", "b").await, "28000");
    assert_eq!(refused(&server, "tls_only", "t").await, "28000");
    assert_eq!(refused(&server, "nologin", "n").await, "28000");
    let first = common::connect(&conn(&server, "limited", "l")).await;
    assert_eq!(refused(&server, "limited", "l").await, "53300");
    drop(first);
    // The slot comes back when the connection ends.
    let mut again = None;
    for _ in 0..50 {
        if let Ok((c, connection)) =
            tokio_postgres::connect(&conn(&server, "limited", "l"), tokio_postgres::NoTls).await
        {
            tokio::spawn(connection);
            again = Some(c);
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    let again = again.expect("the limited role's slot was given back");
    // max_connections = 5: admin, limited, three readers; a sixth is refused, superusers have
    // reserved slots.
    let mut readers = Vec::new();
    for _ in 0..3 {
        readers.push(common::connect(&conn(&server, "reader", "read-only pw")).await);
    }
    assert_eq!(refused(&server, "reader", "read-only pw").await, "53300");
    let extra_admin = common::connect(&conn(&server, "admin", "pencil")).await;
    assert_eq!(common::rows(&extra_admin, "SELECT 1").await, ["1"]);

    // A session whose role is dropped keeps no privileges (it is not a name trust let in).
    extra_admin.batch_execute("REVOKE SELECT ON totals FROM reader; DROP ROLE reader").await.unwrap();
    common::assert_sqlstate(&readers[0], "SELECT * FROM totals", "42501").await;
    common::assert_sqlstate(&readers[0], "CREATE TABLE mine (a INT)", "42501").await;
    drop((again, readers));

    // `method = "reject"` refuses everyone.
    let closed = TestServer::start_with_config("[auth]\nmethod = \"reject\"\n", &[]);
    assert_eq!(refused(&closed, "root", "").await, "28000");
}
