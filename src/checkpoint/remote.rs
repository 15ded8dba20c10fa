//! [`Remote`]: the object store checkpoints go to, named by `--checkpoint-url`: a local
//! directory (the default, `<data-dir>/checkpoints`, or `file:///path`) or an S3-compatible
//! bucket (`s3://bucket/prefix`, configured like a file source's bucket: `AWS_*` environment
//! variables, overridden by the `checkpoint.s3_*` settings). Keys are relative to the URL's
//! prefix. Every call is async I/O; the decisions are in [`super::protocol`].

use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::local::LocalFileSystem;
use object_store::path::Path as ObjectPath;
use object_store::{ObjectStore, ObjectStoreExt, PutMode, PutOptions, PutPayload, WriteMultipart};
use tokio::io::AsyncReadExt;

use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

/// Files larger than this are uploaded in parts.
const MULTIPART_BYTES: u64 = 16 << 20;

pub struct Remote {
    store: Arc<dyn ObjectStore>,
    root: ObjectPath,
    /// The URL as given (for logs and the catalog).
    pub url: String,
}

fn io(what: &str, e: impl std::fmt::Display) -> WeirError {
    WeirError::new(SqlState::IO_ERROR, format!("checkpoint store: {what}: {e}"))
}

impl Remote {
    /// The store `url` names (`s3://bucket/prefix`, `file:///dir` or a directory path).
    pub fn open(url: &str, s3: &crate::config::S3Settings) -> Result<Remote> {
        if let Some(rest) = url.strip_prefix("s3://") {
            let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
            let mut options = ConnectorOptions::default();
            for (key, value) in [
                ("s3.endpoint", &s3.endpoint),
                ("s3.region", &s3.region),
                ("s3.access_key_id", &s3.access_key_id),
                ("s3.secret_access_key", &s3.secret_access_key),
            ] {
                if let Some(v) = value {
                    options.0.insert(key.to_string(), v.clone());
                }
            }
            let bucket = crate::connectors::file::s3::bucket(bucket, &options)?;
            return Ok(Remote { store: bucket.store, root: ObjectPath::from(prefix), url: url.to_string() });
        }
        let dir = url.strip_prefix("file://").unwrap_or(url);
        std::fs::create_dir_all(dir).map_err(|e| io(&format!("cannot create {dir}"), e))?;
        let store = LocalFileSystem::new_with_prefix(dir).map_err(|e| io(dir, e))?;
        Ok(Remote { store: Arc::new(store), root: ObjectPath::default(), url: url.to_string() })
    }

    fn path(&self, key: &str) -> ObjectPath {
        key.split('/').fold(self.root.clone(), |p, part| p.join(part))
    }

    /// Every key under `prefix` (relative to the root).
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let base = self.path(prefix);
        let metas: Vec<object_store::ObjectMeta> =
            self.store.list(Some(&base)).try_collect().await.map_err(|e| io("list", e))?;
        let root = self.root.as_ref();
        Ok(metas
            .into_iter()
            .map(|m| {
                let full = m.location.as_ref();
                full.strip_prefix(root).map(|k| k.trim_start_matches('/')).unwrap_or(full).to_string()
            })
            .collect())
    }

    /// The bytes of `key` as a stream of chunks (for large files).
    pub async fn get_stream(
        &self,
        key: &str,
    ) -> Result<futures::stream::BoxStream<'static, object_store::Result<Bytes>>> {
        let got = self.store.get(&self.path(key)).await.map_err(|e| io(&format!("get {key}"), e))?;
        Ok(got.into_stream())
    }

    pub async fn get(&self, key: &str) -> Result<Bytes> {
        let got = self.store.get(&self.path(key)).await.map_err(|e| io(&format!("get {key}"), e))?;
        got.bytes().await.map_err(|e| io(&format!("read {key}"), e))
    }

    /// Writes `bytes` at `key` unless an object is there (a conditional put): a manifest is
    /// written once and never replaced.
    pub async fn put_new(&self, key: &str, bytes: Vec<u8>) -> Result<()> {
        let options = PutOptions { mode: PutMode::Create, ..Default::default() };
        match self.store.put_opts(&self.path(key), PutPayload::from(bytes), options).await {
            Ok(_) => Ok(()),
            Err(object_store::Error::AlreadyExists { .. }) => {
                Err(WeirError::new(SqlState::IO_ERROR, format!("checkpoint store: {key} exists already")))
            }
            Err(e) => Err(io(&format!("put {key}"), e)),
        }
    }

    /// Uploads local file `file` to `key`, in parts when large; returns its size and crc32,
    /// computed from the bytes uploaded.
    pub async fn upload_file(&self, file: &Path, key: &str) -> Result<(u64, u32)> {
        let mut reader = tokio::fs::File::open(file).await.map_err(|e| io(&format!("open {}", file.display()), e))?;
        let size = reader.metadata().await.map_err(|e| io("stat", e))?.len();
        let mut crc = crc32fast::Hasher::new();
        let read_err = |e| io(&format!("read {}", file.display()), e);
        if size <= MULTIPART_BYTES {
            let mut bytes = Vec::with_capacity(size as usize);
            reader.read_to_end(&mut bytes).await.map_err(read_err)?;
            crc.update(&bytes);
            let n = bytes.len() as u64;
            self.store.put(&self.path(key), PutPayload::from(bytes)).await.map_err(|e| io(&format!("put {key}"), e))?;
            return Ok((n, crc.finalize()));
        }
        let upload = self.store.put_multipart(&self.path(key)).await.map_err(|e| io(&format!("put {key}"), e))?;
        let mut writer = WriteMultipart::new(upload);
        let mut buf = vec![0u8; 4 << 20];
        let mut n = 0u64;
        loop {
            let read = reader.read(&mut buf).await.map_err(read_err)?;
            if read == 0 {
                break;
            }
            crc.update(&buf[..read]);
            n += read as u64;
            writer.wait_for_capacity(2).await.map_err(|e| io(&format!("put {key}"), e))?;
            writer.write(&buf[..read]);
        }
        writer.finish().await.map_err(|e| io(&format!("put {key}"), e))?;
        Ok((n, crc.finalize()))
    }

    pub async fn delete(&self, key: &str) -> Result<()> {
        match self.store.delete(&self.path(key)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(io(&format!("delete {key}"), e)),
        }
    }
}
