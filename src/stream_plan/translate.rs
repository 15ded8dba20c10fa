//! From a DataFusion logical plan (optimized) to a view's stream plan: one [`PlanNode`] per
//! operator, children first, each with its [`Spec`] and the [`Properties`] of its output.
//!
//! Supported: table and view scans, projection, filter, equi-joins (inner with a residual
//! condition; left, right and full outer), grouped and global aggregates (count, sum, avg,
//! min, max), DISTINCT, UNION ALL, `ROW_NUMBER()` bounded by an outer filter (a Top-N), and
//! subquery aliases; ORDER BY is ignored (a view is a set of rows). Anything else is
//! SQLSTATE 0A000, naming what is missing.
//!
//! Event time: a scan of `TUMBLE(...)` / `HOP(...)` reads its relation through a window
//! assigner; each node's output columns that are window bounds are tracked ([`TimeColumn`]),
//! so an aggregate grouped by one becomes a windowed aggregate, and `EMIT ON WINDOW CLOSE`
//! either goes to those aggregates or, without one, to a buffer on top. For every input with a
//! `WATERMARK`, [`StreamPlan::watermarks`] has the expression the job computes the view's
//! watermark from.
//!
//! Nodes say what they require of their inputs' distribution; they put no exchange
//! (`distribution::enforce_distribution` does). Called by [`super::build`].

use std::sync::Arc;

use datafusion::arrow::compute::SortOptions;
use datafusion::arrow::datatypes::SchemaRef;
use datafusion::catalog::Session;
use datafusion::common::tree_node::{Transformed, TreeNode};
use datafusion::common::{DFSchema, NullEquality, ScalarValue};
use datafusion::logical_expr::{lit, Aggregate, Distinct, Expr, ExprSchemable, JoinType, LogicalPlan};
use datafusion::physical_expr::PhysicalExpr;

use super::distribution::{Distribution, Requirement};
use super::join_interval::{interval_nanos, join_interval};
use super::plan::{PlanNode, Properties, StreamPlan, ViewOptions};
use super::spec::{Spec, StateTtl};
use super::temporal_bounds::{self, uses_now};
use crate::catalog::persist::WatermarkDef;
use crate::catalog::windowed::windowed_relation;
use crate::catalog::{Catalog, RelationKind};
use crate::error::{Result, WeirError};
use crate::operators::eval::OrderKey;
use crate::operators::hash_agg::{AggKind, AggSpec, AggWindow, HashAggConfig};
use crate::operators::hash_join::{shape, HashJoinConfig, JoinWindow};
use crate::operators::lookup_join::LookupKind;
use crate::operators::over_window::OverWindowConfig;
use crate::operators::top_n::{Ranking, TopNConfig};
use crate::operators::unnest::UnnestConfig;
use crate::state::keys::{operator_state_table, TableId, RUNTIME_STATE_TABLE};
use crate::state::value::StateFormat;
use crate::types::window::{TimeColumn, Windowing};

/// A node planned: its number and its output's properties.
#[derive(Clone)]
struct Out {
    node: usize,
    props: Properties,
}

impl std::ops::Deref for Out {
    type Target = Properties;
    fn deref(&self) -> &Properties {
        &self.props
    }
}

struct Builder<'a> {
    state: &'a dyn Session,
    catalog: &'a Catalog,
    view_id: TableId,
    nodes: Vec<PlanNode>,
    inputs: Vec<TableId>,
    watermarks: Vec<Option<Arc<dyn PhysicalExpr>>>,
    late_rows_schema: Option<SchemaRef>,
    /// The next operator state table number of this view.
    next_state_table: u8,
    options: ViewOptions,
    /// Windowed aggregates built (they emit on window close themselves).
    windowed_aggregates: usize,
    /// Window assigners built (lateness needs one).
    assigners: usize,
    /// Subplans built so far, by what they compute ([`SharedPlan`]): one met again reuses its
    /// operators, which then feed each consumer. (q5 reads the same HOP of `bid` twice.)
    built: std::collections::HashMap<SharedPlan, Out>,
    /// The rank bound (`rn <= N`) of each `row_number()` window whose bounding filter's input
    /// is being built ([`rank_bound`]).
    rank_limits: std::collections::HashMap<LogicalPlan, usize>,
    /// `EMIT ON WINDOW CLOSE` is done below the top (window functions over rows released in
    /// time order), so no buffer goes on top.
    emitted_on_close: bool,
}

/// What a subplan computes: the plan, and what each windowed relation it scans is (a scan of
/// `HOP(...)` is named after the function only, so two different HOPs would look alike).
#[derive(PartialEq, Eq, Hash)]
struct SharedPlan(LogicalPlan, Vec<String>);

impl SharedPlan {
    fn of(plan: &LogicalPlan) -> SharedPlan {
        use datafusion::common::tree_node::{TreeNode, TreeNodeRecursion};
        let mut windows = Vec::new();
        let _ = plan.apply(|p| {
            if let LogicalPlan::TableScan(scan) = p {
                if let Some((relation, windowing)) = windowed_relation(&scan.source) {
                    windows.push(format!("{}:{windowing:?}", relation.def.id));
                }
            }
            Ok(TreeNodeRecursion::Continue)
        });
        SharedPlan(plan.clone(), windows)
    }
}

/// The table side of a lookup join ([`Builder::lookup_side`]).
struct LookupSide {
    relation: Arc<crate::catalog::Relation>,
    /// The table's column of each of the side's columns.
    columns: Vec<usize>,
    /// The table's columns the scan reads, in the scan's order.
    scan_columns: Vec<usize>,
    /// For each of the side's columns, its index among the scan's.
    output: Vec<usize>,
    /// Conditions on the scan's rows (pushed under the join), over `scan_schema`.
    filter: Option<Expr>,
    scan_schema: DFSchema,
}

/// View `view_id`'s stream plan for `plan`, without exchanges yet.
pub fn translate(
    plan: &LogicalPlan,
    state: &dyn Session,
    catalog: &Catalog,
    view_id: TableId,
    options: &ViewOptions,
) -> Result<StreamPlan> {
    let mut b = Builder {
        state,
        catalog,
        view_id,
        nodes: Vec::new(),
        inputs: Vec::new(),
        watermarks: Vec::new(),
        late_rows_schema: None,
        next_state_table: 0,
        options: options.clone(),
        windowed_aggregates: 0,
        assigners: 0,
        built: Default::default(),
        rank_limits: Default::default(),
        emitted_on_close: false,
    };
    let top = b.node(plan)?;
    let append_only = top.append_only;
    if options.emit_on_window_close && b.windowed_aggregates == 0 && !b.emitted_on_close {
        b.emit_on_window_close(plan, top.clone())?;
    }
    if b.emitted_on_close && !b.window_functions_on_top() {
        return Err(WeirError::unsupported(
            "EMIT ON WINDOW CLOSE with window functions emits the window functions' rows: a view whose rows do not all come from them (a UNION, an aggregate or a join above them) cannot say when its other rows close",
        ));
    }
    let watermark = match append_only {
        true => b.derived_watermark(plan, &top)?,
        false => None,
    };
    if (options.keep_late_rows || options.lateness > 0) && b.assigners == 0 {
        return Err(WeirError::unsupported(
            "ALLOW LATENESS and LATE ROWS TO need a window: read a table through TUMBLE(...) or HOP(...)",
        ));
    }
    Ok(StreamPlan {
        nodes: b.nodes,
        inputs: b.inputs,
        watermarks: b.watermarks,
        late_rows_schema: b.late_rows_schema,
        append_only,
        watermark,
    })
}

/// Where a partitioned operator (Top-N, window functions) wants its input and where its rows
/// are: a partition's rows in one shard (`exprs` over `input`, as `keys`); without partitions,
/// all rows in shard 0.
fn partitioned(
    exprs: &[Expr],
    keys: &[(Arc<dyn PhysicalExpr>, datafusion::arrow::datatypes::DataType)],
    input: &DFSchema,
) -> (Requirement, Distribution) {
    if exprs.is_empty() {
        return (Requirement::Single, Distribution::Single);
    }
    let columns = hash_of(exprs, input);
    let keys = keys.iter().map(|(e, _)| Arc::clone(e)).collect();
    (Requirement::hash(keys, columns.clone()), columns.map(Distribution::Hash).unwrap_or(Distribution::Any))
}

/// `schema` with every column nullable: what operators output (see [`Builder::schema`]).
fn nullable(schema: &DFSchema) -> SchemaRef {
    let fields: Vec<_> = schema.fields().iter().map(|f| f.as_ref().clone().with_nullable(true)).collect();
    Arc::new(datafusion::arrow::datatypes::Schema::new_with_metadata(fields, schema.metadata().clone()))
}

/// Physical expressions reading the columns at `indices` of `schema`.
fn columns(schema: &datafusion::arrow::datatypes::Schema, indices: &[usize]) -> Vec<Arc<dyn PhysicalExpr>> {
    indices
        .iter()
        .map(|&i| {
            Arc::new(datafusion::physical_expr::expressions::Column::new(schema.field(i).name(), i))
                as Arc<dyn PhysicalExpr>
        })
        .collect()
}

/// The input column `expr` is, if it is a plain column.
fn column_index(expr: &Expr, schema: &DFSchema) -> Option<usize> {
    match expr {
        Expr::Column(c) => schema.index_of_column(c).ok(),
        // A renamed column is the same values (`window_start AS starttime` is still a window).
        Expr::Alias(alias) => column_index(&alias.expr, schema),
        _ => None,
    }
}

/// The input columns `keys` are, when they are plain columns: rows hashed by exactly those
/// columns need not move to be grouped by `keys`.
fn hash_of(keys: &[Expr], schema: &DFSchema) -> Option<Vec<usize>> {
    keys.iter().map(|k| column_index(k, schema)).collect::<Option<Vec<_>>>()
}

/// Whether an aggregate's group expressions are in canonical order (by name), or cannot be
/// reordered (GROUPING SETS).
fn is_canonical(a: &Aggregate) -> bool {
    let names: Vec<String> = a.group_expr.iter().map(|e| e.schema_name().to_string()).collect();
    a.group_expr.iter().any(|e| matches!(e, Expr::GroupingSet(_))) || names.is_sorted()
}

/// `expr` without its alias.
fn unalias(expr: &Expr) -> &Expr {
    match expr {
        Expr::Alias(alias) => unalias(&alias.expr),
        e => e,
    }
}

/// If `filter` bounds the row number of a `row_number()` window below it (`rn <= N`, `rn < N`,
/// `rn = 1`, either way round, as one of its ANDed terms), the window's plan and the most rows
/// it keeps per partition. The filter itself stays: the bound only tells the window how many
/// rows it need keep.
fn rank_bound(filter: &datafusion::logical_expr::Filter) -> Option<(LogicalPlan, usize)> {
    use datafusion::logical_expr::utils::split_conjunction;
    use datafusion::logical_expr::{BinaryExpr, Operator as BinaryOp};
    // The column `expr` is (through casts), as an index of the filter's input.
    let column = |expr: &Expr| -> Option<usize> {
        let mut e = expr;
        while let Expr::Cast(c) = e {
            e = &c.expr;
        }
        column_index(e, filter.input.schema())
    };
    let value = |expr: &Expr| -> Option<i64> {
        match expr {
            Expr::Literal(v, _) => v.cast_to(&datafusion::arrow::datatypes::DataType::Int64).ok()?.try_into().ok(),
            _ => None,
        }
    };
    let bounds = split_conjunction(&filter.predicate).into_iter().filter_map(|term| {
        let Expr::BinaryExpr(BinaryExpr { left, op, right }) = term else { return None };
        // As `rn op N`.
        let (c, op, n) = match (column(left), value(right), column(right), value(left)) {
            (Some(c), Some(n), _, _) => (c, *op, n),
            (_, _, Some(c), Some(n)) => (c, op.swap()?, n),
            _ => return None,
        };
        let limit = match op {
            BinaryOp::LtEq => n,
            BinaryOp::Lt => n - 1,
            BinaryOp::Eq if n == 1 => 1,
            _ => return None,
        };
        Some((c, limit.max(0) as usize))
    });
    for (mut c, limit) in bounds {
        // Down to the window the column comes from, through renames.
        let mut plan = filter.input.as_ref();
        loop {
            match plan {
                LogicalPlan::SubqueryAlias(s) => plan = &s.input,
                LogicalPlan::Projection(p) => {
                    c = column_index(p.expr.get(c)?, p.input.schema())?;
                    plan = &p.input;
                }
                LogicalPlan::Window(w) => {
                    let first = w.input.schema().fields().len();
                    if c >= first
                        && matches!(unalias(w.window_expr.get(c - first)?), Expr::WindowFunction(f) if Ranking::from_name(f.fun.name()).is_some())
                    {
                        return Some((plan.clone(), limit));
                    }
                    break;
                }
                _ => break,
            }
        }
    }
    None
}

fn unsupported(what: &str) -> WeirError {
    WeirError::unsupported(format!("{what} is not supported in a materialized view yet"))
}

impl Builder<'_> {
    /// A new state table for an operator of this view (shared by its shards, whose keys differ).
    fn state_table(&mut self) -> Result<TableId> {
        let n = self.next_state_table;
        if n == RUNTIME_STATE_TABLE {
            return Err(unsupported("a view with this many stateful operators"));
        }
        self.next_state_table = n + 1;
        Ok(operator_state_table(self.view_id, n))
    }

    /// The view's state TTL for an operator keeping `indexes` indexes of idle keys (their
    /// tables new), or None without `WITH (state_ttl = ...)`.
    fn state_ttl(&mut self, indexes: usize) -> Result<Option<StateTtl>> {
        let Some(nanos) = self.options.state_ttl else { return Ok(None) };
        let tables = (0..indexes).map(|_| self.state_table()).collect::<Result<Vec<_>>>()?;
        Ok(Some(StateTtl { nanos, tables }))
    }

    /// `EMIT ON WINDOW CLOSE` without a windowed aggregate: a buffer on top, by a window
    /// column of the view's rows; without one, by a column that is an input's watermarked
    /// column as it is (`SELECT device, ts FROM events WHERE ... EMIT ON WINDOW CLOSE`: each row
    /// once the watermark passes its time, as RisingWave does).
    fn emit_on_window_close(&mut self, plan: &LogicalPlan, top: Out) -> Result<()> {
        let window = top.times.iter().enumerate().find_map(|(i, t)| t.map(|t| (i, t)));
        // Over a watermarked column itself, no window assigner judged which rows are late.
        let judges_lateness = window.is_none();
        let Some((column, time)) = window.or_else(|| self.watermarked_column(plan)) else {
            return Err(WeirError::unsupported(
                "EMIT ON WINDOW CLOSE needs a window or an event time: read from TUMBLE(...) or HOP(...) and GROUP BY (or select) window_start or window_end, or select the column a WATERMARK is declared for",
            ));
        };
        let table = self.state_table()?;
        let schema = Self::schema(plan);
        // Every row to shard 0 (the spec requires it).
        let spec = Spec::EowcBuffer { column, time, schema, table, judges_lateness };
        let props = Properties { distribution: Distribution::Single, ..top.props.clone() };
        self.add(spec, &[top.node], props);
        Ok(())
    }

    /// The watermark a view over this one may take from its (append-only) rows, so that windowed
    /// views can be stacked. A view of windows emitted on close (an `EMIT ON WINDOW CLOSE`
    /// aggregate, or buffer) emits them in close order, each epoch after the last: the largest
    /// window bound seen so far is a watermark of that column (a reader advances it at the
    /// view's barriers, `dataflow::job`). A view passing an input's watermarked column on
    /// unchanged keeps the input's watermark expression, over its own column.
    fn derived_watermark(&self, plan: &LogicalPlan, top: &Out) -> Result<Option<WatermarkDef>> {
        let schema = plan.schema();
        let quoted = |c: usize| format!("\"{}\"", schema.field(c).name().replace('"', "\"\""));
        // Down from the root through operators that keep rows as they are.
        let mut node = self.nodes.len() - 1;
        loop {
            match &self.nodes[node].spec {
                Spec::Project { .. } | Spec::Filter { .. } | Spec::Exchange(_) => node = self.nodes[node].inputs[0],
                Spec::EowcBuffer { column, .. } => {
                    return Ok(Some(WatermarkDef { column: *column, expr: quoted(*column) }));
                }
                Spec::Aggregate { config, .. } if config.window.is_some_and(|w| w.emit_on_close && w.lateness == 0) => {
                    return Ok(top
                        .times
                        .iter()
                        .position(Option::is_some)
                        .map(|c| WatermarkDef { column: c, expr: quoted(c) }));
                }
                _ => break,
            }
        }
        let Some((column, _)) = self.watermarked_column(plan) else { return Ok(None) };
        let Some(relation) = schema.qualified_field(column).0.and_then(|q| self.catalog.get(q.table())) else {
            return Ok(None);
        };
        let Some(declared) = &relation.def.watermark else { return Ok(None) };
        let source = DFSchema::try_from(relation.schema.as_ref().clone())?;
        let expr = datafusion::prelude::SessionContext::new().parse_sql_expr(&declared.expr, &source)?;
        // Over the view's column: an expression reading any other column is not carried over.
        let own = relation.schema.field(declared.column).name().clone();
        let mut other_columns = false;
        let renamed = expr
            .transform_up(|e| match e {
                Expr::Column(c) if c.name == own => Ok(Transformed::yes(Expr::Column(
                    datafusion::common::Column::from_name(schema.field(column).name()),
                ))),
                Expr::Column(c) => {
                    other_columns = true;
                    Ok(Transformed::no(Expr::Column(c)))
                }
                other => Ok(Transformed::no(other)),
            })?
            .data;
        if other_columns {
            return Ok(None);
        }
        let expr = datafusion::sql::unparser::expr_to_sql(&renamed)?.to_string();
        Ok(Some(WatermarkDef { column, expr }))
    }

    /// Keeps the rows of `child` (over `input`) for which `predicate` holds: a Filter for its
    /// conjuncts without `now()`, then a TemporalFilter for those comparing with it.
    fn filter(&mut self, child: Out, predicate: &Expr, input: &DFSchema) -> Result<Out> {
        let split = temporal_bounds::split(predicate, input)?;
        let mut out = child;
        if let Some(ordinary) = &split.ordinary {
            let predicate = self.physical(ordinary, input)?;
            out = self.add(Spec::Filter { predicate }, &[out.node], out.props.clone());
        }
        if split.bounds.is_empty() {
            return Ok(out);
        }
        let bounds = split
            .bounds
            .iter()
            .map(|b| Ok((self.physical(&b.value, input)?, b.offset, b.end)))
            .collect::<Result<Vec<_>>>()?;
        let text = split.bounds.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join(" AND ");
        let schema = nullable(input);
        let tables = (self.state_table()?, self.state_table()?);
        let spec = Spec::TemporalFilter { bounds, text, schema, tables };
        // Rows leave as time passes: retractions, held to the barrier.
        let props = Properties { append_only: false, prompt: false, ..out.props.clone() };
        Ok(self.add(spec, &[out.node], props))
    }

    /// Which output columns of `plan` are a relation's watermarked column, passed on unchanged
    /// (through aliases, projections and filters).
    fn watermarked_columns(&self, plan: &LogicalPlan) -> Vec<bool> {
        let width = plan.schema().fields().len();
        match plan {
            LogicalPlan::TableScan(scan) if windowed_relation(&scan.source).is_none() => {
                let Some(relation) = self.catalog.get(scan.table_name.table()) else { return vec![false; width] };
                let Some(watermark) = &relation.def.watermark else { return vec![false; width] };
                match &scan.projection {
                    Some(projection) => projection.iter().map(|&c| c == watermark.column).collect(),
                    None => (0..width).map(|c| c == watermark.column).collect(),
                }
            }
            LogicalPlan::SubqueryAlias(s) => self.watermarked_columns(&s.input),
            LogicalPlan::Filter(f) => self.watermarked_columns(&f.input),
            LogicalPlan::Projection(p) => {
                let inner = self.watermarked_columns(&p.input);
                p.expr.iter().map(|e| column_index(e, p.input.schema()).is_some_and(|c| inner[c])).collect()
            }
            _ => vec![false; width],
        }
    }

    /// The first output column of `plan` that is a relation's watermarked column, unchanged
    /// (its qualified name is that column's); its rows close at their own time.
    fn watermarked_column(&self, plan: &LogicalPlan) -> Option<(usize, TimeColumn)> {
        plan.schema()
            .iter()
            .position(|(qualifier, field)| {
                qualifier.and_then(|q| self.catalog.get(q.table())).is_some_and(|relation| {
                    relation
                        .def
                        .watermark
                        .as_ref()
                        .is_some_and(|w| relation.schema.field(w.column).name() == field.name())
                })
            })
            .map(|column| (column, TimeColumn { close_offset: 0 }))
    }

    /// Adds a node computing `spec` over the nodes `inputs`, its output as `props` says.
    fn add(&mut self, spec: Spec, inputs: &[usize], props: Properties) -> Out {
        self.nodes.push(PlanNode { spec, inputs: inputs.to_vec(), out: props.clone() });
        Out { node: self.nodes.len() - 1, props }
    }

    /// `expr` over rows of `input`, evaluated per row; `now()` has no value there (only a
    /// temporal filter compares with it, [`Builder::filter`]).
    fn physical(&self, expr: &Expr, input: &DFSchema) -> Result<Arc<dyn PhysicalExpr>> {
        if uses_now(expr) {
            return Err(temporal_bounds::refuse(expr));
        }
        let expr = fixed_intervals_as_durations(expr.clone(), input)?;
        Ok(self.state.create_physical_expr(expr, input)?)
    }

    /// The columns an operator computing `plan` outputs. Every column is nullable, whatever
    /// the planner derived from the inputs: an expression that fails for a row gives NULL
    /// there (`operators::eval`), and that row must not take the rest of its batch with it.
    fn schema(plan: &LogicalPlan) -> SchemaRef {
        nullable(plan.schema())
    }

    /// The leaf reading the columns `indices` of relation `relation` (as `schema`); records it
    /// as the view's next input, with its watermark.
    fn source(
        &mut self,
        relation: &Arc<crate::catalog::Relation>,
        indices: &[usize],
        schema: SchemaRef,
        props: Properties,
    ) -> Result<Out> {
        let source = relation.schema.clone();
        let exprs = columns(&source, indices);
        let leaf = self.add(Spec::Source { relation: Arc::clone(relation), exprs, schema }, &[], props);
        self.inputs.push(relation.def.id);
        let watermark = match &relation.def.watermark {
            Some(w) => {
                let schema = DFSchema::try_from(source.as_ref().clone())?;
                // Built-in functions only: a table's watermark does not depend on a session.
                let expr = datafusion::prelude::SessionContext::new().parse_sql_expr(&w.expr, &schema)?;
                Some(self.physical(&expr, &schema)?)
            }
            None => None,
        };
        self.watermarks.push(watermark);
        Ok(leaf)
    }

    /// `out` (rows of `input` columns) projected to the columns at `indices`, with where its
    /// rows are and its window columns following them.
    fn reproject(&mut self, out: Out, input: &SchemaRef, indices: &[usize], output: SchemaRef) -> Result<Out> {
        let distribution = out.distribution.through_projection(|c| indices.iter().position(|&i| i == c));
        let times = indices.iter().map(|&i| out.times[i]).collect();
        let props = Properties { distribution, times, append_only: out.append_only, prompt: out.prompt };
        Ok(self.add(Spec::Project { exprs: columns(input, indices), schema: output }, &[out.node], props))
    }

    /// Adds `plan`'s operators, or finds them built already for an equal subplan; returns its
    /// top node, where its rows are and its window columns.
    fn node(&mut self, plan: &LogicalPlan) -> Result<Out> {
        let mut shared = SharedPlan::of(plan);
        if let Some(limit) = self.rank_limits.get(plan) {
            // A Top-N built for a smaller bound would not serve a larger one.
            shared.1.push(format!("rank<={limit}"));
        }
        if let Some(out) = self.built.get(&shared) {
            return Ok(out.clone());
        }
        let out = self.new_node(plan)?;
        self.built.insert(shared, out.clone());
        Ok(out)
    }

    fn new_node(&mut self, plan: &LogicalPlan) -> Result<Out> {
        match plan {
            LogicalPlan::TableScan(scan) => {
                if scan.fetch.is_some() {
                    return Err(WeirError::unsupported(
                        "LIMIT in a materialized view needs ORDER BY: which rows it keeps must not depend on chance",
                    ));
                }
                let schema = Self::schema(plan);
                // A view's inputs enter shard 0, or, in a cluster, wherever a node reads them.
                let distribution = match self.options.cluster {
                    Some(_) => Distribution::Any,
                    None => Distribution::Single,
                };
                let read_as = |relation: &crate::catalog::Relation, columns: usize| Properties {
                    distribution: distribution.clone(),
                    times: vec![None; columns],
                    append_only: relation.def.append_only,
                    prompt: true,
                };
                let out = match windowed_relation(&scan.source) {
                    Some((relation, windowing)) => {
                        // Into the window go the columns the query reads and those the windows
                        // are computed from, or every column when late rows are kept (a
                        // LATE ROWS TO table has them all); then the scan's projection. HOP
                        // copies each row once per window, so unread columns would be copied
                        // for nothing.
                        let n = relation.schema.fields().len();
                        let read: Vec<usize> = match (&scan.projection, self.options.keep_late_rows) {
                            (Some(projection), false) => {
                                let mut read: Vec<usize> = projection.iter().copied().filter(|&c| c < n).collect();
                                read.extend(windowing.columns());
                                read.sort_unstable();
                                read.dedup();
                                read
                            }
                            _ => (0..n).collect(),
                        };
                        let input = Arc::new(relation.schema.project(&read)?);
                        let leaf = self.source(&relation, &read, Arc::clone(&input), read_as(&relation, read.len()))?;
                        // Windows close by the watermark only over the column it is declared for.
                        let by_watermark =
                            relation.def.watermark.as_ref().is_some_and(|w| w.column == windowing.time_column());
                        let (assigned, full) =
                            self.window_assign(leaf, &input, windowing.narrowed(&read), by_watermark)?;
                        // The scan's projection, over the narrowed input and the two window columns.
                        let at = |c: usize| {
                            if c < n {
                                read.iter().position(|&r| r == c).expect("read")
                            } else {
                                c - n + read.len()
                            }
                        };
                        let n = read.len();
                        let indices: Vec<usize> = match &scan.projection {
                            Some(projection) => projection.iter().map(|&c| at(c)).collect(),
                            None => (0..n + 2).collect(),
                        };
                        if indices.len() != n + 2 || indices.iter().enumerate().any(|(i, &c)| i != c) {
                            self.reproject(assigned, &full, &indices, Arc::clone(&schema))?
                        } else {
                            assigned
                        }
                    }
                    None => {
                        let name = scan.table_name.table();
                        let relation = self.catalog.get(name).ok_or_else(|| WeirError::undefined_table(name))?;
                        if self.options.lookups.contains(&relation.def.id) {
                            return Err(WeirError::unsupported(format!(
                                "a table read FOR SYSTEM_TIME AS OF PROCTIME() must be a side of a join \
                                 (\"{name}\" is read another way here)"
                            )));
                        }
                        let indices: Vec<usize> =
                            scan.projection.clone().unwrap_or_else(|| (0..relation.schema.fields().len()).collect());
                        self.source(&relation, &indices, Arc::clone(&schema), read_as(&relation, indices.len()))?
                    }
                };
                match scan.filters.iter().cloned().reduce(|a, b| a.and(b)) {
                    Some(predicate) => self.filter(out, &predicate, scan.projected_schema.as_ref()),
                    None => Ok(out),
                }
            }
            LogicalPlan::Projection(p) => {
                let child = self.node(&p.input)?;
                let exprs = p.expr.iter().map(|e| self.physical(e, p.input.schema())).collect::<Result<Vec<_>>>()?;
                // Where a column moves to, if it is passed on unchanged.
                let moved = |c: usize| p.expr.iter().position(|e| column_index(e, p.input.schema()) == Some(c));
                let distribution = child.distribution.through_projection(moved);
                let times =
                    p.expr.iter().map(|e| column_index(e, p.input.schema()).and_then(|c| child.times[c])).collect();
                let props = Properties { distribution, times, append_only: child.append_only, prompt: child.prompt };
                Ok(self.add(Spec::Project { exprs, schema: Self::schema(plan) }, &[child.node], props))
            }
            LogicalPlan::Filter(f) => {
                // A bound on a row number holds for the window below while this filter's input
                // is built, and only then: another reader of the same window is not bounded.
                let bound = rank_bound(f);
                let outer = bound.as_ref().and_then(|(window, limit)| self.rank_limits.insert(window.clone(), *limit));
                let child = self.node(&f.input);
                if let Some((window, _)) = bound {
                    match outer {
                        Some(limit) => self.rank_limits.insert(window, limit),
                        None => self.rank_limits.remove(&window),
                    };
                }
                self.filter(child?, &f.predicate, f.input.schema())
            }
            LogicalPlan::Aggregate(a) if !is_canonical(a) => {
                // The same aggregate with its groups in a canonical order, so that two that
                // differ only in group order are one (q5 groups by window and auction twice),
                // then its columns in this one's order.
                let mut groups = a.group_expr.clone();
                groups.sort_by_cached_key(|e| e.schema_name().to_string());
                let canonical = Aggregate::try_new(Arc::clone(&a.input), groups.clone(), a.aggr_expr.clone())?;
                let canonical_schema = Self::schema(&LogicalPlan::Aggregate(canonical.clone()));
                let out = self.node(&LogicalPlan::Aggregate(canonical))?;
                let indices: Vec<usize> = a
                    .group_expr
                    .iter()
                    .map(|e| groups.iter().position(|g| g == e).expect("a group"))
                    .chain(groups.len()..groups.len() + a.aggr_expr.len())
                    .collect();
                self.reproject(out, &canonical_schema, &indices, Self::schema(plan))
            }
            LogicalPlan::Aggregate(a) if distinct_on_form(a).is_some() => self.distinct_on(plan, a),
            LogicalPlan::Aggregate(a) if matches!(a.group_expr.as_slice(), [Expr::GroupingSet(_)]) => {
                self.grouping_sets(a)
            }
            LogicalPlan::Aggregate(a) => {
                let child = self.node(&a.input)?;
                let group_types =
                    a.group_expr.iter().map(|e| Ok(e.get_type(a.input.schema())?)).collect::<Result<Vec<_>>>()?;
                let group_by = a
                    .group_expr
                    .iter()
                    .map(|e| {
                        if matches!(e, Expr::GroupingSet(_)) {
                            return Err(unsupported("GROUPING SETS"));
                        }
                        self.physical(e, a.input.schema())
                    })
                    .collect::<Result<Vec<_>>>()?;
                let mut aggs = Vec::new();
                for (i, expr) in a.aggr_expr.iter().enumerate() {
                    let output_type = a.schema.field(a.group_expr.len() + i).data_type().clone();
                    let inner = unalias(expr);
                    let Expr::AggregateFunction(f) = inner else {
                        return Err(unsupported(&format!("aggregate {expr}")));
                    };
                    aggs.push(self.agg_spec(f, a.input.schema(), output_type)?);
                }
                // Grouped by a window bound: a windowed aggregate.
                let group_times: Vec<Option<TimeColumn>> = a
                    .group_expr
                    .iter()
                    .map(|e| column_index(e, a.input.schema()).and_then(|c| child.times[c]))
                    .collect();
                let window = group_times.iter().enumerate().find_map(|(i, t)| {
                    t.map(|column| AggWindow {
                        group_index: i,
                        column,
                        lateness: self.options.lateness,
                        emit_on_close: self.options.emit_on_window_close,
                    })
                });
                if window.is_some() {
                    self.windowed_aggregates += 1;
                }
                // Not under a state TTL: a partial forgotten alone would leave its group part-counted.
                let two_phase = self.options.two_phase_aggregation && self.options.state_ttl.is_none();
                if window.is_none() && !a.group_expr.is_empty() && two_phase {
                    if let Some(out) = self.two_phase(plan, a, &child, &group_by, &group_types, &aggs)? {
                        return Ok(out);
                    }
                }
                let tables = (self.state_table()?, self.state_table()?);
                let groups = a.group_expr.len();
                // A group's rows meet in one shard; a global aggregate's in shard 0.
                let (input, distribution) = if groups == 0 {
                    (Requirement::Single, Distribution::Single)
                } else {
                    let columns = hash_of(&a.group_expr, a.input.schema());
                    (Requirement::hash(group_by.clone(), columns), Distribution::Hash((0..groups).collect()))
                };
                let config = HashAggConfig {
                    window,
                    append_only_input: child.append_only,
                    prompt_input: child.prompt,
                    state_format: self.options.state_format,
                    ..HashAggConfig::new(group_by, group_types, aggs, Self::schema(plan))
                };
                let mut times = group_times;
                times.resize(a.schema.fields().len(), None);
                // Each group is emitted once, when its window closes, and never corrected.
                let append_only = child.append_only && window.is_some_and(|w| w.emit_on_close && w.lateness == 0);
                let props = Properties { distribution, times, append_only, prompt: false };
                // Windowed groups end with the watermark; the one group of a global aggregate
                // is no unbounded state.
                let ttl = match window.is_none() && groups > 0 {
                    true => self.state_ttl(1)?,
                    false => None,
                };
                Ok(self.add(Spec::Aggregate { config, tables, input, ttl }, &[child.node], props))
            }
            LogicalPlan::Distinct(Distinct::All(input)) => {
                let child = self.node(input)?;
                let all: Vec<usize> = (0..input.schema().fields().len()).collect();
                let keys = columns(input.schema().as_arrow(), &all);
                let types: Vec<_> = input.schema().fields().iter().map(|f| f.data_type().clone()).collect();
                let tables = (self.state_table()?, self.state_table()?);
                let config = HashAggConfig {
                    state_format: self.options.state_format,
                    ..HashAggConfig::new(keys.clone(), types, vec![], Self::schema(plan))
                };
                let input = Requirement::hash(keys, Some(all.clone()));
                let props = Properties {
                    distribution: Distribution::Hash(all),
                    times: child.times.clone(),
                    append_only: false,
                    prompt: false,
                };
                let ttl = self.state_ttl(1)?;
                Ok(self.add(Spec::Aggregate { config, tables, input, ttl }, &[child.node], props))
            }
            LogicalPlan::Join(j) => {
                if let Some(out) = self.lookup_join(j)? {
                    return Ok(out);
                }
                if j.null_aware {
                    return self.not_in(j);
                }
                // Refused here, in plan order, rather than when the operators are made.
                shape(j.join_type)?;
                let left = self.node(&j.left)?;
                let right = self.node(&j.right)?;
                // Without an equality every row meets every row of the other side: one constant
                // key, in one shard (a scalar subquery's one row, a condition like `a.x < b.y`).
                let constant = j.on.is_empty();
                let on = match constant {
                    true => vec![(lit(true), lit(true))],
                    false => j.on.clone(),
                };
                let left_on: Vec<Expr> = on.iter().map(|(l, _)| l.clone()).collect();
                let right_on: Vec<Expr> = on.iter().map(|(_, r)| r.clone()).collect();
                let (left_columns, right_columns) =
                    (hash_of(&left_on, j.left.schema()), hash_of(&right_on, j.right.schema()));
                // Inner and left semi or anti join rows are where their left key put them; outer
                // joins pad keys with NULL.
                let output = match (&left_columns, j.join_type) {
                    _ if constant => Distribution::Single,
                    (Some(columns), JoinType::Inner | JoinType::LeftSemi | JoinType::LeftAnti) => {
                        Distribution::Hash(columns.clone())
                    }
                    _ => Distribution::Any,
                };
                let left_keys =
                    on.iter().map(|(l, _)| self.physical(l, j.left.schema())).collect::<Result<Vec<_>>>()?;
                let right_keys =
                    on.iter().map(|(_, r)| self.physical(r, j.right.schema())).collect::<Result<Vec<_>>>()?;
                // Comparisons with now() in an inner join's condition filter its output instead.
                let (condition, temporal) = match (&j.filter, j.join_type) {
                    (Some(f), JoinType::Inner) if uses_now(f) => {
                        let split = temporal_bounds::split(f, &j.schema)?;
                        let temporal = datafusion::logical_expr::utils::split_conjunction(f)
                            .into_iter()
                            .filter(|c| uses_now(c))
                            .cloned()
                            .reduce(Expr::and);
                        (split.ordinary, temporal)
                    }
                    (f, _) => (f.clone(), None),
                };
                // The residual reads a pair of rows, left then right, whatever the join outputs.
                let pair = j.left.schema().join(j.right.schema())?;
                let residual = condition.as_ref().map(|f| self.physical(f, &pair)).transpose()?;
                // Joined on a window bound of both sides: state is freed as windows become final.
                let window = j.on.iter().enumerate().find_map(|(i, (l, r))| {
                    let l = column_index(l, j.left.schema()).and_then(|c| left.times[c])?;
                    let r = column_index(r, j.right.schema()).and_then(|c| right.times[c])?;
                    Some(JoinWindow {
                        key_index: i,
                        column: TimeColumn { close_offset: l.close_offset.max(r.close_offset) },
                    })
                });
                // A residual bound on the sides' times: rows no future partner can meet are freed.
                // A residual bound on the sides' times frees rows no future partner can meet: with a
                // window bound on the other side (its late rows are gone already), or a watermarked
                // column of an append-only side, whose rows behind the watermark the join then
                // judges late (views of state format 3 on).
                let mut late_sides = [false, false];
                let interval = match (&condition, j.join_type) {
                    (Some(filter), JoinType::Inner) => {
                        let raw = |plan: &LogicalPlan, out: &Out| -> Vec<bool> {
                            let judged =
                                out.append_only && self.options.state_format >= StateFormat::RAW_INTERVALS_EXPIRE;
                            self.watermarked_columns(plan).into_iter().map(|w| w && judged).collect()
                        };
                        let raw_columns: Vec<bool> =
                            raw(&j.left, &left).into_iter().chain(raw(&j.right, &right)).collect();
                        let times: Vec<Option<TimeColumn>> = left
                            .times
                            .iter()
                            .chain(&right.times)
                            .zip(&raw_columns)
                            .map(|(t, raw)| t.or(raw.then_some(TimeColumn { close_offset: 0 })))
                            .collect();
                        let left_width = j.left.schema().fields().len();
                        let interval = join_interval(filter, &j.schema, left_width, &times);
                        if let Some(interval) = &interval {
                            let all_times: Vec<&Option<TimeColumn>> = left.times.iter().chain(&right.times).collect();
                            late_sides = [0, 1].map(|side| {
                                let column = interval.columns[side] + side * left_width;
                                all_times[column].is_none() && raw_columns[column]
                            });
                        }
                        interval
                    }
                    _ => None,
                };
                let tables = (self.state_table()?, self.state_table()?);
                // Keys joined on a window bound end with the watermark.
                let ttl = match window {
                    None => self.state_ttl(2)?,
                    Some(_) => None,
                };
                // A side whose keys may be forgotten retracts their rows then: neither side
                // keeps rows as an append-only one does, nor is the output append-only.
                let (left_append_only, right_append_only) =
                    (left.append_only && ttl.is_none(), right.append_only && ttl.is_none());
                let config = HashJoinConfig {
                    residual,
                    late_sides,
                    nulls_match: j.null_equality == NullEquality::NullEqualsNull,
                    append_only_inputs: [left_append_only, right_append_only],
                    window,
                    interval,
                    lateness: self.options.lateness,
                    ..HashJoinConfig::new(
                        j.join_type,
                        (Self::schema(&j.left), left_keys.clone()),
                        (Self::schema(&j.right), right_keys.clone()),
                        Self::schema(plan),
                    )
                };
                // A key's rows of either side meet in one shard.
                let (left_input, right_input) = match constant {
                    true => (Requirement::Single, Requirement::Single),
                    false => (Requirement::hash(left_keys, left_columns), Requirement::hash(right_keys, right_columns)),
                };
                // Semi and anti joins output one side only.
                let times = match j.join_type {
                    JoinType::Inner | JoinType::Left | JoinType::Right | JoinType::Full => {
                        left.times.iter().chain(&right.times).copied().collect()
                    }
                    _ => vec![None; j.schema.fields().len()],
                };
                // An inner join of rows that are never retracted never retracts a match.
                let append_only = left_append_only && right_append_only && j.join_type == JoinType::Inner;
                // A new row on either side may match the other side's rows of a final window.
                let props = Properties { distribution: output, times, append_only, prompt: false };
                let spec = Spec::Join { config, tables, left: left_input, right: right_input, ttl };
                let out = self.add(spec, &[left.node, right.node], props);
                match temporal {
                    Some(temporal) => self.filter(out, &temporal, &j.schema),
                    None => Ok(out),
                }
            }
            LogicalPlan::Union(u) => {
                let children = u.inputs.iter().map(|i| self.node(i)).collect::<Result<Vec<_>>>()?;
                let output = if children.iter().all(|c| c.distribution == Distribution::Single) {
                    Distribution::Single
                } else {
                    Distribution::Any
                };
                // A column is a window bound only if it is the same one in every input.
                let times = (0..u.schema.fields().len())
                    .map(|i| {
                        let first = children[0].times.get(i).copied().flatten();
                        children.iter().all(|c| c.times.get(i).copied().flatten() == first).then_some(first).flatten()
                    })
                    .collect();
                let nodes: Vec<usize> = children.iter().map(|c| c.node).collect();
                let append_only = children.iter().all(|c| c.append_only);
                let prompt = children.iter().all(|c| c.prompt);
                let spec = Spec::Union { schema: Self::schema(plan), inputs: nodes.len() };
                Ok(self.add(spec, &nodes, Properties { distribution: output, times, append_only, prompt }))
            }
            LogicalPlan::Window(w) => self.top_n(plan, w),
            LogicalPlan::Unnest(u) => {
                if !u.struct_type_columns.is_empty() || u.list_type_columns.iter().any(|(_, l)| l.depth != 1) {
                    return Err(unsupported("unnest of structs or of nested lists more than one level"));
                }
                let child = self.node(&u.input)?;
                let schema = Self::schema(plan);
                let columns: Vec<(usize, bool)> = u
                    .dependency_indices
                    .iter()
                    .enumerate()
                    .map(|(o, &c)| {
                        let name = u.schema.field(o).name();
                        let list = u.list_type_columns.iter().any(|(i, l)| *i == c && &l.output_column.name == name);
                        (c, list)
                    })
                    .collect();
                // A column passed on keeps where its rows are and whether it bounds a window.
                let moved = |c: usize| columns.iter().position(|&(i, list)| i == c && !list);
                let distribution = child.distribution.through_projection(moved);
                let times = columns.iter().map(|&(c, list)| if list { None } else { child.times[c] }).collect();
                let props = Properties { distribution, times, append_only: child.append_only, prompt: child.prompt };
                let config = UnnestConfig { columns, null_handling: u.options.null_handling, schema };
                Ok(self.add(Spec::Unnest(config), &[child.node], props))
            }
            LogicalPlan::Values(v) => {
                let rows = v.values.iter().map(|row| row.as_slice()).collect::<Vec<_>>();
                self.constant(plan, &rows, v.values.len())
            }
            LogicalPlan::EmptyRelation(e) => self.constant(plan, &[], e.produce_one_row as usize),
            LogicalPlan::SubqueryAlias(s) => self.node(&s.input),
            LogicalPlan::Sort(s) if s.fetch.is_none() => self.node(&s.input),
            // ORDER BY ... LIMIT n: a Top-N over all rows.
            LogicalPlan::Sort(s) => self.limit(plan, &s.expr, &s.input, 0, s.fetch.unwrap_or(0)),
            LogicalPlan::Limit(l) => {
                use datafusion::logical_expr::{FetchType, SkipType};
                let skip = match l.get_skip_type()? {
                    SkipType::Literal(n) => n,
                    SkipType::UnsupportedExpr => return Err(unsupported("an OFFSET that is not a constant")),
                };
                let fetch = match l.get_fetch_type()? {
                    FetchType::Literal(Some(n)) => n,
                    FetchType::Literal(None) => return Err(unsupported("OFFSET without LIMIT")),
                    FetchType::UnsupportedExpr => return Err(unsupported("a LIMIT that is not a constant")),
                };
                match l.input.as_ref() {
                    // A fetch the optimizer pushed into the sort bounds the rows too.
                    LogicalPlan::Sort(s) => {
                        let fetch = s.fetch.map_or(fetch, |f| fetch.min(f.saturating_sub(skip)));
                        self.limit(plan, &s.expr, &s.input, skip, fetch)
                    }
                    _ => Err(WeirError::unsupported(
                        "LIMIT in a materialized view needs ORDER BY: which rows it keeps must not depend on chance",
                    )),
                }
            }
            other => Err(unsupported(other.display().to_string().split(':').next().unwrap_or("this plan"))),
        }
    }

    /// A leaf of `count` rows the query gives itself: `rows` (one expression per column, no
    /// column reads anything), or as many rows of no column (`SELECT 1` reads one such row).
    fn constant(&mut self, plan: &LogicalPlan, rows: &[&[Expr]], count: usize) -> Result<Out> {
        use datafusion::arrow::array::{RecordBatch, RecordBatchOptions};
        let schema = Self::schema(plan);
        let one = RecordBatch::try_new_with_options(
            Arc::new(datafusion::arrow::datatypes::Schema::empty()),
            vec![],
            &RecordBatchOptions::new().with_row_count(Some(1)),
        )?;
        let no_columns = DFSchema::empty();
        let mut columns = Vec::with_capacity(schema.fields().len());
        for (c, field) in schema.fields().iter().enumerate() {
            let values = rows
                .iter()
                .map(|row| {
                    let expr = self.physical(&row[c], &no_columns)?;
                    let value = expr.evaluate(&one)?.into_array(1)?;
                    Ok(ScalarValue::try_from_array(&value, 0)?.cast_to(field.data_type())?)
                })
                .collect::<Result<Vec<_>>>()?;
            columns.push(match values.is_empty() {
                true => datafusion::arrow::array::new_empty_array(field.data_type()),
                false => ScalarValue::iter_to_array(values)?,
            });
        }
        let options = RecordBatchOptions::new().with_row_count(Some(count));
        let rows = RecordBatch::try_new_with_options(Arc::clone(&schema), columns, &options)?;
        let props = Properties {
            distribution: Distribution::Single,
            times: vec![None; schema.fields().len()],
            append_only: true,
            prompt: true,
        };
        Ok(self.add(Spec::Constant { rows }, &[], props))
    }

    /// A grouped aggregate in two phases (`WITH (two_phase_aggregation = true)`, for hot keys):
    /// the rows spread over the shards by a hash of all their columns (so a row's delete meets
    /// its insert), each shard aggregating its share per group (partial, the shard's number its
    /// last group key), then the partial rows of a group meeting in one shard, merged (final:
    /// counts and sums summed, extremes and booleans and bits taken again). A hot group's rows
    /// are then counted on every shard, and its one shard takes a partial row per shard and
    /// epoch instead of every row. None when an aggregate has no such merge (avg,
    /// count(DISTINCT), string_agg, ...): the plain plan then.
    fn two_phase(
        &mut self,
        plan: &LogicalPlan,
        a: &Aggregate,
        child: &Out,
        group_by: &[Arc<dyn PhysicalExpr>],
        group_types: &[datafusion::arrow::datatypes::DataType],
        aggs: &[AggSpec],
    ) -> Result<Option<Out>> {
        use datafusion::arrow::datatypes::{Field, Schema};
        let mut partial = Vec::with_capacity(aggs.len());
        let mut merges = Vec::with_capacity(aggs.len());
        for spec in aggs {
            let merge = match spec.kind {
                AggKind::CountRows | AggKind::Count | AggKind::Sum => AggKind::Sum,
                AggKind::Min | AggKind::Max | AggKind::BoolAnd | AggKind::BoolOr => spec.kind,
                AggKind::BitAnd | AggKind::BitOr | AggKind::BitXor => spec.kind,
                _ => return Ok(None),
            };
            partial.push(spec.clone());
            merges.push(merge);
        }
        let groups = group_by.len();
        // Partial: the rows spread by all their columns, grouped by the group keys and the
        // shard (added by each shard's operator), so a hot group's rows are counted in every
        // shard, each (group, shard) in its own. Views of an earlier state format group by the
        // group keys and a bucket of the row instead (their state is kept so).
        let width = a.input.schema().fields().len();
        let all: Vec<usize> = (0..width).collect();
        let by_shard = self.options.state_format >= StateFormat::PARTIALS_PER_SHARD;
        let (partial_keys, spread, distribution) = match by_shard {
            true => {
                let spread = Requirement::hash(columns(a.input.schema().as_arrow(), &all), Some(all));
                (group_by.to_vec(), spread, Distribution::Any)
            }
            false => {
                let bucket = super::spread::SpreadBucket::new(columns(a.input.schema().as_arrow(), &all));
                let keys: Vec<_> = group_by.iter().cloned().chain([bucket]).collect();
                (keys.clone(), Requirement::hash(keys, None), Distribution::Hash((0..=groups).collect()))
            }
        };
        let mut partial_types = group_types.to_vec();
        partial_types.push(datafusion::arrow::datatypes::DataType::UInt64);
        let mut fields: Vec<Field> =
            partial_types.iter().enumerate().map(|(i, t)| Field::new(format!("group_{i}"), t.clone(), true)).collect();
        fields.extend(
            aggs.iter().enumerate().map(|(i, s)| Field::new(format!("partial_{i}"), s.output_type.clone(), true)),
        );
        let partial_schema = Arc::new(Schema::new(fields));
        let config = HashAggConfig {
            append_only_input: child.append_only,
            prompt_input: child.prompt,
            state_format: self.options.state_format,
            shard_key: by_shard,
            ..HashAggConfig::new(partial_keys, partial_types, partial, Arc::clone(&partial_schema))
        };
        let tables = (self.state_table()?, self.state_table()?);
        let props = Properties {
            distribution,
            times: vec![None; partial_schema.fields().len()],
            append_only: false,
            prompt: false,
        };
        let ttl = self.state_ttl(1)?;
        let partial_out = self.add(Spec::Aggregate { config, tables, input: spread, ttl }, &[child.node], props);
        // Final: a group's partial rows in one shard.
        let keys: Vec<usize> = (0..groups).collect();
        let final_aggs = aggs
            .iter()
            .zip(merges)
            .enumerate()
            .map(|(i, (spec, kind))| AggSpec {
                kind,
                arg: Some(columns(&partial_schema, &[groups + 1 + i]).remove(0)),
                arg_type: Some(spec.output_type.clone()),
                output_type: spec.output_type.clone(),
                delimiter: None,
                order_by: vec![],
            })
            .collect();
        let group_keys = columns(&partial_schema, &keys);
        let config = HashAggConfig {
            state_format: self.options.state_format,
            ..HashAggConfig::new(group_keys.clone(), group_types.to_vec(), final_aggs, Self::schema(plan))
        };
        let tables = (self.state_table()?, self.state_table()?);
        let input = Requirement::hash(group_keys, Some(keys.clone()));
        let props = Properties {
            distribution: Distribution::Hash(keys),
            times: vec![None; a.schema.fields().len()],
            append_only: false,
            prompt: false,
        };
        let ttl = self.state_ttl(1)?;
        Ok(Some(self.add(Spec::Aggregate { config, tables, input, ttl }, &[partial_out.node], props)))
    }

    /// What aggregate call `f` over rows of `input` computes, as Weir keeps it.
    fn agg_spec(
        &self,
        f: &datafusion::logical_expr::expr::AggregateFunction,
        input: &DFSchema,
        output_type: datafusion::arrow::datatypes::DataType,
    ) -> Result<AggSpec> {
        let params = &f.params;
        let name = f.func.name();
        let distinct = if params.distinct { "DISTINCT " } else { "" };
        let refused = || unsupported(&format!("the aggregate {name}({distinct}...)"));
        let mut args = params.args.clone();
        let kind = match name {
            // `count(DISTINCT a, b)`: distinct rows of (a, b) with no NULL in them.
            "count" if params.distinct && args.len() > 1 => {
                let all_there = args.iter().map(|a| a.clone().is_not_null()).reduce(Expr::and).expect("two args");
                let row = datafusion::functions::core::expr_fn::r#struct(args.clone());
                args = vec![datafusion::logical_expr::when(all_there, row).end()?];
                AggKind::CountDistinct
            }
            // `percentile_cont(f) WITHIN GROUP (ORDER BY x)`: DataFusion passes (x, f).
            "percentile_cont" if !params.distinct => {
                AggKind::PercentileCont(constant_fraction(args.get(1), name).ok_or_else(refused)??.to_bits())
            }
            "percentile_disc" if !params.distinct => {
                let fraction = constant_fraction(args.get(1), name).ok_or_else(refused)??;
                if !(0.0..=1.0).contains(&fraction) {
                    return Err(WeirError::new(
                        crate::error::SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
                        format!("percentile value {fraction} is not between 0 and 1"),
                    ));
                }
                AggKind::PercentileDisc(fraction.to_bits())
            }
            "mode" if !params.distinct => AggKind::Mode,
            _ => AggKind::from_name(name, !args.is_empty(), params.distinct).ok_or_else(refused)?,
        };
        if params.null_treatment == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls) {
            return Err(unsupported(&format!("{name}(...) IGNORE NULLS")));
        }
        // ORDER BY: by the value ascending is the order Weir keeps values in (NULLs last, where
        // array_agg keeps them); string_agg, array_agg, first_value and last_value keep theirs
        // under any other ORDER BY keys.
        let by_value = |order: &datafusion::logical_expr::SortExpr| order.asc && args.first() == Some(&order.expr);
        let order_by = match (kind, params.order_by.as_slice()) {
            (AggKind::FirstValue | AggKind::LastValue, []) => {
                return Err(unsupported(&format!("{name}(...) without ORDER BY (which row is first?)")))
            }
            (_, []) => vec![],
            (AggKind::StringAgg, [order]) if by_value(order) => vec![],
            (AggKind::ArrayAgg, [order]) if by_value(order) && !order.nulls_first => vec![],
            (AggKind::PercentileCont(_) | AggKind::PercentileDisc(_) | AggKind::Mode, [order]) if order.asc => vec![],
            (AggKind::StringAgg | AggKind::ArrayAgg | AggKind::FirstValue | AggKind::LastValue, orders) => {
                self.order_keys(orders, input)?
            }
            _ => {
                return Err(unsupported(&format!(
                    "ORDER BY inside {name}(...) (it is for string_agg, array_agg, first_value, last_value, and ascending for percentile_cont, percentile_disc and mode)"
                )))
            }
        };
        // `agg(x) FILTER (WHERE c)` is `agg(CASE WHEN c THEN x END)`: every aggregate Weir keeps
        // but array_agg skips NULL values, and `count(*)` counts `CASE WHEN c THEN 1 END`.
        let (kind, value) = match &params.filter {
            None => (kind, args.first().cloned()),
            Some(_) if kind.keeps_nulls() => return Err(unsupported(&format!("{name}(...) with FILTER"))),
            Some(condition) => {
                let value = args.first().cloned().unwrap_or(lit(1i64));
                let kind = if kind == AggKind::CountRows { AggKind::Count } else { kind };
                (kind, Some(datafusion::logical_expr::when(condition.as_ref().clone(), value).end()?))
            }
        };
        let arg = value.as_ref().map(|e| self.physical(e, input)).transpose()?;
        let arg_type = value.as_ref().map(|e| e.get_type(input)).transpose()?;
        let delimiter = match (kind, args.get(1)) {
            (AggKind::StringAgg, Some(Expr::Literal(v, _))) => Some(v.to_string()),
            (AggKind::StringAgg, _) => return Err(unsupported("string_agg with a delimiter that is not a constant")),
            _ => None,
        };
        Ok(AggSpec { kind, arg, arg_type, output_type, delimiter, order_by })
    }

    /// `GROUP BY GROUPING SETS (...)`, `ROLLUP (...)` or `CUBE (...)`: one aggregate per
    /// grouping set, each projected to the whole aggregate's columns (NULL for an expression
    /// the set does not group by, and the set's `__grouping_id`, which `grouping()` reads), all
    /// in one union. Each set's groups are kept as a plain GROUP BY's are.
    fn grouping_sets(&mut self, a: &Aggregate) -> Result<Out> {
        use datafusion::logical_expr::{GroupingSet, Projection, Union};
        let [Expr::GroupingSet(grouping)] = a.group_expr.as_slice() else {
            return Err(WeirError::internal("grouping sets without a grouping set"));
        };
        let distinct: Vec<Expr> = grouping.distinct_expr().into_iter().cloned().collect();
        let sets: Vec<Vec<Expr>> = match grouping {
            GroupingSet::Rollup(exprs) => (0..=exprs.len()).map(|n| exprs[..n].to_vec()).collect(),
            GroupingSet::Cube(exprs) => (0..1u64 << exprs.len())
                .map(|mask| {
                    exprs.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, e)| e.clone()).collect()
                })
                .collect(),
            GroupingSet::GroupingSets(sets) => sets.clone(),
        };
        let n = distinct.len();
        let id_field = a.schema.field(n);
        let mut seen: Vec<u64> = Vec::new();
        let mut branches = Vec::with_capacity(sets.len());
        for set in sets {
            // The id: a bit per expression the set leaves NULL (the first the highest), and
            // above them how many equal sets came before.
            let mask = distinct
                .iter()
                .enumerate()
                .filter(|(_, e)| !set.contains(e))
                .fold(0u64, |mask, (i, _)| mask | 1 << (n - 1 - i));
            let ordinal = seen.iter().filter(|&&m| m == mask).count() as u64;
            seen.push(mask);
            let id = ScalarValue::UInt64(Some(mask | ordinal << n)).cast_to(id_field.data_type())?;
            let branch = Aggregate::try_new(Arc::clone(&a.input), set.clone(), a.aggr_expr.clone())?;
            let columns = branch.schema.columns();
            let mut exprs = Vec::with_capacity(a.schema.fields().len());
            for (i, e) in distinct.iter().enumerate() {
                let name = a.schema.field(i).name();
                exprs.push(match set.iter().position(|s| s == e) {
                    Some(at) => Expr::Column(columns[at].clone()).alias(name),
                    None => lit(ScalarValue::try_from(a.schema.field(i).data_type())?).alias(name),
                });
            }
            exprs.push(lit(id).alias(id_field.name()));
            for (j, column) in columns[set.len()..].iter().enumerate() {
                exprs.push(Expr::Column(column.clone()).alias(a.schema.field(n + 1 + j).name()));
            }
            let projection = Projection::try_new(exprs, Arc::new(LogicalPlan::Aggregate(branch)))?;
            branches.push(Arc::new(LogicalPlan::Projection(projection)));
        }
        let union = Union { inputs: branches, schema: Arc::clone(&a.schema) };
        self.node(&LogicalPlan::Union(union))
    }

    /// `x NOT IN (SELECT y ...)`, DataFusion's null-aware anti join: no row at all once the
    /// subquery has a NULL `y`, and a row whose `x` is NULL only while the subquery has no rows.
    /// Built as an ordinary anti join, left-joined to one row of two flags about the subquery
    /// (`bool_or(y IS NULL)`, `bool_or(true)`: they change only when they flip) and filtered
    /// by them, then projected back to the left columns.
    fn not_in(&mut self, j: &datafusion::logical_expr::Join) -> Result<Out> {
        use datafusion::functions_aggregate::expr_fn::bool_or;
        use datafusion::logical_expr::{col, LogicalPlanBuilder};
        let [(left_key, right_key)] = j.on.as_slice() else {
            return Err(unsupported("NOT IN over several columns"));
        };
        let anti = datafusion::logical_expr::Join { null_aware: false, ..j.clone() };
        let (has_null, nonempty) = ("__weir_subquery_has_null", "__weir_subquery_has_rows");
        let flags = LogicalPlanBuilder::from(j.right.as_ref().clone())
            .aggregate(
                Vec::<Expr>::new(),
                vec![bool_or(right_key.clone().is_null()).alias(has_null), bool_or(lit(true)).alias(nonempty)],
            )?
            .build()?;
        // Both flags are NULL until the subquery's first row; `IS NOT TRUE` counts that as false.
        let keep = col(has_null).is_not_true().and(left_key.clone().is_not_null().or(col(nonempty).is_not_true()));
        let with_flags = datafusion::logical_expr::Join::try_new(
            Arc::new(LogicalPlan::Join(anti)),
            Arc::new(flags),
            vec![],
            None,
            JoinType::Left,
            datafusion::logical_expr::JoinConstraint::On,
            NullEquality::NullEqualsNothing,
            false,
        )?;
        let plan = LogicalPlanBuilder::from(LogicalPlan::Join(with_flags))
            .filter(keep)?
            .project(j.left.schema().columns().into_iter().map(Expr::Column))?
            .build()?;
        self.node(&plan)
    }

    /// A join one of whose sides reads a table `FOR SYSTEM_TIME AS OF PROCTIME()`: the other
    /// side's rows look their partner up by the table's primary key (`LookupJoin`); the table
    /// is not an input of the view. None for other joins.
    fn lookup_join(&mut self, j: &datafusion::logical_expr::Join) -> Result<Option<Out>> {
        let (left, right) = (self.lookup_side(&j.left)?, self.lookup_side(&j.right)?);
        let (table_on_left, side) = match (left, right) {
            (None, None) => return Ok(None),
            (Some(_), Some(_)) => {
                return Err(unsupported("a join of two tables both read FOR SYSTEM_TIME AS OF PROCTIME()"))
            }
            (Some(side), None) => (true, side),
            (None, Some(side)) => (false, side),
        };
        let kind = match (j.join_type, table_on_left) {
            (JoinType::Inner, table_on_left) => LookupKind::Inner { table_on_left },
            (JoinType::Left, false) => LookupKind::Left,
            _ => {
                return Err(unsupported(
                    "a join FOR SYSTEM_TIME AS OF PROCTIME() other than [INNER] JOIN or LEFT JOIN with the table on the right",
                ))
            }
        };
        let (stream_plan, table_plan) = if table_on_left { (&j.right, &j.left) } else { (&j.left, &j.right) };
        let table = &side.relation;
        let must = |what: String| {
            WeirError::unsupported(what).with_hint(format!(
                "join on every column of the primary key of \"{}\": ... JOIN {} FOR SYSTEM_TIME AS OF PROCTIME() AS d ON s.k = d.k",
                table.def.name, table.def.name
            ))
        };
        let key = &table.def.primary_key;
        if key.is_empty() {
            return Err(must(format!("\"{}\" has no primary key to look rows up by", table.def.name)));
        }
        let mut keys: Vec<Option<Arc<dyn PhysicalExpr>>> = vec![None; key.len()];
        // Equalities beyond one per key column are checked on the joined rows.
        let mut more = Vec::new();
        for (l, r) in &j.on {
            let (stream_expr, table_expr) = if table_on_left { (r, l) } else { (l, r) };
            // A key column widened to the stream's integer type is looked up by the stream's
            // value narrowed back (a value the column cannot hold matches no row).
            let table_expr = match table_expr {
                Expr::Cast(cast)
                    if cast.field.data_type().is_integer()
                        && cast.expr.get_type(table_plan.schema()).is_ok_and(|t| t.is_integer()) =>
                {
                    cast.expr.as_ref()
                }
                other => other,
            };
            let column = column_index(table_expr, table_plan.schema()).map(|c| side.columns[c]);
            match column.and_then(|c| key.iter().position(|&k| k == c)) {
                Some(position) if keys[position].is_none() => {
                    keys[position] = Some(self.physical(stream_expr, stream_plan.schema())?)
                }
                _ => more.push(l.clone().eq(r.clone())),
            }
        }
        let keys: Vec<Arc<dyn PhysicalExpr>> = match keys.into_iter().collect::<Option<Vec<_>>>() {
            Some(keys) => keys,
            None => return Err(must("the join condition does not pin every primary key column".into())),
        };
        if j.filter.as_ref().is_some_and(uses_now) {
            return Err(unsupported("now() in the condition of a join FOR SYSTEM_TIME AS OF PROCTIME()"));
        }
        let stream = self.node(stream_plan)?;
        if !stream.append_only {
            return Err(WeirError::unsupported(format!(
                "the rows joined with \"{}\" FOR SYSTEM_TIME AS OF PROCTIME() may be updated or deleted; \
                 a lookup join needs an append-only side",
                table.def.name
            ))
            .with_hint("Read an APPEND ONLY table or a source, or join the table without FOR SYSTEM_TIME AS OF."));
        }
        let residual = more.into_iter().chain(j.filter.clone()).reduce(Expr::and);
        let residual = residual.map(|f| self.physical(&f, &j.schema)).transpose()?;
        let table_filter = match side.filter {
            Some(f) => Some(self.physical(&f, &side.scan_schema)?),
            None => None,
        };
        let spec = Spec::LookupJoin {
            kind,
            keys,
            table: Arc::clone(table),
            columns: (side.scan_columns.clone(), side.output.clone()),
            table_filter,
            residual,
            schema: nullable(&j.schema),
        };
        let table_times = vec![None; side.output.len()];
        let times = if table_on_left {
            table_times.iter().chain(&stream.times).copied().collect()
        } else {
            stream.times.iter().chain(&table_times).copied().collect()
        };
        let width = if table_on_left { side.output.len() } else { 0 };
        let distribution = stream.distribution.through_projection(|c| Some(c + width));
        let props = Properties { distribution, times, append_only: true, prompt: stream.prompt };
        Ok(Some(self.add(spec, &[stream.node], props)))
    }

    /// `plan` as the table side of a lookup join: a scan of a table read `FOR SYSTEM_TIME AS
    /// OF PROCTIME()`, under aliases and conditions. None for anything else.
    fn lookup_side(&self, plan: &LogicalPlan) -> Result<Option<LookupSide>> {
        let mut at = plan;
        let mut conditions = Vec::new();
        // For each column of `plan`, its column in the node `at` (through column projections).
        let mut from: Vec<usize> = (0..plan.schema().fields().len()).collect();
        loop {
            match at {
                LogicalPlan::SubqueryAlias(s) => at = &s.input,
                LogicalPlan::Filter(f) => {
                    // Evaluated on the scan's rows (a condition naming a column by a name the
                    // scan does not have fails to plan, never passes unchecked).
                    conditions.push(f.predicate.clone());
                    at = &f.input;
                }
                LogicalPlan::Projection(p) => {
                    let below: Option<Vec<usize>> = p.expr.iter().map(|e| column_index(e, p.input.schema())).collect();
                    let Some(below) = below else { return Ok(None) };
                    from = from.iter().map(|&c| below[c]).collect();
                    at = &p.input;
                }
                LogicalPlan::TableScan(scan) if windowed_relation(&scan.source).is_none() => {
                    let Some(relation) = self.catalog.get(scan.table_name.table()) else { return Ok(None) };
                    if !self.options.lookups.contains(&relation.def.id) {
                        return Ok(None);
                    }
                    if relation.def.kind != RelationKind::Table {
                        return Err(unsupported("FOR SYSTEM_TIME AS OF PROCTIME() over anything but a table"));
                    }
                    let scan_columns =
                        scan.projection.clone().unwrap_or_else(|| (0..relation.schema.fields().len()).collect());
                    let filter = scan.filters.iter().cloned().chain(conditions);
                    return Ok(Some(LookupSide {
                        columns: from.iter().map(|&c| scan_columns[c]).collect(),
                        output: from,
                        scan_columns,
                        relation,
                        filter: filter.reduce(Expr::and),
                        scan_schema: scan.projected_schema.as_ref().clone(),
                    }));
                }
                _ => return Ok(None),
            }
        }
    }

    /// A `row_number()` window under a filter bounding it: a streaming Top-N.
    fn top_n(&mut self, plan: &LogicalPlan, w: &datafusion::logical_expr::Window) -> Result<Out> {
        // A ranking bounded by the query above is a Top-N; any other window function is computed
        // over its whole partition.
        let bounded = match w.window_expr.as_slice() {
            [expr] => {
                matches!(unalias(expr), Expr::WindowFunction(f) if Ranking::from_name(f.fun.name()).is_some())
                    && self.rank_limits.contains_key(plan)
            }
            _ => false,
        };
        if !bounded {
            return self.over_window(plan, w);
        }
        let [expr] = w.window_expr.as_slice() else {
            return Err(unsupported("more than one window function in one SELECT"));
        };
        let Expr::WindowFunction(f) = unalias(expr) else {
            return Err(unsupported(&format!("the window expression {expr}")));
        };
        let name = f.fun.name().to_string();
        let Some(ranking) = Ranking::from_name(&name) else {
            return Err(WeirError::unsupported(format!(
                "the window function {name}() is not supported in a materialized view yet \
                 (ROW_NUMBER(), RANK() or DENSE_RANK() bounded by an outer filter, WHERE rn <= N, is)"
            )));
        };
        let Some(&limit) = self.rank_limits.get(plan) else {
            return Err(WeirError::unsupported(format!(
                "{}() in a materialized view needs a bound on it in the outer query, as in \
                 SELECT * FROM (SELECT ..., {}() OVER (...) AS rn FROM t) WHERE rn <= 10 (a streaming Top-N)",
                name.to_uppercase(),
                name.to_uppercase()
            )));
        };
        let params = &f.params;
        if params.filter.is_some() || params.distinct {
            return Err(unsupported("FILTER or DISTINCT in a window function"));
        }
        let child = self.node(&w.input)?;
        let input = w.input.schema();
        let partition_by = self.partition_keys(&params.partition_by, input)?;
        let order_by = self.order_keys(&params.order_by, input)?;
        // Partitioned by a window bound: a window's partitions are freed once it is final.
        let window = params
            .partition_by
            .iter()
            .enumerate()
            .find_map(|(i, e)| column_index(e, input).and_then(|c| child.times[c]).map(|column| (i, column)));
        let table = self.state_table()?;
        let schema = Self::schema(plan);
        let lateness = self.options.lateness;
        let config = TopNConfig {
            partition_by: partition_by.clone(),
            order_by,
            ranking,
            limit,
            schema,
            window: window.map(|(index, column)| (index, column, lateness)),
            append_only_input: child.append_only,
        };
        let (input, output) = partitioned(&params.partition_by, &partition_by, input);
        let mut times = child.times.clone();
        times.push(None);
        // Rows move between ranks as others come and go.
        let props = Properties { distribution: output, times, append_only: false, prompt: false };
        Ok(self.add(Spec::TopN { config, table, input }, &[child.node], props))
    }

    /// Window functions (`lag(x) OVER (PARTITION BY p ORDER BY o)`, running sums, ...): an
    /// [`OverWindow`](crate::operators::over_window) computing each touched partition again at
    /// the barrier with DataFusion's window expressions. Every function of one `WindowAggr` must
    /// share its PARTITION BY and ORDER BY (DataFusion groups them so).
    ///
    /// With `EMIT ON WINDOW CLOSE` the rows reach it in event-time order, each once the
    /// watermark has passed its time ([`Builder::release_in_time_order`]), so a row's values,
    /// which read no row after it, are final when it is emitted.
    fn over_window(&mut self, plan: &LogicalPlan, w: &datafusion::logical_expr::Window) -> Result<Out> {
        let input = w.input.schema();
        let mut spec: Option<(Vec<Expr>, Vec<datafusion::logical_expr::SortExpr>)> = None;
        for expr in &w.window_expr {
            let Expr::WindowFunction(f) = unalias(expr) else {
                return Err(unsupported(&format!("the window expression {expr}")));
            };
            let keys = (f.params.partition_by.clone(), f.params.order_by.clone());
            match &spec {
                None => spec = Some(keys),
                Some(first) if *first == keys => {}
                Some(_) => {
                    return Err(unsupported("window functions over different PARTITION BY or ORDER BY in one SELECT"))
                }
            }
        }
        let (partition_exprs, order_exprs) = spec.ok_or_else(|| WeirError::internal("a window without functions"))?;
        let mut child = self.node(&w.input)?;
        if self.options.emit_on_window_close {
            child = self.release_in_time_order(w, &order_exprs, child)?;
        }
        let partition_by = self.partition_keys(&partition_exprs, input)?;
        let order_by = self.order_keys(&order_exprs, input)?;
        let props = self.state.execution_props();
        let context = datafusion::logical_expr::physical_planning_context::PhysicalPlanningContext::default();
        let functions = w
            .window_expr
            .iter()
            .map(|e| Ok(datafusion::physical_planner::create_window_expr(e, input, props, &context)?))
            .collect::<Result<Vec<_>>>()?;
        let table = self.state_table()?;
        let config =
            OverWindowConfig { partition_by: partition_by.clone(), order_by, functions, schema: Self::schema(plan) };
        let (requirement, output) = partitioned(&partition_exprs, &partition_by, input);
        let mut times = child.times.clone();
        times.resize(plan.schema().fields().len(), None);
        // A row's values change as its neighbours come and go, unless rows only come, in time
        // order, and none reads a later one (`EMIT ON WINDOW CLOSE`).
        let append_only = self.options.emit_on_window_close && child.append_only;
        let props = Properties { distribution: output, times, append_only, prompt: false };
        Ok(self.add(Spec::OverWindow { config, table, input: requirement }, &[child.node], props))
    }

    /// Whether the view's rows come from window functions (the top node, under projections and
    /// filters, is an `OverWindow`).
    fn window_functions_on_top(&self) -> bool {
        let mut node = self.nodes.len() - 1;
        loop {
            match &self.nodes[node].spec {
                Spec::Project { .. } | Spec::Filter { .. } | Spec::Exchange(_) => node = self.nodes[node].inputs[0],
                Spec::OverWindow { .. } => return true,
                _ => return false,
            }
        }
    }

    /// `EMIT ON WINDOW CLOSE` over window functions: the window's rows held in a buffer until
    /// the watermark passes their time (the first ORDER BY key, ascending: a window bound or a
    /// watermarked column), then released in time order. Only functions whose values read no
    /// later row: frames ending at the current row or before it, and no `lead`, `ntile`,
    /// `cume_dist` or `percent_rank`; else 0A000.
    fn release_in_time_order(
        &mut self,
        w: &datafusion::logical_expr::Window,
        order_exprs: &[datafusion::logical_expr::SortExpr],
        child: Out,
    ) -> Result<Out> {
        use datafusion::logical_expr::WindowFrameBound;
        let refused = |why: &str| {
            WeirError::unsupported(format!(
                "EMIT ON WINDOW CLOSE over window functions needs {why}: their rows are emitted once the watermark passes their time, with values that read no later row"
            ))
        };
        for expr in &w.window_expr {
            let Expr::WindowFunction(f) = unalias(expr) else { continue };
            let name = f.fun.name().to_ascii_lowercase();
            if matches!(name.as_str(), "lead" | "ntile" | "cume_dist" | "percent_rank") {
                return Err(refused(&format!("functions of earlier rows only, not {name}")));
            }
            if matches!(f.params.window_frame.end_bound, WindowFrameBound::Following(_)) {
                return Err(refused("frames ending at the current row or before it (with ORDER BY)"));
            }
            // `lag(x, n)` reads a later row for a negative n.
            let backwards = match f.params.args.get(1) {
                None => true,
                Some(Expr::Literal(n, _)) => matches!(
                    n.cast_to(&datafusion::arrow::datatypes::DataType::Int64),
                    Ok(ScalarValue::Int64(Some(n))) if n >= 0
                ),
                Some(_) => false,
            };
            if name == "lag" && !backwards {
                return Err(refused("lag by a constant, non-negative offset"));
            }
        }
        if self.options.lateness > 0 {
            // A late row for a window already released would change the rows after it.
            return Err(refused("no ALLOW LATENESS"));
        }
        let input = w.input.schema();
        let first = order_exprs.first().filter(|o| o.asc).and_then(|o| column_index(&o.expr, input));
        let watermarked = self.watermarked_columns(&w.input);
        let Some((column, time, judges_lateness)) = first.and_then(|c| match child.times[c] {
            Some(time) => Some((c, time, false)),
            None => watermarked[c].then_some((c, TimeColumn { close_offset: 0 }, true)),
        }) else {
            return Err(refused(
                "ORDER BY an event time first, ascending (a window bound or a column with a WATERMARK)",
            ));
        };
        let table = self.state_table()?;
        let spec = Spec::EowcBuffer { column, time, schema: Self::schema(&w.input), table, judges_lateness };
        let props = Properties { distribution: Distribution::Single, ..child.props.clone() };
        self.emitted_on_close = true;
        Ok(self.add(spec, &[child.node], props))
    }

    /// Partition expressions `exprs` over `input`, evaluated per row, with their types.
    fn partition_keys(
        &self,
        exprs: &[Expr],
        input: &DFSchema,
    ) -> Result<Vec<(Arc<dyn PhysicalExpr>, datafusion::arrow::datatypes::DataType)>> {
        exprs.iter().map(|e| Ok((self.physical(e, input)?, e.get_type(input)?))).collect()
    }

    /// `SELECT DISTINCT ON (k) ... ORDER BY k, o`, which DataFusion plans as an aggregate of
    /// `first_value(c ORDER BY o)` per column grouped by `k` ([`distinct_on_form`]): a Top-1 per
    /// partition `k` ranked by `o` (ties by the whole row), projected to the group and the
    /// columns, so the row kept changes as rows come and go.
    fn distinct_on(&mut self, plan: &LogicalPlan, a: &Aggregate) -> Result<Out> {
        let (order, columns) = distinct_on_form(a).expect("matched as DISTINCT ON");
        let child = self.node(&a.input)?;
        let in_schema = a.input.schema();
        let partition_by = self.partition_keys(&a.group_expr, in_schema)?;
        let order_by = self.order_keys(&order, in_schema)?;
        let groups: Vec<usize> = a
            .group_expr
            .iter()
            .map(|e| column_index(e, in_schema))
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| unsupported("DISTINCT ON an expression that is not a column"))?;
        let window = groups.iter().enumerate().find_map(|(i, &c)| child.times[c].map(|column| (i, column)));
        let width = in_schema.fields().len();
        let ranked = ranked_schema(in_schema);
        let config = TopNConfig {
            partition_by: partition_by.clone(),
            order_by,
            ranking: Ranking::RowNumber,
            limit: 1,
            schema: Arc::clone(&ranked),
            window: window.map(|(index, column)| (index, column, self.options.lateness)),
            append_only_input: child.append_only,
        };
        let table = self.state_table()?;
        let hashed = hash_of(&a.group_expr, in_schema);
        let keys = partition_by.iter().map(|(e, _)| Arc::clone(e)).collect();
        let distribution = hashed.clone().map(Distribution::Hash).unwrap_or(Distribution::Any);
        let mut times = child.times.clone();
        times.push(None);
        let props = Properties { distribution, times, append_only: false, prompt: false };
        let out = self.add(Spec::TopN { config, table, input: Requirement::hash(keys, hashed) }, &[child.node], props);
        debug_assert!(columns.iter().all(|&c| c < width));
        let indices: Vec<usize> = groups.into_iter().chain(columns).collect();
        self.reproject(out, &ranked, &indices, Self::schema(plan))
    }

    /// `ORDER BY` keys over rows of `schema` (a Top-N's, a window's, an ordered aggregate's).
    fn order_keys(&self, order: &[datafusion::logical_expr::SortExpr], schema: &DFSchema) -> Result<Vec<OrderKey>> {
        order
            .iter()
            .map(|s| {
                Ok(OrderKey {
                    expr: self.physical(&s.expr, schema)?,
                    data_type: s.expr.get_type(schema)?,
                    options: SortOptions { descending: !s.asc, nulls_first: s.nulls_first },
                })
            })
            .collect()
    }

    /// `ORDER BY order LIMIT fetch OFFSET skip` over `input`: a Top-N of all rows (one shard),
    /// its rows ranked by `order` and ties by the whole row (so which of equal rows it keeps
    /// does not depend on their arrival), the first `skip` dropped, the row number too.
    fn limit(
        &mut self,
        plan: &LogicalPlan,
        order: &[datafusion::logical_expr::SortExpr],
        input: &Arc<LogicalPlan>,
        skip: usize,
        fetch: usize,
    ) -> Result<Out> {
        let child = self.node(input)?;
        let in_schema = input.schema();
        let order_by = self.order_keys(order, in_schema)?;
        let width = in_schema.fields().len();
        let ranked = ranked_schema(in_schema);
        let config = TopNConfig {
            partition_by: vec![],
            order_by,
            ranking: Ranking::RowNumber,
            limit: skip.saturating_add(fetch),
            schema: Arc::clone(&ranked),
            window: None,
            append_only_input: child.append_only,
        };
        let table = self.state_table()?;
        let mut times = child.times.clone();
        times.push(None);
        let props = Properties { distribution: Distribution::Single, times, append_only: false, prompt: false };
        let mut out = self.add(Spec::TopN { config, table, input: Requirement::Single }, &[child.node], props);
        if skip > 0 {
            use datafusion::physical_expr::expressions::{BinaryExpr, Column, Literal};
            let predicate: Arc<dyn PhysicalExpr> = Arc::new(BinaryExpr::new(
                Arc::new(Column::new("__weir_rank", width)),
                datafusion::logical_expr::Operator::Gt,
                Arc::new(Literal::new(datafusion::common::ScalarValue::UInt64(Some(skip as u64)))),
            ));
            out = self.add(Spec::Filter { predicate }, &[out.node], out.props.clone());
        }
        let indices: Vec<usize> = (0..width).collect();
        self.reproject(out, &ranked, &indices, Self::schema(plan))
    }

    /// The window assigner over `leaf` (rows of `input`): returns its node and output schema.
    /// Windows over a column the watermark is not declared for (`by_watermark` false) are plain
    /// groups: no row is late, and no window closes.
    fn window_assign(
        &mut self,
        leaf: Out,
        input: &SchemaRef,
        windowing: Windowing,
        by_watermark: bool,
    ) -> Result<(Out, SchemaRef)> {
        let schema = windowing.output_schema(input);
        self.assigners += 1;
        if self.options.keep_late_rows {
            if let Some(existing) = &self.late_rows_schema {
                if existing.fields() != schema.fields() {
                    return Err(unsupported(
                        "LATE ROWS TO one table from windows over relations with different columns",
                    ));
                }
            }
            self.late_rows_schema = Some(Arc::clone(&schema));
        }
        let (lateness, keep_late) = (self.options.lateness, self.options.keep_late_rows);
        let n = input.fields().len();
        let mut times = vec![None; n + 2];
        match windowing {
            Windowing::Fixed(spec) => {
                if by_watermark {
                    times[n] = spec.start_closes_after().map(|close_offset| TimeColumn { close_offset });
                    times[n + 1] = Some(TimeColumn { close_offset: 0 });
                }
                // Each row is windowed where it is.
                let props = Properties {
                    distribution: leaf.distribution.clone(),
                    times,
                    append_only: leaf.append_only,
                    prompt: true,
                };
                let spec = Spec::WindowAssign { spec, schema: Arc::clone(&schema), lateness, keep_late, by_watermark };
                Ok((self.add(spec, &[leaf.node], props), schema))
            }
            Windowing::Session(spec) => {
                // A session's end moves as rows arrive; only `window_end` tells when it closes.
                if by_watermark {
                    times[n + 1] = Some(TimeColumn { close_offset: 0 });
                }
                let table = self.state_table()?;
                // Sessions without keys gather every row in one place.
                let (input, distribution) = if spec.keys.is_empty() {
                    (Requirement::Single, Distribution::Single)
                } else {
                    let keys = columns(input, &spec.keys);
                    (Requirement::hash(keys, Some(spec.keys.clone())), Distribution::Hash(spec.keys.clone()))
                };
                // Sessions re-assign rows as they grow and merge.
                let props = Properties { distribution, times, append_only: false, prompt: false };
                let spec = Spec::SessionAssign {
                    spec,
                    schema: Arc::clone(&schema),
                    lateness,
                    keep_late,
                    by_watermark,
                    table,
                    input,
                };
                Ok((self.add(spec, &[leaf.node], props), schema))
            }
        }
    }
}

/// `t ± INTERVAL '10' SECOND` with `t` a TIMESTAMP, as `t ± <duration>` in `t`'s unit: the
/// same value for a fixed-length interval (no months, and no days where a time zone would
/// make a day's length vary), computed as one integer subtraction per row instead of a
/// calendar step per row (q7's join condition computes it for every bid).
fn fixed_intervals_as_durations(expr: Expr, input: &DFSchema) -> Result<Expr> {
    use datafusion::arrow::datatypes::{DataType, TimeUnit};
    use datafusion::common::tree_node::{Transformed, TreeNode};
    use datafusion::common::ScalarValue;
    use datafusion::logical_expr::{BinaryExpr, Operator as BinaryOp};
    let rewritten = expr.transform_up(|e| {
        let Expr::BinaryExpr(BinaryExpr { left, op: op @ (BinaryOp::Plus | BinaryOp::Minus), right }) = &e else {
            return Ok(Transformed::no(e));
        };
        let (
            Expr::Literal(value @ ScalarValue::IntervalMonthDayNano(Some(interval)), _),
            Ok(DataType::Timestamp(unit, tz)),
        ) = (right.as_ref(), left.get_type(input))
        else {
            return Ok(Transformed::no(e));
        };
        // Fixed length: no months (interval_nanos), and no days where a time zone decides them.
        let nanos = match (interval_nanos(value), tz.is_some() && interval.days != 0) {
            (Some(nanos), false) => nanos,
            _ => return Ok(Transformed::no(e)),
        };
        let duration = match unit {
            TimeUnit::Nanosecond => ScalarValue::DurationNanosecond(Some(nanos)),
            TimeUnit::Microsecond if nanos % 1_000 == 0 => ScalarValue::DurationMicrosecond(Some(nanos / 1_000)),
            TimeUnit::Millisecond if nanos % 1_000_000 == 0 => {
                ScalarValue::DurationMillisecond(Some(nanos / 1_000_000))
            }
            TimeUnit::Second if nanos % 1_000_000_000 == 0 => ScalarValue::DurationSecond(Some(nanos / 1_000_000_000)),
            _ => return Ok(Transformed::no(e)),
        };
        let shifted = Expr::BinaryExpr(BinaryExpr::new(left.clone(), *op, Box::new(Expr::Literal(duration, None))));
        Ok(Transformed::yes(shifted))
    })?;
    Ok(rewritten.data)
}

/// A Top-N's output when it stands for `LIMIT` or `DISTINCT ON`: the input's columns, then the
/// rank (which the plan drops after it).
fn ranked_schema(input: &datafusion::common::DFSchemaRef) -> SchemaRef {
    let mut fields: Vec<datafusion::arrow::datatypes::FieldRef> = input.inner().fields().iter().cloned().collect();
    fields.push(Arc::new(datafusion::arrow::datatypes::Field::new(
        "__weir_rank",
        datafusion::arrow::datatypes::DataType::UInt64,
        false,
    )));
    Arc::new(datafusion::arrow::datatypes::Schema::new(fields))
}

/// Whether `a` is how DataFusion plans `DISTINCT ON`: every aggregate `first_value(column ORDER
/// BY o)` with one and the same `o`, grouped by at least one expression; then `o` and the
/// aggregated columns (indices into the input).
/// An ordered-set aggregate's fraction (`percentile_cont(0.5)`): None when it is no number,
/// an error when it is not a constant.
fn constant_fraction(arg: Option<&Expr>, name: &str) -> Option<Result<f64>> {
    match arg {
        Some(Expr::Literal(fraction, _)) => match fraction.cast_to(&datafusion::arrow::datatypes::DataType::Float64) {
            Ok(ScalarValue::Float64(Some(fraction))) => Some(Ok(fraction)),
            Ok(_) => None,
            Err(e) => Some(Err(e.into())),
        },
        _ => Some(Err(unsupported(&format!("{name} with a fraction that is not a constant")))),
    }
}

fn distinct_on_form(a: &Aggregate) -> Option<(Vec<datafusion::logical_expr::SortExpr>, Vec<usize>)> {
    if a.group_expr.is_empty() || a.aggr_expr.is_empty() {
        return None;
    }
    let mut order: Option<&Vec<datafusion::logical_expr::SortExpr>> = None;
    let mut columns = Vec::new();
    for expr in &a.aggr_expr {
        let Expr::AggregateFunction(f) = unalias(expr) else { return None };
        let params = &f.params;
        let ignore_nulls = params.null_treatment == Some(datafusion::logical_expr::expr::NullTreatment::IgnoreNulls);
        if f.func.name() != "first_value"
            || params.filter.is_some()
            || params.distinct
            || params.order_by.is_empty()
            || ignore_nulls
        {
            return None;
        }
        if order.is_some_and(|o| *o != params.order_by) {
            return None;
        }
        order = Some(&params.order_by);
        let [arg] = params.args.as_slice() else { return None };
        columns.push(column_index(arg, a.input.schema())?);
    }
    Some((order?.clone(), columns))
}

#[cfg(test)]
mod tests {
    use super::*;
    use datafusion::arrow::datatypes::{DataType, Field, Schema, TimeUnit};
    use datafusion::common::ScalarValue;
    use datafusion::prelude::{col, lit};

    #[test]
    fn fixed_intervals_become_durations_in_the_timestamps_unit() {
        use datafusion::arrow::datatypes::IntervalMonthDayNano;
        let schema = DFSchema::try_from(Schema::new(vec![
            Field::new("ns", DataType::Timestamp(TimeUnit::Nanosecond, None), true),
            Field::new("ms", DataType::Timestamp(TimeUnit::Millisecond, None), true),
            Field::new("tz", DataType::Timestamp(TimeUnit::Nanosecond, Some("+01:00".into())), true),
        ]))
        .unwrap();
        let interval = |months, days, nanos| {
            lit(ScalarValue::IntervalMonthDayNano(Some(IntervalMonthDayNano::new(months, days, nanos))))
        };
        let rewrite = |e: Expr| fixed_intervals_as_durations(e, &schema).unwrap();
        let ten_seconds = 10_000_000_000;
        assert_eq!(
            rewrite(col("ns") - interval(0, 0, ten_seconds)),
            col("ns") - lit(ScalarValue::DurationNanosecond(Some(ten_seconds)))
        );
        assert_eq!(
            rewrite(col("ms") + interval(0, 1, 0)),
            col("ms") + lit(ScalarValue::DurationMillisecond(Some(86_400_000)))
        );
        // Kept: months, a day where the time zone decides its length, a unit that cannot hold it.
        for kept in [col("ns") - interval(1, 0, 0), col("tz") - interval(0, 1, 0), col("ms") - interval(0, 0, 1)] {
            assert_eq!(rewrite(kept.clone()), kept);
        }
        assert_eq!(
            rewrite(col("tz") - interval(0, 0, ten_seconds)),
            col("tz") - lit(ScalarValue::DurationNanosecond(Some(ten_seconds)))
        );
    }
}
