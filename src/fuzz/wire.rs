//! The `wire` target: a whole server in this process, listening on loopback, fed the fuzzer's
//! bytes as a client's side of one connection (startup, simple and extended query, COPY data),
//! its answers read until it hangs up or a deadline passes.
//!
//! The first byte's low bit says whether the target sends a well-formed startup message (user
//! `fuzz`, database `dev`) before the rest, or the rest is the whole stream (startup, SSL and
//! cancel requests fuzzed too). Role `fuzz` logs in without a password and may read and change
//! table `t` and read view `t_counts`, nothing more (the host rules refuse every other name but
//! `root`, whose password is random), so the server's state stays bounded; `t` is emptied
//! every 512 inputs.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{every_type, MAX_INPUT, RUNTIME};

/// How long one connection's answers are read.
const DEADLINE: Duration = Duration::from_secs(2);

struct Server {
    port: u16,
    admin: tokio_postgres::Client,
}

static SERVER: LazyLock<Server> = LazyLock::new(|| RUNTIME.block_on(start()).expect("a server to fuzz"));

static INPUTS: AtomicU64 = AtomicU64::new(0);

pub fn wire(data: &[u8]) {
    drop(exchange(data));
}

/// What the server answered to `data` (the [`wire`] target's input) before it hung up or the
/// deadline passed.
pub fn exchange(data: &[u8]) -> Vec<u8> {
    if data.len() > MAX_INPUT {
        return vec![];
    }
    let Some((&first, rest)) = data.split_first() else { return vec![] };
    let server = &*SERVER;
    RUNTIME.block_on(async {
        let mut stream = TcpStream::connect(("127.0.0.1", server.port)).await.expect("the server accepts connections");
        let _ = stream.set_nodelay(true);
        let mut bytes = Vec::with_capacity(rest.len() + 64);
        let startup_sent = first & 1 == 0;
        if pgwire_decoder_panics(rest, startup_sent) {
            return vec![];
        }
        if startup_sent {
            bytes.extend_from_slice(&startup_message());
        }
        bytes.extend_from_slice(rest);
        let mut answers = Vec::new();
        let talk = async {
            stream.write_all(&bytes).await?;
            stream.shutdown().await?;
            stream.read_to_end(&mut answers).await
        };
        let _ = tokio::time::timeout(DEADLINE, talk).await;
        if INPUTS.fetch_add(1, Ordering::Relaxed) % 512 == 511 {
            server.admin.batch_execute("DELETE FROM t").await.expect("the server answers its superuser");
        }
        answers
    })
}

/// Whether one of the client's messages in `stream` makes pgwire's own decoder panic (pgwire
/// 0.41.1 reads the fields of Parse, Bind, Execute and others without checking that the body
/// holds them). The server is not at risk: tokio ends that connection's task and the rest go
/// on; but the client gets no error, and the fuzzer would find this one bug over and over and
/// little else, so such inputs are passed over until pgwire checks its bodies (known issue,
/// ADR 36). A SASLInitialResponse is not passed over: Weir checks that one itself.
fn pgwire_decoder_panics(stream: &[u8], startup_sent: bool) -> bool {
    use pgwire::messages::{DecodeContext, PgWireFrontendMessage, ProtocolVersion, SslNegotiationMetaMessage};
    let mut buf = bytes::BytesMut::from(stream);
    let mut context = DecodeContext::new(ProtocolVersion::PROTOCOL3_0);
    context.awaiting_frontend_ssl = !startup_sent;
    context.awaiting_frontend_startup = !startup_sent;
    super::contained::run(|| loop {
        let decoded = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            PgWireFrontendMessage::decode(&mut buf, &context)
        }));
        match decoded {
            Err(_) => return true,
            Ok(Ok(Some(PgWireFrontendMessage::SslNegotiation(negotiation)))) => {
                context.awaiting_frontend_ssl = false;
                if matches!(negotiation, SslNegotiationMetaMessage::None) {
                    continue;
                }
            }
            Ok(Ok(Some(PgWireFrontendMessage::Startup(_) | PgWireFrontendMessage::CancelRequest(_)))) => {
                context.awaiting_frontend_ssl = false;
                context.awaiting_frontend_startup = false;
            }
            Ok(Ok(Some(_))) => {}
            Ok(_) => return false,
        }
    })
}

/// Protocol 3.0's startup message for user `fuzz`, database `dev`.
pub fn startup_message() -> Vec<u8> {
    let mut body = 196_608u32.to_be_bytes().to_vec();
    for part in ["user", "fuzz", "database", "dev", ""] {
        body.extend_from_slice(part.as_bytes());
        body.push(0);
    }
    let mut message = ((body.len() + 4) as u32).to_be_bytes().to_vec();
    message.extend(body);
    message
}

async fn start() -> crate::error::Result<Server> {
    let dir = std::env::temp_dir().join(format!("weir-fuzz-wire-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let password: String = crate::catalog::password::random_bytes::<16>().iter().map(|b| format!("{b:02x}")).collect();
    let config_file = dir.join("weir.toml");
    std::fs::write(
        &config_file,
        format!(
            r#"[auth]
method = "reject"
[[auth.users]]
name = "root"
password = "{password}"
[[auth.hba]]
user = "fuzz"
method = "trust"
[[auth.hba]]
user = "root"
method = "scram-sha-256"
"#
        ),
    )?;
    let overrides = crate::config::Overrides {
        listen: Some(format!("127.0.0.1:{port}")),
        data_dir: Some(dir.join("data")),
        metrics_listen: Some("off".into()),
        ..Default::default()
    };
    let config = crate::config::Config::resolve(Some(&config_file), overrides)?;
    tokio::spawn(async move {
        let stopped = crate::server::run(config).await;
        panic!("the fuzzed server stopped: {stopped:?}");
    });
    let connect = format!("host=127.0.0.1 port={port} user=root password={password} dbname=dev");
    let mut tries = 0;
    let admin = loop {
        match tokio_postgres::connect(&connect, tokio_postgres::NoTls).await {
            Ok((client, connection)) => {
                tokio::spawn(connection);
                break client;
            }
            Err(e) if tries < 600 => {
                tries += 1;
                tracing::debug!("waiting for the server: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err(e) => return Err(crate::error::WeirError::io(format!("the fuzzed server never answered: {e}"))),
        }
    };
    let setup = format!(
        "CREATE TABLE t ({});
         CREATE MATERIALIZED VIEW t_counts AS SELECT k, count(*) AS c FROM t GROUP BY k;
         CREATE ROLE fuzz LOGIN;
         GRANT SELECT, INSERT, UPDATE, DELETE ON t TO fuzz;
         GRANT SELECT ON t_counts TO fuzz;",
        every_type!()
    );
    admin.batch_execute(&setup).await.map_err(|e| crate::error::WeirError::io(format!("fuzzing setup: {e}")))?;
    Ok(Server { port, admin })
}
