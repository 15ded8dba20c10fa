//! Server configuration: defaults, overlaid by a TOML file (`--config`), overlaid by `WEIR_*`
//! environment variables and command-line flags (clap treats those two alike; a flag wins).
//!
//! [`Config`] is plain data, built once in `main` and shared read-only with every layer.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::error::{Result, WeirError};

/// How clients prove who they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
pub enum AuthMethod {
    /// Anyone may connect as any user (the default; Weir listens on loopback by default). A
    /// name that is a role gets that role's privileges (NOLOGIN roles are refused); a name that
    /// is none acts as a superuser.
    #[default]
    Trust,
    /// Cleartext password checked against the role's verifier (use with TLS).
    Password,
    /// SCRAM-SHA-256 against the role's verifier.
    #[serde(alias = "scram-sha-256")]
    Scram,
    /// Refused (a host rule's).
    Reject,
}

/// A superuser defined in the config file (`[[auth.users]]`): its password as text, a
/// SCRAM-SHA-256 verifier (`SCRAM-SHA-256$...`, what `weir password` or PostgreSQL's
/// `pg_authid.rolpassword` gives), or a file holding either.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    #[serde(default)]
    pub password: Option<String>,
    #[serde(default)]
    pub password_file: Option<PathBuf>,
}

impl UserConfig {
    /// The user's password or verifier as given (the file's first line for `password_file`);
    /// the server makes the verifier of it (`catalog::password`).
    pub fn password_text(&self) -> Result<String> {
        let text = match (&self.password, &self.password_file) {
            (Some(p), None) => p.clone(),
            (None, Some(file)) => std::fs::read_to_string(file)
                .map_err(|e| {
                    config_error(format!("[[auth.users]] {}: password_file {}: {e}", self.name, file.display()))
                })?
                .trim_end_matches(['\n', '\r'])
                .to_string(),
            _ => {
                return Err(config_error(format!(
                    "[[auth.users]] {}: give exactly one of password and password_file",
                    self.name
                )))
            }
        };
        Ok(text)
    }
}

/// A host rule (`[[auth.hba]]`), PostgreSQL's `pg_hba.conf` line: the first rule whose
/// connection type, database, user and address match a connection says how it authenticates;
/// a connection no rule matches is refused (28000). Without rules, `auth.method` applies to all.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HbaRule {
    /// `host` (TLS or not), `hostssl` (TLS only) or `hostnossl`.
    #[serde(rename = "type", default = "host")]
    pub connection: String,
    /// A database name or `all`.
    #[serde(default = "all")]
    pub database: String,
    /// A role name, `+role` (its members), or `all`.
    #[serde(default = "all")]
    pub user: String,
    /// An address range (`10.0.0.0/8`, `::1/128`), one address, or `all`.
    #[serde(default = "all")]
    pub address: String,
    pub method: AuthMethod,
}

fn host() -> String {
    "host".into()
}

fn all() -> String {
    "all".into()
}

impl HbaRule {
    /// Whether the rule's type, database and address take a connection (its user is matched
    /// by the server, which knows role membership).
    pub fn takes(&self, database: &str, address: std::net::IpAddr, tls: bool) -> bool {
        let connection = match self.connection.as_str() {
            "hostssl" => tls,
            "hostnossl" => !tls,
            _ => true,
        };
        let database = self.database == "all" || self.database == database;
        connection && database && address_matches(&self.address, address)
    }

    fn check(&self) -> Result<()> {
        if !matches!(self.connection.as_str(), "host" | "hostssl" | "hostnossl") {
            return Err(config_error(format!("[[auth.hba]] type {}: host, hostssl or hostnossl", self.connection)));
        }
        if self.address != "all" && !self.address.contains('/') && self.address.parse::<std::net::IpAddr>().is_err() {
            self.address
                .parse::<ipnet::IpNet>()
                .map_err(|e| config_error(format!("[[auth.hba]] address {}: {e}", self.address)))?;
        }
        if self.address.contains('/') {
            self.address
                .parse::<ipnet::IpNet>()
                .map_err(|e| config_error(format!("[[auth.hba]] address {}: {e}", self.address)))?;
        }
        Ok(())
    }
}

fn address_matches(rule: &str, address: std::net::IpAddr) -> bool {
    // An IPv4 client seen through an IPv6 socket is matched as IPv4.
    let address = match address {
        std::net::IpAddr::V6(v6) => v6.to_ipv4_mapped().map(std::net::IpAddr::V4).unwrap_or(address),
        v4 => v4,
    };
    if rule == "all" {
        return true;
    }
    if let Ok(one) = rule.parse::<std::net::IpAddr>() {
        return one == address;
    }
    rule.parse::<ipnet::IpNet>().is_ok_and(|net| net.contains(&address))
}

fn config_error(message: String) -> WeirError {
    WeirError::new(crate::error::SqlState("F0000"), message)
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub method: AuthMethod,
    #[serde(default)]
    pub users: Vec<UserConfig>,
    #[serde(default)]
    pub hba: Vec<HbaRule>,
    /// Sessions at most at once; superusers have three more (PostgreSQL's reserved slots).
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
}

fn default_max_connections() -> usize {
    100
}

impl Default for AuthConfig {
    fn default() -> Self {
        AuthConfig { method: AuthMethod::Trust, users: vec![], hba: vec![], max_connections: default_max_connections() }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    /// PEM certificate chain.
    pub cert: PathBuf,
    /// PEM PKCS#8 private key.
    pub key: PathBuf,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StorageConfig {
    /// fsync the write-ahead log on every commit. Off by default: a process crash (`kill -9`)
    /// loses nothing either way; an OS crash or power loss may lose the last writes without it.
    pub sync_writes: bool,
    /// RocksDB block cache, in MiB.
    pub block_cache_mb: usize,
    /// Entries each operator state table of a view keeps in memory (the rest is in RocksDB).
    pub state_cache_entries: usize,
}

impl Default for StorageConfig {
    fn default() -> Self {
        StorageConfig { sync_writes: false, block_cache_mb: 256, state_cache_entries: 100_000 }
    }
}

/// How client sessions (queries, DML, DDL) share the machine with the dataflow.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServingConfig {
    /// Worker threads of the runtime client sessions run on (their blocking reads get threads
    /// of their own as needed).
    pub threads: usize,
    /// The Linux nice value of those threads: above 0, the kernel gives the dataflow's threads
    /// (at 0) the CPU first when both want it, so views stay fresh while ad-hoc reads wait for
    /// what is left. 10 by default: on the 2-core bench machine a Nexmark stream beside 16
    /// readers lost 12 % of its rate at 10 and 44 % at 0 (docs/benchmarks.md). 0 shares the CPU
    /// equally.
    pub nice: i32,
}

impl Default for ServingConfig {
    fn default() -> Self {
        ServingConfig { threads: 2, nice: 10 }
    }
}

/// `[checkpoint]` settings (flags `--checkpoint-url`, `--checkpoint-interval`).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct CheckpointConfig {
    /// Where checkpoints go: `s3://bucket/prefix`, `file:///dir` or a directory; default
    /// `<data-dir>/checkpoints`.
    pub url: Option<String>,
    /// Least milliseconds between checkpoints; 0: only when DDL completes and at a clean stop.
    pub interval_ms: u64,
    /// Complete checkpoints kept in the object store (at least 1).
    pub keep: usize,
    /// Milliseconds the views may take to commit a checkpoint barrier before it is given up.
    pub timeout_ms: u64,
    /// Endpoint and credentials for an `s3://` URL (else the `AWS_*` environment variables).
    pub s3: S3Settings,
}

impl Default for CheckpointConfig {
    fn default() -> Self {
        CheckpointConfig { url: None, interval_ms: 1000, keep: 3, timeout_ms: 60_000, s3: Default::default() }
    }
}

impl CheckpointConfig {
    pub fn interval(&self) -> Option<Duration> {
        (self.interval_ms > 0).then(|| Duration::from_millis(self.interval_ms))
    }

    /// The object store URL, the default resolved against `data_dir`.
    pub fn url_for(&self, data_dir: &Path) -> String {
        self.url.clone().unwrap_or_else(|| data_dir.join("checkpoints").to_string_lossy().into_owned())
    }
}

/// S3 settings for a `s3://` checkpoint URL (None: from the environment).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct S3Settings {
    pub endpoint: Option<String>,
    pub region: Option<String>,
    pub access_key_id: Option<String>,
    pub secret_access_key: Option<String>,
}

/// The file format of `--config`; every key is optional.
#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub metrics_listen: Option<String>,
    pub log: Option<String>,
    /// `text` (the default) or `json`.
    pub log_format: Option<String>,
    pub database: Option<String>,
    #[serde(default)]
    pub auth: AuthConfig,
    pub tls: Option<TlsConfig>,
    #[serde(default)]
    pub storage: StorageConfig,
    #[serde(default)]
    pub serving: ServingConfig,
    /// Milliseconds between barriers (default 100, ADR 23).
    pub barrier_interval_ms: Option<u64>,
    /// Rows tables and sources publish to views after which a barrier comes early (default
    /// 1,000,000; 0 for barriers by time only).
    pub epoch_max_rows: Option<u64>,
    /// Milliseconds without rows after which an input no longer holds back a view's
    /// watermark (default 10000).
    pub watermark_idle_timeout_ms: Option<u64>,
    /// Checkpoints: where, how often, how many kept.
    #[serde(default)]
    pub checkpoint: CheckpointConfig,
    /// Milliseconds a stop waits for statements under way, and then for sinks to deliver its
    /// last checkpoint (each; default 10000).
    pub drain_timeout_ms: Option<u64>,
    /// Milliseconds a whole stop may take before the server stops at once, as a kill would
    /// (default 60000).
    pub shutdown_timeout_ms: Option<u64>,
    /// The directory secret references may read files from (default /etc/weir/secrets).
    pub secrets_dir: Option<PathBuf>,
}

/// How often views commit an epoch unless configured (ADR 23): fresh views, with checkpoints
/// (every 1 s) every tenth barrier or so.
pub const DEFAULT_BARRIER_INTERVAL_MS: u64 = 100;

/// Where secret references in connector options read files unless `secrets_dir` says
/// (`catalog::secrets`).
pub const DEFAULT_SECRETS_DIR: &str = "/etc/weir/secrets";

/// The resolved configuration.
#[derive(Debug, Clone)]
pub struct Config {
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub metrics_listen: Option<SocketAddr>,
    pub log: String,
    pub log_format: LogFormat,
    /// The one database this server serves (what `psql -d` should name; others are refused).
    pub database: String,
    pub auth: AuthConfig,
    pub tls: Option<TlsConfig>,
    pub storage: StorageConfig,
    pub serving: ServingConfig,
    /// How often a barrier closes an epoch and views commit.
    pub barrier_interval: std::time::Duration,
    /// A barrier also comes once tables and sources have taken this many rows since the last
    /// one (0: by time only), so an epoch's work, and the memory views hold for it, stays
    /// bounded however fast rows come.
    pub epoch_max_rows: u64,
    /// How long an input without rows holds back the watermark of the views reading it.
    pub watermark_idle_timeout: std::time::Duration,
    pub checkpoint: CheckpointConfig,
    /// How long a stop waits for statements under way, and then for sinks to deliver its last
    /// checkpoint (each).
    pub drain_timeout: std::time::Duration,
    /// How long a whole stop may take; then the server stops at once (safe, as kill -9 is).
    pub shutdown_timeout: std::time::Duration,
    /// The directory secret references may read files from (`catalog::secrets`).
    pub secrets_dir: PathBuf,
    /// Cluster mode (`--cluster`); `None`: one process, as without it.
    pub cluster: Option<ClusterConfig>,
}

/// How this node joins a cluster (`crate::cluster`, ADR 38).
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// etcd's client endpoints, `host:port`.
    pub endpoints: Vec<String>,
    /// Every key the cluster keeps in etcd starts with this (`/weir/<name>/`), so several
    /// clusters can share one etcd.
    pub prefix: String,
    /// This node's name, stable across its restarts.
    pub node_id: String,
    /// Where other nodes and clients reach this node's Postgres wire (`host:port`).
    pub advertise: String,
    /// Where this node's exchange service (Arrow Flight) listens.
    pub exchange_listen: SocketAddr,
    /// Where other nodes reach it (`host:port`, the advertised host): the server sets the port
    /// once the listener is bound (port 0 picks a free one, as tests do).
    pub exchange: String,
    /// The node's etcd lease: a node not heard from for this long is gone, its vnodes given to
    /// others.
    pub lease: std::time::Duration,
}

impl ClusterConfig {
    /// From `--cluster etcd://host:port[,host:port...][/name]`, `--node-id`, `--advertise` (a
    /// host; the ports are the Postgres and exchange listen ports), `--exchange-listen`
    /// (default: the `--listen` address with port [`DEFAULT_EXCHANGE_PORT`]) and
    /// `--cluster-lease`.
    pub fn parse(
        url: &str,
        node_id: Option<&str>,
        advertise: Option<&str>,
        listen: SocketAddr,
        exchange_listen: Option<&str>,
        lease: Option<std::time::Duration>,
    ) -> Result<ClusterConfig> {
        let bad = |why: String| WeirError::new(crate::error::SqlState("F0000"), why);
        let rest = url
            .strip_prefix("etcd://")
            .ok_or_else(|| bad(format!("--cluster: expected etcd://host:port[,host:port...][/name], got {url}")))?;
        let (hosts, name) = match rest.split_once('/') {
            Some((hosts, name)) => (hosts, name.trim_matches('/')),
            None => (rest, ""),
        };
        let name = if name.is_empty() { "default" } else { name };
        if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_') {
            return Err(bad(format!("--cluster: the cluster name may hold letters, digits, - and _: {name}")));
        }
        let endpoints: Vec<String> =
            hosts.split(',').map(str::trim).filter(|h| !h.is_empty()).map(String::from).collect();
        if endpoints.is_empty() || endpoints.iter().any(|e| !e.contains(':')) {
            return Err(bad(format!("--cluster: every etcd endpoint is host:port: {url}")));
        }
        let node_id = node_id
            .ok_or_else(|| bad("--cluster needs --node-id: a name for this node, stable across its restarts".into()))?;
        if node_id.is_empty()
            || node_id.len() > 63
            || !node_id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
        {
            return Err(bad(format!("--node-id: 1 to 63 letters, digits, '-', '_' or '.': {node_id:?}")));
        }
        let host = match advertise {
            Some(host) if !host.is_empty() => host.to_string(),
            _ if !listen.ip().is_unspecified() => listen.ip().to_string(),
            _ => {
                return Err(bad(format!(
                    "--cluster with --listen {listen} needs --advertise: the host other nodes and clients reach this one at"
                )))
            }
        };
        let lease = lease.unwrap_or(std::time::Duration::from_secs(DEFAULT_CLUSTER_LEASE_SECONDS));
        if lease < std::time::Duration::from_secs(2) || lease.subsec_nanos() != 0 {
            return Err(bad(format!(
                "--cluster-lease: whole seconds, at least 2 (etcd's shortest lease), got {lease:?}"
            )));
        }
        let exchange_listen = match exchange_listen {
            Some(text) => parse_addr("exchange-listen", text)?,
            None => SocketAddr::new(listen.ip(), DEFAULT_EXCHANGE_PORT),
        };
        let overlap = exchange_listen.ip() == listen.ip()
            || exchange_listen.ip().is_unspecified()
            || listen.ip().is_unspecified();
        if overlap && exchange_listen.port() == listen.port() && listen.port() != 0 {
            return Err(bad(format!("--exchange-listen {exchange_listen} is the Postgres --listen address")));
        }
        Ok(ClusterConfig {
            endpoints,
            prefix: format!("/weir/{name}/"),
            node_id: node_id.to_string(),
            advertise: format!("{host}:{}", listen.port()),
            exchange_listen,
            exchange: format!("{host}:{}", exchange_listen.port()),
            lease,
        })
    }
}

/// How long a node may go unheard before etcd ends its lease (and the cluster gives its vnodes
/// to others).
pub const DEFAULT_CLUSTER_LEASE_SECONDS: u64 = 2;

/// The exchange service's port when `--exchange-listen` is not given.
pub const DEFAULT_EXCHANGE_PORT: u16 = 4567;

/// How log lines are written: for people, or one JSON object a line for a log pipeline (each
/// with the view, source or sink it concerns, from the span its task runs in).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    #[default]
    Text,
    Json,
}

impl std::str::FromStr for LogFormat {
    type Err = WeirError;
    fn from_str(text: &str) -> Result<LogFormat> {
        match text.trim().to_ascii_lowercase().as_str() {
            "text" => Ok(LogFormat::Text),
            "json" => Ok(LogFormat::Json),
            other => Err(WeirError::new(
                crate::error::SqlState("F0000"),
                format!("log format must be text or json, not {other:?}"),
            )),
        }
    }
}

pub const DEFAULT_LISTEN: &str = "127.0.0.1:4566";
pub const DEFAULT_METRICS_LISTEN: &str = "127.0.0.1:9464";
pub const DEFAULT_DATA_DIR: &str = "./weir-data";
pub const DEFAULT_DATABASE: &str = "dev";
pub const DEFAULT_EPOCH_MAX_ROWS: u64 = 1_000_000;

/// Values given on the command line or in the environment (None = not given).
#[derive(Debug, Default, Clone)]
pub struct Overrides {
    pub listen: Option<String>,
    pub data_dir: Option<PathBuf>,
    pub metrics_listen: Option<String>,
    pub log: Option<String>,
    pub log_format: Option<String>,
    pub barrier_interval_ms: Option<u64>,
    pub watermark_idle_timeout_ms: Option<u64>,
    pub checkpoint_url: Option<String>,
    pub checkpoint_interval_ms: Option<u64>,
    pub checkpoint_keep: Option<usize>,
    pub drain_timeout_ms: Option<u64>,
    pub shutdown_timeout_ms: Option<u64>,
    pub secrets_dir: Option<PathBuf>,
    /// `--cluster etcd://...` and the flags that go with it.
    pub cluster: Option<String>,
    pub node_id: Option<String>,
    pub advertise: Option<String>,
    pub exchange_listen: Option<String>,
    pub cluster_lease: Option<std::time::Duration>,
}

impl Config {
    /// Defaults < file < overrides.
    pub fn resolve(file: Option<&Path>, overrides: Overrides) -> Result<Config> {
        let file_cfg = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .map_err(|e| WeirError::io(format!("cannot read config file {}: {e}", path.display())))?;
                toml::from_str::<FileConfig>(&text).map_err(|e| {
                    WeirError::new(
                        crate::error::SqlState("F0000"),
                        format!("invalid config file {}: {e}", path.display()),
                    )
                })?
            }
            None => FileConfig::default(),
        };
        let listen = overrides.listen.or(file_cfg.listen).unwrap_or_else(|| DEFAULT_LISTEN.into());
        let mut checkpoint = file_cfg.checkpoint.clone();
        checkpoint.url = overrides.checkpoint_url.or(checkpoint.url);
        checkpoint.interval_ms = overrides.checkpoint_interval_ms.unwrap_or(checkpoint.interval_ms);
        checkpoint.keep = overrides.checkpoint_keep.unwrap_or(checkpoint.keep);
        let metrics =
            overrides.metrics_listen.or(file_cfg.metrics_listen).unwrap_or_else(|| DEFAULT_METRICS_LISTEN.into());
        let listen = parse_addr("listen", &listen)?;
        let cluster = match &overrides.cluster {
            Some(url) => Some(ClusterConfig::parse(
                url,
                overrides.node_id.as_deref(),
                overrides.advertise.as_deref(),
                listen,
                overrides.exchange_listen.as_deref(),
                overrides.cluster_lease,
            )?),
            None => None,
        };
        let config = Config {
            listen,
            data_dir: overrides.data_dir.or(file_cfg.data_dir).unwrap_or_else(|| DEFAULT_DATA_DIR.into()),
            metrics_listen: if metrics.is_empty() || metrics == "off" {
                None
            } else {
                Some(parse_addr("metrics-listen", &metrics)?)
            },
            log: overrides.log.or(file_cfg.log).unwrap_or_else(|| "info".into()),
            log_format: overrides.log_format.or(file_cfg.log_format).as_deref().unwrap_or("text").parse()?,
            database: file_cfg.database.unwrap_or_else(|| DEFAULT_DATABASE.into()),
            auth: file_cfg.auth,
            tls: file_cfg.tls,
            storage: file_cfg.storage,
            serving: file_cfg.serving,
            barrier_interval: std::time::Duration::from_millis(
                overrides
                    .barrier_interval_ms
                    .or(file_cfg.barrier_interval_ms)
                    .unwrap_or(DEFAULT_BARRIER_INTERVAL_MS)
                    .max(1),
            ),
            epoch_max_rows: file_cfg.epoch_max_rows.unwrap_or(DEFAULT_EPOCH_MAX_ROWS),
            watermark_idle_timeout: std::time::Duration::from_millis(
                overrides.watermark_idle_timeout_ms.or(file_cfg.watermark_idle_timeout_ms).unwrap_or(10_000).max(1),
            ),
            checkpoint,
            drain_timeout: std::time::Duration::from_millis(
                overrides.drain_timeout_ms.or(file_cfg.drain_timeout_ms).unwrap_or(10_000),
            ),
            shutdown_timeout: std::time::Duration::from_millis(
                overrides.shutdown_timeout_ms.or(file_cfg.shutdown_timeout_ms).unwrap_or(60_000).max(1),
            ),
            secrets_dir: overrides
                .secrets_dir
                .or(file_cfg.secrets_dir)
                .unwrap_or_else(|| PathBuf::from(DEFAULT_SECRETS_DIR)),
            cluster,
        };
        for rule in &config.auth.hba {
            rule.check()?;
        }
        for user in &config.auth.users {
            user.password_text()?;
        }
        Ok(config)
    }
}

fn parse_addr(what: &str, s: &str) -> Result<SocketAddr> {
    use std::net::ToSocketAddrs;
    s.to_socket_addrs().ok().and_then(|mut it| it.next()).ok_or_else(|| {
        WeirError::new(crate::error::SqlState("F0000"), format!("--{what}: not a HOST:PORT address: {s}"))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_override_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir.toml");
        std::fs::write(
            &path,
            "listen = \"127.0.0.1:7000\"\ndata_dir = \"/tmp/x\"\n[auth]\nmethod = \"scram\"\n[[auth.users]]\nname = \"u\"\npassword = \"p\"\n",
        )
        .unwrap();
        let cfg =
            Config::resolve(Some(&path), Overrides { listen: Some("127.0.0.1:7001".into()), ..Default::default() })
                .unwrap();
        assert_eq!(cfg.listen.port(), 7001);
        assert_eq!(cfg.data_dir, PathBuf::from("/tmp/x"));
        assert_eq!(cfg.metrics_listen.unwrap().port(), 9464);
        assert_eq!(cfg.auth.method, AuthMethod::Scram);
    }

    #[test]
    fn unknown_keys_are_rejected() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir.toml");
        std::fs::write(&path, "lisen = \"127.0.0.1:7000\"\n").unwrap();
        let err = Config::resolve(Some(&path), Overrides::default()).unwrap_err();
        assert!(err.message.contains("lisen"), "{}", err.message);
    }
}
