//! Where a file source's files are: a local directory or an S3 prefix, and which of its files
//! the source reads. [`Location::list`] gives the matching files' names in name order, and the
//! `open_*` functions read one by its name, so the reader above is the same for both.
//!
//! A `path` is `dir/name`: `name` is one file, a pattern whose `*`s match any run of
//! characters, or empty (`dir/`) for every file in `dir`. A local `path` that is a directory
//! reads every file in it too. `s3://bucket/prefix/...` is read from S3-compatible object
//! storage ([`super::s3`]); only the files directly under the prefix are listed, like a local
//! directory's.

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use datafusion::parquet::arrow::arrow_reader::{ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder};

use super::s3::{self, Bucket};
use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

pub enum Location {
    Local { dir: PathBuf, name: String },
    S3 { bucket: Bucket, prefix: String, name: String },
}

impl Location {
    pub fn new(path: &str, options: &ConnectorOptions) -> Result<Location> {
        if let Some(rest) = path.strip_prefix("s3://") {
            let (bucket, key) = rest.split_once('/').unwrap_or((rest, ""));
            if bucket.is_empty() {
                return Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("{path} names no bucket")));
            }
            let (prefix, name) =
                key.rsplit_once('/').map(|(p, n)| (format!("{p}/"), n)).unwrap_or((String::new(), key));
            return Ok(Location::S3 { bucket: s3::bucket(bucket, options)?, prefix, name: name.to_string() });
        }
        if path.contains("://") {
            return Err(WeirError::unsupported(format!("{path}: file sources read local paths and s3:// only")));
        }
        if options.0.keys().any(|k| k.starts_with("s3.")) {
            return Err(WeirError::new(SqlState::INVALID_PARAMETER_VALUE, "s3.* options need an s3:// path"));
        }
        let local = Path::new(path);
        if path.ends_with('/') || local.is_dir() {
            return Ok(Location::Local { dir: local.to_path_buf(), name: String::new() });
        }
        let dir = local.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
        let name = local.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
        Ok(Location::Local { dir: dir.to_path_buf(), name })
    }

    /// The names of the files to read, in name order: local paths, or `s3://bucket/key`s.
    pub fn list(&self) -> Result<Vec<String>> {
        let mut names = match self {
            Location::Local { dir, name } => {
                let Ok(entries) = std::fs::read_dir(dir) else { return Ok(vec![]) };
                entries
                    .filter_map(|e| e.ok())
                    .map(|e| e.path())
                    .filter(|p| p.is_file() && p.file_name().is_some_and(|n| matches(name, &n.to_string_lossy())))
                    .map(|p| p.to_string_lossy().to_string())
                    .collect::<Vec<_>>()
            }
            Location::S3 { bucket, prefix, name } => s3::list(bucket, prefix)?
                .into_iter()
                .filter(|key| matches(name, &key[prefix.len()..]))
                .map(|key| format!("s3://{}/{key}", bucket.name))
                .collect(),
        };
        names.sort();
        Ok(names)
    }

    /// The file `name` (from [`Location::list`]) as buffered bytes, read front to back.
    pub fn open_text(&self, name: &str) -> Result<Box<dyn BufRead + Send>> {
        Ok(match self {
            Location::Local { .. } => Box::new(BufReader::new(File::open(name).map_err(|e| io(name, e))?)),
            Location::S3 { bucket, .. } => {
                Box::new(BufReader::with_capacity(1 << 20, s3::reader(bucket, key(bucket, name))?))
            }
        })
    }

    /// A Parquet reader of the file `name`, `batch_size` rows a batch.
    pub fn open_parquet(&self, name: &str, batch_size: usize) -> Result<ParquetRecordBatchReader> {
        let reader = match self {
            Location::Local { .. } => {
                ParquetRecordBatchReaderBuilder::try_new(File::open(name).map_err(|e| io(name, e))?)
                    .and_then(|b| b.with_batch_size(batch_size).build())
            }
            Location::S3 { bucket, .. } => {
                ParquetRecordBatchReaderBuilder::try_new(s3::get_all(bucket, key(bucket, name))?)
                    .and_then(|b| b.with_batch_size(batch_size).build())
            }
        };
        reader.map_err(|e| io(name, e))
    }
}

/// The key of `s3://bucket/key`.
fn key<'a>(bucket: &Bucket, name: &'a str) -> &'a str {
    name.strip_prefix("s3://")
        .and_then(|n| n.strip_prefix(bucket.name.as_str()))
        .map(|n| n.trim_start_matches('/'))
        .unwrap_or(name)
}

fn io(name: &str, e: impl std::fmt::Display) -> WeirError {
    WeirError::io(format!("cannot read {name}: {e}"))
}

/// The last part of a file's name, for positions in messages and dead letters.
pub fn base_name(name: &str) -> &str {
    name.rsplit('/').next().unwrap_or(name)
}

/// Whether `name` matches `pattern`, where `*` is any run of characters and an empty pattern
/// matches every name.
fn matches(pattern: &str, name: &str) -> bool {
    if pattern.is_empty() {
        return !name.is_empty();
    }
    if !pattern.contains('*') {
        return pattern == name;
    }
    let parts: Vec<&str> = pattern.split('*').collect();
    let (first, last) = (parts[0], parts[parts.len() - 1]);
    if !name.starts_with(first) || name.len() < first.len() + last.len() || !name.ends_with(last) {
        return false;
    }
    let mut rest = &name[first.len()..name.len() - last.len()];
    for part in &parts[1..parts.len() - 1] {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wildcards_match_runs_of_characters() {
        assert!(matches("*.csv", "bids-1.csv"));
        assert!(matches("bids-*.csv", "bids-1.csv"));
        assert!(!matches("bids-*.csv", "asks-1.csv"));
        assert!(matches("b*-*.json", "bids-2026.json"));
        assert!(!matches("*.csv", "x.json"));
        assert!(matches("", "anything"));
        assert!(matches("one.csv", "one.csv") && !matches("one.csv", "one.csv.tmp"));
    }

    #[test]
    fn paths_split_into_a_directory_and_a_name_pattern() {
        let options = ConnectorOptions::default();
        let Location::Local { dir, name } = Location::new("data/bids/*.csv", &options).unwrap() else { panic!() };
        assert_eq!((dir.as_path(), name.as_str()), (Path::new("data/bids"), "*.csv"));
        let Location::Local { dir, name } = Location::new("bids.csv", &options).unwrap() else { panic!() };
        assert_eq!((dir.as_path(), name.as_str()), (Path::new("."), "bids.csv"));
        let Location::Local { name, .. } = Location::new("data/bids/", &options).unwrap() else { panic!() };
        assert_eq!(name, "");
        assert!(Location::new("http://x/y", &options).is_err());
        let mut with_s3 = ConnectorOptions::default();
        with_s3.0.insert("s3.region".into(), "us-east-1".into());
        assert!(Location::new("data/bids/", &with_s3).is_err());
    }
}
