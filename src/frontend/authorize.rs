//! Privilege checks: what a statement needs, checked against the role the session runs as
//! before anything of the statement runs, so a denied statement (42501) changes nothing.
//!
//! - Reads (a query, the query of an INSERT, CREATE ... AS, a sink, COPY TO, EXPLAIN) need
//!   SELECT on every relation they name (USAGE does for a source); the system catalogs are
//!   everyone's but `pg_authid` and `weir_catalog.dead_letters` (raw input), which are the
//!   superusers'. A plain view reads its relations with its owner's privileges, as in
//!   PostgreSQL: its reader needs SELECT on the view, its owner on what the view reads.
//! - Writes need INSERT, UPDATE, DELETE or TRUNCATE on their table, and SELECT too when they
//!   read it (a WHERE, RETURNING, or an assignment reading a column).
//! - Creating a relation needs CREATE on the database; dropping, indexing, replacing or
//!   granting on one needs its ownership; role statements are checked by their handler
//!   (`handler::roles`), which knows the roles involved.
//! - Superusers, and users no role names (trust authentication's), pass every check.
//!
//! Called by `Frontend::execute` for every statement and by the server before COPY FROM
//! STDIN; `has_table_privilege` and its kin ([`register_privilege_functions`]) ask the same.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, BooleanArray};
use datafusion::arrow::datatypes::DataType;
use datafusion::common::TableReference;
use datafusion::logical_expr::{ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility};
use datafusion::prelude::SessionContext;
use datafusion::sql::sqlparser::ast::{self, CopySource, FromTable, ObjectType, TableObject};

use super::parser::Statement;
use super::session::{Identity, Session};
use super::sink_statement::{SinkInput, SinkStatement};
use crate::catalog::access::{Object, Privilege};
use crate::catalog::{Catalog, Relation, RelationKind, DEFAULT_SCHEMA};
use crate::error::{Result, SqlState, WeirError};

/// Whose privileges a check goes by.
pub struct Checker<'a> {
    catalog: &'a Catalog,
    role: String,
    superuser: bool,
}

impl<'a> Checker<'a> {
    pub fn new(catalog: &'a Catalog, identity: &Identity) -> Checker<'a> {
        let role = identity.role();
        let superuser = identity.acts_unlisted() || catalog.access.is_superuser(&role);
        Checker { catalog, role, superuser }
    }

    pub fn role(&self) -> &str {
        &self.role
    }

    pub fn is_superuser(&self) -> bool {
        self.superuser
    }

    /// 42501 unless the role may manage roles (a superuser, or CREATEROLE), and a superuser when
    /// `superuser` roles are involved; `what` says what it was doing.
    pub fn require_role_admin(&self, superuser: bool, what: &str) -> Result<()> {
        if self.superuser {
            return Ok(());
        }
        if superuser {
            return Err(denied(format!("permission denied to {what}: only superusers may manage superusers")));
        }
        if !self.catalog.access.role(&self.role).is_some_and(|r| r.create_role) {
            return Err(denied(format!("permission denied to {what}"))
                .with_hint("Only superusers and roles with CREATEROLE manage roles."));
        }
        Ok(())
    }

    /// Whether the role holds `privilege` on `relation` (USAGE on a source counts as SELECT).
    pub fn holds(&self, relation: &Relation, privilege: Privilege) -> bool {
        if self.superuser {
            return true;
        }
        let access = &self.catalog.access;
        let object = Object::Relation(relation.def.id);
        let held = |p| access.allows(&self.role, object, &relation.def.owner, p);
        held(privilege) || privilege == Privilege::Select && relation.is_source() && held(Privilege::Usage)
    }

    /// 42501 unless the role holds `privilege` on `relation`.
    pub fn require(&self, relation: &Relation, privilege: Privilege) -> Result<()> {
        if self.holds(relation, privilege) {
            return Ok(());
        }
        Err(denied(format!("permission denied for {} {}", kind_word(relation), relation.def.name)))
    }

    /// 42501 unless the role owns `relation` (or is a member of its owner, or a superuser).
    pub fn require_owner(&self, relation: &Relation) -> Result<()> {
        if self.superuser || self.catalog.access.acts_as_owner(&self.role, &relation.def.owner) {
            return Ok(());
        }
        Err(denied(format!("must be owner of {} {}", kind_word(relation), relation.def.name)))
    }

    /// 42501 unless the role may create relations.
    pub fn require_create(&self) -> Result<()> {
        let access = &self.catalog.access;
        if self.superuser || access.allows(&self.role, Object::Database, "", Privilege::Create) {
            return Ok(());
        }
        Err(denied(format!("permission denied for database {}", self.catalog.database()))
            .with_hint("A superuser may GRANT CREATE ON DATABASE to this role."))
    }

    /// 42501 unless the role is a superuser; `what` says what needed it.
    pub fn require_superuser(&self, what: &str) -> Result<()> {
        if self.superuser {
            return Ok(());
        }
        Err(denied(format!("permission denied: {what} is for superusers")))
    }

    /// Checks a read of the relation `name` refers to. Names of no Weir relation are the
    /// system catalogs' (or nothing, which planning reports).
    fn read(&self, name: &TableReference) -> Result<()> {
        let schema = name.schema();
        if schema.is_none() || schema == Some(DEFAULT_SCHEMA) {
            if let Some(relation) = self.catalog.get(name.table()) {
                self.require(&relation, Privilege::Select)?;
                return self.view_owner_reads(&relation, 0);
            }
        }
        let system_only = match (schema, name.table()) {
            (None | Some("pg_catalog"), "pg_authid") => true,
            (Some("weir_catalog"), "dead_letters") => true,
            _ => false,
        };
        if system_only && !self.superuser {
            return Err(denied(format!("permission denied for table {}", name.table())));
        }
        Ok(())
    }

    /// A plain view's reads, checked with its owner's privileges.
    fn view_owner_reads(&self, relation: &Relation, depth: usize) -> Result<()> {
        if relation.def.kind != RelationKind::View || self.superuser || depth > 16 {
            return Ok(());
        }
        let owner = Checker {
            catalog: self.catalog,
            role: relation.def.owner.clone(),
            superuser: relation.def.owner.is_empty() || self.catalog.access.is_superuser(&relation.def.owner),
        };
        for id in &relation.def.depends_on {
            if let Some(read) = self.catalog.by_id(*id) {
                owner.require(&read, Privilege::Select)?;
                owner.view_owner_reads(&read, depth + 1)?;
            }
        }
        Ok(())
    }

    /// The relation `name` names, if there is one (a missing one is the statement's own
    /// error to report).
    fn relation(&self, name: &ast::ObjectName) -> Option<Arc<Relation>> {
        super::handler::relation_name(name).ok().and_then(|n| self.catalog.get(&n))
    }

    /// Checks reads of everything `statement` names but `except` (a write's target): its
    /// relations, the relations window functions in FROM read (`TUMBLE(t, ...)`), and, in a
    /// `WITH RECURSIVE`, the names of its CTEs too (a recursive CTE's body may read a relation
    /// of the CTE's own name, which the CTE's scope hides from the name resolution).
    fn reads_of(&self, statement: &ast::Statement, except: Option<&str>) -> Result<()> {
        let wrapped = datafusion::sql::parser::Statement::Statement(Box::new(statement.clone()));
        let (mut names, ctes) = datafusion::sql::resolve::resolve_table_references(&wrapped, true)?;
        if has_recursive_with(statement) {
            names.extend(ctes);
        }
        names.extend(window_inputs(statement));
        for name in names {
            let target =
                except.is_some_and(|t| name.table() == t) && matches!(name.schema(), None | Some(DEFAULT_SCHEMA));
            if !target {
                self.read(&name)?;
            }
        }
        Ok(())
    }

    fn reads_of_query(&self, query: &ast::Query) -> Result<()> {
        self.reads_of(&ast::Statement::Query(Box::new(query.clone())), None)
    }

    /// Checks a write of `privilege` to `target`, and a read of it when `reads_target`, and
    /// the reads of whatever else `statement` names.
    fn write(
        &self,
        statement: &ast::Statement,
        target: &ast::ObjectName,
        privilege: Privilege,
        reads_target: bool,
    ) -> Result<()> {
        let relation = self.relation(target);
        if let Some(relation) = &relation {
            self.require(relation, privilege)?;
            if reads_target {
                self.require(relation, Privilege::Select)?;
            }
        }
        self.reads_of(statement, relation.as_ref().map(|r| r.def.name.as_str()))
    }

    /// Checks one SQL statement.
    pub fn sql(&self, statement: &ast::Statement, session: &Session) -> Result<()> {
        use ast::Statement as S;
        match statement {
            S::Query(_) => self.reads_of(statement, None),
            S::Insert(insert) => {
                let TableObject::TableName(target) = &insert.table else { return Ok(()) };
                let relation = self.relation(target);
                if let Some(relation) = &relation {
                    self.require(relation, Privilege::Insert)?;
                    let updates = matches!(
                        &insert.on,
                        Some(ast::OnInsert::OnConflict(ast::OnConflict {
                            action: ast::OnConflictAction::DoUpdate(_),
                            ..
                        })) | Some(ast::OnInsert::DuplicateKeyUpdate(_))
                    );
                    if updates {
                        self.require(relation, Privilege::Update)?;
                    }
                    if insert.returning.is_some() || updates {
                        self.require(relation, Privilege::Select)?;
                    }
                }
                // The source query, and subqueries in ON CONFLICT and RETURNING.
                self.reads_of(statement, relation.as_ref().map(|r| r.def.name.as_str()))
            }
            S::Update(update) => {
                let ast::TableFactor::Table { name, .. } = &update.table.relation else { return Ok(()) };
                let reads = update.selection.is_some()
                    || update.returning.is_some()
                    || update.assignments.iter().any(|a| reads_a_column(&a.value));
                self.write(statement, name, Privilege::Update, reads)
            }
            S::Delete(delete) => {
                let tables = match &delete.from {
                    FromTable::WithFromKeyword(t) | FromTable::WithoutKeyword(t) => t,
                };
                let Some(ast::TableFactor::Table { name, .. }) = tables.first().map(|t| &t.relation) else {
                    return Ok(());
                };
                let reads = delete.selection.is_some() || delete.returning.is_some();
                self.write(statement, name, Privilege::Delete, reads)
            }
            S::Truncate(truncate) => {
                for target in &truncate.table_names {
                    if let Some(relation) = self.relation(&target.name) {
                        self.require(&relation, Privilege::Truncate)?;
                    }
                }
                Ok(())
            }
            S::Explain { statement, .. } => self.sql(statement, session),
            S::Copy { source: CopySource::Table { table_name, .. }, to: false, .. } => {
                match self.relation(table_name) {
                    Some(relation) => self.require(&relation, Privilege::Insert),
                    None => Ok(()),
                }
            }
            S::Copy { source: CopySource::Table { table_name, .. }, to: true, .. } => match self.relation(table_name) {
                Some(relation) => self.require(&relation, Privilege::Select),
                None => Ok(()),
            },
            S::Copy { source: CopySource::Query(query), .. } => self.reads_of_query(query),
            // Settings that act on the whole server.
            S::Set(set) if set.to_string().to_ascii_lowercase().contains("weir.epoch_clock") => {
                self.require_superuser("weir.epoch_clock")
            }
            S::CreateTable(create) => {
                self.require_create()?;
                match &create.query {
                    Some(query) => self.reads_of_query(query),
                    None => Ok(()),
                }
            }
            S::CreateView(view) => {
                if view.or_replace {
                    if let Some(existing) = self.relation(&view.name) {
                        self.require_owner(&existing)?;
                    }
                }
                self.require_create()?;
                self.reads_of_query(&view.query)
            }
            S::CreateIndex(index) => match self.relation(&index.table_name) {
                Some(relation) => self.require_owner(&relation),
                None => Ok(()),
            },
            S::Drop { object_type, names, .. } if dropped_relation(object_type) => {
                for name in names {
                    if let Some(relation) = self.relation(name) {
                        self.require_owner(&relation)?;
                    }
                }
                Ok(())
            }
            S::ShowCreate { obj_name, .. } => match self.relation(obj_name) {
                // A source's connector (its address, topic, redacted secrets) is for those
                // who may use it.
                Some(relation) if relation.is_source() => self.require_usage(&relation),
                _ => Ok(()),
            },
            S::Execute { name: Some(name), parameters, .. } => {
                // Its arguments are evaluated as a query's select list.
                for argument in parameters {
                    let select = super::dialect::parse(&format!("SELECT {argument}")).map_err(|e| e.into_error())?;
                    select.iter().try_for_each(|s| self.reads_of(s, None))?;
                }
                let prepared = name
                    .0
                    .first()
                    .and_then(|p| p.as_ident())
                    .and_then(|i| session.prepared.get(&super::handler::prepare::name_of(i)));
                match prepared {
                    Some(prepared) => self.sql(&prepared.statement, session),
                    None => Ok(()),
                }
            }
            _ => Ok(()),
        }
    }

    /// The clauses of a streaming CREATE: a source reading the server's files is for
    /// superusers (PostgreSQL's `pg_read_server_files`); `LATE ROWS TO` an existing table
    /// writes into it.
    fn streaming_clauses(&self, clauses: &super::clauses::StreamingClauses) -> Result<()> {
        if let Some(source) = &clauses.source {
            if source.get("connector").is_some_and(|c| c.eq_ignore_ascii_case("file")) {
                self.require_superuser("a source reading the server's files (connector 'file')")?;
            }
        }
        if let Some(table) = clauses.late_rows_to.as_deref().and_then(|t| self.catalog.get(t)) {
            self.require(&table, Privilege::Insert)?;
        }
        Ok(())
    }

    /// 42501 unless the role owns `relation` or holds USAGE on it.
    fn require_usage(&self, relation: &Relation) -> Result<()> {
        if self.holds(relation, Privilege::Usage) {
            return Ok(());
        }
        Err(denied(format!("permission denied for {} {}", kind_word(relation), relation.def.name)))
    }

    /// Checks a sink statement.
    fn sink(&self, statement: &SinkStatement) -> Result<()> {
        match statement {
            SinkStatement::Show => Ok(()),
            SinkStatement::ShowCreate(name) | SinkStatement::Drop { name, .. } => {
                let Some(relation) = self.catalog.get(name) else { return Ok(()) };
                if matches!(statement, SinkStatement::Drop { .. }) {
                    self.require_owner(&relation)
                } else {
                    self.require_usage(&relation)
                }
            }
            SinkStatement::Create { input, .. } => {
                self.require_create()?;
                match input {
                    SinkInput::View(view) => match self.catalog.get(view) {
                        Some(relation) => self.require(&relation, Privilege::Select),
                        None => Ok(()),
                    },
                    SinkInput::Query(query) => {
                        let statements = super::dialect::parse(query).map_err(|e| e.into_error())?;
                        statements.iter().try_for_each(|s| self.reads_of(s, None))
                    }
                }
            }
        }
    }
}

/// Checks `statement` for the session's role; Err (42501) when it may not run it.
pub fn check(catalog: &Catalog, session: &Session, statement: &Statement) -> Result<()> {
    let checker = Checker::new(catalog, &session.identity);
    if checker.is_superuser() {
        return Ok(());
    }
    match statement {
        Statement::Flush => Ok(()),
        Statement::ExplainAnalyze(name) => {
            let name = name.trim_matches('"');
            match catalog.get(name).or_else(|| catalog.get(&name.to_ascii_lowercase())) {
                Some(relation) => checker.require(&relation, Privilege::Select),
                None => Ok(()),
            }
        }
        Statement::Sink(sink) => checker.sink(sink),
        // Checked by their handler, which knows the roles involved.
        Statement::Access(_) => Ok(()),
        Statement::Streaming(statement, clauses) => {
            checker.sql(statement, session)?;
            checker.streaming_clauses(clauses)
        }
        Statement::Sql(statement) => checker.sql(statement, session),
    }
}

/// Whether `statement` has a `WITH RECURSIVE` anywhere.
fn has_recursive_with(statement: &ast::Statement) -> bool {
    use datafusion::sql::sqlparser::ast::Visit;
    use std::ops::ControlFlow;
    struct Recursive;
    impl ast::Visitor for Recursive {
        type Break = ();
        fn pre_visit_query(&mut self, query: &ast::Query) -> ControlFlow<()> {
            match &query.with {
                Some(with) if with.recursive => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    statement.visit(&mut Recursive).is_break()
}

/// The relations window functions in FROM read: the first argument of `TUMBLE`, `HOP`,
/// `SESSION` and `CUMULATE` (`catalog::windowed`), which name resolution does not see.
fn window_inputs(statement: &ast::Statement) -> Vec<TableReference> {
    use datafusion::sql::sqlparser::ast::Visit;
    use std::ops::ControlFlow;
    struct Inputs(Vec<TableReference>);
    impl ast::Visitor for Inputs {
        type Break = ();
        fn pre_visit_table_factor(&mut self, factor: &ast::TableFactor) -> ControlFlow<()> {
            let function = match factor {
                ast::TableFactor::Table { name, args: Some(args), .. } => Some((name.to_string(), &args.args)),
                _ => None,
            };
            if let Some((name, args)) = function {
                let name = name.to_ascii_lowercase();
                if matches!(name.rsplit('.').next(), Some("tumble" | "hop" | "session" | "cumulate")) {
                    if let Some(ast::FunctionArg::Unnamed(ast::FunctionArgExpr::Expr(first))) = args.first() {
                        let text = match first {
                            ast::Expr::Identifier(i) if i.quote_style.is_some() => i.value.clone(),
                            ast::Expr::Identifier(i) => i.value.to_ascii_lowercase(),
                            ast::Expr::CompoundIdentifier(parts) => parts
                                .iter()
                                .map(|i| {
                                    if i.quote_style.is_some() {
                                        i.value.clone()
                                    } else {
                                        i.value.to_ascii_lowercase()
                                    }
                                })
                                .collect::<Vec<_>>()
                                .join("."),
                            other => other.to_string(),
                        };
                        let reference = match text.split_once('.') {
                            Some((schema, table)) => TableReference::partial(schema, table),
                            None => TableReference::bare(text),
                        };
                        self.0.push(reference);
                    }
                }
            }
            ControlFlow::Continue(())
        }
    }
    let mut inputs = Inputs(Vec::new());
    let _ = statement.visit(&mut inputs);
    inputs.0
}

fn dropped_relation(object_type: &ObjectType) -> bool {
    matches!(object_type, ObjectType::Table | ObjectType::View | ObjectType::MaterializedView | ObjectType::Index)
        || format!("{object_type}").eq_ignore_ascii_case("source")
}

/// Whether `expr` reads a column (an UPDATE's assignment that does needs SELECT).
fn reads_a_column(expr: &ast::Expr) -> bool {
    use datafusion::sql::sqlparser::ast::Visit;
    use std::ops::ControlFlow;
    struct Columns;
    impl ast::Visitor for Columns {
        type Break = ();
        fn pre_visit_expr(&mut self, expr: &ast::Expr) -> ControlFlow<()> {
            match expr {
                ast::Expr::Identifier(_) | ast::Expr::CompoundIdentifier(_) => ControlFlow::Break(()),
                _ => ControlFlow::Continue(()),
            }
        }
    }
    expr.visit(&mut Columns).is_break()
}

/// How PostgreSQL's messages name a relation's kind.
fn kind_word(relation: &Relation) -> &'static str {
    match relation.def.kind {
        RelationKind::Table if relation.is_source() => "source",
        RelationKind::Table => "table",
        RelationKind::MaterializedView => "materialized view",
        RelationKind::View => "view",
        RelationKind::Sink => "sink",
        RelationKind::Index => "index",
    }
}

/// 42501 with `message`.
pub fn denied(message: String) -> WeirError {
    WeirError::new(SqlState::INSUFFICIENT_PRIVILEGE, message)
}

/// `has_table_privilege([user,] table, privilege)` and `has_any_column_privilege`, answered
/// from the roles and grants: `table` by name or OID, `privilege` one or more names separated
/// by commas (any held is true; `WITH GRANT OPTION` is held by owners and superusers only).
struct HasTablePrivilege {
    name: &'static str,
    signature: Signature,
    catalog: Arc<Catalog>,
    identity: Arc<Identity>,
}

impl std::fmt::Debug for HasTablePrivilege {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}({})", self.name, self.identity.user)
    }
}

impl PartialEq for HasTablePrivilege {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && Arc::ptr_eq(&self.identity, &other.identity)
    }
}
impl Eq for HasTablePrivilege {}
impl std::hash::Hash for HasTablePrivilege {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
    }
}

impl HasTablePrivilege {
    /// The answer for role `role` (None: the session's), relation `table`, `privileges`.
    fn answer(&self, role: Option<&str>, table: &TableArg, privileges: &str) -> Result<bool> {
        let relation = match table {
            TableArg::Name(name) => {
                let parsed = TableReference::parse_str(name);
                match parsed.schema() {
                    None | Some(DEFAULT_SCHEMA) => self.catalog.get(parsed.table()),
                    _ => None,
                }
            }
            TableArg::Oid(oid) => self.catalog.relations().into_iter().find(|r| i64::from(r.oid()) == *oid),
        };
        let identity;
        let identity = match role {
            Some(role) if role != self.identity.role() => {
                identity = Identity::new(role, false);
                &identity
            }
            _ => self.identity.as_ref(),
        };
        let checker = Checker::new(&self.catalog, identity);
        let mut any = false;
        for word in privileges.split(',') {
            let word = word.trim();
            let (word, grant_option) = match word.to_ascii_uppercase().strip_suffix(" WITH GRANT OPTION") {
                Some(w) => (w.trim().to_string(), true),
                None => (word.to_string(), false),
            };
            let privilege = Privilege::from_name(&word).ok_or_else(|| {
                WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("unrecognized privilege type: \"{word}\""))
            })?;
            any |= match &relation {
                // The system catalogs: everyone reads them (pg_authid aside), no one writes.
                None => {
                    privilege == Privilege::Select
                        && !(matches!(table, TableArg::Name(n) if n.ends_with("pg_authid")) && !checker.is_superuser())
                }
                Some(r) if grant_option => checker.require_owner(r).is_ok(),
                Some(r) => checker.holds(r, privilege),
            };
        }
        Ok(any)
    }
}

enum TableArg {
    Name(String),
    Oid(i64),
}

impl ScalarUDFImpl for HasTablePrivilege {
    fn name(&self) -> &str {
        self.name
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _: &[DataType]) -> datafusion::error::Result<DataType> {
        Ok(DataType::Boolean)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> datafusion::error::Result<ColumnarValue> {
        let rows = args.number_rows;
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let text = |a: &ArrayRef| datafusion::arrow::compute::cast(a, &DataType::Utf8);
        let (role, table, privilege) = match arrays.as_slice() {
            [table, privilege] => (None, table.clone(), text(privilege)?),
            [role, table, privilege] => (Some(text(role)?), table.clone(), text(privilege)?),
            _ => return Err(datafusion::error::DataFusionError::Plan(format!("{} takes 2 or 3 arguments", self.name))),
        };
        let tables: Vec<Option<TableArg>> = if table.data_type().is_integer() {
            let t = datafusion::arrow::compute::cast(&table, &DataType::Int64)?;
            let t = t.as_primitive::<datafusion::arrow::datatypes::Int64Type>();
            (0..rows).map(|i| t.is_valid(i).then(|| TableArg::Oid(t.value(i)))).collect()
        } else {
            let t = text(&table)?;
            let t = t.as_string::<i32>();
            (0..rows).map(|i| t.is_valid(i).then(|| TableArg::Name(t.value(i).to_string()))).collect()
        };
        let privilege = privilege.as_string::<i32>();
        let role = role.as_ref().map(|r| r.as_string::<i32>().clone());
        let mut out = Vec::with_capacity(rows);
        for (i, table) in tables.iter().enumerate() {
            let Some(table) = table else {
                out.push(None);
                continue;
            };
            if privilege.is_null(i) || role.as_ref().is_some_and(|r| r.is_null(i)) {
                out.push(None);
                continue;
            }
            let role = role.as_ref().map(|r| r.value(i));
            let held = self
                .answer(role, table, privilege.value(i))
                .map_err(|e| datafusion::error::DataFusionError::External(Box::new(e)))?;
            out.push(Some(held));
        }
        Ok(ColumnarValue::Array(Arc::new(BooleanArray::from(out))))
    }
}

/// Registers the privilege functions of a session whose identity is `identity`.
pub fn register_privilege_functions(ctx: &SessionContext, identity: Arc<Identity>, catalog: &Arc<Catalog>) {
    for name in ["has_table_privilege", "has_any_column_privilege"] {
        ctx.register_udf(ScalarUDF::new_from_impl(HasTablePrivilege {
            name,
            signature: Signature::variadic_any(Volatility::Stable),
            catalog: Arc::clone(catalog),
            identity: Arc::clone(&identity),
        }));
    }
}
