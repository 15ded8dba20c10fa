//! `GRANT` and `REVOKE`: privileges on relations and the database, and role membership.
//!
//! A relation's privileges are granted by its owner (or a member of the owner, or a superuser);
//! `CREATE` on the database and role membership by superusers and roles with CREATEROLE. What
//! each kind of relation takes: tables SELECT, INSERT, UPDATE, DELETE, TRUNCATE; views and
//! materialized views SELECT; sources SELECT and USAGE; sinks USAGE; `ALL` is all of those.
//! A privilege a relation cannot have is 0LP01, as in PostgreSQL.

use super::super::access_statement::{AccessStatement, GrantTarget, RelationWord};
use super::super::authorize::Checker;
use super::super::{Frontend, Session, StatementResult};
use crate::catalog::access::no_role;
use crate::catalog::access::{Object, Privilege, Privileges};
use crate::catalog::{Relation, RelationKind};
use crate::error::{Result, SqlState, WeirError};

/// Whether a relation is of the kind the statement's word names.
fn is_kind(relation: &Relation, word: RelationWord) -> bool {
    let kind = relation.def.kind;
    let source = relation.is_source();
    match word {
        // ON TABLE names any relation with rows to read, as PostgreSQL's does.
        RelationWord::Table => !matches!(kind, RelationKind::Sink | RelationKind::Index),
        RelationWord::View => kind == RelationKind::View,
        RelationWord::MaterializedView => kind == RelationKind::MaterializedView,
        RelationWord::Source => source,
        RelationWord::Sink => kind == RelationKind::Sink,
    }
}

fn word_name(word: RelationWord) -> &'static str {
    match word {
        RelationWord::Table => "a table",
        RelationWord::View => "a view",
        RelationWord::MaterializedView => "a materialized view",
        RelationWord::Source => "a source",
        RelationWord::Sink => "a sink",
    }
}

pub async fn handle(fe: &Frontend, session: &mut Session, statement: AccessStatement) -> Result<StatementResult> {
    let catalog = fe.catalog();
    let store = catalog.store().as_ref();
    let checker = Checker::new(catalog, &session.identity);
    let tag = statement.tag();
    match statement {
        AccessStatement::Membership { grant, roles, members } => {
            for role in &roles {
                if catalog.access.role(role).is_none() {
                    return Err(no_role(role));
                }
                // A member may SET ROLE to it: membership of a superuser is a superuser's to give.
                let superuser = grant && catalog.access.reaches_superuser(role);
                checker.require_role_admin(
                    superuser,
                    &format!("{} role \"{role}\"", if grant { "grant" } else { "revoke" }),
                )?;
            }
            // Every membership checked before any is written.
            for member in &members {
                if catalog.access.role(member).is_none() {
                    return Err(no_role(member));
                }
                for role in roles.iter().filter(|_| grant) {
                    if role == member || catalog.access.is_member(role, member) {
                        return Err(WeirError::new(
                            SqlState::INVALID_GRANT_OPERATION,
                            format!("role \"{member}\" is a member of role \"{role}\""),
                        ));
                    }
                }
            }
            for member in &members {
                catalog.access.alter_role(store, member, |def| {
                    for role in &roles {
                        if grant {
                            def.member_of.insert(role.clone());
                        } else {
                            def.member_of.remove(role);
                        }
                    }
                    Ok(())
                })?;
            }
        }
        AccessStatement::Privileges { grant, privileges, target, grantees } => match target {
            GrantTarget::Database(name) => {
                if name != catalog.database() {
                    return Err(WeirError::new(SqlState("3D000"), format!("database \"{name}\" does not exist")));
                }
                checker.require_superuser("granting on the database")?;
                let list = privileges.unwrap_or_else(|| vec![Privilege::Create]);
                if let Some(p) = list.iter().find(|p| **p != Privilege::Create) {
                    return Err(invalid(*p, "database"));
                }
                catalog.access.change_grants(store, Object::Database, &grantees, Privileges::of(&list), grant)?;
            }
            GrantTarget::Relations(word, names) => {
                let mut relations = Vec::with_capacity(names.len());
                for name in &names {
                    let relation = catalog.get(name).ok_or_else(|| WeirError::undefined_table(name))?;
                    if !is_kind(&relation, word) {
                        return Err(WeirError::new(
                            SqlState::WRONG_OBJECT_TYPE,
                            format!("\"{name}\" is not {}", word_name(word)),
                        ));
                    }
                    relations.push(relation);
                }
                change(fe, &checker, &relations, privileges.as_deref(), &grantees, grant)?;
            }
            GrantTarget::AllInSchema => {
                let relations: Vec<_> = catalog
                    .relations()
                    .into_iter()
                    .filter(|r| !matches!(r.def.kind, RelationKind::Index | RelationKind::Sink))
                    .filter(|r| checker.require_owner(r).is_ok())
                    .collect();
                change(fe, &checker, &relations, privileges.as_deref(), &grantees, grant)?;
            }
        },
        other => return Err(WeirError::internal(format!("{other} is not a GRANT or REVOKE"))),
    }
    Ok(StatementResult::command(tag))
}

/// Grants or revokes `privileges` (None: all that apply) on each of `relations`: all checked
/// first, then changed.
fn change(
    fe: &Frontend,
    checker: &Checker,
    relations: &[std::sync::Arc<Relation>],
    privileges: Option<&[Privilege]>,
    grantees: &[String],
    grant: bool,
) -> Result<()> {
    let mut changes = Vec::with_capacity(relations.len());
    for relation in relations {
        checker.require_owner(relation)?;
        let applicable = crate::catalog::access::applicable(relation);
        let list = match privileges {
            Some(list) => {
                if let Some(p) = list.iter().find(|p| !applicable.contains(p)) {
                    return Err(invalid(*p, &relation.def.name));
                }
                list
            }
            None => applicable,
        };
        changes.push((relation.def.id, Privileges::of(list)));
    }
    let catalog = fe.catalog();
    for (id, privileges) in changes {
        catalog.access.change_grants(catalog.store().as_ref(), Object::Relation(id), grantees, privileges, grant)?;
    }
    Ok(())
}

fn invalid(privilege: Privilege, on: &str) -> WeirError {
    WeirError::new(SqlState::INVALID_GRANT_OPERATION, format!("invalid privilege type {} for {on}", privilege.name()))
}
