//! Grouped aggregation with retraction: count, count(DISTINCT), sum, avg, min, max, bool_and,
//! bool_or, string_agg (values in ascending order).
//!
//! Per group it keeps the number of input rows and one accumulator per aggregate, each able to
//! take a row back: counts and sums subtract, and `min`, `max` and `count(DISTINCT)` keep every
//! value with its multiplicity, so deleting the current extreme reveals the next one. Over an
//! input that only inserts ([`HashAggConfig::append_only_input`]), `min` and `max` keep just the
//! extreme so far, in the group's own state, and `count(DISTINCT)` writes a value only the
//! first time it is seen. Changes
//! are applied as they arrive; at each barrier every group touched in the epoch emits its
//! change once (`U-` old row, `U+` new row; `-` when its last row left, `+` when it appeared).
//! An aggregate without GROUP BY has one group that always exists, as in SQL.
//!
//! `avg` and a floating-point `sum` keep their sum exactly ([`ExactSum`]), so rows taken back
//! leave exactly the sum of the rows still there, whatever the order (a running `f64` total
//! would keep the rounding errors of rows long gone). Views whose state is in the first format
//! ([`StateFormat::FIRST`], made before this) keep their running `f64` totals.
//!
//! State is in the store ([`KeyedState`], bounded cache): table 0 holds each group's counters
//! and last emitted row, keyed by the group key; table 1 the value multisets, keyed by group
//! key, aggregate and value (memcomparable, so the first and last entries are min and max).
//! Only the groups touched in the current epoch are held in memory, in one arena indexed by
//! group key: a batch's rows are mapped to group slots once and applied in row order, and at
//! the barrier the touched groups' new rows are built as Arrow arrays at once (counters
//! straight into an array), compared encoded with the rows emitted before, and the output is
//! picked from old and new rows by index.
//!
//! Windowed aggregation ([`AggWindow`]): when a group key column is a window's start or end,
//! the aggregate knows when each group's window closes and follows the view's watermark:
//! - with `EMIT ON WINDOW CLOSE`, a group's row is emitted first at the barrier after the
//!   watermark reached the window's end; a change within the allowed lateness then emits a
//!   correction (`U-` / `U+`);
//! - in either mode, once the watermark passes the end plus the allowed lateness, the group's
//!   state is deleted (its row stays in the view): state is bounded by the open windows. Over
//!   an input straight from window assignment ([`HashAggConfig::prompt_input`]: no change for a
//!   final window can come later), an epoch that has touched as many groups as the state cache
//!   holds does this before its barrier too, emitting the final windows' rows early, so that
//!   the touched groups held in memory are bounded by the open windows as well, however much
//!   event time one epoch spans.
//!
//! Under a view's state TTL ([`HashAgg::with_state_ttl`], `state::idle_keys`), a plain grouped
//! aggregate (or DISTINCT) forgets a group no row changed for the TTL of epoch time: its row is
//! retracted and its state deleted, as if its rows had been deleted.
//!
//! Which groups are open is indexed in memory by close time (`open`, `closed`): the index is
//! the record the aggregate keeps with each checkpoint ([`Operator::save_record`]), restored
//! with the view's state, so it always holds every stored windowed group.
//!
//! A windowed group's state is held in memory by its window's close ([`ExpiringGroups`]) and
//! checkpointed as a few values per window, not put into table 0 group by group: a group
//! costs no store operation of its own, and a final window leaves the store with a few
//! deletes. Past [`MEMORY_LIMIT_BYTES`] per shard (windows far longer than their pace, a stuck
//! watermark) the groups move into table 0 for good, which spills past its cache; a view
//! restored from a record without the groups' mode (an older build's) keeps them there too.

use std::cmp::Ordering;

use crate::types::hash::{HashMap, HashSet};
use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, Int64Array, RecordBatch};
use datafusion::arrow::compute::{cast, interleave};
use datafusion::arrow::datatypes::{DataType, SchemaRef};
use datafusion::arrow::row::{RowConverter, Rows, SortField};
use datafusion::common::ScalarValue;
use datafusion::physical_expr::expressions::Literal;
use datafusion::physical_expr::PhysicalExpr;

use super::eval::{evaluate, OrderKey};
use super::operator::Operator;
use crate::error::{Result, SqlState, WeirError};
use crate::state::expiring_groups::ExpiringGroups;
use crate::state::expiry::{Expiring, Expiry};
use crate::state::idle_keys::IdleKeys;
use crate::state::keyed::{Flush, KeyedState};
use crate::state::keys::{KeyRef, StateKey};
use crate::state::keys_by_time::KeysByTime;
use crate::state::record::{corrupt as corrupt_record, RecordReader, RecordWriter};
use crate::state::store::WriteBatch;
use crate::state::value::{decode_count, encode_count, StateFormat, ValueReader, ValueWriter};
use crate::state::watermark_pace::WatermarkPace;
use crate::state::MEMORY_LIMIT_BYTES;
use crate::status::ViewStatus;
use crate::types::clock::Clock;
use crate::types::exact_sum::ExactSum;
use crate::types::ordered_set::{mode, percentile_disc_index};
use crate::types::window::{close_times, TimeColumn};
use crate::types::{ChangeBatch, Op};

/// How a windowed aggregate's groups close.
#[derive(Debug, Clone, Copy)]
pub struct AggWindow {
    /// The group key column that is a window's start or end, and when its window closes.
    pub group_index: usize,
    pub column: TimeColumn,
    /// Nanoseconds after its close that a window keeps its state and takes late rows.
    pub lateness: i64,
    pub emit_on_close: bool,
}

impl AggWindow {
    /// When a window's groups are final and leave.
    fn expiry(&self) -> Expiry {
        Expiry::new(self.lateness)
    }
}

/// What an aggregate computes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AggKind {
    /// `count(*)`: rows.
    CountRows,
    /// `count(x)`: non-NULL values.
    Count,
    Sum,
    Avg,
    Min,
    Max,
    /// `count(DISTINCT x)`.
    CountDistinct,
    BoolAnd,
    BoolOr,
    /// `string_agg(x, delimiter [ORDER BY x])`: the values in ascending order.
    StringAgg,
    /// `var_samp` / `var`, `var_pop`, `stddev_samp` / `stddev`, `stddev_pop`.
    Variance {
        population: bool,
        root: bool,
    },
    /// `bit_and`, `bit_or`: over the distinct values kept in the multiset.
    BitAnd,
    BitOr,
    /// `bit_xor`: a running xor (each value is its own inverse).
    BitXor,
    /// `array_agg(x [ORDER BY x])`: the values in ascending order, NULLs (kept) last.
    ArrayAgg,
    /// `percentile_cont(f) WITHIN GROUP (ORDER BY x)` and `median(x)` (f = 0.5): interpolated
    /// between the values around position `f * (n - 1)` (the fraction's f64 bits).
    PercentileCont(u64),
    /// `first_value(x ORDER BY y)`, `last_value(x ORDER BY y)`: the value of the first or last
    /// row by its ORDER BY (ties by the value), NULL values kept.
    FirstValue,
    LastValue,
    /// `percentile_disc(f) WITHIN GROUP (ORDER BY x)`: the first value whose place in order
    /// reaches the fraction (its f64 bits); `mode() WITHIN GROUP (ORDER BY x)`: the most
    /// frequent value, the least of a tie (`types::ordered_set`).
    PercentileDisc(u64),
    Mode,
}

impl AggKind {
    /// The kind for a DataFusion aggregate function name, if Weir can maintain it.
    pub fn from_name(name: &str, has_arg: bool, distinct: bool) -> Option<AggKind> {
        Some(match (name.to_ascii_lowercase().as_str(), has_arg, distinct) {
            ("count", false, false) => AggKind::CountRows,
            ("count", true, false) => AggKind::Count,
            ("count", true, true) => AggKind::CountDistinct,
            ("sum", true, false) => AggKind::Sum,
            ("avg" | "mean", true, false) => AggKind::Avg,
            // DISTINCT does not change an extreme.
            ("min", true, _) => AggKind::Min,
            ("max", true, _) => AggKind::Max,
            ("bool_and", true, _) => AggKind::BoolAnd,
            ("bool_or", true, _) => AggKind::BoolOr,
            ("string_agg", true, false) => AggKind::StringAgg,
            ("var" | "var_samp" | "var_sample" | "variance", true, false) => {
                AggKind::Variance { population: false, root: false }
            }
            ("var_pop" | "var_population", true, false) => AggKind::Variance { population: true, root: false },
            ("stddev" | "stddev_samp", true, false) => AggKind::Variance { population: false, root: true },
            ("stddev_pop", true, false) => AggKind::Variance { population: true, root: true },
            // Equal values do not change an AND or an OR.
            ("bit_and", true, _) => AggKind::BitAnd,
            ("bit_or", true, _) => AggKind::BitOr,
            ("bit_xor", true, false) => AggKind::BitXor,
            ("array_agg", true, false) => AggKind::ArrayAgg,
            ("median", true, false) => AggKind::PercentileCont(0.5f64.to_bits()),
            // Exactly: an approximation may be exact.
            ("approx_distinct", true, false) => AggKind::CountDistinct,
            ("first_value", true, false) => AggKind::FirstValue,
            ("last_value", true, false) => AggKind::LastValue,
            _ => return None,
        })
    }

    /// Whether the aggregate keeps its values (with multiplicities) in the multiset table.
    fn keeps_values(self) -> bool {
        matches!(
            self,
            AggKind::Min
                | AggKind::Max
                | AggKind::CountDistinct
                | AggKind::StringAgg
                | AggKind::BitAnd
                | AggKind::BitOr
                | AggKind::ArrayAgg
                | AggKind::PercentileCont(_)
                | AggKind::FirstValue
                | AggKind::LastValue
                | AggKind::PercentileDisc(_)
                | AggKind::Mode
        )
    }

    /// Whether rows with a NULL value count (they are in the multiset).
    pub fn keeps_nulls(self) -> bool {
        matches!(self, AggKind::ArrayAgg | AggKind::FirstValue | AggKind::LastValue)
    }
}

#[derive(Clone)]
pub struct AggSpec {
    pub kind: AggKind,
    pub arg: Option<Arc<dyn PhysicalExpr>>,
    /// The argument's type (None for `count(*)`).
    pub arg_type: Option<DataType>,
    /// The output column's type.
    pub output_type: DataType,
    /// string_agg's delimiter.
    pub delimiter: Option<String>,
    /// `ORDER BY` inside the call, by something else than the value ascending (`string_agg(x,
    /// ',' ORDER BY y DESC)`, `first_value(x ORDER BY y)`): the multiset keeps its values under
    /// these keys, in this order, then by the value. Empty: by the value.
    pub order_by: Vec<OrderKey>,
}

/// One aggregate's counters for one group. Value multisets are in the store.
#[derive(Debug, Clone, PartialEq)]
enum Acc {
    Count(i64),
    Sum {
        sum: Option<ScalarValue>,
        values: i64,
    },
    /// `avg`: the exact sum of its values and how many there are.
    Avg {
        sum: ExactSum,
        values: i64,
    },
    /// `avg` in a view of the first state format: a running `f64` sum.
    AvgRounded {
        sum: f64,
        values: i64,
    },
    /// `sum` over floating-point values: kept exactly (not in the first state format, whose
    /// views keep a running total in [`Acc::Sum`]).
    FloatSum {
        sum: ExactSum,
        values: i64,
    },
    /// min / max: everything is in the multiset.
    Extreme,
    /// min / max over an input that never retracts: the extreme so far.
    Best(Option<ScalarValue>),
    Distinct(i64),
    Bools {
        trues: i64,
        falses: i64,
    },
    /// Variance and standard deviation: the exact sums of the values and of their squares.
    Moments {
        sum: ExactSum,
        squares: ExactSum,
        values: i64,
    },
    /// `bit_xor`: the xor of the values so far.
    Xor {
        bits: i64,
        values: i64,
    },
}

#[derive(Debug, Clone)]
struct Group {
    rows: i64,
    accs: Vec<Acc>,
    /// The row last emitted for this group (output-row encoding).
    emitted: Option<Vec<u8>>,
    /// Known never to have reached the store (a windowed group first seen in this epoch): it
    /// is stored as new, and deleting it writes nothing.
    unstored: bool,
}

/// Codec of single scalars of one type, through arrow-row (reversible and memcomparable); for
/// an aggregate ordered by other keys, of the keys then the value, the value decoded alone.
struct ScalarCodec(RowConverter);

/// A stored sum's tag: its total as the output type (what every version wrote), or as the wider
/// running type ([`running_sum_type`]) when the output type cannot hold it.
const SUM_AS_OUTPUT: u8 = 1;
const SUM_WIDE: u8 = 2;

/// `total` (of type `wide`, None for none yet) plus `v` times `sign` (+1 or -1).
fn add_to_total(total: Option<ScalarValue>, v: ScalarValue, sign: i64, wide: &DataType) -> Result<ScalarValue> {
    // Integers into a 38-digit total, the common case, without Arrow's kernels.
    if let (DataType::Decimal128(p, 0), Some(x)) = (wide, integer_value(&v)) {
        let current = match &total {
            Some(ScalarValue::Decimal128(Some(t), ..)) => *t,
            _ => 0,
        };
        let next = if sign > 0 { current.checked_add(x) } else { current.checked_sub(x) };
        let next = next.ok_or_else(|| WeirError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "sum out of range"))?;
        return Ok(ScalarValue::Decimal128(Some(next), *p, 0));
    }
    // Decimals of the total's scale into a 76-digit total.
    if let (DataType::Decimal256(p, s), ScalarValue::Decimal128(Some(x), _, vs)) = (wide, &v) {
        if vs == s {
            let current = match &total {
                Some(ScalarValue::Decimal256(Some(t), ..)) => *t,
                _ => datafusion::arrow::datatypes::i256::ZERO,
            };
            let x = datafusion::arrow::datatypes::i256::from_i128(*x);
            let next = if sign > 0 { current.checked_add(x) } else { current.checked_sub(x) };
            let next = next.ok_or_else(|| WeirError::new(SqlState::NUMERIC_VALUE_OUT_OF_RANGE, "sum out of range"))?;
            return Ok(ScalarValue::Decimal256(Some(next), *p, *s));
        }
    }
    let v = v.cast_to(wide)?;
    let current = match total {
        Some(t) => t,
        None => ScalarValue::new_zero(wide)?,
    };
    let next = if sign > 0 { current.add_checked(&v)? } else { current.sub_checked(&v)? };
    // Decimal arithmetic widens its precision (Decimal(20, 2) + Decimal(20, 2) is
    // Decimal(21, 2)); the total keeps its type.
    Ok(if next.data_type() == *wide { next } else { next.cast_to(wide)? })
}

/// An integer scalar's value, if it is one.
fn integer_value(v: &ScalarValue) -> Option<i128> {
    Some(match v {
        ScalarValue::Int8(Some(x)) => *x as i128,
        ScalarValue::Int16(Some(x)) => *x as i128,
        ScalarValue::Int32(Some(x)) => *x as i128,
        ScalarValue::Int64(Some(x)) => *x as i128,
        ScalarValue::UInt8(Some(x)) => *x as i128,
        ScalarValue::UInt16(Some(x)) => *x as i128,
        ScalarValue::UInt32(Some(x)) => *x as i128,
        ScalarValue::UInt64(Some(x)) => *x as i128,
        _ => return None,
    })
}

/// A numeric value as `f64` (an `avg`'s or a floating-point `sum`'s argument).
fn float_value(v: &ScalarValue) -> Result<f64> {
    match v.cast_to(&DataType::Float64)? {
        ScalarValue::Float64(Some(f)) => Ok(f),
        _ => Err(WeirError::internal("avg or sum of a non-numeric value")),
    }
}

/// The type a sum's running total is kept in: wide enough that adding rows does not overflow
/// where the output type would (an integer sum in 38 digits, a decimal one in 76).
fn running_sum_type(output: &DataType) -> DataType {
    match output {
        t if t.is_integer() => DataType::Decimal128(38, 0),
        DataType::Decimal128(_, s) => DataType::Decimal256(76, *s),
        other => other.clone(),
    }
}

impl ScalarCodec {
    fn new(data_type: &DataType) -> Result<ScalarCodec> {
        Ok(ScalarCodec(RowConverter::new(vec![SortField::new(data_type.clone())])?))
    }
    fn nulls_last(data_type: &DataType) -> Result<ScalarCodec> {
        let options = datafusion::arrow::compute::SortOptions { descending: false, nulls_first: false };
        Ok(ScalarCodec(RowConverter::new(vec![SortField::new_with_options(data_type.clone(), options)])?))
    }
    fn encode(&self, v: &ScalarValue) -> Result<Vec<u8>> {
        let rows = self.0.convert_columns(&[v.to_array()?])?;
        Ok(rows.row(0).as_ref().to_vec())
    }
    /// Values under `order` keys, then by the value (ascending, NULLs last).
    fn ordered(order: &[OrderKey], data_type: &DataType) -> Result<ScalarCodec> {
        let value = datafusion::arrow::compute::SortOptions { descending: false, nulls_first: false };
        let mut fields: Vec<SortField> =
            order.iter().map(|o| SortField::new_with_options(o.data_type.clone(), o.options)).collect();
        fields.push(SortField::new_with_options(data_type.clone(), value));
        Ok(ScalarCodec(RowConverter::new(fields)?))
    }
    fn decode(&self, bytes: &[u8]) -> Result<ScalarValue> {
        let parser = self.0.parser();
        let arrays = self.0.convert_rows([parser.parse(bytes)])?;
        Ok(ScalarValue::try_from_array(arrays.last().expect("a value column"), 0)?)
    }
}

pub struct HashAgg {
    group_by: Vec<Arc<dyn PhysicalExpr>>,
    /// Encodes group keys (None without GROUP BY: the one group's key is empty).
    group_codec: Option<RowConverter>,
    aggs: Vec<AggSpec>,
    /// Per aggregate: sums' values (by output type) or multiset values (by argument type).
    value_codecs: Vec<Option<ScalarCodec>>,
    /// Per sum: its running total's codec, of [`running_sum_type`], for a total its output
    /// type cannot hold.
    wide_codecs: Vec<Option<ScalarCodec>>,
    output_codec: RowConverter,
    schema: SchemaRef,
    groups: KeyedState,
    values: KeyedState,
    /// Groups touched in this epoch: where each is in `touched`, in the order first touched.
    dirty: HashMap<Vec<u8>, usize>,
    touched: Vec<Group>,
    view: ViewStatus,
    /// The input only ever inserts: min and max keep their extreme, not a value multiset.
    append_only_input: bool,
    window: Option<AggWindow>,
    /// Its input holds no rows back for a barrier: final windows may finish mid-epoch.
    prompt_input: bool,
    /// `avg` and floating-point `sum` keep exact sums (the view's state format has them).
    exact_sums: bool,
    /// Windowed groups by close time: not yet emitted (`open`, or every group when emitting
    /// continuously) and emitted but still taking late rows (`closed`).
    open: KeysByTime,
    closed: KeysByTime,
    /// How fast the watermark moves, so that groups final before the next checkpoint are not
    /// settled into the store only to be deleted from it (`flush_state`).
    pace: WatermarkPace,
    /// A windowed aggregate's groups with a close time, while held in memory (else in
    /// `groups`, as every other group is).
    in_memory: Option<ExpiringGroups>,
    /// The stored parts of groups that moved from memory into `groups`, deleted at the next
    /// flush.
    retired: Option<(Vec<u8>, Vec<u8>)>,
    /// Bytes of groups held in memory past which they move into `groups`
    /// ([`MEMORY_LIMIT_BYTES`]; lower in tests).
    memory_limit: usize,
    /// The view's state TTL: groups idle that long are forgotten ([`HashAgg::with_state_ttl`]).
    idle: Option<IdleKeys>,
    /// The last group key is the shard's number ([`HashAggConfig::shard_key`]).
    shard_key: bool,
}

/// How a windowed aggregate's checkpoint record says its groups are held: in table 0 (also
/// what a record without the field means), or in memory ([`ExpiringGroups`]).
const GROUPS_IN_TABLE: u64 = 0;
const GROUPS_IN_MEMORY: u64 = 1;

/// What a [`HashAgg`] computes and what it may assume of its input, all given at once (by the
/// stream plan's aggregate node).
#[derive(Clone)]
pub struct HashAggConfig {
    pub group_by: Vec<Arc<dyn PhysicalExpr>>,
    pub group_types: Vec<DataType>,
    pub aggs: Vec<AggSpec>,
    /// The output: the group columns, then one per aggregate.
    pub schema: SchemaRef,
    /// Grouped by a window bound: a windowed aggregate.
    pub window: Option<AggWindow>,
    /// The input only ever inserts rows: `min` and `max` keep the extreme so far in the group's
    /// state instead of every value in the store.
    pub append_only_input: bool,
    /// No change for a window can reach a windowed aggregate after the watermark made the
    /// window final (its rows come from window assignment, which drops late rows, through
    /// projections, filters and unions), so a final window's groups may be finished before the
    /// barrier ([`HashAgg::retire_final_windows`]).
    pub prompt_input: bool,
    /// The format the view's state is written in (recorded with the view).
    pub state_format: StateFormat,
    /// The partial phase of a two-phase aggregate: each shard's groups are its own, the shard's
    /// number their last group key (a UInt64 in `group_types`, not in `group_by`), so a hot
    /// group is counted in every shard its rows reach and merged after the exchange.
    pub shard_key: bool,
}

impl HashAggConfig {
    /// Plain grouping: no window, any input.
    pub fn new(
        group_by: Vec<Arc<dyn PhysicalExpr>>,
        group_types: Vec<DataType>,
        aggs: Vec<AggSpec>,
        schema: SchemaRef,
    ) -> HashAggConfig {
        HashAggConfig {
            group_by,
            group_types,
            aggs,
            schema,
            window: None,
            append_only_input: false,
            prompt_input: false,
            state_format: StateFormat::CURRENT,
            shard_key: false,
        }
    }
}

impl HashAgg {
    /// Shard `shard` of an aggregate configured by `config`, over its state tables (groups,
    /// value multisets). A global aggregate's one group lives in the view's first shard
    /// (`first`: shard 0, on the node owning vnode 0 in a cluster), where all its rows go.
    pub fn new(
        config: HashAggConfig,
        state: (KeyedState, KeyedState),
        shard: usize,
        first: bool,
        view: impl Into<ViewStatus>,
    ) -> Result<HashAgg> {
        let HashAggConfig {
            mut group_by,
            group_types,
            aggs,
            schema,
            window,
            append_only_input,
            prompt_input,
            state_format,
            shard_key,
        } = config;
        if shard_key {
            group_by.push(Arc::new(Literal::new(ScalarValue::UInt64(Some(shard as u64)))));
        }
        let group_codec = if group_types.is_empty() {
            None
        } else {
            Some(RowConverter::new(group_types.into_iter().map(SortField::new).collect())?)
        };
        let value_codecs = aggs
            .iter()
            .map(|a| match a.kind {
                AggKind::Sum => ScalarCodec::new(&a.output_type).map(Some),
                k if k.keeps_values() && !a.order_by.is_empty() => {
                    ScalarCodec::ordered(&a.order_by, a.arg_type.as_ref().expect("an argument")).map(Some)
                }
                // array_agg keeps NULLs too, last, as `ORDER BY x` puts them.
                AggKind::ArrayAgg => ScalarCodec::nulls_last(a.arg_type.as_ref().expect("an argument")).map(Some),
                k if k.keeps_values() => ScalarCodec::new(a.arg_type.as_ref().expect("an argument")).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let wide_codecs = aggs
            .iter()
            .map(|a| match a.kind {
                AggKind::Sum => ScalarCodec::new(&running_sum_type(&a.output_type)).map(Some),
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        let output_codec = crate::state::table::row_codec(&schema)?;
        let mut agg = HashAgg {
            group_by,
            group_codec,
            wide_codecs,
            aggs,
            value_codecs,
            output_codec,
            schema,
            groups: state.0,
            values: state.1,
            dirty: HashMap::default(),
            touched: Vec::new(),
            view: view.into(),
            append_only_input,
            window,
            prompt_input,
            exact_sums: state_format >= StateFormat::EXACT_SUMS,
            open: KeysByTime::default(),
            closed: KeysByTime::default(),
            pace: WatermarkPace::default(),
            in_memory: None,
            retired: None,
            memory_limit: MEMORY_LIMIT_BYTES,
            idle: None,
            shard_key,
        };
        if agg.window.is_some() {
            // Its groups' stored parts carry the shard number.
            let (table, store) = agg.groups.table();
            agg.in_memory = Some(ExpiringGroups::new(table, store, shard as u16, &agg.describe()));
        }
        if agg.group_codec.is_none() && first {
            // The one group of a global aggregate exists from the start.
            let group = agg.load(&[])?;
            agg.dirty.insert(vec![], 0);
            agg.touched.push(group);
        }
        Ok(agg)
    }

    /// This aggregate under the view's state TTL (`WITH (state_ttl = ...)`), its idle groups
    /// indexed in `idle`: a group not changed for the TTL of epoch time is forgotten as if its
    /// rows had been deleted (its row retracted, its state deleted), and starts anew with its
    /// next row; a retraction reaching a group with no rows left (one forgotten) is ignored.
    /// For grouped aggregates without a window (windows end with the watermark).
    pub fn with_state_ttl(mut self, idle: IdleKeys) -> Result<HashAgg> {
        if self.window.is_some() || self.group_codec.is_none() {
            return Err(WeirError::internal("a state TTL is for grouped aggregates without a window"));
        }
        self.idle = Some(idle);
        Ok(self)
    }

    /// Whether aggregate `i` keeps its values (with multiplicities) in the multiset table.
    fn keeps_values(&self, i: usize) -> bool {
        let kind = self.aggs[i].kind;
        kind.keeps_values() && !(self.append_only_input && matches!(kind, AggKind::Min | AggKind::Max))
    }

    fn new_group(&self) -> Group {
        let accs = self.aggs.iter().map(|a| self.new_acc(a)).collect();
        Group { rows: 0, accs, emitted: None, unstored: false }
    }

    /// Aggregate `a`'s accumulator for a group with no rows: which one it keeps (also what
    /// [`HashAgg::decode_group`] reads back).
    fn new_acc(&self, a: &AggSpec) -> Acc {
        match a.kind {
            AggKind::CountRows | AggKind::Count => Acc::Count(0),
            AggKind::Sum if self.exact_sums && a.output_type.is_floating() => {
                Acc::FloatSum { sum: ExactSum::default(), values: 0 }
            }
            AggKind::Sum => Acc::Sum { sum: None, values: 0 },
            AggKind::Avg if self.exact_sums => Acc::Avg { sum: ExactSum::default(), values: 0 },
            AggKind::Avg => Acc::AvgRounded { sum: 0.0, values: 0 },
            AggKind::Min | AggKind::Max if self.append_only_input => Acc::Best(None),
            AggKind::Min
            | AggKind::Max
            | AggKind::StringAgg
            | AggKind::BitAnd
            | AggKind::BitOr
            | AggKind::ArrayAgg
            | AggKind::PercentileCont(_)
            | AggKind::FirstValue
            | AggKind::LastValue
            | AggKind::PercentileDisc(_)
            | AggKind::Mode => Acc::Extreme,
            AggKind::CountDistinct => Acc::Distinct(0),
            AggKind::BoolAnd | AggKind::BoolOr => Acc::Bools { trues: 0, falses: 0 },
            AggKind::Variance { .. } => {
                Acc::Moments { sum: ExactSum::default(), squares: ExactSum::default(), values: 0 }
            }
            AggKind::BitXor => Acc::Xor { bits: 0, values: 0 },
        }
    }

    /// The group's state: held in memory, else the store's, else new.
    fn load(&mut self, key: &[u8]) -> Result<Group> {
        self.load_at(key, self.close_of(key))
    }

    /// [`HashAgg::load`] of a group whose window closes at `close` (None: not windowed), as
    /// its caller knows it (a group on its way between the open and closed indexes, or one
    /// just looked up).
    fn load_at(&mut self, key: &[u8], close: Option<i64>) -> Result<Group> {
        if let (Some(in_memory), Some(close)) = (&self.in_memory, close) {
            return match in_memory.get(close, key) {
                Some(bytes) => self.decode_group(bytes),
                None => Ok(self.new_group()),
            };
        }
        match self.groups.get(KeyRef::whole(key))? {
            Some(bytes) => self.decode_group(&bytes),
            None => Ok(self.new_group()),
        }
    }

    /// Aggregate `agg`'s multiset under group `group`: its values follow.
    fn multiset_prefix(group: &[u8], agg: usize, extra: usize) -> StateKey {
        StateKey::under(group, 1 + extra).then(&[agg as u8])
    }

    /// Adds (`sign` 1) or takes back (`sign` -1) row `row`'s value of aggregate `i` (`arg`
    /// its argument column, None for `count(*)`).
    fn update(&mut self, group: &mut Group, i: usize, arg: Option<&ArrayRef>, row: usize, sign: i64) -> Result<()> {
        let spec = &self.aggs[i];
        if let Acc::Count(n) = &mut group.accs[i] {
            // Counters need no value, only whether there is one.
            if spec.kind == AggKind::CountRows || arg.is_some_and(|a| a.is_valid(row)) {
                *n += sign;
            }
            return Ok(());
        }
        let value = arg.map(|a| ScalarValue::try_from_array(a, row)).transpose()?.filter(|v| !v.is_null());
        match &mut group.accs[i] {
            Acc::Sum { sum, values } => {
                if let Some(v) = value {
                    // The running total is wider than the output, so a total that does not
                    // fit (yet) fails no row: its group's value is NULL until it fits again.
                    *sum = Some(add_to_total(sum.take(), v, sign, &running_sum_type(&spec.output_type))?);
                    *values += sign;
                }
            }
            Acc::Avg { sum, values } | Acc::FloatSum { sum, values } => {
                if let Some(v) = value {
                    match integer_value(&v) {
                        Some(i) => sum.add_i128(i, sign),
                        None => sum.add_f64(float_value(&v)?, sign),
                    }
                    *values += sign;
                }
            }
            Acc::AvgRounded { sum, values } => {
                if let Some(v) = value {
                    *sum += sign as f64 * float_value(&v)?;
                    *values += sign;
                }
            }
            Acc::Bools { trues, falses } => match value {
                Some(ScalarValue::Boolean(Some(true))) => *trues += sign,
                Some(ScalarValue::Boolean(Some(false))) => *falses += sign,
                _ => {}
            },
            Acc::Moments { sum, squares, values } => {
                if let Some(v) = value {
                    match integer_value(&v) {
                        // |v| < 2^64: its square fits in an i128.
                        Some(i) => {
                            sum.add_i128(i, sign);
                            squares.add_i128(i * i, sign);
                        }
                        None => {
                            let f = float_value(&v)?;
                            sum.add_f64(f, sign);
                            squares.add_f64(f * f, sign);
                        }
                    }
                    *values += sign;
                }
            }
            Acc::Xor { bits, values } => {
                if let Some(v) = value {
                    *bits ^= bits_of(&v)?;
                    *values += sign;
                }
            }
            Acc::Best(best) => {
                if let Some(v) = value {
                    if sign < 0 {
                        return Err(WeirError::internal("an aggregate input derived as append-only retracted a row"));
                    }
                    let better = match best {
                        None => true,
                        Some(b) => {
                            let wanted = if spec.kind == AggKind::Max { Ordering::Greater } else { Ordering::Less };
                            v.partial_cmp(b) == Some(wanted)
                        }
                    };
                    if better {
                        *best = Some(v);
                    }
                }
            }
            // Counters are counted above. Values of the others live in the multiset; `apply`
            // nets them per batch (add_to_multiset).
            Acc::Count(_) | Acc::Extreme | Acc::Distinct(_) => {}
        }
        Ok(())
    }

    /// Changes the multiplicity of one (encoded) value of aggregate `i` by `delta`.
    fn add_to_multiset(
        &mut self,
        group_key: &[u8],
        group: &mut Group,
        i: usize,
        value: &[u8],
        delta: i64,
    ) -> Result<()> {
        let key = Self::multiset_prefix(group_key, i, value.len()).then(value);
        let key = key.key();
        if let (true, Acc::Distinct(n)) = (self.append_only_input, &mut group.accs[i]) {
            // Values only arrive: a value seen before changes nothing, so its count is not kept.
            if delta < 0 {
                return Err(WeirError::internal("an aggregate input derived as append-only retracted a row"));
            }
            if self.values.get(key)?.is_none() {
                self.values.put(key, encode_count(1));
                *n += 1;
            }
            return Ok(());
        }
        let (before, mut after) = self.values.add_count(key, delta)?;
        if after < 0 && self.idle.is_some() {
            // A value of a row from before its group was forgotten: nothing to take it from.
            self.values.delete(key);
            after = 0;
        }
        if let Acc::Distinct(n) = &mut group.accs[i] {
            *n += (after > 0) as i64 - (before > 0) as i64;
        }
        Ok(())
    }

    /// Aggregate `i`'s values in group `group_key`, from its multiset: in the codec's order, each
    /// as often as it is there.
    fn multiset_values(&self, group_key: &[u8], i: usize) -> Result<Vec<ScalarValue>> {
        let prefix = Self::multiset_prefix(group_key, i, 0);
        let codec = self.value_codecs[i].as_ref().expect("codec");
        let mut values = Vec::new();
        for (k, count) in self.values.scan_prefix(prefix.key())? {
            let value = codec.decode(&k[prefix.bytes().len()..])?;
            values.extend(std::iter::repeat_n(value, decode_count(&count)?.max(0) as usize));
        }
        Ok(values)
    }

    fn value(&self, group_key: &[u8], group: &Group, i: usize) -> Result<ScalarValue> {
        let spec = &self.aggs[i];
        let out = match &group.accs[i] {
            Acc::Count(n) => ScalarValue::Int64(Some(*n)),
            Acc::Sum { sum, values } => match sum {
                Some(s) if *values > 0 => s.clone(),
                _ => ScalarValue::Null,
            },
            Acc::Avg { values: 0, .. } | Acc::AvgRounded { values: 0, .. } | Acc::FloatSum { values: 0, .. } => {
                ScalarValue::Null
            }
            Acc::Avg { sum, values } => ScalarValue::Float64(Some(sum.to_f64() / *values as f64)),
            Acc::AvgRounded { sum, values } => ScalarValue::Float64(Some(sum / *values as f64)),
            Acc::FloatSum { sum, .. } => ScalarValue::Float64(Some(sum.to_f64())).cast_to(&spec.output_type)?,
            Acc::Distinct(n) => ScalarValue::Int64(Some(*n)),
            Acc::Bools { trues, falses } => {
                if trues + falses == 0 {
                    ScalarValue::Null
                } else if spec.kind == AggKind::BoolAnd {
                    ScalarValue::Boolean(Some(*falses == 0))
                } else {
                    ScalarValue::Boolean(Some(*trues > 0))
                }
            }
            Acc::Extreme if spec.kind == AggKind::StringAgg => {
                let parts = self.multiset_values(group_key, i)?;
                let parts =
                    parts.iter().map(|v| Ok(v.cast_to(&DataType::Utf8)?.to_string())).collect::<Result<Vec<_>>>()?;
                match parts.is_empty() {
                    true => ScalarValue::Null,
                    false => ScalarValue::Utf8(Some(parts.join(spec.delimiter.as_deref().unwrap_or("")))),
                }
            }
            Acc::Extreme if spec.kind == AggKind::ArrayAgg => {
                let values = self.multiset_values(group_key, i)?;
                match values.is_empty() {
                    true => ScalarValue::Null,
                    false => {
                        let item = spec.arg_type.as_ref().expect("an argument");
                        ScalarValue::List(ScalarValue::new_list_nullable(&values, item))
                    }
                }
            }
            Acc::Extreme if matches!(spec.kind, AggKind::PercentileCont(_)) => {
                let AggKind::PercentileCont(bits) = spec.kind else { unreachable!("matched") };
                let values = self.multiset_values(group_key, i)?;
                let values = values.iter().map(float_value).collect::<Result<Vec<f64>>>()?;
                match interpolate(&values, f64::from_bits(bits)) {
                    Some(v) => ScalarValue::Float64(Some(v)),
                    None => ScalarValue::Null,
                }
            }
            Acc::Extreme if matches!(spec.kind, AggKind::PercentileDisc(_) | AggKind::Mode) => {
                let values = self.multiset_values(group_key, i)?;
                let picked = match spec.kind {
                    AggKind::PercentileDisc(bits) => {
                        percentile_disc_index(values.len(), f64::from_bits(bits)).map(|i| &values[i])
                    }
                    _ => mode(&values),
                };
                picked.cloned().unwrap_or(ScalarValue::Null)
            }
            Acc::Best(best) => best.clone().unwrap_or(ScalarValue::Null),
            Acc::Extreme if matches!(spec.kind, AggKind::BitAnd | AggKind::BitOr) => {
                let mut folded: Option<i64> = None;
                for value in self.multiset_values(group_key, i)? {
                    let bits = bits_of(&value)?;
                    folded = Some(match (folded, spec.kind) {
                        (None, _) => bits,
                        (Some(f), AggKind::BitAnd) => f & bits,
                        (Some(f), _) => f | bits,
                    });
                }
                folded.map_or(ScalarValue::Null, |f| ScalarValue::Int64(Some(f)))
            }
            Acc::Xor { values: 0, .. } => ScalarValue::Null,
            Acc::Xor { bits, .. } => ScalarValue::Int64(Some(*bits)),
            Acc::Moments { sum, squares, values } => {
                let AggKind::Variance { population, root } = spec.kind else {
                    return Err(WeirError::internal("moments kept for an aggregate that is no variance"));
                };
                match variance(sum, squares, *values, population) {
                    Some(v) if root => ScalarValue::Float64(Some(v.sqrt())),
                    Some(v) => ScalarValue::Float64(Some(v)),
                    None => ScalarValue::Null,
                }
            }
            Acc::Extreme => {
                let prefix = Self::multiset_prefix(group_key, i, 0);
                let last = matches!(spec.kind, AggKind::Max | AggKind::LastValue);
                match self.values.first_with_prefix(prefix.key(), last)? {
                    Some((k, _)) => self.value_codecs[i].as_ref().expect("codec").decode(&k[prefix.bytes().len()..])?,
                    None => ScalarValue::Null,
                }
            }
        };
        if out.is_null() {
            return Ok(ScalarValue::try_from(&spec.output_type)?);
        }
        match (out.cast_to(&spec.output_type), spec.kind) {
            (Ok(value), _) => Ok(value),
            // A sum its type cannot hold: NULL for this group while it does not fit, counted as
            // an error of the view, as a failing expression's row is (`operators::eval`).
            (Err(e), AggKind::Sum) => {
                let message = format!("sum out of range for type {}: {e}", spec.output_type);
                crate::metrics::VIEW_ERRORS_TOTAL.with_label_values(&[&self.view]).inc();
                self.view.error(&message, 1);
                Ok(ScalarValue::try_from(&spec.output_type)?)
            }
            (Err(e), _) => Err(e.into()),
        }
    }

    /// A group as stored: its row count, each accumulator's fields, the row it emitted last.
    fn encode_group(&self, group: &Group) -> Result<Vec<u8>> {
        let mut out = ValueWriter::with_capacity(64);
        out.i64(group.rows);
        for (i, acc) in group.accs.iter().enumerate() {
            match acc {
                Acc::Count(n) | Acc::Distinct(n) => {
                    out.i64(*n);
                }
                Acc::Sum { sum, values } => {
                    out.i64(*values);
                    // A total its output type holds is stored as that type (1), as before
                    // totals were kept wider; one it does not, as the wider type (2).
                    let narrow = sum.as_ref().map(|s| s.cast_to(&self.aggs[i].output_type));
                    match (sum, narrow) {
                        (Some(_), Some(Ok(narrow))) => {
                            out.u8(SUM_AS_OUTPUT)
                                .bytes(&self.value_codecs[i].as_ref().expect("codec").encode(&narrow)?);
                        }
                        (Some(wide), _) => {
                            out.u8(SUM_WIDE).bytes(&self.wide_codecs[i].as_ref().expect("codec").encode(wide)?);
                        }
                        (None, _) => {
                            out.u8(0);
                        }
                    }
                }
                Acc::Avg { sum, values } | Acc::FloatSum { sum, values } => {
                    out.exact_sum(sum).i64(*values);
                }
                Acc::AvgRounded { sum, values } => {
                    out.f64(*sum).i64(*values);
                }
                Acc::Extreme => {}
                Acc::Best(best) => match best {
                    Some(v) => {
                        out.u8(1).bytes(&self.value_codecs[i].as_ref().expect("codec").encode(v)?);
                    }
                    None => {
                        out.u8(0);
                    }
                },
                Acc::Bools { trues, falses } => {
                    out.i64(*trues).i64(*falses);
                }
                Acc::Moments { sum, squares, values } => {
                    out.exact_sum(sum).exact_sum(squares).i64(*values);
                }
                Acc::Xor { bits, values } => {
                    out.i64(*bits).i64(*values);
                }
            }
        }
        match &group.emitted {
            Some(e) => out.u8(1).bytes(e),
            None => out.u8(0),
        };
        Ok(out.finish())
    }

    /// The group [`HashAgg::encode_group`] stored.
    fn decode_group(&self, bytes: &[u8]) -> Result<Group> {
        let mut r = ValueReader::new(bytes, "aggregate state");
        let rows = r.i64()?;
        let mut accs = Vec::with_capacity(self.aggs.len());
        for (i, spec) in self.aggs.iter().enumerate() {
            accs.push(match self.new_acc(spec) {
                Acc::Count(_) => Acc::Count(r.i64()?),
                Acc::Distinct(_) => Acc::Distinct(r.i64()?),
                Acc::FloatSum { .. } => {
                    let sum = r.exact_sum()?;
                    Acc::FloatSum { sum, values: r.i64()? }
                }
                Acc::Sum { .. } => {
                    let values = r.i64()?;
                    let wide = running_sum_type(&spec.output_type);
                    let sum = match r.u8()? {
                        SUM_AS_OUTPUT => {
                            Some(self.value_codecs[i].as_ref().expect("codec").decode(r.slice()?)?.cast_to(&wide)?)
                        }
                        SUM_WIDE => Some(self.wide_codecs[i].as_ref().expect("codec").decode(r.slice()?)?),
                        _ => None,
                    };
                    Acc::Sum { sum, values }
                }
                Acc::Avg { .. } => {
                    let sum = r.exact_sum()?;
                    Acc::Avg { sum, values: r.i64()? }
                }
                Acc::AvgRounded { .. } => Acc::AvgRounded { sum: r.f64()?, values: r.i64()? },
                Acc::Best(_) => Acc::Best(if r.u8()? == 1 {
                    Some(self.value_codecs[i].as_ref().expect("codec").decode(r.slice()?)?)
                } else {
                    None
                }),
                // Its values are in the multiset table.
                Acc::Extreme => Acc::Extreme,
                Acc::Bools { .. } => Acc::Bools { trues: r.i64()?, falses: r.i64()? },
                Acc::Moments { .. } => {
                    let (sum, squares) = (r.exact_sum()?, r.exact_sum()?);
                    Acc::Moments { sum, squares, values: r.i64()? }
                }
                Acc::Xor { .. } => Acc::Xor { bits: r.i64()?, values: r.i64()? },
            });
        }
        let emitted = if r.u8()? == 1 { Some(r.slice()?.to_vec()) } else { None };
        Ok(Group { rows, accs, emitted, unstored: false })
    }
}

/// The variance of `values` numbers with sum `sum` and sum of squares `squares`: of the
/// population, or of a sample (None for fewer than two). Exact while the sums are integers
/// that `n * squares - sum^2` holds in an i128; else from their nearest f64s.
fn variance(sum: &ExactSum, squares: &ExactSum, values: i64, population: bool) -> Option<f64> {
    let n = values;
    let divisor = if population { n } else { n - 1 };
    if n <= 0 || divisor <= 0 {
        return None;
    }
    let exact = sum.to_i128().zip(squares.to_i128()).and_then(|(s, q)| {
        let scaled = (n as i128).checked_mul(q)?.checked_sub(s.checked_mul(s)?)?;
        Some(scaled as f64 / (n as f64 * divisor as f64))
    });
    let variance = exact.unwrap_or_else(|| {
        let (s, q) = (sum.to_f64(), squares.to_f64());
        (q - s * s / n as f64) / divisor as f64
    });
    // Rounding must not make it negative.
    Some(variance.max(0.0))
}

/// The continuous percentile `fraction` of `values` (ascending): between the values around
/// position `fraction * (n - 1)`, linearly, as PostgreSQL's `percentile_cont`; None for none.
fn interpolate(values: &[f64], fraction: f64) -> Option<f64> {
    let last = values.len().checked_sub(1)?;
    let position = fraction.clamp(0.0, 1.0) * last as f64;
    let (below, above) = (position.floor() as usize, position.ceil() as usize);
    let (low, high) = (values[below], values[above.min(last)]);
    Some(low + (position - below as f64) * (high - low))
}

/// An integer value's bits, for `bit_and`, `bit_or` and `bit_xor`.
fn bits_of(value: &ScalarValue) -> Result<i64> {
    match value.cast_to(&DataType::Int64)? {
        ScalarValue::Int64(Some(bits)) => Ok(bits),
        other => Err(WeirError::internal(format!("a bitwise aggregate of {other:?}"))),
    }
}

/// A batch as [`HashAgg::apply`] prepared it for its groups.
struct PreparedBatch<'a> {
    batch: &'a ChangeBatch,
    /// Each aggregate's argument (None for `count(*)`).
    args: Vec<Option<ArrayRef>>,
    /// Multiset aggregates' arguments, encoded (memcomparable).
    encoded_values: Vec<Option<Rows>>,
    /// Each row's group slot, and each slot's group key and first row.
    row_slots: Vec<usize>,
    slot_keys: Vec<(&'a [u8], usize)>,
    /// Where each slot's group is in the arena of touched groups.
    at: Vec<usize>,
}

impl Operator for HashAgg {
    fn describe(&self) -> String {
        let mut keys: Vec<String> = self.group_by.iter().map(|e| e.to_string()).collect();
        if self.shard_key {
            keys.pop();
            keys.push("shard".into());
        }
        let aggs: Vec<String> = self
            .aggs
            .iter()
            .map(|a| {
                let arg = a.arg.as_ref().map(|e| e.to_string()).unwrap_or_else(|| "*".into());
                let order: Vec<String> = a
                    .order_by
                    .iter()
                    .map(|o| format!("{}{}", o.expr, if o.options.descending { " DESC" } else { "" }))
                    .collect();
                match order.is_empty() {
                    true => format!("{:?}({arg})", a.kind),
                    false => format!("{:?}({arg} ORDER BY {})", a.kind, order.join(", ")),
                }
            })
            .collect();
        let window = match &self.window {
            Some(w) => format!(
                ", window {}{}{}",
                keys[w.group_index],
                if w.emit_on_close { ", emit on close" } else { "" },
                if w.lateness > 0 { format!(", lateness {}s", w.lateness as f64 / 1e9) } else { String::new() }
            ),
            None => String::new(),
        };
        format!(
            "HashAgg: group by [{}], [{}]{window}{}",
            keys.join(", "),
            aggs.join(", "),
            IdleKeys::describe(self.idle.as_ref())
        )
    }

    fn apply(&mut self, _input: usize, batch: ChangeBatch, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let keys = self.group_by.iter().map(|e| evaluate(e, &batch.data, &self.view)).collect::<Result<Vec<_>>>()?;
        let encoded = match &self.group_codec {
            Some(codec) => Some(codec.convert_columns(&keys)?),
            None => None,
        };
        let args = self
            .aggs
            .iter()
            .map(|a| a.arg.as_ref().map(|e| evaluate(e, &batch.data, &self.view)).transpose())
            .collect::<Result<Vec<_>>>()?;
        // Values of multiset aggregates (min, max, count distinct, string_agg), encoded once.
        let encoded_values = self
            .aggs
            .iter()
            .zip(&args)
            .enumerate()
            .map(|(i, (spec, arg))| match (self.keeps_values(i), arg) {
                (true, Some(arg)) => {
                    let codec = &self.value_codecs[i].as_ref().expect("codec").0;
                    // Under its ORDER BY keys, if it has its own.
                    let mut columns = spec
                        .order_by
                        .iter()
                        .map(|o| evaluate(&o.expr, &batch.data, &self.view))
                        .collect::<Result<Vec<_>>>()?;
                    columns.push(Arc::clone(arg));
                    Ok(Some(codec.convert_columns(&columns)?))
                }
                _ => Ok(None),
            })
            .collect::<Result<Vec<_>>>()?;
        // Each row's group as a slot in this batch, so each group's state is looked up once.
        let mut slot_of: HashMap<&[u8], usize> = HashMap::default();
        let mut slot_keys: Vec<(&[u8], usize)> = Vec::new(); // (key, first row)
        let row_slots: Vec<usize> = (0..batch.num_rows())
            .map(|row| {
                let key: &[u8] = encoded.as_ref().map(|e| e.row(row).data()).unwrap_or_default();
                *slot_of.entry(key).or_insert_with(|| {
                    slot_keys.push((key, row));
                    slot_keys.len() - 1
                })
            })
            .collect();
        let closes = match self.window {
            Some(window) => Some(close_times(&keys[window.group_index], window.column)?),
            None => None,
        };
        // Each slot's group in `touched`: this epoch's, else the store's, else new.
        let mut at: Vec<usize> = Vec::with_capacity(slot_keys.len());
        for &(key, first_row) in &slot_keys {
            if let Some(&i) = self.dirty.get(key) {
                at.push(i);
                continue;
            }
            // A windowed group first seen now: nothing of it is stored (the index holds every
            // stored windowed group, restored with the state from a checkpoint), so it is not
            // looked up.
            let close = closes.as_ref().and_then(|c| c[first_row]);
            let indexed_at = self.close_of(key);
            let group = match (self.window, close, indexed_at) {
                (Some(window), Some(close), None) => {
                    let closed = !window.emit_on_close || clock.watermark.is_some_and(|w| close <= w);
                    // A window that is already closed when its first row arrives (within the
                    // allowed lateness) emits at the next barrier like any closed window.
                    let index = if window.emit_on_close && closed { &mut self.closed } else { &mut self.open };
                    index.insert(key, close);
                    Group { unstored: true, ..self.new_group() }
                }
                _ => self.load_at(key, indexed_at)?,
            };
            self.dirty.insert(key.to_vec(), self.touched.len());
            at.push(self.touched.len());
            self.touched.push(group);
        }
        // Taken out while rows update them, as updating borrows the operator.
        let mut touched = std::mem::take(&mut self.touched);
        let prepared = PreparedBatch { batch: &batch, args, encoded_values, row_slots, slot_keys, at };
        let applied = self.apply_rows(&prepared, &mut touched);
        self.touched = touched;
        applied?;
        // After the batch: changes it brings for windows now final are in their groups.
        self.retire_final_windows(clock)
    }

    fn on_barrier(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let dirty = self.take_dirty();
        match self.window {
            Some(window) => {
                self.pace.observe(std::time::Instant::now(), clock.watermark);
                let watermark = clock.watermark.unwrap_or(i64::MIN);
                let final_through = window.expiry().final_through(clock).unwrap_or(i64::MIN);
                self.close_windows(dirty, watermark, final_through, window)
            }
            None if self.idle.is_some() => self.emit_forgetting_idle(dirty, clock),
            None => self.emit(dirty),
        }
    }

    /// A windowed group whose window will be final before the next checkpoint at the
    /// watermark's pace is not settled between checkpoints: it would be written to the store
    /// only to be deleted from it (at full speed a window lives a few hundred milliseconds).
    fn flush_state(&mut self, wb: &mut WriteBatch, flush: Flush) {
        if self.in_memory.as_ref().is_some_and(|g| g.bytes_held() > self.memory_limit) {
            self.move_groups_to_table();
        }
        if let Some((start, end)) = self.retired.take() {
            wb.delete_range(start, end);
        }
        if let Some(in_memory) = &mut self.in_memory {
            in_memory.flush(wb, flush);
        }
        let lateness = self.window.map(|w| w.lateness);
        let through = lateness.and_then(|l| self.pace.final_by_next_checkpoint(&self.groups, flush, l));
        let (open, closed) = (&self.open, &self.closed);
        let expires_first = |group: &[u8]| open.due_by(group, through) || closed.due_by(group, through);
        self.groups.flush_keeping(wb, flush, &expires_first);
        self.values.flush_keeping(wb, flush, &expires_first);
        if let Some(idle) = &mut self.idle {
            idle.flush(wb, flush);
        }
    }

    /// A windowed aggregate's groups by close time, not yet emitted then emitted; the groups
    /// touched in the epoch are all stored by now (the barrier took them).
    fn save_record(&self) -> Option<Vec<u8>> {
        debug_assert!(self.dirty.is_empty(), "a checkpoint follows the barrier, which takes every touched group");
        self.window?;
        let mut record = RecordWriter::default();
        self.open.write(&mut record);
        self.closed.write(&mut record);
        record.u64(if self.in_memory.is_some() { GROUPS_IN_MEMORY } else { GROUPS_IN_TABLE });
        Some(record.finish())
    }

    fn restore_record(&mut self, record: &[u8]) -> Result<()> {
        let what = self.describe();
        let mut record = RecordReader::new(record, &what)?;
        self.open = KeysByTime::read(&mut record)?;
        self.closed = KeysByTime::read(&mut record)?;
        let held = if record.at_end() { GROUPS_IN_TABLE } else { record.u64()? };
        match (held, &mut self.in_memory) {
            (GROUPS_IN_TABLE, in_memory) => *in_memory = None,
            (GROUPS_IN_MEMORY, Some(in_memory)) => {
                in_memory.restore()?;
                // Each restored group is one the index holds, at the same close.
                let (open, closed) = (&self.open, &self.closed);
                let at = |key: &[u8]| open.time_of(key).or_else(|| closed.time_of(key));
                if in_memory.entries().any(|(time, key)| at(key) != Some(time)) {
                    return Err(corrupt_record(&what, "a windowed group stored at a window it is not indexed at"));
                }
            }
            (held, _) => return Err(corrupt_record(&what, &format!("groups held in an unknown way ({held})"))),
        }
        record.finish()
    }

    fn open_windows(&self) -> usize {
        self.open.len() + self.closed.len()
    }

    fn memory_bytes(&self) -> usize {
        self.in_memory.as_ref().map_or(0, ExpiringGroups::bytes_held)
    }
}

impl HashAgg {
    /// Applies a batch's rows to their groups (`touched[at[row_slots[row]]]`).
    fn apply_rows(&mut self, prepared: &PreparedBatch, touched: &mut [Group]) -> Result<()> {
        let PreparedBatch { batch, args, encoded_values, row_slots, slot_keys, at } = prepared;
        // A value's net change per (group slot, multiset aggregate), applied to the state once.
        let mut deltas: HashMap<(usize, usize, &[u8]), i64> = HashMap::default();
        let mut ignored = 0;
        for (row, &slot) in row_slots.iter().enumerate() {
            let sign = batch.ops[row].sign();
            let group = &mut touched[at[slot]];
            if sign < 0 && group.rows <= 0 && self.idle.is_some() {
                // The row's group was forgotten by the state TTL (or never had it).
                ignored += 1;
                continue;
            }
            group.rows += sign;
            for (i, arg) in args.iter().enumerate() {
                match (&encoded_values[i], arg) {
                    (Some(values), Some(arg)) => {
                        if arg.is_valid(row) || self.aggs[i].kind.keeps_nulls() {
                            *deltas.entry((slot, i, values.row(row).data())).or_insert(0) += sign;
                        }
                    }
                    _ => self.update(group, i, arg.as_ref(), row, sign)?,
                }
            }
        }
        for ((slot, i, value), delta) in deltas.into_iter().filter(|(_, d)| *d != 0) {
            self.add_to_multiset(slot_keys[slot].0, &mut touched[at[slot]], i, value, delta)?;
        }
        if ignored > 0 {
            crate::metrics::STATE_TTL_IGNORED_RETRACTIONS_TOTAL.with_label_values(&[&self.view]).inc_by(ignored);
        }
        Ok(())
    }

    /// Under a state TTL: emits the epoch's changes as [`HashAgg::emit`] does, indexes the
    /// touched groups at the epoch's time, then forgets the groups idle for the TTL, emitting
    /// their rows' retraction.
    fn emit_forgetting_idle(&mut self, dirty: Vec<(Vec<u8>, Group)>, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let Some(now) = clock.now else { return self.emit(dirty) };
        let mut idle = self.idle.take().expect("called with a state TTL");
        let result = idle.advance(now).and_then(|()| self.index_and_forget(&mut idle, dirty, now));
        self.idle = Some(idle);
        result
    }

    fn index_and_forget(
        &mut self,
        idle: &mut IdleKeys,
        dirty: Vec<(Vec<u8>, Group)>,
        now: i64,
    ) -> Result<Vec<ChangeBatch>> {
        for (key, group) in &dirty {
            match group.rows > 0 {
                true => idle.touch(key)?,
                false => {
                    idle.remove(key)?;
                    // Rows from before a group was forgotten may leave values behind.
                    self.delete_values(key)?;
                }
            }
        }
        let mut out = self.emit(dirty)?;
        let mut forgotten = Vec::new();
        for key in idle.take_idle(now)? {
            let mut group = self.load_at(&key, None)?;
            if group.rows > 0 || group.emitted.is_some() {
                group.rows = 0;
                forgotten.push((key, group));
            }
        }
        if forgotten.is_empty() {
            return Ok(out);
        }
        crate::metrics::STATE_TTL_FORGOTTEN_KEYS_TOTAL.with_label_values(&[&self.view]).inc_by(forgotten.len() as u64);
        for (key, _) in &forgotten {
            self.delete_values(key)?;
        }
        out.extend(self.emit(forgotten)?);
        Ok(out)
    }

    /// Deletes every value multiset of group `key`.
    fn delete_values(&mut self, key: &[u8]) -> Result<()> {
        for i in 0..self.aggs.len() {
            if self.keeps_values(i) {
                self.values.delete_prefix(Self::multiset_prefix(key, i, 0).key())?;
            }
        }
        Ok(())
    }

    /// The groups touched in this epoch, in the order first touched; none are left touched.
    fn take_dirty(&mut self) -> Vec<(Vec<u8>, Group)> {
        let mut keys: Vec<(Vec<u8>, usize)> = self.dirty.drain().collect();
        keys.sort_unstable_by_key(|(_, at)| *at);
        keys.into_iter().map(|(key, _)| key).zip(std::mem::take(&mut self.touched)).collect()
    }

    /// Emits the changes of `dirty` groups and, with `EMIT ON WINDOW CLOSE`, the rows of the
    /// windows closed through `watermark` (touched now or not; touched groups of windows still
    /// open are only stored); then deletes the state of the windows closed through
    /// `final_through` (final: the watermark has passed their end plus the allowed lateness).
    fn close_windows(
        &mut self,
        dirty: Vec<(Vec<u8>, Group)>,
        watermark: i64,
        final_through: i64,
        window: AggWindow,
    ) -> Result<Vec<ChangeBatch>> {
        let out = if window.emit_on_close {
            let (mut emit, held): (Vec<_>, Vec<_>) =
                dirty.into_iter().partition(|(k, _)| self.close_of(k).is_some_and(|close| close <= watermark));
            let newly_closed = self.open.expire_through(watermark)?;
            for (key, group) in held {
                self.store_group(&key, &group)?;
            }
            let mut emitting: HashSet<Vec<u8>> = emit.iter().map(|(k, _)| k.clone()).collect();
            for (close, keys) in newly_closed {
                for key in keys {
                    if emitting.insert(key.clone()) {
                        let group = self.load_at(&key, Some(close))?;
                        emit.push((key.clone(), group));
                    }
                    self.closed.insert(&key, close);
                }
            }
            self.emit(emit)?
        } else {
            self.emit(dirty)?
        };
        self.forget_windows_through(final_through)?;
        Ok(out)
    }

    /// Within an epoch, once it has touched as many groups as the state cache holds: the
    /// touched groups of windows that are final (the watermark passed their end plus the
    /// allowed lateness) emit now and their state is deleted, instead of waiting in memory for
    /// the barrier. An epoch spanning many windows of event time (a replay, a backlog, a fast
    /// generator) then holds about the groups of the windows open at once, not of every window
    /// it saw. Their final rows are the same whenever they are emitted in the epoch.
    fn retire_final_windows(&mut self, clock: &Clock) -> Result<Vec<ChangeBatch>> {
        let Some(window) = self.window else { return Ok(vec![]) };
        let Some(final_through) = window.expiry().final_through(clock) else { return Ok(vec![]) };
        if !self.prompt_input || self.dirty.len() < self.groups.capacity() {
            return Ok(vec![]);
        }
        let earliest = [self.open.earliest(), self.closed.earliest()].into_iter().flatten().min();
        if earliest.is_none_or(|close| close > final_through) {
            return Ok(vec![]);
        }
        let (now, later): (Vec<_>, Vec<_>) = self
            .take_dirty()
            .into_iter()
            .partition(|(key, _)| self.close_of(key).is_some_and(|close| close <= final_through));
        for (key, group) in later {
            self.dirty.insert(key, self.touched.len());
            self.touched.push(group);
        }
        crate::metrics::GROUPS_FINISHED_EARLY_TOTAL.with_label_values(&[&self.view]).inc_by(now.len() as u64);
        // Every window closed through `final_through` is final, so its state goes now: the
        // earliest open window moves on, and the next batch does not sort the groups again.
        self.close_windows(now, final_through, final_through, window)
    }

    /// The close time of a windowed group with state (emitted or not).
    fn close_of(&self, key: &[u8]) -> Option<i64> {
        self.open.time_of(key).or_else(|| self.closed.time_of(key))
    }

    /// Writes a group's state (or deletes it when it has no rows left).
    fn store_group(&mut self, key: &[u8], group: &Group) -> Result<()> {
        let close = self.close_of(key);
        if let (Some(close), Some(_)) = (close, &self.in_memory) {
            let encoded = (group.rows != 0).then(|| self.encode_group(group)).transpose()?;
            let in_memory = self.in_memory.as_mut().expect("matched above");
            match encoded {
                Some(encoded) => in_memory.put(close, key, encoded),
                None => in_memory.delete(close, key),
            }
            return Ok(());
        }
        if group.rows == 0 && self.group_codec.is_some() {
            if !group.unstored {
                self.groups.delete(KeyRef::whole(key));
            }
        } else {
            let encoded = self.encode_group(group)?;
            match group.unstored {
                true => self.groups.put_new(KeyRef::whole(key), encoded),
                false => self.groups.put(KeyRef::whole(key), encoded),
            }
        }
        Ok(())
    }

    /// Deletes the state of every window that closed at or before `through`: nothing can change
    /// them any more (later rows for them are late, and left out before they get here).
    fn forget_windows_through(&mut self, through: i64) -> Result<()> {
        let mut done = Vec::new();
        for index in [&mut self.open, &mut self.closed] {
            done.extend(index.expire_through(through)?.into_iter().flat_map(|(_, keys)| keys));
        }
        if let Some(in_memory) = &mut self.in_memory {
            in_memory.expire_through(through)?;
        }
        for key in done {
            if self.in_memory.is_none() {
                self.groups.delete(KeyRef::whole(&key));
            }
            self.delete_values(&key)?;
        }
        Ok(())
    }

    /// Moves the groups held in memory into table 0 for good (past [`MEMORY_LIMIT_BYTES`]):
    /// their stored parts leave the store in this flush's batch.
    fn move_groups_to_table(&mut self) {
        let Some(in_memory) = self.in_memory.take() else { return };
        tracing::info!(
            view = %self.view,
            bytes = in_memory.bytes_held(),
            "a windowed aggregate's groups pass its memory limit: they move into its state table"
        );
        self.retired = Some(in_memory.stored_range());
        for (_, key, value) in in_memory.into_entries() {
            self.groups.put(KeyRef::whole(&key), value);
        }
    }

    /// Emits the changes of `dirty` groups since each last emitted, and stores their state.
    ///
    /// Columnar: every group's new row is built as arrays (group keys decoded at once,
    /// counters straight into an array), encoded at once to compare with the row it emitted
    /// before, and the output is picked from the old and new rows by index.
    fn emit(&mut self, dirty: Vec<(Vec<u8>, Group)>) -> Result<Vec<ChangeBatch>> {
        if dirty.is_empty() {
            return Ok(vec![]);
        }
        let global = self.group_codec.is_none();
        // A group with no rows left has no new row; its slot in the columns is a placeholder.
        let alive: Vec<bool> = dirty.iter().map(|(_, g)| g.rows > 0 || global).collect();
        let mut columns: Vec<ArrayRef> = match &self.group_codec {
            Some(codec) => {
                let parser = codec.parser();
                codec.convert_rows(dirty.iter().map(|(k, _)| parser.parse(k)))?
            }
            None => vec![],
        };
        for i in 0..self.aggs.len() {
            columns.push(self.aggregate_column(&dirty, &alive, i)?);
        }
        let columns = columns
            .into_iter()
            .zip(self.schema.fields())
            .map(|(column, field)| match column.data_type() == field.data_type() {
                true => Ok(column),
                false => Ok(cast(&column, field.data_type())?),
            })
            .collect::<Result<Vec<_>>>()?;
        let new_rows = self.output_codec.convert_columns(&columns)?;
        let old_rows: Vec<&[u8]> = dirty.iter().filter_map(|(_, g)| g.emitted.as_deref()).collect();
        let old_columns = match old_rows.is_empty() {
            true => None,
            false => {
                let parser = self.output_codec.parser();
                Some(self.output_codec.convert_rows(old_rows.iter().map(|r| parser.parse(r)))?)
            }
        };
        // Output rows as (0 = old rows, 1 = new rows; index), with their ops.
        let mut picks: Vec<(usize, usize)> = Vec::new();
        let mut ops = Vec::new();
        let mut next_old = 0;
        for (j, (key, mut group)) in dirty.into_iter().enumerate() {
            let new = alive[j].then(|| new_rows.row(j));
            let old = group.emitted.as_ref().map(|_| {
                next_old += 1;
                next_old - 1
            });
            if group.emitted.as_deref() != new.as_ref().map(|r| r.as_ref()) {
                match (old, new.is_some()) {
                    (Some(old), true) => {
                        picks.extend([(0, old), (1, j)]);
                        ops.extend([Op::UpdateDelete, Op::UpdateInsert]);
                    }
                    (Some(old), false) => {
                        picks.push((0, old));
                        ops.push(Op::Delete);
                    }
                    (None, true) => {
                        picks.push((1, j));
                        ops.push(Op::Insert);
                    }
                    (None, false) => {}
                }
                group.emitted = new.map(|r| r.as_ref().to_vec());
            }
            self.store_group(&key, &group)?;
        }
        if ops.is_empty() {
            return Ok(vec![]);
        }
        let output = columns
            .iter()
            .enumerate()
            .map(|(c, new)| {
                // Without old rows no pick names source 0.
                let old = old_columns.as_ref().map_or(new, |old| &old[c]);
                Ok(interleave(&[old.as_ref(), new.as_ref()], &picks)?)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(vec![ChangeBatch::new(RecordBatch::try_new(Arc::clone(&self.schema), output)?, ops)])
    }

    /// Aggregate `i`'s new value for every group of `dirty`, as an array of its output type.
    fn aggregate_column(&self, dirty: &[(Vec<u8>, Group)], alive: &[bool], i: usize) -> Result<ArrayRef> {
        let spec = &self.aggs[i];
        let counter = matches!(spec.kind, AggKind::CountRows | AggKind::Count | AggKind::CountDistinct);
        if counter && spec.output_type == DataType::Int64 {
            let counts: Int64Array = dirty
                .iter()
                .map(|(_, g)| match g.accs[i] {
                    Acc::Count(n) | Acc::Distinct(n) => n,
                    _ => 0,
                })
                .map(Some)
                .collect();
            return Ok(Arc::new(counts));
        }
        let values = dirty
            .iter()
            .zip(alive)
            .map(|((key, group), alive)| match alive {
                true => self.value(key, group, i),
                false => Ok(ScalarValue::try_from(&spec.output_type)?),
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(ScalarValue::iter_to_array(values)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::operator::testing::{step, step_at};
    use crate::state::memory::MemoryStore;
    use crate::state::store::StateStore;
    use crate::types::change_batch::from_pretty;
    use datafusion::arrow::datatypes::{Field, Schema};
    use datafusion::physical_expr::expressions::col;

    fn agg(store: &Arc<dyn StateStore>) -> HashAgg {
        agg_with(store, false)
    }

    /// [`agg`], told whether its input only inserts.
    fn agg_with(store: &Arc<dyn StateStore>, append_only_input: bool) -> HashAgg {
        let input = from_pretty("I I\n+ 1 1").schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
            Field::new("top", DataType::Int64, true),
        ]));
        let config = HashAggConfig {
            append_only_input,
            ..HashAggConfig::new(
                vec![col("c0", &input).unwrap()],
                vec![DataType::Int64],
                vec![
                    AggSpec {
                        kind: AggKind::CountRows,
                        arg: None,
                        arg_type: None,
                        output_type: DataType::Int64,
                        delimiter: None,
                        order_by: vec![],
                    },
                    AggSpec {
                        kind: AggKind::Max,
                        arg: Some(col("c1", &input).unwrap()),
                        arg_type: Some(DataType::Int64),
                        output_type: DataType::Int64,
                        delimiter: None,
                        order_by: vec![],
                    },
                ],
                schema,
            )
        };
        let state = (KeyedState::new(1, Arc::clone(store), 4), KeyedState::new(2, Arc::clone(store), 4));
        HashAgg::new(config, state, 0, true, "test").unwrap()
    }

    /// `avg(c1)` and `sum(c1)` per `c0` over floats, its state in `format`.
    fn float_sums(store: &Arc<dyn StateStore>, format: StateFormat) -> HashAgg {
        let input = from_pretty("I F\n+ 1 1").schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("mean", DataType::Float64, true),
            Field::new("total", DataType::Float64, true),
        ]));
        let over_c1 = |kind| AggSpec {
            kind,
            arg: Some(col("c1", &input).unwrap()),
            arg_type: Some(DataType::Float64),
            output_type: DataType::Float64,
            delimiter: None,
            order_by: vec![],
        };
        let config = HashAggConfig {
            state_format: format,
            ..HashAggConfig::new(
                vec![col("c0", &input).unwrap()],
                vec![DataType::Int64],
                vec![over_c1(AggKind::Avg), over_c1(AggKind::Sum)],
                schema,
            )
        };
        let state = (KeyedState::new(1, Arc::clone(store), 4), KeyedState::new(2, Arc::clone(store), 4));
        HashAgg::new(config, state, 0, true, "test").unwrap()
    }

    /// Exact sums leave exactly the rows still there; a view of the first state format keeps
    /// its running float totals (its stored state has them) and reads them back.
    #[test]
    fn float_sums_are_exact_and_first_format_views_keep_their_totals() {
        for (format, left) in [(StateFormat::CURRENT, "1.0 1.0"), (StateFormat::FIRST, "0.0 0.0")] {
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            let mut a = float_sums(&store, format);
            step(&mut a, &store, "I F\n+ 1 1e17\n+ 1 1");
            let mut wb = WriteBatch::default();
            a.flush_state(&mut wb, Flush::CHECKPOINT);
            store.write(wb).unwrap();
            // Restored over its stored state, in its format.
            let mut b = float_sums(&store, format);
            let out = step(&mut b, &store, "I F\n- 1 1e17");
            assert_eq!(out.lines().last().unwrap(), format!("U+ 1 {left}"), "{format:?}");
        }
    }

    /// `count(*)` per window end (`c0`, seconds) and `c1` over an append-only input, through a
    /// tiny cache.
    fn windowed_count(store: &Arc<dyn StateStore>, emit_on_close: bool, lateness: i64, prompt: bool) -> HashAgg {
        let input = from_pretty("S I\n+ 1 1").schema();
        let schema = Arc::new(Schema::new(vec![
            Field::new("end", DataType::Timestamp(datafusion::arrow::datatypes::TimeUnit::Second, None), true),
            Field::new("k", DataType::Int64, true),
            Field::new("n", DataType::Int64, true),
        ]));
        let count = AggSpec {
            kind: AggKind::CountRows,
            arg: None,
            arg_type: None,
            output_type: DataType::Int64,
            delimiter: None,
            order_by: vec![],
        };
        let config = HashAggConfig {
            window: Some(AggWindow {
                group_index: 0,
                column: crate::types::window::TimeColumn { close_offset: 0 },
                lateness,
                emit_on_close,
            }),
            append_only_input: true,
            prompt_input: prompt,
            ..HashAggConfig::new(
                vec![col("c0", &input).unwrap(), col("c1", &input).unwrap()],
                vec![input.field(0).data_type().clone(), DataType::Int64],
                vec![count],
                schema,
            )
        };
        let state = (
            KeyedState::new(1, Arc::clone(store), 4).write_back(None).unwrap(),
            KeyedState::new(2, Arc::clone(store), 4).write_back(None).unwrap(),
        );
        HashAgg::new(config, state, 0, true, "test").unwrap()
    }

    /// `sum(c1)` per `c0`, of decimals of 38 digits (`numeric(38, 0)`, as integer sums are planned).
    fn decimal_sum(store: &Arc<dyn StateStore>) -> HashAgg {
        let input = Arc::new(Schema::new(vec![
            Field::new("c0", DataType::Int64, true),
            Field::new("c1", DataType::Decimal128(38, 0), true),
        ]));
        let schema = Arc::new(Schema::new(vec![
            Field::new("k", DataType::Int64, true),
            Field::new("s", DataType::Decimal128(38, 0), true),
        ]));
        let sum = AggSpec {
            kind: AggKind::Sum,
            arg: Some(col("c1", &input).unwrap()),
            arg_type: Some(DataType::Decimal128(38, 0)),
            output_type: DataType::Decimal128(38, 0),
            delimiter: None,
            order_by: vec![],
        };
        let state = (KeyedState::new(1, Arc::clone(store), 4), KeyedState::new(2, Arc::clone(store), 4));
        let config = HashAggConfig::new(vec![col("c0", &input).unwrap()], vec![DataType::Int64], vec![sum], schema);
        HashAgg::new(config, state, 0, true, "test").unwrap()
    }

    /// A total past its type's 38 digits is NULL for its group only, is stored wide and read back,
    /// and comes back when rows leave.
    #[test]
    fn a_total_past_its_type_is_null_until_it_fits_again_across_a_restore() {
        use datafusion::arrow::array::{Decimal128Array, Int64Array};
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let nines = 10i128.pow(38) - 1;
        let batch = |keys: Vec<i64>, values: Vec<i128>, ops: Vec<Op>| {
            let values = Decimal128Array::from(values).with_precision_and_scale(38, 0).unwrap();
            let data = RecordBatch::try_from_iter([
                ("c0", Arc::new(Int64Array::from(keys)) as ArrayRef),
                ("c1", Arc::new(values) as ArrayRef),
            ])
            .unwrap();
            ChangeBatch::new(data, ops)
        };
        let sums = |out: Vec<ChangeBatch>| -> Vec<String> {
            let mut rows: Vec<String> = out
                .iter()
                .flat_map(|b| {
                    (0..b.num_rows()).map(move |i| {
                        let s = b.data.column(1).as_any().downcast_ref::<Decimal128Array>().unwrap();
                        let v = if s.is_null(i) { "NULL".to_string() } else { s.value(i).to_string() };
                        format!(
                            "{:?} {} {v}",
                            b.ops[i],
                            b.data.column(0).as_any().downcast_ref::<Int64Array>().unwrap().value(i)
                        )
                    })
                })
                .collect();
            rows.sort();
            rows
        };
        let mut a = decimal_sum(&store);
        let clock = Clock::default();
        a.apply(0, batch(vec![1, 1, 2], vec![nines, 5, 7], vec![Op::Insert; 3]), &clock).unwrap();
        let out = sums(a.on_barrier(&clock).unwrap());
        assert_eq!(out, vec!["Insert 1 NULL", "Insert 2 7"]);
        let mut wb = WriteBatch::default();
        a.flush_state(&mut wb, Flush::CHECKPOINT);
        store.write(wb).unwrap();
        // Restored: the wide total is read back, and the group comes back when the row leaves.
        let mut b = decimal_sum(&store);
        b.apply(0, batch(vec![1], vec![5], vec![Op::Delete]), &clock).unwrap();
        let out = sums(b.on_barrier(&clock).unwrap());
        assert_eq!(out, vec![format!("UpdateDelete 1 NULL"), format!("UpdateInsert 1 {nines}")]);
    }

    #[test]
    fn max_survives_deleting_the_extreme_and_empty_groups_vanish() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut a = agg(&store);
        let mut first: Vec<String> =
            step(&mut a, &store, "I I\n+ 1 10\n+ 1 30\n+ 2 5").lines().map(String::from).collect();
        first.sort();
        assert_eq!(first, vec!["+ 1 2 30", "+ 2 1 5"]);
        assert_eq!(step(&mut a, &store, "I I\n- 1 30"), "U- 1 2 30\nU+ 1 1 10\n");
        assert_eq!(step(&mut a, &store, "I I\n- 2 5"), "- 2 1 5\n");
        assert_eq!(step(&mut a, &store, "I I\n+ 1 20\n- 1 20"), "");
        // Many groups through a tiny cache: state comes back from the store.
        for k in 3..40 {
            step(&mut a, &store, &format!("I I\n+ {k} {k}"));
        }
        assert_eq!(step(&mut a, &store, "I I\n+ 3 1"), "U- 3 1 3\nU+ 3 2 3\n");
        assert_eq!(step(&mut a, &store, "I I\n- 1 10"), "- 1 1 10\n");
    }

    #[test]
    fn max_over_an_append_only_input_keeps_the_extreme_in_the_group() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut a = agg_with(&store, true);
        let mut first: Vec<String> =
            step(&mut a, &store, "I I\n+ 1 10\n+ 1 30\n+ 2 .").lines().map(String::from).collect();
        first.sort();
        assert_eq!(first, vec!["+ 1 2 30", "+ 2 1 NULL"]);
        let out = step(&mut a, &store, "I I\n+ 1 20\n+ 2 7");
        let (one, two): (Vec<&str>, Vec<&str>) =
            out.lines().partition(|l| l.starts_with("U- 1") || l.starts_with("U+ 1"));
        assert_eq!((one, two), (vec!["U- 1 2 30", "U+ 1 3 30"], vec!["U- 2 1 NULL", "U+ 2 2 7"]));
        // Nothing went to the value multisets (table 2).
        let mut wb = WriteBatch::default();
        a.flush_state(&mut wb, Flush::EPOCH);
        assert!(wb.ops.iter().all(|op| op.key()[..4] != 2u32.to_be_bytes()));
        // In the store before the next flush (which `step` tells so).
        store.write(wb).unwrap();
        // Many groups through a tiny cache: the extreme comes back from the store.
        for k in 3..40 {
            step(&mut a, &store, &format!("I I\n+ {k} {k}"));
        }
        assert_eq!(step(&mut a, &store, "I I\n+ 1 5"), "U- 1 3 30\nU+ 1 4 30\n");
        assert_eq!(step(&mut a, &store, "I I\n+ 1 50"), "U- 1 4 30\nU+ 1 5 50\n");
        // A retraction is a bug upstream, reported as one.
        assert!(a.apply(0, from_pretty("I I\n- 1 50"), &Clock::default()).is_err());
    }

    #[test]
    fn count_distinct_over_an_append_only_input_writes_each_value_once() {
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let input = from_pretty("I I\n+ 1 1").schema();
        let schema =
            Arc::new(Schema::new(vec![Field::new("k", DataType::Int64, true), Field::new("d", DataType::Int64, true)]));
        let spec = AggSpec {
            kind: AggKind::CountDistinct,
            arg: Some(col("c1", &input).unwrap()),
            arg_type: Some(DataType::Int64),
            output_type: DataType::Int64,
            delimiter: None,
            order_by: vec![],
        };
        let state = (KeyedState::new(1, Arc::clone(&store), 4), KeyedState::new(2, Arc::clone(&store), 4));
        let config = HashAggConfig {
            append_only_input: true,
            ..HashAggConfig::new(vec![col("c0", &input).unwrap()], vec![DataType::Int64], vec![spec], schema)
        };
        let mut a = HashAgg::new(config, state, 0, true, "t").unwrap();
        assert_eq!(step(&mut a, &store, "I I\n+ 1 10\n+ 1 10\n+ 1 20\n+ 1 ."), "+ 1 2\n");
        // Values seen before, some only in the store by now, count once.
        for k in 2..30 {
            step(&mut a, &store, &format!("I I\n+ {k} {k}"));
        }
        assert_eq!(step(&mut a, &store, "I I\n+ 1 20\n+ 1 30"), "U- 1 2\nU+ 1 3\n");
        assert!(a.apply(0, from_pretty("I I\n- 1 30"), &Clock::default()).is_err());
    }

    /// A windowed aggregate over a prompt input finishes final windows mid-epoch once it has
    /// touched as many groups as its cache holds; its changes, summed up, are those of the same
    /// aggregate finishing them at barriers only, in both emit modes, with and without lateness.
    #[test]
    fn final_windows_finished_mid_epoch_give_what_barriers_give() {
        const S: i64 = 1_000_000_000;
        for (emit_on_close, lateness) in [(false, 0), (true, 0), (false, 2 * S), (true, 2 * S)] {
            let mut sums: Vec<HashMap<String, i64>> = Vec::new();
            let mut finished_early = 0;
            for prompt in [true, false] {
                let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
                let mut a = windowed_count(&store, emit_on_close, lateness, prompt);
                let mut sum: HashMap<String, i64> = HashMap::default();
                let mut add = |batches: Vec<ChangeBatch>| {
                    for line in batches.iter().map(|b| b.to_pretty()).collect::<String>().lines() {
                        let (op, row) = line.split_once(' ').unwrap();
                        *sum.entry(row.to_string()).or_default() += if op.ends_with('-') { -1 } else { 1 };
                    }
                };
                // Three epochs of 40 seconds of event time each; 5 s windows, 7 keys, rows
                // twice; the watermark one second behind.
                let mut clock = Clock::default();
                for epoch in 0..3 {
                    for second in epoch * 40..(epoch + 1) * 40 {
                        let end = (second / 5 + 1) * 5;
                        let rows: String = (0..7).map(|k| format!("\n+ {end} {k}\n+ {end} {k}")).collect();
                        let out = a.apply(0, from_pretty(&format!("S I{rows}")), &clock).unwrap();
                        if prompt {
                            finished_early += out.len();
                            assert!(a.dirty.len() <= 16 + 7 + 35, "{} groups touched", a.dirty.len());
                        }
                        add(out);
                        clock.watermark = Some((second - 1) * S);
                    }
                    add(a.on_barrier(&clock).unwrap());
                    let mut wb = WriteBatch::default();
                    a.flush_state(&mut wb, Flush::EPOCH);
                    store.write(wb).unwrap();
                }
                sum.retain(|_, n| *n != 0);
                sums.push(sum);
            }
            assert!(
                finished_early > 0,
                "nothing finished mid-epoch (emit on close {emit_on_close}, lateness {lateness})"
            );
            assert_eq!(sums[0], sums[1], "emit on close {emit_on_close}, lateness {lateness}");
            assert!(sums[0].values().all(|&n| n == 1), "{:?}", sums[0]);
        }
    }

    /// Restored from a checkpoint, an aggregate reads its groups (and value multisets) back from
    /// the store: a deleted maximum reveals the stored next one, a group's last row removes it.
    #[test]
    fn a_restored_aggregate_continues_like_one_that_never_stopped() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes};
        assert_restore_continues(
            &|store| Box::new(agg(store)),
            &[
                &[Changes(0, "I I\n+ 1 10\n+ 1 30\n+ 2 5")],
                &[Changes(0, "I I\n- 1 30\n+ 3 7")],
                &[Changes(0, "I I\n- 2 5\n+ 1 20")],
                &[Changes(0, "I I\n+ 1 20\n- 1 20\n+ 2 6")],
                &[Changes(0, "I I\n- 1 10\n- 3 7\n- 1 20")],
            ],
        );
    }

    /// Restored from a checkpoint, a windowed aggregate knows which windows are open and
    /// which closed: a window closing after the restart emits (on close) and is forgotten, a late
    /// row for a closed window corrects its row, in both emit modes, with and without lateness.
    #[test]
    fn a_restored_windowed_aggregate_closes_and_forgets_the_windows_it_had() {
        use crate::operators::operator::testing::{assert_restore_continues, Event::Changes, Event::Watermark};
        const S: i64 = 1_000_000_000;
        for (emit_on_close, lateness) in [(false, 0), (true, 0), (false, 2 * S), (true, 2 * S)] {
            assert_restore_continues(
                &|store| Box::new(windowed_count(store, emit_on_close, lateness, false)),
                &[
                    &[Changes(0, "S I\n+ 5 1\n+ 5 2\n+ 10 1")],
                    &[Changes(0, "S I\n+ 5 1\n+ 10 2"), Watermark(3 * S)],
                    &[Changes(0, "S I\n+ 15 1"), Watermark(6 * S)],
                    // Window 5 is closed: within the lateness a correction, else a new row.
                    &[Changes(0, "S I\n+ 5 2\n+ 10 1"), Watermark(11 * S)],
                    &[Watermark(14 * S)],
                    &[Changes(0, "S I\n+ 20 1\n+ 15 1"), Watermark(20 * S)],
                    &[Changes(0, "S I\n+ 20 1"), Watermark(25 * S)],
                ],
            );
        }
    }

    /// A windowed aggregate's groups stay out of its group table: nothing is written between
    /// checkpoints, a checkpoint writes a few parts per open window, and a final window's parts
    /// leave the store at the next one.
    #[test]
    fn windowed_groups_are_written_per_window_at_checkpoints_only() {
        use crate::operators::operator::testing::checkpoint;
        const S: i64 = 1_000_000_000;
        let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
        let mut a = windowed_count(&store, false, 0, false);
        let rows: String = (0..50).map(|k| format!("\n+ 5 {k}\n+ 10 {k}")).collect();
        assert_eq!(step(&mut a, &store, &format!("S I{rows}")).lines().count(), 100);
        let stored = |store: &Arc<dyn StateStore>| store.read_prefix(&[]).unwrap();
        assert!(stored(&store).is_empty(), "written before a checkpoint");
        assert!(a.memory_bytes() > 100 * 8);
        checkpoint(&mut a, &store);
        let parts = stored(&store).len();
        assert!((2..=2 * crate::state::expiring_groups::PARTS).contains(&parts), "{parts} values stored");
        step_at(&mut a, &store, &Clock::at_watermark(6 * S), "S I\n+ 10 1");
        checkpoint(&mut a, &store);
        assert!(stored(&store).len() < parts, "window 5's parts are gone");
        step_at(&mut a, &store, &Clock::at_watermark(11 * S), "S I");
        checkpoint(&mut a, &store);
        assert!(stored(&store).is_empty() && a.memory_bytes() == 0);
    }

    /// Past its memory limit a windowed aggregate moves its groups into its table, for good:
    /// the outputs are those of one that kept them in memory, through restarts; a record
    /// without the groups' mode (an older build's) restores them from the table.
    #[test]
    fn groups_past_the_memory_limit_move_into_the_table() {
        use crate::operators::operator::testing::{
            assert_restore_continues, checkpoint, Event::Changes, Event::Watermark,
        };
        const S: i64 = 1_000_000_000;
        let epochs: &[&[crate::operators::operator::testing::Event]] = &[
            &[Changes(0, "S I\n+ 5 1\n+ 5 2\n+ 10 1")],
            &[Changes(0, "S I\n+ 5 1\n+ 10 2"), Watermark(3 * S)],
            &[Changes(0, "S I\n+ 15 1"), Watermark(6 * S)],
            &[Changes(0, "S I\n+ 5 2\n+ 10 1"), Watermark(11 * S)],
            &[Changes(0, "S I\n+ 20 1\n+ 15 1"), Watermark(20 * S)],
        ];
        for emit_on_close in [false, true] {
            let tiny = |store: &Arc<dyn StateStore>| {
                let mut a = windowed_count(store, emit_on_close, 2 * S, false);
                a.memory_limit = 0;
                Box::new(a) as Box<dyn Operator>
            };
            assert_restore_continues(&tiny, epochs);
            // The same outputs as in memory.
            let run = |make: &dyn Fn(&Arc<dyn StateStore>) -> Box<dyn Operator>| {
                let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
                let mut a = make(&store);
                let mut outs = Vec::new();
                let mut clock = Clock::default();
                for events in epochs {
                    for event in events.iter() {
                        match event {
                            Changes(_, text) => outs.extend(a.apply(0, from_pretty(text), &clock).unwrap()),
                            Watermark(w) => clock.watermark = Some(*w),
                            _ => unreachable!(),
                        }
                    }
                    outs.extend(a.on_barrier(&clock).unwrap());
                    checkpoint(a.as_mut(), &store);
                }
                (outs.iter().map(|b| b.to_pretty()).collect::<String>(), a)
            };
            let (spilled, mut a) = run(&tiny);
            let (kept, _) = run(&|store: &Arc<dyn StateStore>| {
                Box::new(windowed_count(store, emit_on_close, 2 * S, false)) as Box<dyn Operator>
            });
            assert_eq!(spilled, kept);
            assert_eq!(a.memory_bytes(), 0);
            // An older record (no mode field) restores the groups from the table.
            let store: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            a = tiny(&store);
            step(a.as_mut(), &store, "S I\n+ 25 1\n+ 25 2");
            let record = checkpoint(a.as_mut(), &store).unwrap();
            let mut b = windowed_count(&store, emit_on_close, 2 * S, false);
            b.restore_record(&record[..record.len() - 8]).unwrap();
            assert!(b.in_memory.is_none());
            let other: Arc<dyn StateStore> = Arc::new(MemoryStore::new());
            let mut c = windowed_count(&other, emit_on_close, 2 * S, false);
            step(&mut c, &other, "S I\n+ 25 1\n+ 25 2");
            assert_eq!(step(&mut b, &store, "S I\n+ 25 1"), step(&mut c, &other, "S I\n+ 25 1"));
            let later = Clock::at_watermark(30 * S);
            let closed = step_at(&mut b, &store, &later, "S I");
            assert_eq!(closed, step_at(&mut c, &other, &later, "S I"));
            assert_eq!(closed.is_empty(), !emit_on_close);
        }
    }
}
