//! Which stored rows a read must touch, from its conditions: [`KeyAccess`].
//!
//! A relation's rows are stored by the memcomparable encoding of its key columns
//! ([`Relation::key_columns`]: a table's primary key, a materialized view's columns), which sorts
//! like the columns and encodes them one after another, so the rows whose first key columns
//! hold given values, or whose next key column lies in a range, are one range of encoded keys.
//! Conditions that pin every key column of a table become point lookups; conditions that pin or
//! bound a prefix of the key columns become key ranges; anything else reads every row.
//!
//! The access is a superset of the matching rows, never a subset: the caller (DataFusion, for
//! reads; the DML writer) applies the conditions again to what is read, so a condition this
//! module does not understand only costs a wider read. Called by [`super::provider`] (reads,
//! UPDATE, DELETE) and [`super::dml`].

use std::cmp::Ordering;

use datafusion::arrow::array::ArrayRef;
use datafusion::arrow::datatypes::DataType;
use datafusion::common::{Column, ScalarValue};
use datafusion::logical_expr::{BinaryExpr, Expr, Operator};

use super::{Relation, RelationKind};
use crate::error::Result;
use crate::state::keys::prefix_end;
use crate::state::table::TableRange;

/// Keys looked up one by one at most; more, and a wider read is made.
const MAX_LOOKUPS: usize = 10_000;

/// Key prefixes read as ranges at most: each is a seek in every vnode (256), so past this a
/// read of every row costs less (unless the relation is distributed by the pinned columns, as
/// an index is: then each range is one seek, and [`MAX_LOOKUPS`] applies).
const MAX_RANGES: usize = 64;

/// The stored rows a read touches.
#[derive(Debug)]
pub enum KeyAccess {
    /// Every key column of a table pinned: the rows of these keys (one array per key column,
    /// in key order, a row per key), each looked up.
    Keys(Vec<ArrayRef>),
    /// A prefix of the key columns pinned, and perhaps the next one bounded: the rows whose
    /// memcomparable keys lie in these ranges.
    Ranges(Vec<TableRange>),
    /// Every row.
    All,
}

/// What one condition says of one key column.
#[derive(Debug, Clone)]
enum Narrowing {
    /// The column is one of these values (none: no row matches).
    Values(Vec<ScalarValue>),
    /// The column is at least (or above, when not inclusive) the value.
    Lower(ScalarValue, bool),
    /// The column is at most (or below, when not inclusive) the value.
    Upper(ScalarValue, bool),
}

/// What all the conditions say of one key column.
#[derive(Debug, Default, Clone)]
struct ColumnBounds {
    values: Option<Vec<ScalarValue>>,
    lower: Bound,
    upper: Bound,
}

impl ColumnBounds {
    fn add(&mut self, narrowing: Narrowing) {
        match narrowing {
            Narrowing::Values(values) => match &mut self.values {
                Some(pinned) => pinned.retain(|v| values.contains(v)),
                None => self.values = Some(values),
            },
            Narrowing::Lower(v, inclusive) => {
                if tighter(&v, inclusive, &self.lower, Ordering::Greater) {
                    self.lower = Some((v, inclusive));
                }
            }
            Narrowing::Upper(v, inclusive) => {
                if tighter(&v, inclusive, &self.upper, Ordering::Less) {
                    self.upper = Some((v, inclusive));
                }
            }
        }
    }

    /// The pinned values, each once, that also lie within the bounds.
    fn pinned(&self) -> Option<Vec<ScalarValue>> {
        let mut seen = std::collections::HashSet::new();
        let within =
            |v: &ScalarValue| inside(v, &self.lower, Ordering::Greater) && inside(v, &self.upper, Ordering::Less);
        self.values
            .as_ref()
            .map(|values| values.iter().filter(|v| within(v) && seen.insert((*v).clone())).cloned().collect())
    }

    fn bounded(&self) -> bool {
        self.lower.is_some() || self.upper.is_some()
    }
}

/// A bound: a value, and whether the value itself is in.
type Bound = Option<(ScalarValue, bool)>;

/// Whether bound `(v, inclusive)` keeps fewer values than `old` on its side: `inward` is how a
/// value further in compares (Greater for a lower bound, Less for an upper one).
fn tighter(v: &ScalarValue, inclusive: bool, old: &Bound, inward: Ordering) -> bool {
    match old {
        None => true,
        Some((old, old_inclusive)) => match v.partial_cmp(old) {
            Some(Ordering::Equal) => *old_inclusive && !inclusive,
            Some(o) => o == inward,
            None => false,
        },
    }
}

/// Whether `v` is on the kept side of `bound` (`inward` as for [`tighter`]).
fn inside(v: &ScalarValue, bound: &Bound, inward: Ordering) -> bool {
    bound.as_ref().is_none_or(|(b, inclusive)| match v.partial_cmp(b) {
        Some(Ordering::Equal) => *inclusive,
        Some(o) => o == inward,
        None => false,
    })
}

/// Whether `filter` narrows a read of `relation` by key (so it is worth offering to the scan).
/// A typed parameter (`k = $1`) narrows as a constant does: a cached plan is optimized with its
/// parameters in it, and their values are put in before the scan is made.
pub fn narrows(relation: &Relation, filter: &Expr) -> bool {
    use datafusion::common::tree_node::{Transformed, TransformedResult, TreeNode};
    let with_constants = filter
        .clone()
        .transform(|e| match &e {
            Expr::Placeholder(p) => match p.field.as_ref().map(|f| ScalarValue::new_default(f.data_type())) {
                Some(Ok(v)) if !v.is_null() => Ok(Transformed::yes(Expr::Literal(v, None))),
                _ => Ok(Transformed::no(e)),
            },
            _ => Ok(Transformed::no(e)),
        })
        .data();
    with_constants.is_ok_and(|f| narrowing(relation, &f).is_some())
}

/// The stored rows a read of `relation` under `filters` (ANDed) must touch.
pub fn key_access(relation: &Relation, filters: &[Expr]) -> Result<KeyAccess> {
    let Some(key) = relation.key_columns() else {
        return Ok(KeyAccess::All);
    };
    let mut bounds: std::collections::HashMap<usize, ColumnBounds> = std::collections::HashMap::new();
    for filter in filters.iter().flat_map(datafusion::logical_expr::utils::split_conjunction) {
        if let Some((column, narrowing)) = narrowing(relation, filter) {
            bounds.entry(column).or_default().add(narrowing);
        }
    }
    // Walk the key columns while they are pinned: every combination of their values is a
    // prefix; the first column that is only bounded ends the prefix with a range.
    let mut prefixes: Vec<Vec<ScalarValue>> = vec![vec![]];
    let mut range: Option<&ColumnBounds> = None;
    for column in key {
        let Some(column_bounds) = bounds.get(column) else { break };
        match column_bounds.pinned() {
            Some(values) => {
                if prefixes.len().saturating_mul(values.len()) > MAX_LOOKUPS {
                    break;
                }
                prefixes = prefixes
                    .iter()
                    .flat_map(|prefix| {
                        values.iter().map(move |v| [prefix.as_slice(), std::slice::from_ref(v)].concat())
                    })
                    .collect();
            }
            None => {
                if column_bounds.bounded() {
                    range = Some(column_bounds);
                }
                break;
            }
        }
    }
    let pinned = prefixes.first().map_or(key.len(), |p| p.len());
    if pinned == 0 && range.is_none() {
        return Ok(KeyAccess::All);
    }
    if pinned == key.len() && relation.def.kind == RelationKind::Table {
        return Ok(KeyAccess::Keys(key_arrays(relation, key, &prefixes)?));
    }
    let table = &relation.table;
    // A table distributed by the pinned columns (an index) reads each range in one vnode.
    let one_vnode_each = table.distribution_columns() > 0 && pinned >= table.distribution_columns();
    if prefixes.len() > MAX_RANGES && !one_vnode_each {
        return Ok(KeyAccess::All);
    }
    let mut ranges = Vec::with_capacity(prefixes.len());
    for prefix in &prefixes {
        let mut span = table.prefix_range(prefix)?;
        let with = |v: &ScalarValue| table.encode_key_prefix(&[prefix.as_slice(), std::slice::from_ref(v)].concat());
        match range.and_then(|r| r.lower.as_ref()) {
            Some((lo, true)) => span.keys.start = with(lo)?,
            Some((lo, false)) => span.keys.start = after(&with(lo)?),
            None => {}
        }
        match range.and_then(|r| r.upper.as_ref()) {
            Some((hi, true)) => span.keys.end = prefix_end(&with(hi)?),
            Some((hi, false)) => span.keys.end = Some(with(hi)?),
            None => {}
        }
        ranges.push(span);
    }
    Ok(KeyAccess::Ranges(ranges))
}

/// The first key after every key starting with `encoded` (itself, when nothing is after it).
fn after(encoded: &[u8]) -> Vec<u8> {
    prefix_end(encoded).unwrap_or_else(|| encoded.to_vec())
}

/// The keys `rows` (each a value per key column) as one array per key column.
fn key_arrays(relation: &Relation, key: &[usize], rows: &[Vec<ScalarValue>]) -> Result<Vec<ArrayRef>> {
    (0..key.len())
        .map(|i| {
            if rows.is_empty() {
                let data_type = relation.schema.field(key[i]).data_type();
                return Ok(datafusion::arrow::array::new_empty_array(data_type));
            }
            Ok(ScalarValue::iter_to_array(rows.iter().map(|r| r[i].clone()))?)
        })
        .collect()
}

/// The key column `filter` narrows, and how: `k = v`, `k IN (v, ...)`, `k = v OR k = w`,
/// `k < v` (and `<=`, `>`, `>=`, either way round), `k BETWEEN v AND w`, with `k` perhaps
/// widened by a cast that keeps values apart and in order.
fn narrowing(relation: &Relation, filter: &Expr) -> Option<(usize, Narrowing)> {
    let key = relation.key_columns()?;
    let key_column = |e: &Expr| -> Option<usize> {
        let column: &Column = match e {
            Expr::Column(c) => c,
            Expr::Cast(cast) => match cast.expr.as_ref() {
                Expr::Column(c) if widens(relation, c, cast.field.data_type()) => c,
                _ => return None,
            },
            _ => return None,
        };
        let index = relation.schema.index_of(&column.name).ok()?;
        key.contains(&index).then_some(index)
    };
    let literal = constant;
    let (column, narrowing) = match filter {
        Expr::BinaryExpr(BinaryExpr { left, op, right }) if *op != Operator::Or => {
            let (column, op, value) = match (key_column(left), key_column(right)) {
                (Some(c), None) => (c, *op, literal(right)?),
                (None, Some(c)) => (c, op.swap()?, literal(left)?),
                _ => return None,
            };
            let value = exact(relation, column, value)?;
            let narrowing = match op {
                Operator::Eq => Narrowing::Values(value.into_iter().collect()),
                // A NULL or a value the column cannot hold: the condition is not used.
                Operator::Lt | Operator::LtEq | Operator::Gt | Operator::GtEq if !ordered(relation, column) => {
                    return None
                }
                Operator::Lt => Narrowing::Upper(value?, false),
                Operator::LtEq => Narrowing::Upper(value?, true),
                Operator::Gt => Narrowing::Lower(value?, false),
                Operator::GtEq => Narrowing::Lower(value?, true),
                _ => return None,
            };
            (column, narrowing)
        }
        Expr::InList(list) if !list.negated => {
            let column = key_column(&list.expr)?;
            let values = list.list.iter().map(|e| exact(relation, column, literal(e)?)).collect::<Option<Vec<_>>>()?;
            (column, Narrowing::Values(values.into_iter().flatten().collect()))
        }
        // `k = 1 OR k = 2` (how small IN lists may come): the values of both sides.
        Expr::BinaryExpr(BinaryExpr { left, op: Operator::Or, right }) => {
            match (narrowing(relation, left)?, narrowing(relation, right)?) {
                ((l, Narrowing::Values(mut values)), (r, Narrowing::Values(more))) if l == r => {
                    values.extend(more);
                    (l, Narrowing::Values(values))
                }
                _ => return None,
            }
        }
        _ => return None,
    };
    Some((column, narrowing))
}

/// The value of `expr` when it is a constant: a literal, or an expression of literals
/// (`$1 + 100` once its parameter is bound: a cached plan is not optimized again, so nothing
/// folded it).
fn constant(expr: &Expr) -> Option<ScalarValue> {
    use datafusion::logical_expr::simplify::SimplifyContext;
    use datafusion::optimizer::simplify_expressions::ExprSimplifier;
    match expr {
        Expr::Literal(v, _) => Some(v.clone()),
        _ if !expr.column_refs().is_empty() || expr.is_volatile() => None,
        _ => match ExprSimplifier::new(SimplifyContext::default()).simplify(expr.clone()).ok()? {
            Expr::Literal(v, _) => Some(v),
            _ => None,
        },
    }
}

/// `value` as a value of `column`'s type, as a condition `column = value` would match it:
/// Some(None) when no row can (NULL, a value the type cannot hold exactly), None when that
/// cannot be told here (see [`exact`]).
pub fn as_column_value(relation: &Relation, column: usize, value: ScalarValue) -> Option<Option<ScalarValue>> {
    exact(relation, column, value)
}

/// `value` as a value of `column`'s type: Some(None) when no row can equal it (NULL, or a
/// value the type cannot hold exactly), None when that cannot be told (a cast that fails).
fn exact(relation: &Relation, column: usize, value: ScalarValue) -> Option<Option<ScalarValue>> {
    if value.is_null() {
        return Some(None);
    }
    let data_type = relation.schema.field(column).data_type();
    if !comparable(&value.data_type(), data_type) {
        return None;
    }
    let cast = value.cast_to(data_type).ok()?;
    if cast.is_null() {
        return None;
    }
    // Cast back, it must be the value given: 1.5 is no integer, and bounding by 1 or 2 instead
    // would need care with the comparison's direction; the condition is simply not used.
    match cast.cast_to(&value.data_type()) {
        Ok(back) if back == value => Some(Some(cast)),
        _ => None,
    }
}

/// Whether a value of type `from` is compared with a column of type `to` as the value cast to
/// the column's type: the same type, integers, or strings (DataFusion gives conditions
/// literals of the column's type; other pairs, such as timestamps in other time zones, are
/// left to it).
fn comparable(from: &DataType, to: &DataType) -> bool {
    use DataType::*;
    let integer = |t: &DataType| matches!(t, Int8 | Int16 | Int32 | Int64 | UInt8 | UInt16 | UInt32 | UInt64);
    let string = |t: &DataType| matches!(t, Utf8 | LargeUtf8 | Utf8View);
    from == to || integer(from) && integer(to) || string(from) && string(to)
}

/// Whether the stored key order of `column` is SQL's order of its values (floating point keys
/// are not: the encoding orders -0 before 0 and NaN above all).
fn ordered(relation: &Relation, column: usize) -> bool {
    use DataType::*;
    matches!(
        relation.schema.field(column).data_type(),
        Int8 | Int16
            | Int32
            | Int64
            | UInt8
            | UInt16
            | UInt32
            | UInt64
            | Utf8
            | LargeUtf8
            | Utf8View
            | Date32
            | Date64
            | Timestamp(_, _)
            | Time32(_)
            | Time64(_)
            | Decimal128(_, _)
            | Decimal256(_, _)
            | Boolean
            | Binary
            | LargeBinary
            | BinaryView
    )
}

/// Whether casting `column` to `to` is an integer widening (no two values become one, order
/// kept).
fn widens(relation: &Relation, column: &Column, to: &DataType) -> bool {
    use DataType::*;
    let Ok(from) = relation.schema.field_with_name(&column.name).map(|f| f.data_type().clone()) else {
        return false;
    };
    let rank = |t: &DataType| match t {
        Int8 => Some(1),
        Int16 => Some(2),
        Int32 => Some(3),
        Int64 => Some(4),
        _ => None,
    };
    matches!((rank(&from), rank(to)), (Some(a), Some(b)) if a <= b)
}
