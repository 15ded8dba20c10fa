//! The roles as PostgreSQL's catalogs show them, from `catalog::access`: `pg_roles`,
//! `pg_user`, `pg_auth_members`, `pg_authid` (verifiers included: reading it is for
//! superusers, `frontend::authorize`), `information_schema.table_privileges` and
//! `pg_get_userbyid`. psql's `\du`, JDBC's and the BI
//! tools' role lookups read these. Built when a statement plans (a role statement bumps the
//! catalog version, so cached plans are made again). Called by `pg_catalog::WeirPgCatalog`.

use std::collections::HashMap;
use std::sync::Arc;

use datafusion::arrow::array::{
    ArrayRef, BooleanArray, Int32Array, ListBuilder, RecordBatch, StringArray, StringBuilder,
};
use datafusion::arrow::datatypes::{DataType, Field, Schema, SchemaRef, TimeUnit};
use datafusion::datasource::MemTable;
use datafusion::error::Result as DfResult;
use datafusion::logical_expr::{create_udf, ColumnarValue, ScalarUDF, Volatility};

use crate::catalog::access::RoleDef;
use crate::catalog::Catalog;

/// The relations this module serves.
pub const TABLES: [&str; 4] = ["pg_roles", "pg_user", "pg_auth_members", "pg_authid"];

fn oid_field(name: &str) -> Field {
    Field::new(name, DataType::Int32, false)
}

/// The attribute columns `pg_roles` and `pg_authid` share, in their order.
const FLAGS: [&str; 6] = ["rolsuper", "rolinherit", "rolcreaterole", "rolcreatedb", "rolcanlogin", "rolreplication"];

fn flag_fields() -> Vec<Field> {
    FLAGS.iter().map(|n| Field::new(*n, DataType::Boolean, false)).collect()
}

/// The values of [`FLAGS`] of each role.
fn flag_columns(roles: &[RoleDef]) -> Vec<ArrayRef> {
    vec![
        bools(roles, |r| r.superuser),
        bools(roles, |_| true),
        bools(roles, |r| r.create_role),
        bools(roles, |r| r.create_db),
        bools(roles, |r| r.login),
        bools(roles, |_| false),
    ]
}

fn schema(table: &str) -> SchemaRef {
    let b = |n: &str| Field::new(n, DataType::Boolean, false);
    let t = |n: &str| Field::new(n, DataType::Utf8, true);
    let until = |n: &str| Field::new(n, DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())), true);
    let config = |n: &str| Field::new(n, DataType::List(Arc::new(Field::new("item", DataType::Utf8, true))), true);
    let fields = match table {
        "pg_roles" => [
            vec![Field::new("rolname", DataType::Utf8, false)],
            flag_fields(),
            vec![
                Field::new("rolconnlimit", DataType::Int32, false),
                t("rolpassword"),
                until("rolvaliduntil"),
                b("rolbypassrls"),
                config("rolconfig"),
                oid_field("oid"),
            ],
        ]
        .concat(),
        "pg_authid" => [
            vec![oid_field("oid"), Field::new("rolname", DataType::Utf8, false)],
            flag_fields(),
            vec![
                b("rolbypassrls"),
                Field::new("rolconnlimit", DataType::Int32, false),
                t("rolpassword"),
                until("rolvaliduntil"),
            ],
        ]
        .concat(),
        "pg_user" => vec![
            Field::new("usename", DataType::Utf8, false),
            oid_field("usesysid"),
            b("usecreatedb"),
            b("usesuper"),
            b("userepl"),
            b("usebypassrls"),
            t("passwd"),
            until("valuntil"),
            config("useconfig"),
        ],
        _ => vec![
            oid_field("oid"),
            oid_field("roleid"),
            oid_field("member"),
            oid_field("grantor"),
            b("admin_option"),
            b("inherit_option"),
            b("set_option"),
        ],
    };
    Arc::new(Schema::new(fields))
}

fn texts(values: impl Iterator<Item = Option<String>>) -> ArrayRef {
    Arc::new(values.collect::<StringArray>())
}

fn bools(roles: &[RoleDef], f: impl Fn(&RoleDef) -> bool) -> ArrayRef {
    Arc::new(roles.iter().map(|r| Some(f(r))).collect::<BooleanArray>())
}

fn ints(values: impl Iterator<Item = i32>) -> ArrayRef {
    Arc::new(values.collect::<Int32Array>())
}

fn nulls(field: &Field, n: usize) -> ArrayRef {
    datafusion::arrow::array::new_null_array(field.data_type(), n)
}

fn empty_lists(n: usize) -> ArrayRef {
    let mut b = ListBuilder::new(StringBuilder::new());
    for _ in 0..n {
        b.append(false);
    }
    Arc::new(b.finish())
}

/// The rows of `table` (one of [`TABLES`]).
fn batch(table: &str, catalog: &Catalog) -> DfResult<RecordBatch> {
    let schema = schema(table);
    let roles = catalog.access.roles();
    let n = roles.len();
    let names = || texts(roles.iter().map(|r| Some(r.name.clone())));
    let oids = || ints(roles.iter().map(|r| r.oid as i32));
    let masked = || texts(roles.iter().map(|r| r.password.as_ref().map(|_| "********".to_string())));
    let no = || bools(&roles, |_| false);
    let columns: Vec<ArrayRef> = match table {
        "pg_roles" => [
            vec![names()],
            flag_columns(&roles),
            vec![
                ints(roles.iter().map(|r| r.connection_limit)),
                masked(),
                nulls(schema.field(9), n),
                no(),
                empty_lists(n),
                oids(),
            ],
        ]
        .concat(),
        "pg_authid" => [
            vec![oids(), names()],
            flag_columns(&roles),
            vec![
                no(),
                ints(roles.iter().map(|r| r.connection_limit)),
                texts(roles.iter().map(|r| r.password.clone())),
                nulls(schema.field(11), n),
            ],
        ]
        .concat(),
        "pg_user" => {
            let users: Vec<RoleDef> = roles.iter().filter(|r| r.login).cloned().collect();
            let n = users.len();
            vec![
                texts(users.iter().map(|r| Some(r.name.clone()))),
                ints(users.iter().map(|r| r.oid as i32)),
                bools(&users, |r| r.create_db),
                bools(&users, |r| r.superuser),
                bools(&users, |_| false),
                bools(&users, |_| false),
                texts(users.iter().map(|r| r.password.as_ref().map(|_| "********".to_string()))),
                nulls(schema.field(7), n),
                empty_lists(n),
            ]
        }
        _ => {
            let oid_of: HashMap<&str, i32> = roles.iter().map(|r| (r.name.as_str(), r.oid as i32)).collect();
            let edges: Vec<(i32, i32)> = roles
                .iter()
                .flat_map(|r| r.member_of.iter().filter_map(|of| oid_of.get(of.as_str()).map(|o| (*o, r.oid as i32))))
                .collect();
            let m = edges.len();
            let grantor = roles.iter().find(|r| r.superuser).map(|r| r.oid as i32).unwrap_or(10);
            vec![
                ints((0..m).map(|i| 1_000_000 + i as i32)),
                ints(edges.iter().map(|e| e.0)),
                ints(edges.iter().map(|e| e.1)),
                ints((0..m).map(|_| grantor)),
                Arc::new((0..m).map(|_| Some(false)).collect::<BooleanArray>()),
                Arc::new((0..m).map(|_| Some(true)).collect::<BooleanArray>()),
                Arc::new((0..m).map(|_| Some(true)).collect::<BooleanArray>()),
            ]
        }
    };
    Ok(RecordBatch::try_new(schema, columns)?)
}

/// The table `name` is, if it is one of [`TABLES`].
pub fn table(name: &str, catalog: &Catalog) -> DfResult<Option<MemTable>> {
    if !TABLES.contains(&name) {
        return Ok(None);
    }
    let batch = batch(name, catalog)?;
    Ok(Some(MemTable::try_new(batch.schema(), vec![vec![batch]])?))
}

/// The OID a relation's owner shows as: its role's; for relations made before roles (owned by
/// the superusers) 10, PostgreSQL's bootstrap superuser's.
pub fn owner_oid(catalog: &Catalog, owner: &str) -> u32 {
    catalog.access.role(owner).map(|r| r.oid).unwrap_or(BOOTSTRAP_OID)
}

/// PostgreSQL's bootstrap superuser's OID, which Weir's first `[[auth.users]]` user has too.
const BOOTSTRAP_OID: u32 = 10;

/// What OID 10 is called when no role has it (no `[[auth.users]]`): the superusers that own
/// relations made before roles.
const BOOTSTRAP_NAME: &str = "weir";

/// `pg_get_userbyid(oid)`: the role's name (10: the superusers', when no role has it),
/// `unknown (OID=n)` for none, as in PostgreSQL.
pub fn get_userbyid_udf(catalog: Arc<Catalog>) -> ScalarUDF {
    by_role_oid("pg_get_userbyid", DataType::Utf8, catalog, |roles, oids| {
        let mut names: HashMap<i64, &str> = roles.iter().map(|r| (i64::from(r.oid), r.name.as_str())).collect();
        names.entry(i64::from(BOOTSTRAP_OID)).or_insert(BOOTSTRAP_NAME);
        let out: StringArray = oids
            .iter()
            .map(|o| o.map(|o| names.get(&o).map(|n| n.to_string()).unwrap_or_else(|| format!("unknown (OID={o})"))))
            .collect();
        Arc::new(out)
    })
}

/// `information_schema.table_privileges`: each relation's owner with every privilege its kind
/// takes (grantable), and each grant (grantor: the owner). Every row is shown, whoever asks.
pub fn table_privileges(catalog: &Catalog) -> DfResult<MemTable> {
    let t = |n: &str| Field::new(n, DataType::Utf8, false);
    let schema = Arc::new(Schema::new(vec![
        t("grantor"),
        t("grantee"),
        t("table_catalog"),
        t("table_schema"),
        t("table_name"),
        t("privilege_type"),
        t("is_grantable"),
        t("with_hierarchy"),
    ]));
    let owner_name = |owner: &str| match catalog.access.role(owner) {
        Some(role) => role.name,
        None => catalog
            .access
            .roles()
            .into_iter()
            .find(|r| r.oid == BOOTSTRAP_OID)
            .map(|r| r.name)
            .unwrap_or_else(|| BOOTSTRAP_NAME.to_string()),
    };
    let mut rows: Vec<[String; 4]> = Vec::new();
    for relation in catalog.relations() {
        let applicable = crate::catalog::access::applicable(&relation);
        if applicable.is_empty() {
            continue;
        }
        let owner = owner_name(&relation.def.owner);
        for p in applicable {
            rows.push([owner.clone(), owner.clone(), relation.def.name.clone(), p.name().to_string()]);
        }
        let grants = catalog.access.grants(crate::catalog::access::Object::Relation(relation.def.id));
        for (grantee, privileges) in &grants.grants {
            let grantee =
                if grantee == crate::catalog::access::PUBLIC { "PUBLIC".to_string() } else { grantee.clone() };
            for p in privileges.iter() {
                rows.push([owner.clone(), grantee.clone(), relation.def.name.clone(), p.name().to_string()]);
            }
        }
    }
    let column = |f: &dyn Fn(&[String; 4]) -> String| -> ArrayRef { texts(rows.iter().map(|r| Some(f(r)))) };
    let grantable: Vec<Option<String>> =
        rows.iter().map(|r| Some(if r[0] == r[1] { "YES" } else { "NO" }.to_string())).collect();
    let batch = RecordBatch::try_new(
        Arc::clone(&schema),
        vec![
            column(&|r| r[0].clone()),
            column(&|r| r[1].clone()),
            column(&|_| catalog.database().to_string()),
            column(&|_| crate::catalog::DEFAULT_SCHEMA.to_string()),
            column(&|r| r[2].clone()),
            column(&|r| r[3].clone()),
            texts(grantable.into_iter()),
            column(&|r| if r[3] == "SELECT" { "YES" } else { "NO" }.to_string()),
        ],
    )?;
    MemTable::try_new(schema, vec![vec![batch]])
}

/// `weir_role_memberships(oid)`: the names of the roles role `oid` is a member of (directly),
/// sorted; what psql's `\du` lists as "Member of" (`catalog_idioms` rewrites its subquery).
pub fn role_memberships_udf(catalog: Arc<Catalog>) -> ScalarUDF {
    let list = DataType::List(Arc::new(Field::new("item", DataType::Utf8, true)));
    by_role_oid("weir_role_memberships", list, catalog, |roles, oids| {
        let mut out = ListBuilder::new(StringBuilder::new());
        for oid in oids.iter() {
            match oid.and_then(|o| roles.iter().find(|r| i64::from(r.oid) == o)) {
                Some(role) => {
                    for name in &role.member_of {
                        out.values().append_value(name);
                    }
                    out.append(true);
                }
                None => out.append(oid.is_some()),
            }
        }
        Arc::new(out.finish())
    })
}

/// A function of a role OID, answered from the roles as they are when it runs.
fn by_role_oid(
    name: &str,
    returns: DataType,
    catalog: Arc<Catalog>,
    answer: fn(&[RoleDef], &datafusion::arrow::array::Int64Array) -> ArrayRef,
) -> ScalarUDF {
    create_udf(
        name,
        vec![DataType::Int64],
        returns,
        Volatility::Stable,
        Arc::new(move |args: &[ColumnarValue]| {
            let arrays = ColumnarValue::values_to_arrays(args)?;
            let oids = datafusion::arrow::compute::cast(&arrays[0], &DataType::Int64)?;
            let oids =
                datafusion::arrow::array::AsArray::as_primitive::<datafusion::arrow::datatypes::Int64Type>(&oids);
            Ok(ColumnarValue::Array(answer(&catalog.access.roles(), oids)))
        }),
    )
}
