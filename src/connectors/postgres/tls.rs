//! TLS of a Postgres sink's connection, as libpq and pgjdbc take it from the URL:
//! `sslmode` = `disable` | `prefer` (the default: TLS when the server offers it, unverified) |
//! `require` (TLS, unverified) | `verify-ca` (the server's certificate chains to a trusted CA) |
//! `verify-full` (and was issued for the host connected to); `sslrootcert` = the trusted CAs
//! (a PEM file; default: the machine's CA bundle), `sslcert` / `sslkey` = a client certificate.
//! Through OpenSSL (the one librdkafka uses, ADR 32) and `postgres-openssl`.
//!
//! [`TlsSettings::take`] removes these parameters from a URL's query, so what remains is what
//! the URL parsers of [`super`] know; [`TlsSettings::connector`] makes the connector.

use openssl::ssl::{SslConnector, SslFiletype, SslMethod, SslVerifyMode};
use postgres_openssl::MakeTlsConnector;
use tokio_postgres::config::SslMode;

use crate::error::{Result, SqlState, WeirError};

/// `sslmode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

/// The TLS parameters of one URL.
#[derive(Debug, Clone)]
pub struct TlsSettings {
    pub mode: Mode,
    root_cert: Option<String>,
    cert: Option<String>,
    key: Option<String>,
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

impl TlsSettings {
    /// The TLS parameters of `query` (`a=b&c=d`), and the query without them.
    pub fn take(query: &str) -> Result<(TlsSettings, String)> {
        let mut settings = TlsSettings { mode: Mode::Prefer, root_cert: None, cert: None, key: None };
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.split_once('=') {
                Some(("sslmode", mode)) => {
                    settings.mode = match mode {
                        "disable" => Mode::Disable,
                        "prefer" | "allow" => Mode::Prefer,
                        "require" => Mode::Require,
                        "verify-ca" => Mode::VerifyCa,
                        "verify-full" => Mode::VerifyFull,
                        other => {
                            return Err(invalid(format!(
                                "sslmode must be disable, prefer, require, verify-ca or verify-full, not '{other}'"
                            )))
                        }
                    }
                }
                Some(("sslrootcert", path)) => settings.root_cert = Some(path.to_string()),
                Some(("sslcert", path)) => settings.cert = Some(path.to_string()),
                Some(("sslkey", path)) => settings.key = Some(path.to_string()),
                _ => rest.push(pair),
            }
        }
        if settings.cert.is_some() != settings.key.is_some() {
            return Err(invalid("sslcert and sslkey go together".into()));
        }
        Ok((settings, rest.join("&")))
    }

    /// tokio-postgres's mode for this one (the verify modes are `require` with a verifying
    /// connector).
    pub fn ssl_mode(&self) -> SslMode {
        match self.mode {
            Mode::Disable => SslMode::Disable,
            Mode::Prefer => SslMode::Prefer,
            Mode::Require | Mode::VerifyCa | Mode::VerifyFull => SslMode::Require,
        }
    }

    /// The connector; None for `disable`. Fails (22023) on files that cannot be read.
    pub fn connector(&self) -> Result<Option<MakeTlsConnector>> {
        if self.mode == Mode::Disable {
            return Ok(None);
        }
        let tls = |what: &str, e: openssl::error::ErrorStack| invalid(format!("Postgres sink TLS: {what}: {e}"));
        let mut builder = SslConnector::builder(SslMethod::tls_client()).map_err(|e| tls("OpenSSL", e))?;
        let verify = matches!(self.mode, Mode::VerifyCa | Mode::VerifyFull);
        if verify {
            match &self.root_cert {
                Some(path) => builder.set_ca_file(path).map_err(|e| tls(&format!("sslrootcert {path}"), e))?,
                None => {
                    // OpenSSL is built into Weir: its default paths are not the machine's.
                    let found = openssl_probe::probe();
                    if let Some(file) = found.cert_file {
                        builder.set_ca_file(&file).map_err(|e| tls("the machine's CA bundle", e))?;
                    }
                }
            }
            builder.set_verify(SslVerifyMode::PEER);
        } else {
            builder.set_verify(SslVerifyMode::NONE);
        }
        if let (Some(cert), Some(key)) = (&self.cert, &self.key) {
            builder.set_certificate_chain_file(cert).map_err(|e| tls(&format!("sslcert {cert}"), e))?;
            builder.set_private_key_file(key, SslFiletype::PEM).map_err(|e| tls(&format!("sslkey {key}"), e))?;
        }
        let mut connector = MakeTlsConnector::new(builder.build());
        let mode = self.mode;
        connector.set_callback(move |config, _host| {
            if mode != Mode::VerifyFull {
                config.set_verify_hostname(false);
            }
            Ok(())
        });
        Ok(Some(connector))
    }
}
