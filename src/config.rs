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
#[serde(rename_all = "lowercase")]
pub enum AuthMethod {
    /// Anyone may connect as any user (the default; Weir listens on loopback by default).
    #[default]
    Trust,
    /// Cleartext password checked against `[[auth.users]]` (use with TLS).
    Password,
    /// SCRAM-SHA-256 against `[[auth.users]]`.
    Scram,
}

#[derive(Debug, Clone, Deserialize)]
pub struct UserConfig {
    pub name: String,
    pub password: String,
}

#[derive(Debug, Clone, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    #[serde(default)]
    pub method: AuthMethod,
    #[serde(default)]
    pub users: Vec<UserConfig>,
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
}

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
        let config = Config {
            listen: parse_addr("listen", &listen)?,
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
        };
        if config.auth.method != AuthMethod::Trust && config.auth.users.is_empty() {
            return Err(WeirError::new(
                crate::error::SqlState("F0000"),
                "auth.method is password or scram but no [[auth.users]] are configured",
            ));
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
