//! The Postgres wire server: accepts connections, negotiates TLS, and drives each one with
//! pgwire, handing statements to the [`Frontend`].
//!
//! - [`auth`]: startup, authentication, ParameterStatus, cancel registration.
//! - [`simple_query`] and [`extended_query`]: the two query protocols.
//! - [`session`]: per-connection session state and transaction-block rules.
//! - [`encode`]: results to wire messages.
//! - [`copy`]: COPY FROM STDIN's data.
//! - [`drain`]: statements under way, which a stop lets finish.
//! - [`held_replies`]: extended-protocol replies held until Sync or Flush.
//!
//! A connection's failure (protocol garbage, an abrupt disconnect, a panic in a statement)
//! closes that connection only; the accept loop and every other session carry on.

pub mod auth;
pub mod cancel;
pub mod copy;
pub mod copy_in;
pub mod drain;
pub mod encode;
pub mod extended_query;
pub mod held_replies;
pub mod session;
pub mod simple_query;

use std::sync::Arc;

use pgwire::api::auth::StartupHandler;
use pgwire::api::cancel::CancelHandler;
use pgwire::api::query::{ExtendedQueryHandler, SimpleQueryHandler};
use pgwire::api::{ClientInfo, ConnectionManager, ErrorHandler, PgWireServerHandlers};
use pgwire::error::PgWireError;
use pgwire::tokio::process_socket;
use pgwire::tokio::tokio_rustls::rustls;
use pgwire::tokio::TlsAcceptor;
use tokio::net::TcpListener;
use tracing::{debug, error, info, warn};

use crate::catalog::Catalog;
use crate::config::{AuthConfig, Config};
use crate::dataflow::coordinator::{EpochBounds, LastCheckpoint};
use crate::dataflow::manager::Streaming;
use crate::error::{Result, WeirError};
use crate::frontend::Frontend;
use crate::metrics;
use crate::state::rocks::RocksStore;
use crate::state::StateStore;

/// Query handling shared by all connections.
pub struct WeirHandler {
    pub frontend: Arc<Frontend>,
    pub cancels: Arc<cancel::CancelRegistry>,
    pub drain: Arc<drain::Drain>,
    query_parser: Arc<extended_query::WeirQueryParser>,
}

/// Everything pgwire needs to serve a connection.
pub struct Handlers {
    query: Arc<WeirHandler>,
    database: String,
    auth: Arc<AuthConfig>,
    connections: Arc<auth::Connections>,
    manager: Arc<ConnectionManager>,
    cancel: Arc<cancel::WeirCancel>,
}

impl Handlers {
    pub fn new(frontend: Arc<Frontend>, config: &Config) -> Handlers {
        let manager = Arc::new(ConnectionManager::new());
        let cancels = Arc::new(cancel::CancelRegistry::default());
        Handlers {
            query: Arc::new(WeirHandler {
                cancels: Arc::clone(&cancels),
                drain: Arc::default(),
                query_parser: Arc::new(extended_query::WeirQueryParser { frontend: Arc::clone(&frontend) }),
                frontend,
            }),
            database: config.database.clone(),
            auth: Arc::new(config.auth.clone()),
            connections: Arc::default(),
            cancel: Arc::new(cancel::WeirCancel { manager: Arc::clone(&manager), registry: cancels }),
            manager,
        }
    }
}

struct LoggingErrors;

impl ErrorHandler for LoggingErrors {
    fn on_error<C: ClientInfo>(&self, client: &C, error: &mut PgWireError) {
        match error {
            PgWireError::UserError(_) => {}
            PgWireError::IoError(e) => debug!(peer = %client.socket_addr(), "connection i/o: {e}"),
            other => {
                metrics::ERRORS_TOTAL.with_label_values(&["08P01"]).inc();
                debug!(peer = %client.socket_addr(), "protocol error: {other}");
            }
        }
    }
}

impl PgWireServerHandlers for Handlers {
    fn simple_query_handler(&self) -> Arc<impl SimpleQueryHandler> {
        Arc::clone(&self.query)
    }
    fn extended_query_handler(&self) -> Arc<impl ExtendedQueryHandler> {
        Arc::clone(&self.query)
    }
    /// Called once per connection: the SASL exchange keeps its state in the handler.
    fn startup_handler(&self) -> Arc<impl StartupHandler> {
        Arc::new(auth::WeirStartup::new(
            &self.database,
            Arc::clone(&self.auth),
            Arc::clone(self.query.frontend.catalog()),
            Arc::clone(&self.connections),
            Arc::clone(&self.manager),
        ))
    }
    fn cancel_handler(&self) -> Arc<impl CancelHandler> {
        Arc::clone(&self.cancel)
    }
    fn error_handler(&self) -> Arc<impl ErrorHandler> {
        Arc::new(LoggingErrors)
    }
    fn copy_handler(&self) -> Arc<impl pgwire::api::copy::CopyHandler> {
        Arc::clone(&self.query)
    }
}

/// The runtime client sessions run on, apart from the dataflow's: its threads (and the blocking
/// threads its reads start) have the configured nice value, so when the CPU is short the
/// kernel gives it to the views first (`[serving]` in the config).
fn serving_runtime(config: &crate::config::ServingConfig) -> Result<tokio::runtime::Runtime> {
    let nice = config.nice;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(config.threads.max(1))
        .thread_name("weir-serving")
        .on_thread_start(move || {
            if nice != 0 {
                // On Linux a thread's nice value is its own (`who` 0: the calling thread).
                // SAFETY: setpriority has no memory effects; a failure only leaves it at 0.
                unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, nice) };
            }
        })
        .enable_all()
        .build()
        .map_err(|e| WeirError::io(format!("cannot start the serving runtime: {e}")))
}

fn tls_acceptor(config: &Config) -> Result<Option<TlsAcceptor>> {
    use rustls_pki_types::pem::PemObject;
    use rustls_pki_types::{CertificateDer, PrivateKeyDer};
    let Some(tls) = &config.tls else {
        return Ok(None);
    };
    let _ = rustls::crypto::ring::default_provider().install_default();
    let certs = CertificateDer::pem_file_iter(&tls.cert)
        .and_then(|it| it.collect::<std::result::Result<Vec<_>, _>>())
        .map_err(|e| WeirError::io(format!("tls.cert {}: {e}", tls.cert.display())))?;
    let key = PrivateKeyDer::from_pem_file(&tls.key)
        .map_err(|e| WeirError::io(format!("tls.key {}: {e}", tls.key.display())))?;
    let server = rustls::ServerConfig::builder()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| WeirError::io(format!("tls: {e}")))?;
    Ok(Some(TlsAcceptor::from(Arc::new(server))))
}

/// A clean stop, step by step: statements under way finish (no new one starts), a last
/// checkpoint is taken and uploaded, sinks deliver it, and the store is flushed. Each wait is
/// bounded (`drain` for statements and for sinks, the checkpoint timeout for the checkpoint);
/// the caller bounds the whole.
async fn stop(
    drain: &drain::Drain,
    streaming: &Streaming,
    status: &crate::status::Status,
    store: Arc<RocksStore>,
    drain_timeout: std::time::Duration,
) {
    drain.close();
    let running = drain.running();
    if running > 0 {
        info!(running, "letting the statements under way finish");
        if tokio::time::timeout(drain_timeout, drain.finished()).await.is_err() {
            warn!(
                running = drain.running(),
                "statements still under way after the drain timeout ({drain_timeout:?}): \
                 they end with the server and are not in its last checkpoint"
            );
        }
    }
    // A last checkpoint: the next start restores it with nothing to replay. A statement still
    // under way is wholly in it (it holds its table's lock or the DDL gate, which the
    // checkpoint waits for) or wholly after it, in the change log.
    let taken = match streaming.coordinator.last_checkpoint().await {
        LastCheckpoint::Uploaded => {
            info!("checkpoint taken at shutdown and uploaded");
            true
        }
        LastCheckpoint::LocalOnly => {
            warn!(
                "checkpoint taken at shutdown, kept locally: its upload did not finish within the checkpoint \
                 timeout (this data directory restores it; a new one restores the last uploaded)"
            );
            true
        }
        LastCheckpoint::Failed => {
            warn!("the checkpoint at shutdown failed: the next start replays the writes since the last one");
            false
        }
    };
    if taken {
        let epoch = *streaming.coordinator.checkpointed().borrow();
        let delivered = async {
            while !status.sinks_behind(epoch).is_empty() {
                tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            }
        };
        if tokio::time::timeout(drain_timeout, delivered).await.is_err() {
            warn!(
                sinks = ?status.sinks_behind(epoch),
                "sinks did not deliver the last checkpoint within the drain timeout ({drain_timeout:?}): the \
                 next start delivers it"
            );
        } else {
            info!(epoch, "sinks delivered the last checkpoint");
        }
    }
    match tokio::task::spawn_blocking(move || store.persist()).await {
        Ok(Ok(())) => info!("state flushed"),
        Ok(Err(e)) => warn!("flushing state at shutdown failed: {e}"),
        Err(e) => warn!("flushing state at shutdown failed: {e}"),
    }
}

/// Ends the process now, with no destructor or shutdown code run, as kill -9 would: the
/// next start recovers from the last checkpoint and the change log, as after a crash.
fn stop_at_once(why: &str) -> ! {
    error!("{why}: stopping at once (the next start recovers as after a crash)");
    // SAFETY: _exit ends the process; nothing runs after it.
    unsafe { libc::_exit(1) }
}

/// Opens the data directory and serves until SIGINT or SIGTERM (see [`stop`]).
pub async fn run(config: Config) -> Result<()> {
    // Before the store opens: it is put back at the newest checkpoint (downloaded first into an
    // empty data directory), with every acknowledged write after it.
    // Views, sources and sinks run on this runtime, also those a session starts.
    crate::runtime::set_current();
    // Where secret references may read files from, before any connector is made.
    crate::catalog::secrets::set_directory(config.secrets_dir.clone());
    // What the server reports about itself (weir_catalog), handed down through the catalog.
    let status = Arc::new(crate::status::Status::default());
    // Up before recovery: alive while it restores, and not ready until it serves.
    if let Some(addr) = config.metrics_listen {
        let ready = Arc::clone(&status);
        let readiness: metrics::Readiness = Arc::new(move || ready.readiness());
        metrics::serve(addr, readiness).await.map_err(|e| WeirError::io(format!("metrics endpoint {addr}: {e}")))?;
    }
    let prepared =
        crate::checkpoint::prepare(&config.checkpoint, &config.storage, &config.data_dir, Arc::clone(&status)).await?;
    let first_epoch = prepared.first_epoch;
    let store = Arc::new(RocksStore::open(&config.data_dir.join("state"), &config.storage)?);
    let (checkpointer, replay) = prepared.checkpointer(Arc::clone(&store) as Arc<dyn StateStore>);
    let phase = Arc::clone(&status);
    let sized = Arc::clone(&store);
    let stopping = Arc::clone(&store);
    tokio::spawn(async move {
        loop {
            metrics::STATE_BYTES.set(sized.approximate_bytes() as i64);
            for (part, bytes) in sized.memory_bytes() {
                metrics::STATE_MEMORY_BYTES.with_label_values(&[part]).set(bytes as i64);
            }
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
    });
    crate::connectors::replay::register();
    let catalog = Arc::new(Catalog::open(store, &config.database, status)?);
    let config_users = config
        .auth
        .users
        .iter()
        .map(|u| {
            let verifier = crate::catalog::password::Verifier::from_text(&u.password_text()?)
                .map_err(|e| WeirError::new(e.state, format!("[[auth.users]] {}: {}", u.name, e.message)))?;
            Ok((u.name.clone(), verifier))
        })
        .collect::<Result<Vec<_>>>()?;
    catalog.access.add_config_users(&config_users);
    let passwords = catalog.access.roles().iter().any(|r| r.login && r.password.is_some());
    if (config.auth.method != crate::config::AuthMethod::Trust || !config.auth.hba.is_empty()) && !passwords {
        warn!("no role that logs in has a password: nobody can log in by password or SCRAM (add [[auth.users]])");
    }
    info!(relations = catalog.relations().len(), data_dir = %config.data_dir.display(), "catalog loaded");
    if config.cluster.is_some() && !catalog.relations().is_empty() {
        // Its tables and views would run on this node alone (ADR 38: views do not run across
        // nodes yet).
        return Err(WeirError::unsupported(format!(
            "{} holds {} relations: a data directory with tables or views cannot join a cluster in this \
             release; start the node on an empty one, or without --cluster",
            config.data_dir.display(),
            catalog.relations().len()
        )));
    }
    let streaming = Streaming::new(
        Arc::clone(&catalog),
        EpochBounds { interval: config.barrier_interval, max_rows: config.epoch_max_rows },
        config.storage.state_cache_entries,
        config.watermark_idle_timeout,
        Some(checkpointer),
        first_epoch,
    );
    // Each view's state size, as the store estimates it, every 5 s.
    let measured = Arc::clone(&catalog);
    tokio::spawn(async move {
        loop {
            measure_views(&measured);
            tokio::time::sleep(std::time::Duration::from_secs(5)).await;
        }
    });
    let frontend = Arc::new(Frontend::new(catalog, Arc::clone(&streaming), replay).await?);
    let handlers = Arc::new(Handlers::new(frontend, &config));
    let tls = tls_acceptor(&config)?;
    // Cluster mode: the exchange service other nodes send rows to (bound first: its address is
    // in this node's registration), then membership, election and vnode assignment through
    // etcd, in the background (before the first client: the frontend's cluster gate reads it).
    let (exchange_stop, exchange_stopped) = tokio::sync::watch::channel(false);
    let cluster = match config.cluster.clone() {
        Some(mut cluster_config) => {
            let exchanges = crate::exchange::Exchanges::new(
                &cluster_config.prefix,
                &cluster_config.node_id,
                crate::exchange::inbox::DEFAULT_WINDOW,
            );
            let listen = cluster_config.exchange_listen;
            let listener = TcpListener::bind(listen)
                .await
                .map_err(|e| WeirError::io(format!("cannot listen for exchanges on {listen}: {e}")))?;
            let bound = listener.local_addr().map_err(|e| WeirError::io(e.to_string()))?;
            let host = cluster_config.exchange.rsplit_once(':').map_or("", |(host, _)| host).to_string();
            cluster_config.exchange = format!("{host}:{}", bound.port());
            info!(addr = %bound, advertised = %cluster_config.exchange, "exchange service listening");
            let mut stopped = exchange_stopped.clone();
            tokio::spawn(async move {
                let stop = async move {
                    let _ = stopped.wait_for(|s| *s).await;
                };
                if let Err(e) = crate::exchange::service::serve(listener, exchanges, stop).await {
                    error!("{e}");
                }
            });
            Some(crate::cluster::Cluster::start(cluster_config, Arc::clone(&phase)))
        }
        None => None,
    };
    drop(exchange_stopped);

    let listener = TcpListener::bind(config.listen)
        .await
        .map_err(|e| WeirError::io(format!("cannot listen on {}: {e}", config.listen)))?;
    phase.set_phase(crate::status::Phase::Serving);
    info!(addr = %config.listen, tls = tls.is_some(), "Weir is ready: psql -h {} -p {} -d {} -U root", config.listen.ip(), config.listen.port(), config.database);

    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    // Nothing may return early from here to its shutdown below.
    let serving = serving_runtime(&config.serving)?;
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (socket, peer) = match accepted {
                    Ok(a) => a,
                    Err(e) => { warn!("accept: {e}"); continue; }
                };
                let _ = socket.set_nodelay(true);
                let handlers = Arc::clone(&handlers);
                let tls = tls.clone();
                metrics::CONNECTIONS_TOTAL.inc();
                metrics::CONNECTIONS_ACTIVE.inc();
                // The socket is registered again with the serving runtime's reactor, so its
                // I/O is woken by the sessions' threads, not by the dataflow's busy ones.
                let socket = match socket.into_std() {
                    Ok(s) => s,
                    Err(e) => { warn!(%peer, "accept: {e}"); metrics::CONNECTIONS_ACTIVE.dec(); continue; }
                };
                let session = serving.spawn(async move {
                    let socket = tokio::net::TcpStream::from_std(socket)?;
                    process_socket(socket, tls, handlers).await
                });
                tokio::spawn(async move {
                    // A panic inside one connection must not be silent; it ends only that task.
                    let outcome = session.await;
                    metrics::CONNECTIONS_ACTIVE.dec();
                    match outcome {
                        Ok(Ok(())) => {}
                        Ok(Err(e)) => debug!(%peer, "connection ended: {e}"),
                        // Sessions still open at shutdown are cancelled with their runtime.
                        Err(e) if e.is_cancelled() => debug!(%peer, "connection closed at shutdown"),
                        Err(e) => error!(%peer, "connection task failed: {e}"),
                    }
                });
            }
            _ = tokio::signal::ctrl_c() => { info!("interrupted, shutting down"); break; }
            _ = terminate.recv() => { info!("terminated, shutting down"); break; }
        }
    }
    // No new connections; load balancers stop sending queries (not ready).
    drop(listener);
    phase.set_phase(crate::status::Phase::Stopping);
    if let Some(cluster) = cluster {
        cluster.leave().await;
    }
    let _ = exchange_stop.send(true);
    let stop = stop(&handlers.query.drain, &streaming, &phase, stopping, config.drain_timeout);
    tokio::select! {
        () = stop => {}
        () = tokio::time::sleep(config.shutdown_timeout) => {
            stop_at_once(&format!("the stop took longer than the shutdown timeout ({:?})", config.shutdown_timeout))
        }
        _ = tokio::signal::ctrl_c() => stop_at_once("interrupted again"),
        _ = terminate.recv() => stop_at_once("terminated again"),
    }
    // Sessions end here (a runtime cannot be dropped inside another's task).
    serving.shutdown_background();
    Ok(())
}

/// Sets `weir_view_state_bytes` for every materialized view: its rows' table and its operators'
/// state tables, as the store estimates their files.
fn measure_views(catalog: &Catalog) {
    use crate::state::keys::operator_state_range;
    let store = catalog.store();
    metrics::VIEW_STATE_BYTES.reset();
    for relation in catalog.relations() {
        if relation.def.kind != crate::catalog::RelationKind::MaterializedView {
            continue;
        }
        let id = relation.def.id;
        let rows = store.approximate_table_bytes(id);
        let (start, end) = operator_state_range(id);
        let operators = store.approximate_range_bytes(&start, &end);
        metrics::VIEW_STATE_BYTES.with_label_values(&[&relation.def.name]).set((rows + operators) as i64);
    }
}
