//! The S3 side of a file source: the object store a `path = 's3://bucket/...'` names, built from
//! the source's `s3.*` options (or the usual `AWS_*` environment variables), and blocking reads
//! of it for the source's reader thread.
//!
//! Object-store requests run on the connectors' I/O runtime ([`crate::connectors::io_runtime`]),
//! so a source reader and `CREATE SOURCE` (which looks at the first Parquet file's schema) can
//! wait for them from any thread. Retries with backoff on transient failures are object_store's
//! own.

use std::io::Read;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use futures::{SinkExt, StreamExt};
use object_store::aws::AmazonS3Builder;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, RetryConfig};

use crate::catalog::options::ConnectorOptions;
use crate::connectors::io_runtime::{run, runtime};
use crate::error::{Result, SqlState, WeirError};

/// The `s3.*` options a file source takes.
pub const OPTIONS: &[&str] = &["s3.endpoint", "s3.region", "s3.access_key_id", "s3.secret_access_key"];

/// A bucket and the store that reads it.
pub struct Bucket {
    pub name: String,
    pub store: Arc<dyn ObjectStore>,
}

/// The bucket of `s3://bucket/...`, configured from the environment (`AWS_ENDPOINT`,
/// `AWS_REGION`, `AWS_ACCESS_KEY_ID`, ...) and then the options, which win. An `http://`
/// endpoint (a local S3-compatible server) is allowed.
pub fn bucket(name: &str, options: &ConnectorOptions) -> Result<Bucket> {
    // A few retries with backoff, within 30 s: an unreachable endpoint fails CREATE SOURCE
    // soon, with the reason.
    let retry = RetryConfig { max_retries: 4, retry_timeout: Duration::from_secs(30), ..Default::default() };
    let mut builder = AmazonS3Builder::from_env().with_bucket_name(name).with_retry(retry);
    if let Some(endpoint) = options.get("s3.endpoint") {
        builder = builder.with_endpoint(endpoint).with_allow_http(endpoint.starts_with("http://"));
    } else if std::env::var("AWS_ENDPOINT").is_ok_and(|e| e.starts_with("http://")) {
        builder = builder.with_allow_http(true);
    }
    if let Some(region) = options.get("s3.region") {
        builder = builder.with_region(region);
    }
    if let Some(key) = options.get("s3.access_key_id") {
        builder = builder.with_access_key_id(key);
    }
    if let Some(secret) = options.get("s3.secret_access_key") {
        builder = builder.with_secret_access_key(secret);
    }
    let store = builder
        .build()
        .map_err(|e| WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("cannot use bucket {name}: {e}")))?;
    Ok(Bucket { name: name.to_string(), store: Arc::new(store) })
}

fn io_error(bucket: &str, key: &ObjectPath, e: impl std::fmt::Display) -> WeirError {
    WeirError::io(format!("cannot read s3://{bucket}/{key}: {e}"))
}

/// The keys directly under `prefix` (a "directory": `""` or ending in `/`), in name order.
pub fn list(bucket: &Bucket, prefix: &str) -> Result<Vec<String>> {
    let store = Arc::clone(&bucket.store);
    let at = ObjectPath::from(prefix.trim_end_matches('/'));
    let listed = run(async move { store.list_with_delimiter((!at.as_ref().is_empty()).then_some(&at)).await });
    let listed = listed.map_err(|e| io_error(&bucket.name, &ObjectPath::from(prefix), e))?;
    let mut keys: Vec<String> = listed.objects.into_iter().map(|o| o.location.to_string()).collect();
    keys.sort();
    Ok(keys)
}

/// The whole object (Parquet needs random access to its footer).
pub fn get_all(bucket: &Bucket, key: &str) -> Result<Bytes> {
    let store = Arc::clone(&bucket.store);
    let at = ObjectPath::from(key);
    let path = at.clone();
    run(async move { store.get(&path).await?.bytes().await }).map_err(|e| io_error(&bucket.name, &at, e))
}

/// The object as a byte stream read ahead by a few chunks (CSV and JSON are read front to back).
pub fn reader(bucket: &Bucket, key: &str) -> Result<ObjectReader> {
    let store = Arc::clone(&bucket.store);
    let at = ObjectPath::from(key);
    let path = at.clone();
    let (mut sender, chunks) = futures::channel::mpsc::channel(4);
    let name = bucket.name.clone();
    // The first response (the object exists, or not) is awaited here; the body then streams.
    let body = run(async move { store.get(&path).await }).map_err(|e| io_error(&bucket.name, &at, e))?;
    runtime().spawn(async move {
        let mut body = body.into_stream();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| io_error(&name, &at, e).to_string());
            let failed = chunk.is_err();
            // A send fails when the reader was dropped: stop reading then.
            if sender.send(chunk).await.is_err() || failed {
                break;
            }
        }
    });
    Ok(ObjectReader { chunks, current: Bytes::new() })
}

/// A blocking [`Read`] over an object's streamed body.
pub struct ObjectReader {
    chunks: futures::channel::mpsc::Receiver<std::result::Result<Bytes, String>>,
    current: Bytes,
}

impl Read for ObjectReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        while self.current.is_empty() {
            match futures::executor::block_on(self.chunks.next()) {
                Some(Ok(chunk)) => self.current = chunk,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
                // The body ended.
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.current.len());
        self.current.copy_to_slice(&mut buf[..n]);
        Ok(n)
    }
}
