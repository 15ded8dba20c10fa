//! `connector = 'file'`: rows from CSV, JSON (one object per line) or Parquet files, read with
//! arrow's readers, replayed as an append-only stream.
//!
//! ```sql
//! CREATE SOURCE bids (auction BIGINT, bidder BIGINT, price BIGINT, date_time TIMESTAMP,
//!   WATERMARK FOR date_time AS date_time - INTERVAL '4' SECOND)
//! WITH (connector = 'file', path = 'data/bids/*.csv') FORMAT PLAIN ENCODE CSV;
//! ```
//! `path` names local files or objects in S3-compatible storage (`s3://bucket/prefix/`, with
//! `s3.endpoint`, `s3.region`, `s3.access_key_id`, `s3.secret_access_key` or the `AWS_*`
//! environment variables): one file, a directory (`dir/`), or a last part with `*` wildcards
//! ([`location`]). Matching files are read in name order. The offset is the number of rows read so far over those files,
//! so a restarted source skips what it has stored. With `file.immutable = 'true'` the files are
//! promised never to change: the source stores each chunk's offsets instead of its rows and
//! reads the files again when its rows are read ([`super::replay`]), checking that every chunk
//! comes out with as many rows as it did. Bounded by default (the source finishes after
//! the last file); with `file.follow = 'true'` it keeps looking for new files (which must sort
//! after the ones read) every `file.poll.ms` (default 1000). CSV files have a header line unless
//! `csv.header = 'false'`. CSV and JSON need the column list; Parquet takes its own schema when
//! none is given. A CSV or JSON line that does not decode (wrong field count, a value not of
//! its column's type) does not stop the source: it becomes a dead letter
//! ([`crate::catalog::dead_letter`]), stored with the chunk it was found in.

mod location;
pub mod s3;

use std::collections::{HashSet, VecDeque};
use std::io::BufRead;
use std::sync::Arc;
use std::time::Duration;

use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::arrow::error::ArrowError;
use parking_lot::Mutex;

use self::location::{base_name, Location};
use super::records::{self, TextEncoding};
use super::source::{Chunk, SourceReader};
use crate::catalog::dead_letter::DeadLetter;
use crate::catalog::options::ConnectorOptions;
use crate::catalog::replay::Position;
use crate::error::{Result, SqlState, WeirError};

pub const OPTIONS: &[&str] = &[
    "connector",
    "path",
    "format",
    "encode",
    "file.follow",
    "file.poll.ms",
    "file.immutable",
    "csv.header",
    "batch.size",
    "bad_data",
];

/// Every option a file source takes: its own and those of S3.
fn all_options() -> Vec<&'static str> {
    OPTIONS.iter().chain(s3::OPTIONS).copied().collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Encoding {
    Csv,
    Json,
    Parquet,
}

type Batches = Box<dyn Iterator<Item = std::result::Result<RecordBatch, datafusion::arrow::error::ArrowError>> + Send>;

pub struct FileReader {
    location: Location,
    encoding: Encoding,
    schema: SchemaRef,
    /// The `json` / `jsonb` columns: a JSON record's value there is kept as its JSON text.
    json: Arc<Vec<String>>,
    header: bool,
    follow: bool,
    /// The files never change once written: the source keeps its offsets, not its rows, and
    /// reads the files again when its rows are read ([`super::replay`]).
    immutable: bool,
    poll: Duration,
    batch_size: usize,
    /// Files already read to the end, and the rows they held together.
    done: HashSet<String>,
    rows_in_done: u64,
    /// Files listed and not read yet, in name order; listed again when empty.
    to_read: VecDeque<String>,
    /// The file being read, its batches, and the rows read from it so far.
    current: Option<(String, Batches, u64)>,
    /// Rows to skip on resuming (the stored offset within the files).
    skip: Option<u64>,
    /// Records of the current chunk that could not be decoded.
    dead: Arc<Mutex<Vec<DeadLetter>>>,
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

impl FileReader {
    pub fn new(options: &ConnectorOptions, declared: Option<SchemaRef>) -> Result<FileReader> {
        options.only(&all_options())?;
        let path = options.get("path").ok_or_else(|| invalid("a file source needs path = '...'".into()))?;
        let location = Location::new(path, options)?;
        // Listed now, so that a bucket that is missing or refuses these credentials fails
        // here, not in the source's task later; the reader starts from this listing.
        let to_read: VecDeque<String> = location.list()?.into();
        let encoding = match options.get("encode").unwrap_or("csv") {
            "csv" => Encoding::Csv,
            "json" => Encoding::Json,
            "parquet" => Encoding::Parquet,
            other => return Err(invalid(format!("ENCODE must be CSV, JSON or PARQUET, not {other}"))),
        };
        let schema = match declared {
            Some(s) if !s.fields().is_empty() => s,
            _ if encoding == Encoding::Parquet => {
                let first = to_read.front().ok_or_else(|| {
                    invalid(format!("no file matches {path}: declare the columns, or add a file first"))
                })?;
                datafusion::arrow::array::RecordBatchReader::schema(&location.open_parquet(first, 1)?)
            }
            _ => return Err(invalid("a CSV or JSON file source needs its column list".into())),
        };
        let (schema, json) = super::records::text_columns(&schema);
        Ok(FileReader {
            location,
            encoding,
            schema,
            json: Arc::new(json),
            header: options.get("csv.header").is_none_or(|h| h.eq_ignore_ascii_case("true")),
            follow: options.get("file.follow").is_some_and(|f| f.eq_ignore_ascii_case("true")),
            immutable: options.get("file.immutable").is_some_and(|f| f.eq_ignore_ascii_case("true")),
            poll: Duration::from_millis(options.u64_or("file.poll.ms", 1000)?),
            batch_size: options.u64_or("batch.size", 8192)?.max(1) as usize,
            done: HashSet::new(),
            rows_in_done: 0,
            to_read,
            current: None,
            skip: None,
            dead: Arc::default(),
        })
    }

    fn open(&self, name: &str) -> Result<Batches> {
        Ok(match self.encoding {
            Encoding::Csv | Encoding::Json => Box::new(TextBatches {
                name: base_name(name).to_string(),
                lines: self.location.open_text(name)?,
                encoding: self.encoding,
                schema: Arc::clone(&self.schema),
                json: Arc::clone(&self.json),
                skip_header: self.encoding == Encoding::Csv && self.header,
                batch_size: self.batch_size,
                records: 0,
                dead: Arc::clone(&self.dead),
            }),
            Encoding::Parquet => {
                let reader = self.location.open_parquet(name, self.batch_size)?;
                let schema = Arc::clone(&self.schema);
                // Parquet columns by name, cast to the source's types.
                Box::new(reader.map(move |batch| {
                    let batch = batch?;
                    let columns = schema
                        .fields()
                        .iter()
                        .map(|f| {
                            let column = batch.column_by_name(f.name()).ok_or_else(|| {
                                datafusion::arrow::error::ArrowError::SchemaError(format!("no column {}", f.name()))
                            })?;
                            datafusion::arrow::compute::cast(column, f.data_type())
                        })
                        .collect::<std::result::Result<Vec<_>, _>>()?;
                    RecordBatch::try_new(Arc::clone(&schema), columns)
                }))
            }
        })
    }

    fn rows_done(&self) -> u64 {
        self.rows_in_done + self.current.as_ref().map(|c| c.2).unwrap_or(0)
    }
}

impl SourceReader for FileReader {
    fn schema(&self) -> SchemaRef {
        Arc::clone(&self.schema)
    }

    fn take_dead_letters(&mut self) -> Vec<DeadLetter> {
        std::mem::take(&mut *self.dead.lock())
    }

    fn replayable(&self) -> bool {
        self.immutable
    }

    /// The files read again, in the same order and batches: replays ask for the logged chunks
    /// in order, so this is one pass over the files. A chunk that does not come out with the
    /// logged bounds means a file changed or vanished since it was read: an error (58030).
    /// (An edit that keeps every batch's row count is not seen: immutability is the user's
    /// promise, this only catches the common breaches.) Batches of no rows (only dead
    /// letters) were not logged and are passed over.
    fn replay(&mut self, from: &Position, to: &Position) -> Result<RecordBatch> {
        let (from, to) = (from.records, to.records);
        let changed = || {
            WeirError::new(
                SqlState::IO_ERROR,
                format!(
                    "the files of this source changed since they were read (file.immutable): rows {from} to {to} \
                     cannot be read again"
                ),
            )
        };
        let mut chunk = self.read(&Position::at(from))?;
        while matches!(&chunk, Chunk::Rows(batch, next) if batch.num_rows() == 0 && next.records == from) {
            chunk = self.read(&Position::at(from))?;
        }
        match chunk {
            Chunk::Rows(batch, next) if next.records == to && batch.num_rows() as u64 == to - from => {
                // Dead letters are stored with the chunk that first read them.
                self.dead.lock().clear();
                Ok(batch)
            }
            _ => Err(changed()),
        }
    }

    fn read(&mut self, from: &Position) -> Result<Chunk> {
        let mut skip = *self.skip.get_or_insert(from.records);
        loop {
            if self.current.is_none() {
                if self.to_read.is_empty() {
                    let done = &self.done;
                    self.to_read = self.location.list()?.into_iter().filter(|p| !done.contains(p)).collect();
                }
                match self.to_read.pop_front() {
                    Some(path) => {
                        let batches = self.open(&path)?;
                        self.current = Some((path, batches, 0));
                    }
                    None if self.follow => return Ok(Chunk::Wait(self.poll)),
                    None => return Ok(Chunk::Done),
                }
            }
            let (path, batches, read) = self.current.as_mut().expect("opened");
            match batches.next() {
                Some(Ok(batch)) => {
                    let n = batch.num_rows() as u64;
                    *read += n;
                    // Resuming: rows already stored are read again and dropped (with the dead
                    // letters found among them, stored with them before).
                    if skip > 0 && skip >= n {
                        skip -= n;
                        self.skip = Some(skip);
                        self.dead.lock().clear();
                        continue;
                    }
                    let batch = batch.slice(skip as usize, (n - skip) as usize);
                    self.skip = Some(0);
                    return Ok(Chunk::Rows(batch, Position::at(self.rows_done())));
                }
                Some(Err(e)) => {
                    return Err(WeirError::new(
                        SqlState::INVALID_TEXT_REPRESENTATION,
                        format!("{path}: row {} and after could not be read: {e}", *read + 1),
                    ))
                }
                None => {
                    let (path, _, read) = self.current.take().expect("opened");
                    self.done.insert(path);
                    self.rows_in_done += read;
                }
            }
        }
    }
}

/// The records of one CSV or JSON (one value per line) file, `batch_size` lines at a time,
/// decoded by arrow's decoders. A batch that does not decode as a whole is decoded again line by
/// line: the lines that fail become dead letters and the rest of the file is read as usual. (A
/// quoted CSV field spanning lines is read right in a good batch; in a batch with an error it
/// is split at its line ends, and its lines become dead letters.)
struct TextBatches {
    /// The file's name, for positions.
    name: String,
    lines: Box<dyn BufRead + Send>,
    encoding: Encoding,
    schema: SchemaRef,
    json: Arc<Vec<String>>,
    skip_header: bool,
    batch_size: usize,
    /// Lines read so far (the header included).
    records: u64,
    dead: Arc<Mutex<Vec<DeadLetter>>>,
}

type ArrowResult<T> = std::result::Result<T, ArrowError>;

impl TextBatches {
    /// The encoding of the lines.
    fn text_encoding(&self) -> TextEncoding {
        if self.encoding == Encoding::Csv {
            TextEncoding::Csv
        } else {
            TextEncoding::Json
        }
    }

    /// The next batch of lines: (the line number of the first in the file, the lines' bytes,
    /// how many), or None at the end of the file.
    fn next_lines(&mut self) -> std::io::Result<Option<(u64, Vec<u8>, usize)>> {
        let mut text = Vec::new();
        if self.skip_header {
            self.skip_header = false;
            self.records += (self.lines.read_until(b'\n', &mut text)? > 0) as u64;
            text.clear();
        }
        let first = self.records + 1;
        let mut lines = 0;
        while lines < self.batch_size {
            if self.lines.read_until(b'\n', &mut text)? == 0 {
                break;
            }
            self.records += 1;
            lines += 1;
        }
        Ok((lines > 0).then_some((first, text, lines)))
    }

    /// A batch with an error, line by line: the rows of the lines that decode; the others are
    /// dead letters.
    fn isolate(&self, first: u64, text: &[u8]) -> ArrowResult<RecordBatch> {
        let lines = text
            .split_inclusive(|b| *b == b'\n')
            .enumerate()
            .map(|(i, line)| (format!("{}:{}", self.name, first + i as u64), line));
        let (good, dead) = records::decode_each(self.text_encoding(), &self.schema, &self.json, lines);
        self.dead.lock().extend(dead);
        let good: Vec<RecordBatch> = good.into_iter().map(|(_, batch)| batch).collect();
        datafusion::arrow::compute::concat_batches(&self.schema, &good)
    }
}

impl Iterator for TextBatches {
    type Item = ArrowResult<RecordBatch>;

    fn next(&mut self) -> Option<Self::Item> {
        let (first, text, lines) = match self.next_lines() {
            Ok(Some(next)) => next,
            Ok(None) => return None,
            Err(e) => return Some(Err(e.into())),
        };
        // A JSON file's `json` columns take their fields' values as JSON text.
        let rewritten = match self.text_encoding() {
            records::TextEncoding::Json => records::json_lines_as_text(&self.json, &text),
            records::TextEncoding::Csv => None,
        };
        let decoded = records::decode(self.text_encoding(), &self.schema, rewritten.as_deref().unwrap_or(&text), lines);
        Some(match decoded {
            Ok(Some(batch)) => Ok(batch),
            Ok(None) => Ok(RecordBatch::new_empty(Arc::clone(&self.schema))),
            // Line by line from the file's own text (each line's JSON values rewritten there).
            Err(_) => self.isolate(first, &text),
        })
    }
}
