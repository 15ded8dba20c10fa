//! `connector = 'jdbc'` (with `jdbc.url`) or `'postgres'` (with `url = 'postgres://...'`): a
//! view's changes written to a PostgreSQL table
//! exactly once (the runtime is [`crate::connectors::sink`], ADR 12).
//!
//! ```sql
//! CREATE SINK to_pg FROM per_auction WITH (connector = 'jdbc',
//!   jdbc.url = 'jdbc:postgresql://127.0.0.1:5432/analytics?user=postgres', table.name = 'per_auction',
//!   primary_key = 'window_start,auction');
//! ```
//! Each checkpoint interval's changes (an outbox group) are one SQL transaction, written part by
//! part: with `primary_key`, a part's changes are netted per key, gone keys deleted and the
//! others upserted (`INSERT ... ON CONFLICT (key) DO UPDATE`); without one, every row is
//! inserted (only over a view that never retracts). A part of [`COPY_FROM_ROWS`] rows or more
//! goes by `COPY ... FROM STDIN` (text format), straight into the table, or with a key into a
//! temporary table of the connection from which one `INSERT ... SELECT ... ON CONFLICT` upserts;
//! fewer go by multi-row INSERT statements, cheaper for a few rows. The same transaction sets
//! the sink's row of `weir_sink_marker (sink, epoch)` (made if missing) to the group: the
//! marker a restart reads. Values are sent as text, which PostgreSQL casts to the table's
//! column types; the table must exist, with the view's column
//! names, unless `auto_create = 'true'`: then CREATE SINK makes it if it is missing, with the
//! view's columns (their Postgres types, [`postgres_type`]) and `primary_key` as its key.

pub mod tls;

use std::time::Duration;

use datafusion::arrow::array::{Array, RecordBatch};
use datafusion::arrow::util::display::{ArrayFormatter, FormatOptions};

use crate::catalog::options::ConnectorOptions;
use crate::connectors::sink::{key_columns, net_by_key, SinkWriter, WriterSpec};
use crate::error::{Result, SqlState, WeirError};
use crate::types::{ChangeBatch, Epoch};
use tls::TlsSettings;

pub const OPTIONS: &[&str] = &[
    "connector",
    "jdbc.url",
    "url",
    "table.name",
    "primary_key",
    "auto_create",
    "format",
    "encode",
    "sink.parallelism",
    // The password, if not in the URL (then it may come by reference: `password.ref`).
    "password",
];

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

/// Rows per INSERT or DELETE statement.
const ROWS_PER_STATEMENT: usize = 500;

pub struct PostgresSink {
    config: tokio_postgres::Config,
    /// The TLS connector (`sslmode`); None: plain connections.
    tls: Option<postgres_openssl::MakeTlsConnector>,
    table: String,
    /// The view's column names, quoted.
    columns: Vec<String>,
    /// The table's definition (columns with their Postgres types, the key) when CREATE SINK may
    /// make it (`auto_create`).
    create: Option<String>,
    /// The primary key's columns (indices); None: inserts only.
    key: Option<Vec<usize>>,
    identity: String,
    client: Option<tokio_postgres::Client>,
    /// The connection has its temporary staging table (COPY with a key).
    staging_made: bool,
}

/// `jdbc:postgresql://host:port/db?user=u&password=p`, or a libpq URL
/// (`postgres://user:password@host:port/db`), as a config and its TLS settings ([`tls`]: the
/// `ssl*` parameters either takes).
fn config_of(url: &str) -> Result<(tokio_postgres::Config, TlsSettings)> {
    let shown = crate::catalog::secrets::redact_urls(url);
    let bad = |why: &str| invalid(format!("the Postgres URL '{shown}': {why}"));
    let (address, query) = url.split_once('?').unwrap_or((url, ""));
    let (tls, query) = TlsSettings::take(query).map_err(|e| bad(&e.message))?;
    let Some(rest) = address.strip_prefix("jdbc:") else {
        let url = if query.is_empty() { address.to_string() } else { format!("{address}?{query}") };
        let mut config: tokio_postgres::Config = url.parse().map_err(|e| bad(&format!("{e}")))?;
        config.connect_timeout(Duration::from_secs(10)).ssl_mode(tls.ssl_mode());
        return Ok((config, tls));
    };
    let address =
        rest.strip_prefix("postgresql://").ok_or_else(|| bad("expected jdbc:postgresql://host:port/database"))?;
    let (host_port, database) = address.split_once('/').unwrap_or((address, "postgres"));
    let (host, port) = host_port.split_once(':').unwrap_or((host_port, "5432"));
    let mut config = tokio_postgres::Config::new();
    config.host(host).port(port.parse().map_err(|_| bad("the port is not a number"))?).dbname(database);
    config.user("postgres").connect_timeout(Duration::from_secs(10)).ssl_mode(tls.ssl_mode());
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        match pair.split_once('=') {
            Some(("user", v)) => {
                config.user(v);
            }
            Some(("password", v)) => {
                config.password(v);
            }
            _ => {
                let name = pair.split_once('=').map_or(pair, |(name, _)| name);
                return Err(bad(&format!(
                    "unknown parameter {name} (user, password, sslmode, sslrootcert, sslcert and sslkey are taken)"
                )));
            }
        }
    }
    Ok((config, tls))
}

/// Drives a sink's connection until it ends, logging why.
async fn watch<F: std::future::Future<Output = std::result::Result<(), tokio_postgres::Error>>>(connection: F) {
    if let Err(e) = connection.await {
        tracing::warn!("Postgres sink connection ended: {e}");
    }
}

fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

impl PostgresSink {
    /// The writer `spec` says (without `primary_key`, its view must be append-only), as
    /// `options` say.
    pub fn new(options: &ConnectorOptions, spec: &WriterSpec) -> Result<PostgresSink> {
        let WriterSpec { ref schema, append_only, .. } = *spec;
        options.only(OPTIONS)?;
        let url = options.get("jdbc.url").or_else(|| options.get("url")).ok_or_else(|| {
            invalid("a Postgres sink needs url = 'postgres://...' (or jdbc.url = 'jdbc:postgresql://...')".into())
        })?;
        let table =
            options.get("table.name").ok_or_else(|| invalid("a Postgres sink needs table.name = '...'".into()))?;
        let key = match options.get("primary_key") {
            Some(names) => Some(key_columns(names, schema)?),
            None if append_only => None,
            None => {
                return Err(WeirError::new(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "a Postgres sink without primary_key needs a view that only ever inserts rows",
                )
                .with_hint("Give primary_key = '...': changed rows are upserted, gone ones deleted."))
            }
        };
        let columns: Vec<String> = schema.fields().iter().map(|f| quote_ident(f.name())).collect();
        let auto_create = match options.get("auto_create").map(str::to_ascii_lowercase).as_deref() {
            None | Some("false") => false,
            Some("true") => true,
            Some(other) => return Err(invalid(format!("auto_create must be true or false, not '{other}'"))),
        };
        let create = auto_create.then(|| {
            let mut definition: Vec<String> = columns
                .iter()
                .zip(schema.fields())
                .map(|(name, f)| {
                    let not_null = if f.is_nullable() { "" } else { " NOT NULL" };
                    format!("{name} {}{not_null}", postgres_type(f))
                })
                .collect();
            if let Some(key) = &key {
                let key: Vec<&str> = key.iter().map(|&i| columns[i].as_str()).collect();
                definition.push(format!("PRIMARY KEY ({})", key.join(", ")));
            }
            definition.join(", ")
        });
        let (mut config, tls) = config_of(url)?;
        if let Some(password) = options.get("password") {
            config.password(password);
        }
        Ok(PostgresSink {
            config,
            tls: tls.connector()?,
            table: table.split('.').map(quote_ident).collect::<Vec<_>>().join("."),
            columns,
            create,
            key,
            identity: crate::connectors::sink::identity("weir-sink", spec),
            client: None,
            staging_made: false,
        })
    }

    fn unreachable(&self, e: impl std::fmt::Display) -> WeirError {
        WeirError::new(SqlState::UNABLE_TO_CONNECT, format!("Postgres sink table {}: {e}", self.table))
    }

    /// The connection, made (with the marker table) if there is none.
    fn client(&mut self) -> Result<&mut tokio_postgres::Client> {
        if self.client.is_none() {
            // On the dataflow's runtime, whoever makes the connection (CREATE SINK checks it
            // from a session): the sink delivers from there, and sessions end first at a stop.
            let handle = crate::runtime::handle();
            let config = self.config.clone();
            let client = match self.tls.clone() {
                None => {
                    let (client, connection) =
                        handle.block_on(config.connect(tokio_postgres::NoTls)).map_err(|e| self.unreachable(e))?;
                    handle.spawn(watch(connection));
                    client
                }
                Some(tls) => {
                    let (client, connection) = handle.block_on(config.connect(tls)).map_err(|e| self.unreachable(e))?;
                    handle.spawn(watch(connection));
                    client
                }
            };
            let made = handle.block_on(client.batch_execute(
                "CREATE TABLE IF NOT EXISTS weir_sink_marker (sink TEXT PRIMARY KEY, epoch BIGINT NOT NULL)",
            ));
            // Shards connecting at once may race to make it: the loser's error says it exists.
            let lost_race = |e: &tokio_postgres::Error| {
                use tokio_postgres::error::SqlState as Pg;
                e.code().is_some_and(|c| *c == Pg::UNIQUE_VIOLATION || *c == Pg::DUPLICATE_TABLE)
            };
            match made {
                Err(e) if !lost_race(&e) => return Err(self.unreachable(e)),
                _ => {}
            }
            self.client = Some(client);
            self.staging_made = false;
        }
        Ok(self.client.as_mut().expect("made"))
    }

    /// An outbox part's changes as rows of text values (None: NULL), in two lists: the rows to
    /// upsert (or insert, without a key) and the keys to delete. With a key, the changes are
    /// netted per key first.
    fn rows(&self, changes: &[ChangeBatch]) -> Result<(Vec<Vec<Value>>, Vec<Vec<Value>>)> {
        let mut upserts: Vec<Vec<Value>> = Vec::new();
        let mut deletes: Vec<Vec<Value>> = Vec::new();
        match &self.key {
            None => {
                for batch in changes {
                    if batch.ops.iter().any(|op| op.sign() < 0) {
                        return Err(WeirError::internal("an insert-only Postgres sink received a retraction"));
                    }
                    upserts.extend(values(&batch.data)?);
                }
            }
            Some(key) => {
                let mut keyed = Vec::new();
                for batch in changes {
                    for (row, op) in values(&batch.data)?.into_iter().zip(&batch.ops) {
                        let k: Vec<Value> = key.iter().map(|&i| row[i].clone()).collect();
                        keyed.push((k, row, op.sign() > 0));
                    }
                }
                for change in net_by_key(keyed) {
                    match change.after {
                        Some(row) => upserts.push(row),
                        None => deletes.push(change.key),
                    }
                }
            }
        }
        Ok((upserts, deletes))
    }

    /// `ON CONFLICT (key) DO UPDATE SET ...` for a sink with a key, else nothing.
    fn on_conflict(&self) -> String {
        let Some(key) = &self.key else { return String::new() };
        let key_columns: Vec<&str> = key.iter().map(|&i| self.columns[i].as_str()).collect();
        let others: Vec<String> = (0..self.columns.len())
            .filter(|i| !key.contains(i))
            .map(|i| format!("{0} = EXCLUDED.{0}", self.columns[i]))
            .collect();
        if others.is_empty() {
            format!(" ON CONFLICT ({}) DO NOTHING", key_columns.join(", "))
        } else {
            format!(" ON CONFLICT ({}) DO UPDATE SET {}", key_columns.join(", "), others.join(", "))
        }
    }

    /// The DELETE statements for `keys`.
    fn deletes(&self, keys: &[Vec<Value>]) -> Vec<String> {
        let Some(key) = &self.key else { return Vec::new() };
        let key_columns: Vec<&str> = key.iter().map(|&i| self.columns[i].as_str()).collect();
        keys.chunks(ROWS_PER_STATEMENT)
            .map(|chunk| {
                let tuples: Vec<String> = chunk.iter().map(|k| literal_tuple(k)).collect();
                format!("DELETE FROM {} WHERE ({}) IN ({})", self.table, key_columns.join(", "), tuples.join(", "))
            })
            .collect()
    }

    /// The INSERT statements for `rows` (a few: COPY costs more than it saves).
    fn inserts(&self, rows: &[Vec<Value>]) -> Vec<String> {
        let on_conflict = self.on_conflict();
        rows.chunks(ROWS_PER_STATEMENT)
            .map(|chunk| {
                let tuples: Vec<String> = chunk.iter().map(|r| literal_tuple(r)).collect();
                format!(
                    "INSERT INTO {} ({}) VALUES {}{on_conflict}",
                    self.table,
                    self.columns.join(", "),
                    tuples.join(", ")
                )
            })
            .collect()
    }

    /// Writes `rows` with COPY: into the table, or, with a key, into a temporary table of the
    /// same columns, from which one INSERT ... ON CONFLICT upserts them.
    fn copy(&mut self, rows: &[Vec<Value>]) -> Result<()> {
        let mut data = Vec::with_capacity(rows.len() * 16 * self.columns.len());
        for row in rows {
            copy_line(row, &mut data);
        }
        let columns = self.columns.join(", ");
        let target = match &self.key {
            None => self.table.clone(),
            Some(_) => {
                // Made once per connection (one per sink, should connections be shared by a
                // pooler); emptied after each use.
                let staging = quote_ident(&format!("{}-rows", self.identity));
                if !self.staging_made {
                    self.execute(&format!(
                        "CREATE TEMPORARY TABLE IF NOT EXISTS {staging} AS SELECT {columns} FROM {} LIMIT 0",
                        self.table
                    ))?;
                    self.staging_made = true;
                }
                staging
            }
        };
        let statement = format!("COPY {target} ({columns}) FROM STDIN");
        let client = self.client()?;
        let copied = tokio::runtime::Handle::current().block_on(async {
            use futures::SinkExt;
            let sink = client.copy_in::<_, bytes::Bytes>(&statement).await?;
            let mut sink = std::pin::pin!(sink);
            sink.send(bytes::Bytes::from(data)).await?;
            sink.as_mut().finish().await
        });
        if let Err(e) = copied {
            self.client = None;
            return Err(self.unreachable(e));
        }
        if self.key.is_some() {
            let on_conflict = self.on_conflict();
            self.execute(&format!(
                "INSERT INTO {} ({columns}) SELECT {columns} FROM {target}{on_conflict}; TRUNCATE {target}",
                self.table
            ))?;
        }
        Ok(())
    }
}

/// A value as sent to PostgreSQL: its text (bytea as `\x` and hex), or None for NULL.
type Value = Option<String>;

/// Rows past which a part's rows go by COPY rather than INSERT statements.
const COPY_FROM_ROWS: usize = 1_000;

/// `batch`'s rows as text values.
fn values(batch: &RecordBatch) -> Result<Vec<Vec<Value>>> {
    use datafusion::arrow::datatypes::DataType as T;
    let options = FormatOptions::default();
    let formatters = batch
        .columns()
        .iter()
        .map(|c| ArrayFormatter::try_new(c.as_ref(), &options))
        .collect::<std::result::Result<Vec<_>, _>>()?;
    Ok((0..batch.num_rows())
        .map(|row| {
            formatters
                .iter()
                .zip(batch.columns())
                .map(|(f, c)| {
                    if c.is_null(row) {
                        None
                    } else if matches!(
                        c.data_type(),
                        T::Binary | T::LargeBinary | T::BinaryView | T::FixedSizeBinary(_)
                    ) {
                        // Arrow prints bytes as bare hex; bytea's hex input starts \x.
                        Some(format!("\\x{}", f.value(row)))
                    } else {
                        Some(f.value(row).to_string())
                    }
                })
                .collect()
        })
        .collect())
}

/// `(v1, v2, ...)` of quoted literals, which PostgreSQL casts to the columns' types.
fn literal_tuple(values: &[Value]) -> String {
    let literals: Vec<String> = values
        .iter()
        .map(|v| match v {
            None => "NULL".to_string(),
            Some(text) => format!("'{}'", text.replace('\'', "''")),
        })
        .collect();
    format!("({})", literals.join(", "))
}

/// Appends `values` as one line of COPY's text format: tab-separated, `\N` for NULL, and
/// backslash, tab, newline and carriage return escaped.
fn copy_line(values: &[Value], out: &mut Vec<u8>) {
    for (i, value) in values.iter().enumerate() {
        if i > 0 {
            out.push(b'\t');
        }
        match value {
            None => out.extend_from_slice(b"\\N"),
            Some(text) => {
                for b in text.bytes() {
                    match b {
                        b'\\' => out.extend_from_slice(b"\\\\"),
                        b'\t' => out.extend_from_slice(b"\\t"),
                        b'\n' => out.extend_from_slice(b"\\n"),
                        b'\r' => out.extend_from_slice(b"\\r"),
                        b => out.push(b),
                    }
                }
            }
        }
    }
    out.push(b'\n');
}

/// The PostgreSQL type of a view's column: as declared (`character varying(20)`), else as its
/// Arrow type maps (text for types Postgres has no match for: values are sent as text either way).
pub fn postgres_type(field: &datafusion::arrow::datatypes::Field) -> String {
    crate::types::pg_type::column_type_name(field).unwrap_or_else(|| "text".into())
}

impl SinkWriter for PostgresSink {
    /// The database answers and the table exists (made now with `auto_create`).
    fn check(&mut self) -> Result<()> {
        let table = self.table.clone();
        let create = self.create.as_ref().map(|columns| format!("CREATE TABLE IF NOT EXISTS {table} ({columns})"));
        let client = self.client()?;
        if let Some(create) = create {
            tokio::runtime::Handle::current().block_on(client.batch_execute(&create)).map_err(|e| {
                WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("making Postgres sink table {table}: {e}"))
            })?;
        }
        let found = tokio::runtime::Handle::current()
            .block_on(client.simple_query(&format!("SELECT * FROM {table} LIMIT 0")))
            .map_err(|e| WeirError::new(SqlState::UNDEFINED_TABLE, format!("Postgres sink table {table}: {e}")));
        found.map(|_| ())
    }

    fn delivered(&mut self) -> Result<Option<Epoch>> {
        let identity = self.identity.clone();
        let client = self.client()?;
        let row = tokio::runtime::Handle::current()
            .block_on(client.query_opt("SELECT epoch FROM weir_sink_marker WHERE sink = $1", &[&identity]));
        match row {
            Ok(row) => Ok(row.map(|r| r.get::<_, i64>(0) as Epoch)),
            Err(e) => {
                self.client = None;
                Err(self.unreachable(e))
            }
        }
    }

    fn begin(&mut self) -> Result<()> {
        self.execute("BEGIN")
    }

    fn write(&mut self, changes: &[ChangeBatch]) -> Result<()> {
        let (upserts, deletes) = self.rows(changes)?;
        for statement in self.deletes(&deletes) {
            self.execute(&statement)?;
        }
        if upserts.len() >= COPY_FROM_ROWS {
            return self.copy(&upserts);
        }
        for statement in self.inserts(&upserts) {
            self.execute(&statement)?;
        }
        Ok(())
    }

    fn commit(&mut self, group: Epoch) -> Result<()> {
        let identity = self.identity.clone();
        let client = self.client()?;
        let marked = tokio::runtime::Handle::current().block_on(client.execute(
            "INSERT INTO weir_sink_marker VALUES ($1, $2) ON CONFLICT (sink) DO UPDATE SET epoch = EXCLUDED.epoch",
            &[&identity, &(group as i64)],
        ));
        if let Err(e) = marked {
            self.client = None;
            return Err(self.unreachable(e));
        }
        crate::fault::point("sink.before_commit");
        self.execute("COMMIT")
    }

    /// The connection goes, and its open transaction with it (Postgres rolls it back).
    fn abort(&mut self) {
        self.client = None;
    }
}

impl PostgresSink {
    /// Runs `sql` on the connection (made if there is none); a failure drops the connection,
    /// and with it any open transaction.
    fn execute(&mut self, sql: &str) -> Result<()> {
        let client = self.client()?;
        let done = tokio::runtime::Handle::current().block_on(client.batch_execute(sql));
        done.map_err(|e| {
            self.client = None;
            self.unreachable(e)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jdbc_and_libpq_urls_read_as_the_same_config() {
        let (jdbc, _) = config_of("jdbc:postgresql://db.example:5433/analytics?user=weir&password=s3cret").unwrap();
        let (libpq, _) = config_of("postgres://weir:s3cret@db.example:5433/analytics").unwrap();
        for c in [&jdbc, &libpq] {
            assert_eq!(c.get_dbname(), Some("analytics"));
            assert_eq!(c.get_user(), Some("weir"));
            assert_eq!(c.get_ports(), &[5433]);
            assert_eq!(c.get_password(), Some(&b"s3cret"[..]));
            assert_eq!(c.get_ssl_mode(), tokio_postgres::config::SslMode::Prefer, "libpq's default");
        }
        assert!(config_of("jdbc:mysql://h/db").is_err());
        let unknown = config_of("jdbc:postgresql://h/db?password=s3cret&ssl=true").unwrap_err();
        assert!(unknown.message.contains("unknown parameter ssl "), "{}", unknown.message);
        assert!(!unknown.message.contains("s3cret"), "a URL's password is never shown: {}", unknown.message);
    }

    #[test]
    fn tls_parameters_are_taken_from_either_url() {
        for url in [
            "jdbc:postgresql://h/db?user=u&sslmode=verify-full&sslrootcert=/ca.pem",
            "postgres://u@h/db?sslmode=verify-full&sslrootcert=/ca.pem",
        ] {
            let (config, tls) = config_of(url).unwrap();
            assert_eq!(tls.mode, tls::Mode::VerifyFull);
            assert_eq!(config.get_ssl_mode(), tokio_postgres::config::SslMode::Require);
        }
        let (_, tls) = config_of("postgres://u@h/db?sslmode=disable").unwrap();
        assert!(tls.connector().unwrap().is_none());
        assert!(config_of("postgres://u@h/db?sslmode=sometimes").is_err());
        assert!(config_of("postgres://u@h/db?sslcert=/c.pem").is_err(), "a certificate needs its key");
    }
}
