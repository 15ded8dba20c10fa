//! An analyzer rule for DataFusion: a cast of a timestamp, a time of day, a float or an interval
//! to text writes the value as PostgreSQL does (`types::pg_text`), not as Arrow does.
//!
//! Arrow writes `2026-01-02T03:04:05.123` and `1e20::float8` as `100000000000000000000`;
//! Postgres writes `2026-01-02 03:04:05.123` and `1e+20`, and so does Weir's wire output. So
//! `ts::text`, `CAST(x AS VARCHAR)` and the casts DataFusion adds itself (`'at ' || ts`) would
//! disagree with what the same value reads as in a result, and with Postgres. After type
//! coercion, this rule replaces each such cast with a call of [`pg_text`](crate::types::pg_text),
//! keeping the expression's name. The other way, a cast of text to an interval reads every
//! form Postgres reads (so `iv::text::interval` gives `iv` back), and text to a timestamp reads
//! a time of day without seconds (`2020-04-15 12:02`). A view made before the rule existed is planned without it
//! (`PlanningRules::postgres_text_casts`), so its stored rows and new ones agree. Registered by
//! `df_context::template_state`.

use std::sync::{Arc, LazyLock};

use datafusion::arrow::array::{ArrayRef, StringArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::config::ConfigOptions;
use datafusion::common::tree_node::{Transformed, TransformedResult};
use datafusion::common::DFSchema;
use datafusion::error::Result;
use datafusion::logical_expr::expr::{Cast, ScalarFunction, TryCast};
use datafusion::logical_expr::{
    ColumnarValue, Expr, ExprSchemable, LogicalPlan, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature,
    Volatility,
};
use datafusion::optimizer::AnalyzerRule;

#[derive(Debug, Default)]
pub struct PostgresTextCasts;

impl AnalyzerRule for PostgresTextCasts {
    fn name(&self) -> &str {
        "weir_postgres_text_casts"
    }

    fn analyze(&self, plan: LogicalPlan, _config: &ConfigOptions) -> Result<LogicalPlan> {
        plan.transform_up_with_subqueries(|node| {
            let schema = super::keep_names::input_schema(&node);
            super::keep_names::rewrite_expressions(node, |e| postgres_text(e, schema.as_ref()))
        })
        .data()
    }
}

/// `e` with a cast of a value Postgres writes otherwise than Arrow to text made a call of
/// [`PG_TEXT`] (the cast kept after it for another text type).
fn postgres_text(e: Expr, schema: &DFSchema) -> Result<Transformed<Expr>> {
    // Text read as an interval: Postgres's forms too (`1 day 02:00:00`, what `pg_text` writes),
    // which DataFusion's cast does not read, made the form it does by `interval_text`.
    // Text read as a timestamp: Postgres's forms without seconds too (`2020-04-15 12:02`).
    if let Expr::Cast(Cast { expr, field, .. }) | Expr::TryCast(TryCast { expr, field, .. }) = &e {
        let normalizer = match field.data_type() {
            DataType::Interval(_) => Some(&INTERVAL_TEXT),
            DataType::Timestamp(_, _) => Some(&TIMESTAMP_TEXT),
            _ => None,
        };
        if let Some(normalizer) = normalizer.filter(|n| {
            inner_is_text(expr, schema) && !matches!(expr.as_ref(), Expr::ScalarFunction(f) if f.name() == n.name())
        }) {
            let normalized =
                Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(normalizer), vec![expr.as_ref().clone()]));
            let rebuilt = match &e {
                Expr::Cast(_) => Expr::Cast(Cast::new(Box::new(normalized), field.data_type().clone())),
                _ => Expr::TryCast(TryCast::new(Box::new(normalized), field.data_type().clone())),
            };
            return Ok(Transformed::yes(rebuilt));
        }
    }
    let (inner, to) = match &e {
        Expr::Cast(Cast { expr, field, .. }) | Expr::TryCast(TryCast { expr, field, .. })
            if is_text(field.data_type()) =>
        {
            (expr.as_ref(), field.data_type().clone())
        }
        _ => return Ok(Transformed::no(e)),
    };
    match inner.get_type(schema) {
        // A duration's text is the interval rule's (`postgres_intervals`, a later revision).
        Ok(DataType::Duration(_)) => return Ok(Transformed::no(e)),
        Ok(from) if crate::types::pg_text::has_pg_text(&from) => {}
        _ => return Ok(Transformed::no(e)),
    }
    Ok(Transformed::yes(postgres_text_of(inner.clone(), to)))
}

/// `inner` written as Postgres writes it as text, as text type `to`.
pub fn postgres_text_of(inner: Expr, to: DataType) -> Expr {
    let call = Expr::ScalarFunction(ScalarFunction::new_udf(Arc::clone(&PG_TEXT), vec![inner]));
    if to == DataType::Utf8 {
        call
    } else {
        Expr::Cast(Cast::new(Box::new(call), to))
    }
}

fn is_text(dt: &DataType) -> bool {
    matches!(dt, DataType::Utf8 | DataType::Utf8View | DataType::LargeUtf8)
}

fn inner_is_text(e: &Expr, schema: &DFSchema) -> bool {
    e.get_type(schema).is_ok_and(|t| is_text(&t))
}

/// `interval_text(text)`: interval text in any form Postgres reads, in the one DataFusion's
/// cast reads (`frontend::interval_text`); text it cannot read is left for the cast's error.
static INTERVAL_TEXT: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| TextFunction::udf("interval_text", |array, _| normalized(array, super::interval_text::normalize)));

/// Each text of `array` as `normalize` rewrites it, or as it is where it does not.
fn normalized(array: &ArrayRef, normalize: fn(&str) -> Option<String>) -> Result<StringArray> {
    use datafusion::arrow::array::Array;
    let array = datafusion::arrow::compute::cast(array, &DataType::Utf8)?;
    let text = array.as_any().downcast_ref::<StringArray>().expect("cast to Utf8");
    Ok(text.iter().map(|v| v.map(|v| normalize(v).unwrap_or_else(|| v.to_string()))).collect())
}

/// `timestamp_text(text)`: timestamp text in the forms Postgres reads that DataFusion's cast
/// does not (a time of day without seconds), in one it reads; other text is left as it is.
static TIMESTAMP_TEXT: LazyLock<Arc<ScalarUDF>> =
    LazyLock::new(|| TextFunction::udf("timestamp_text", |array, _| normalized(array, with_seconds)));

/// `2020-04-15 12:02` (or with `T`, and a zone or offset after) as `2020-04-15 12:02:00`; None
/// when the text is not a date and an hour and minute without seconds.
pub fn with_seconds(text: &str) -> Option<String> {
    let t = text.trim();
    let b = t.as_bytes();
    let digits = |r: std::ops::Range<usize>| b.get(r.clone()).is_some_and(|d| d.iter().all(u8::is_ascii_digit));
    // YYYY-MM-DD, a space or T, H or HH, :, MM
    if !(digits(0..4) && b.get(4) == Some(&b'-') && digits(5..7) && b.get(7) == Some(&b'-') && digits(8..10)) {
        return None;
    }
    if !matches!(b.get(10), Some(b' ' | b'T')) {
        return None;
    }
    let hour_len = if digits(11..13) {
        2
    } else if digits(11..12) {
        1
    } else {
        return None;
    };
    let colon = 11 + hour_len;
    if b.get(colon) != Some(&b':') || !digits(colon + 1..colon + 3) {
        return None;
    }
    let end = colon + 3;
    // Seconds already there (or more digits): not this form.
    if matches!(b.get(end), Some(b':' | b'0'..=b'9')) {
        return None;
    }
    Some(format!("{}:00{}", &t[..end], &t[end..]))
}

/// `pg_text(value)`: the value as Postgres writes it as text.
static PG_TEXT: LazyLock<Arc<ScalarUDF>> = LazyLock::new(|| {
    TextFunction::udf("pg_text", |array, zone| {
        crate::types::pg_text::pg_text(array, zone)
            .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))
    })
});

/// A function of one value to text, by `text` over an array of values (with the session's
/// time zone).
#[derive(Debug)]
struct TextFunction {
    name: &'static str,
    signature: Signature,
    text: fn(&ArrayRef, Option<&str>) -> Result<StringArray>,
}

impl TextFunction {
    fn udf(name: &'static str, text: fn(&ArrayRef, Option<&str>) -> Result<StringArray>) -> Arc<ScalarUDF> {
        let signature = Signature::any(1, Volatility::Immutable);
        Arc::new(ScalarUDF::new_from_impl(TextFunction { name, signature, text }))
    }
}

impl PartialEq for TextFunction {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

impl Eq for TextFunction {}

impl std::hash::Hash for TextFunction {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl ScalarUDFImpl for TextFunction {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _args: &[DataType]) -> Result<DataType> {
        Ok(DataType::Utf8)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let [value] = args.args.as_slice() else {
            return Err(datafusion::error::DataFusionError::Internal(format!("{} takes one argument", self.name)));
        };
        // A constant is written once, whatever the batch's size (which may be 0).
        let scalar = matches!(value, ColumnarValue::Scalar(_));
        let array = value.to_array(if scalar { 1 } else { args.number_rows })?;
        let zone = args.config_options.execution.time_zone.as_deref();
        let text: ArrayRef = Arc::new((self.text)(&array, zone)?);
        Ok(if scalar {
            ColumnarValue::Scalar(datafusion::common::ScalarValue::try_from_array(&text, 0)?)
        } else {
            ColumnarValue::Array(text)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::with_seconds;

    #[test]
    fn a_time_without_seconds_gets_them() {
        assert_eq!(with_seconds("2020-04-15 12:02").as_deref(), Some("2020-04-15 12:02:00"));
        assert_eq!(with_seconds("2020-04-15T9:05+02").as_deref(), Some("2020-04-15T9:05:00+02"));
        assert_eq!(with_seconds(" 2020-04-15 12:02 UTC").as_deref(), Some("2020-04-15 12:02:00 UTC"));
        assert_eq!(with_seconds("2020-04-15 12:02:03"), None);
        assert_eq!(with_seconds("2020-04-15"), None);
        assert_eq!(with_seconds("12:02"), None);
    }
}
