//! Runs every `tests/slt/*.slt` file against a real Weir server over the Postgres wire protocol
//! (tokio-postgres, simple query protocol, text results). Each file gets a fresh server.
//! `statement error (SQLSTATE)`, the code alone, checks the error code; any other text after
//! `statement error` is a regex matched against the server's message (`statement error
//! needs a bound`). The two do not combine: `(0A000).*needs a bound` is read as a regex.

mod common;

use std::path::PathBuf;

use async_trait::async_trait;
use sqllogictest::{AsyncDB, DBOutput, DefaultColumnType};
use tokio_postgres::SimpleQueryMessage;

struct Weir {
    client: tokio_postgres::Client,
}

/// A client error whose text is the server's message (tokio-postgres prints only "db error").
#[derive(Debug)]
struct SqlError(tokio_postgres::Error);

impl std::fmt::Display for SqlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.0.as_db_error() {
            Some(db) => write!(f, "{}", db.message()),
            None => write!(f, "{}", self.0),
        }
    }
}

impl std::error::Error for SqlError {}

#[async_trait]
impl AsyncDB for Weir {
    type Error = SqlError;
    type ColumnType = DefaultColumnType;

    async fn run(&mut self, sql: &str) -> Result<DBOutput<DefaultColumnType>, Self::Error> {
        let messages = self.client.simple_query(sql).await.map_err(SqlError)?;
        let mut rows = Vec::new();
        let mut columns = None;
        let mut count = 0;
        for m in messages {
            match m {
                SimpleQueryMessage::RowDescription(desc) => columns = Some(desc.len()),
                SimpleQueryMessage::Row(row) => {
                    columns = Some(row.len());
                    rows.push(
                        (0..row.len())
                            .map(|i| match row.get(i) {
                                None => "NULL".to_string(),
                                Some("") => "(empty)".to_string(),
                                Some(v) => v.to_string(),
                            })
                            .collect(),
                    );
                }
                SimpleQueryMessage::CommandComplete(n) => count = n,
                _ => {}
            }
        }
        match columns {
            Some(n) => Ok(DBOutput::Rows { types: vec![DefaultColumnType::Any; n], rows }),
            None => Ok(DBOutput::StatementComplete(count)),
        }
    }

    async fn shutdown(&mut self) {}

    fn engine_name(&self) -> &str {
        "weir"
    }

    async fn sleep(dur: std::time::Duration) {
        tokio::time::sleep(dur).await
    }

    fn error_sql_state(err: &Self::Error) -> Option<String> {
        err.0.code().map(|c| c.code().to_string())
    }
}

fn slt_files() -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/slt");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("tests/slt")
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "slt"))
        .collect();
    if let Ok(only) = std::env::var("SLT") {
        files.retain(|p| p.to_string_lossy().contains(&only));
    }
    files.sort();
    files
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqllogictest_files() {
    let files = slt_files();
    assert!(!files.is_empty(), "no .slt files found");
    let mut failures = Vec::new();
    for file in &files {
        // event_time.slt's idle-input case waits for this timeout.
        let server = common::TestServer::start_with(&["--watermark-idle-timeout-ms", "3000"]);
        let conn = server.conn_str();
        let mut runner = sqllogictest::Runner::new(move || {
            let conn = conn.clone();
            async move {
                let (client, connection) =
                    tokio_postgres::connect(&conn, tokio_postgres::NoTls).await.map_err(SqlError)?;
                tokio::spawn(async move {
                    let _ = connection.await;
                });
                Ok::<_, SqlError>(Weir { client })
            }
        });
        runner.with_column_validator(|_, _| true);
        let name = file.file_name().unwrap().to_string_lossy().to_string();
        match runner.run_file_async(file).await {
            Ok(()) => println!("ok   {name}"),
            Err(e) => {
                println!("FAIL {name}\n{}", e.display(true));
                failures.push(format!("{name}: {}\n--- server log ---\n{}", e.display(false), server.log_text()));
            }
        }
    }
    assert!(failures.is_empty(), "{} of {} slt files failed:\n{}", failures.len(), files.len(), failures.join("\n"));
}
