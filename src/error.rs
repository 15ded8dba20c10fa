//! Weir's one error type, [`WeirError`]: a SQLSTATE, a message, and where known a position in the
//! statement text. Every layer returns it (or a DataFusion error, which [`WeirError::from`]
//! classifies); the pgwire edge turns it into an `ErrorResponse` with [`WeirError::into_pg`].
//!
//! The SQLSTATE decides what drivers do (retry, report a syntax error, ...), so classification is
//! done here, once, and nowhere else. DataFusion's errors are structured only in part, so
//! [`classify_datafusion`] looks at the variant first and at the message text only as a fallback.

use std::fmt;

use datafusion::arrow::error::ArrowError;
use datafusion::common::SchemaError;
use datafusion::error::DataFusionError;
use pgwire::error::{ErrorInfo, PgWireError};

/// A five-character SQLSTATE code (Postgres appendix A).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SqlState(pub &'static str);

impl SqlState {
    pub const SYNTAX_ERROR: SqlState = SqlState("42601");
    pub const UNDEFINED_TABLE: SqlState = SqlState("42P01");
    pub const UNDEFINED_COLUMN: SqlState = SqlState("42703");
    pub const AMBIGUOUS_COLUMN: SqlState = SqlState("42702");
    pub const DUPLICATE_TABLE: SqlState = SqlState("42P07");
    pub const DUPLICATE_COLUMN: SqlState = SqlState("42701");
    pub const DATATYPE_MISMATCH: SqlState = SqlState("42804");
    pub const INVALID_TABLE_DEFINITION: SqlState = SqlState("42P16");
    pub const UNDEFINED_FUNCTION: SqlState = SqlState("42883");
    pub const INVALID_PARAMETER_VALUE: SqlState = SqlState("22023");
    pub const INVALID_REGULAR_EXPRESSION: SqlState = SqlState("2201B");
    pub const DATETIME_FIELD_OVERFLOW: SqlState = SqlState("22008");
    pub const INVALID_TEXT_REPRESENTATION: SqlState = SqlState("22P02");
    pub const NUMERIC_VALUE_OUT_OF_RANGE: SqlState = SqlState("22003");
    pub const DIVISION_BY_ZERO: SqlState = SqlState("22012");
    pub const STRING_DATA_RIGHT_TRUNCATION: SqlState = SqlState("22001");
    pub const NOT_NULL_VIOLATION: SqlState = SqlState("23502");
    pub const UNIQUE_VIOLATION: SqlState = SqlState("23505");
    pub const CARDINALITY_VIOLATION: SqlState = SqlState("21000");
    pub const IN_FAILED_TRANSACTION: SqlState = SqlState("25P02");
    pub const ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25001");
    pub const NO_ACTIVE_SQL_TRANSACTION: SqlState = SqlState("25P01");
    pub const INVALID_SAVEPOINT: SqlState = SqlState("3B001");
    pub const SERIALIZATION_FAILURE: SqlState = SqlState("40001");
    pub const DEADLOCK_DETECTED: SqlState = SqlState("40P01");
    pub const FEATURE_NOT_SUPPORTED: SqlState = SqlState("0A000");
    pub const UNDEFINED_PARAMETER: SqlState = SqlState("42704");
    /// The same code, as Postgres raises it for a missing index (or other object).
    pub const UNDEFINED_OBJECT: SqlState = SqlState("42704");
    /// A statement past what the parser will take (`frontend::dialect`).
    pub const STATEMENT_TOO_COMPLEX: SqlState = SqlState("54001");
    pub const QUERY_CANCELED: SqlState = SqlState("57014");
    pub const ADMIN_SHUTDOWN: SqlState = SqlState("57P01");
    pub const DEPENDENT_OBJECTS_STILL_EXIST: SqlState = SqlState("2BP01");
    pub const INSUFFICIENT_PRIVILEGE: SqlState = SqlState("42501");
    pub const WRONG_OBJECT_TYPE: SqlState = SqlState("42809");
    pub const DUPLICATE_OBJECT: SqlState = SqlState("42710");
    pub const RESERVED_NAME: SqlState = SqlState("42939");
    pub const INVALID_GRANT_OPERATION: SqlState = SqlState("0LP01");
    /// A connection refused: no such role, it may not log in, or a host rule rejects it.
    pub const INVALID_AUTHORIZATION: SqlState = SqlState("28000");
    pub const INVALID_PASSWORD: SqlState = SqlState("28P01");
    pub const TOO_MANY_CONNECTIONS: SqlState = SqlState("53300");
    /// The data directory's file system is full (or read-only): writes are refused, reads go on.
    pub const DISK_FULL: SqlState = SqlState("53100");
    pub const IO_ERROR: SqlState = SqlState("58030");
    /// A connector's external system (a Kafka broker) cannot be reached.
    pub const UNABLE_TO_CONNECT: SqlState = SqlState("08001");
    pub const INTERNAL_ERROR: SqlState = SqlState("XX000");
    pub const DATA_CORRUPTED: SqlState = SqlState("XX001");

    pub fn code(&self) -> &'static str {
        self.0
    }
}

/// Who is at fault, for logs and metrics: a user's statement, something outside Weir (disk,
/// network, a peer), or Weir itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorDomain {
    User,
    External,
    Internal,
}

#[derive(Debug, Clone)]
pub struct WeirError {
    pub state: SqlState,
    pub message: String,
    /// 1-based character offset into the statement text, as Postgres reports it.
    pub position: Option<usize>,
    pub hint: Option<String>,
}

pub type Result<T, E = WeirError> = std::result::Result<T, E>;

impl WeirError {
    pub fn new(state: SqlState, message: impl Into<String>) -> Self {
        WeirError { state, message: message.into(), position: None, hint: None }
    }
    pub fn syntax(message: impl Into<String>) -> Self {
        Self::new(SqlState::SYNTAX_ERROR, message)
    }
    pub fn unsupported(message: impl Into<String>) -> Self {
        Self::new(SqlState::FEATURE_NOT_SUPPORTED, message)
    }
    pub fn internal(message: impl Into<String>) -> Self {
        Self::new(SqlState::INTERNAL_ERROR, message)
    }
    pub fn io(message: impl Into<String>) -> Self {
        Self::new(SqlState::IO_ERROR, message)
    }
    pub fn undefined_table(name: &str) -> Self {
        Self::new(SqlState::UNDEFINED_TABLE, format!("relation \"{name}\" does not exist"))
    }
    pub fn with_position(mut self, position: usize) -> Self {
        self.position = Some(position);
        self
    }
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }

    pub fn domain(&self) -> ErrorDomain {
        match &self.state.0[..2] {
            "XX" => ErrorDomain::Internal,
            "58" | "08" | "53" => ErrorDomain::External,
            _ => ErrorDomain::User,
        }
    }

    /// The ErrorResponse sent to the client.
    pub fn into_pg(self) -> PgWireError {
        let mut info = ErrorInfo::new("ERROR".to_owned(), self.state.0.to_owned(), self.message);
        info.position = self.position.map(|p| p.to_string());
        info.hint = self.hint;
        PgWireError::UserError(Box::new(info))
    }
}

impl fmt::Display for WeirError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.message)
    }
}

impl std::error::Error for WeirError {}

/// A blocking task that did not finish: cancelled by a runtime shutting down (57P01, so the
/// caller stops instead of reporting a failure), or panicked.
impl From<tokio::task::JoinError> for WeirError {
    fn from(e: tokio::task::JoinError) -> Self {
        match e.is_cancelled() {
            true => WeirError::new(SqlState::ADMIN_SHUTDOWN, "the server is shutting down"),
            false => WeirError::internal(e.to_string()),
        }
    }
}

impl From<DataFusionError> for WeirError {
    fn from(e: DataFusionError) -> Self {
        classify_datafusion(e)
    }
}

impl From<ArrowError> for WeirError {
    fn from(e: ArrowError) -> Self {
        classify_arrow(&e).unwrap_or_else(|| WeirError::internal(e.to_string()))
    }
}

impl From<rocksdb::Error> for WeirError {
    fn from(e: rocksdb::Error) -> Self {
        // RocksDB keeps only the text: "IO error: No space left on device: While appending to
        // file: ...", "... Read-only file system". Once it stops taking writes, every later
        // write fails with the same stored text.
        let text = e.to_string();
        let fault = if text.contains("No space left on device") || text.contains("Space limit reached") {
            Some(libc::ENOSPC)
        } else if text.contains("Read-only file system") {
            Some(libc::EROFS)
        } else if text.contains("Disk quota exceeded") {
            Some(libc::EDQUOT)
        } else {
            None
        };
        match fault.and_then(|errno| disk_fault(errno, &text)) {
            Some(e) => e,
            None => WeirError::io(format!("state store: {text}")),
        }
    }
}

impl From<std::io::Error> for WeirError {
    fn from(e: std::io::Error) -> Self {
        e.raw_os_error()
            .and_then(|errno| disk_fault(errno, &e.to_string()))
            .unwrap_or_else(|| WeirError::io(e.to_string()))
    }
}

/// 53100 for an errno that says the data directory cannot take writes (full, over quota,
/// read-only), with what the system said; None for any other.
pub fn disk_fault(errno: i32, detail: &str) -> Option<WeirError> {
    let message = match errno {
        libc::ENOSPC => "could not write to the data directory: the file system is full",
        libc::EDQUOT => "could not write to the data directory: the disk quota is exceeded",
        libc::EROFS => "could not write to the data directory: the file system is read-only",
        _ => return None,
    };
    Some(
        WeirError::new(SqlState::DISK_FULL, format!("{message} ({detail})"))
            .with_hint("Reads go on. Writes resume once space is freed (or the file system is writable again)."),
    )
}

impl From<WeirError> for DataFusionError {
    fn from(e: WeirError) -> Self {
        DataFusionError::External(Box::new(e))
    }
}

fn classify_arrow(e: &ArrowError) -> Option<WeirError> {
    let msg = e.to_string();
    let state = match e {
        ArrowError::DivideByZero => SqlState::DIVISION_BY_ZERO,
        ArrowError::ArithmeticOverflow(_) => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        // A timestamp past what nanoseconds since 1970 hold (PostgreSQL's range is wider).
        ArrowError::CastError(m) | ArrowError::ParseError(m) if m.contains("to Nanosecond") => {
            return Some(
                WeirError::new(
                    SqlState::DATETIME_FIELD_OVERFLOW,
                    format!("timestamp out of range: {}", strip_prefixes(m)),
                )
                .with_hint("Weir keeps timestamps in nanoseconds: from 1677-09-21 to 2262-04-11"),
            );
        }
        // NUMERIC's NaN and infinities: a decimal has none.
        ArrowError::CastError(m) | ArrowError::ParseError(m)
            if m.contains("Decimal")
                && ["'NaN'", "'Infinity'", "'-Infinity'", "'inf'", "'-inf'"].iter().any(|v| m.contains(v)) =>
        {
            return Some(
                WeirError::new(
                    SqlState::INVALID_TEXT_REPRESENTATION,
                    format!("invalid input for type numeric: {}", strip_prefixes(m)),
                )
                .with_hint("NUMERIC has no NaN or Infinity in Weir (a decimal); double precision has both"),
            );
        }
        ArrowError::CastError(m) | ArrowError::ParseError(m) => {
            // "Can't cast value 100000 to type Int16": a number that does not fit.
            if m.contains("overflow")
                || m.contains("too large")
                || m.contains("out of range")
                || m.contains("Can't cast value")
            {
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE
            } else {
                SqlState::INVALID_TEXT_REPRESENTATION
            }
        }
        ArrowError::ComputeError(m) if m.contains("Overflow") || m.contains("overflow") => {
            SqlState::NUMERIC_VALUE_OUT_OF_RANGE
        }
        // "12345.68 is too large to store in a Decimal128 of precision 5": a numeric that does
        // not fit its declared precision (Postgres: "numeric field overflow").
        ArrowError::InvalidArgumentError(m) if m.contains("too large to store") => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        ArrowError::InvalidArgumentError(m) if m.contains("non-nullable") => {
            // Arrow's own check when DataFusion shapes rows to a table's schema; it names the
            // column of the statement's input, not the table's, so say what happened instead.
            return Some(WeirError::new(
                SqlState::NOT_NULL_VIOLATION,
                "null value in column violates not-null constraint",
            ));
        }
        ArrowError::ExternalError(inner) => {
            return inner
                .downcast_ref::<WeirError>()
                .cloned()
                .or_else(|| inner.downcast_ref::<DataFusionError>().map(classify_datafusion_ref))
        }
        _ => return None,
    };
    Some(WeirError::new(state, strip_prefixes(&msg)))
}

/// Maps a DataFusion error to the SQLSTATE a Postgres user would get for the same mistake.
pub fn classify_datafusion(e: DataFusionError) -> WeirError {
    classify_datafusion_ref(&e)
}

fn classify_datafusion_ref(e: &DataFusionError) -> WeirError {
    match e {
        // A correlated subquery DataFusion could not decorrelate (`frontend::single_row`).
        DataFusionError::NotImplemented(m) | DataFusionError::Plan(m) | DataFusionError::Internal(m)
            if m.contains("logical expression ScalarSubquery") =>
        {
            WeirError::unsupported(
                "this correlated subquery is not supported: its conditions on the outer row must be equalities, \
                 and what it selects may read the outer row only inside an aggregate",
            )
            .with_hint("write it as a join, or aggregate what it selects")
        }
        DataFusionError::External(inner) => {
            if let Some(w) = inner.downcast_ref::<WeirError>() {
                return w.clone();
            }
            if let Some(d) = inner.downcast_ref::<DataFusionError>() {
                return classify_datafusion_ref(d);
            }
            if let Some(a) = inner.downcast_ref::<ArrowError>() {
                if let Some(w) = classify_arrow(a) {
                    return w;
                }
            }
            WeirError::internal(inner.to_string())
        }
        DataFusionError::Context(_, inner) => classify_datafusion_ref(inner),
        DataFusionError::Diagnostic(_, inner) => classify_datafusion_ref(inner),
        DataFusionError::Shared(inner) => classify_datafusion_ref(inner),
        DataFusionError::ArrowError(a, _) => {
            classify_arrow(a).unwrap_or_else(|| WeirError::internal(strip_prefixes(&a.to_string())))
        }
        DataFusionError::SQL(p, _) => WeirError::syntax(strip_prefixes(&p.to_string())),
        DataFusionError::SchemaError(s, _) => {
            let state = match s.as_ref() {
                SchemaError::FieldNotFound { .. } => SqlState::UNDEFINED_COLUMN,
                SchemaError::AmbiguousReference { .. } => SqlState::AMBIGUOUS_COLUMN,
                SchemaError::DuplicateQualifiedField { .. } | SchemaError::DuplicateUnqualifiedField { .. } => {
                    SqlState::DUPLICATE_COLUMN
                }
            };
            WeirError::new(state, strip_prefixes(&s.to_string()))
        }
        DataFusionError::NotImplemented(m) => WeirError::unsupported(strip_prefixes(m)),
        DataFusionError::Plan(m) | DataFusionError::Execution(m) | DataFusionError::Internal(m) => {
            WeirError::new(classify_message(m, e), strip_prefixes(m))
        }
        DataFusionError::ExecutionJoin(j) => WeirError::internal(j.to_string()),
        DataFusionError::ResourcesExhausted(m) => WeirError::new(SqlState("53200"), m.clone()),
        DataFusionError::IoError(io) => WeirError::io(io.to_string()),
        other => WeirError::new(classify_message(&other.to_string(), other), strip_prefixes(&other.to_string())),
    }
}

fn classify_message(m: &str, e: &DataFusionError) -> SqlState {
    let lower = m.to_ascii_lowercase();
    if lower.contains("divide by zero") || lower.contains("division by zero") {
        SqlState::DIVISION_BY_ZERO
    } else if lower.contains("subquery returned more than one row") {
        // DataFusion's uncorrelated scalar subquery; `frontend::single_row` says it for correlated ones.
        SqlState::CARDINALITY_VIOLATION
    } else if lower.contains("table '") && lower.contains("not found")
        || lower.contains("does not exist") && lower.contains("relation")
    {
        SqlState::UNDEFINED_TABLE
    } else if lower.contains("no field named") || lower.contains("column") && lower.contains("not found") {
        SqlState::UNDEFINED_COLUMN
    } else if lower.contains("invalid function")
        || lower.contains("no function matches")
        || lower.contains("unknown function")
        || lower.contains("function") && lower.contains("does not exist")
    {
        SqlState::UNDEFINED_FUNCTION
    } else if lower.contains("cannot coerce")
        || lower.contains("cannot infer common")
        || lower.contains("type_coercion")
        || lower.contains("does not support") && (lower.contains("type") || lower.contains("operation"))
        || lower.contains("unsupported cast")
        || lower.contains("cannot automatically convert")
        || lower.contains("inserting query must have the same schema")
        || lower.contains("coercion from")
    {
        SqlState::DATATYPE_MISMATCH
    } else if lower.contains("overflow") || lower.contains("too large to store") {
        SqlState::NUMERIC_VALUE_OUT_OF_RANGE
    } else if lower.contains("cannot cast") || lower.contains("cast error") {
        SqlState::INVALID_TEXT_REPRESENTATION
    } else if lower.contains("not null") || lower.contains("non-nullable") {
        SqlState::NOT_NULL_VIOLATION
    } else if lower.contains("unsupported") || lower.contains("not supported") || lower.contains("not implemented") {
        SqlState::FEATURE_NOT_SUPPORTED
    } else if matches!(e, DataFusionError::Plan(_)) {
        // Every other planning error is a mistake in the statement.
        SqlState::SYNTAX_ERROR
    } else if matches!(e, DataFusionError::Execution(_)) {
        SqlState::INVALID_PARAMETER_VALUE
    } else {
        SqlState::INTERNAL_ERROR
    }
}

/// DataFusion prefixes messages with their variant ("Error during planning: ..."); users should
/// see the message alone.
fn strip_prefixes(m: &str) -> String {
    let mut s = m.trim();
    // A function's own refusal of its arguments' types, which DataFusion wraps in its own words
    // and a list of candidates.
    if let Some((_, own)) = s.split_once("user-defined coercion failed with: ") {
        let own = own.strip_prefix("External error: ").unwrap_or(own);
        s = own.split_once(". No function matches").map_or(own, |(message, _)| message);
    }
    for prefix in [
        "Error during planning: ",
        "Execution error: ",
        "This feature is not implemented: ",
        "Schema error: ",
        "Arrow error: ",
        "Invalid argument error: ",
        "Compute error: ",
        "Cast error: ",
        "Parser error: ",
        "sql parser error: ",
        "SQL error: ",
        "ParserError(\"",
    ] {
        while let Some(rest) = s.strip_prefix(prefix) {
            s = rest;
        }
    }
    s.trim_end_matches("\")").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn division_by_zero_maps_to_22012() {
        let e = DataFusionError::ArrowError(Box::new(ArrowError::DivideByZero), None);
        assert_eq!(WeirError::from(e).state, SqlState::DIVISION_BY_ZERO);
    }

    #[test]
    fn missing_table_maps_to_42p01() {
        let e = DataFusionError::Plan("table 'dev.public.nope' not found".into());
        let w = WeirError::from(e);
        assert_eq!(w.state, SqlState::UNDEFINED_TABLE);
        assert_eq!(w.message, "table 'dev.public.nope' not found");
    }

    #[test]
    fn weir_errors_survive_a_trip_through_datafusion() {
        let inner = WeirError::new(SqlState::NOT_NULL_VIOLATION, "null value in column \"id\"");
        let wrapped = DataFusionError::Context("writing".into(), Box::new(DataFusionError::from(inner)));
        assert_eq!(WeirError::from(wrapped).state, SqlState::NOT_NULL_VIOLATION);
    }
}
