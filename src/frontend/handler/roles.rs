//! `CREATE ROLE` / `USER`, `ALTER ROLE`, `DROP ROLE` and `SET ROLE`, with PostgreSQL's rules
//! on who may: superusers manage every role; a role with CREATEROLE manages roles that are not
//! superusers and cannot make one; any role may change its own password. A password is stored
//! as its SCRAM-SHA-256 verifier only (`catalog::password`). A role that owns relations cannot
//! be dropped (2BP01, naming them).

use super::super::access_statement::{AccessStatement, RoleOptions};
use super::super::authorize::denied;
use super::super::authorize::Checker;
use super::super::{Frontend, Session, StatementResult};
use crate::catalog::access::RoleDef;
use crate::catalog::access::{from_config, no_role};
use crate::catalog::password::Verifier;
use crate::error::{Result, SqlState, WeirError};

fn apply(role: &mut RoleDef, options: &RoleOptions) -> Result<()> {
    if let Some(v) = options.superuser {
        role.superuser = v;
    }
    if let Some(v) = options.create_db {
        role.create_db = v;
    }
    if let Some(v) = options.create_role {
        role.create_role = v;
    }
    if let Some(v) = options.login {
        role.login = v;
    }
    if let Some(v) = options.connection_limit {
        role.connection_limit = v;
    }
    match &options.password {
        Some(Some(p)) if p.is_empty() => {
            // PostgreSQL: an empty password is no password.
            role.password = None;
        }
        Some(Some(p)) => role.password = Some(Verifier::from_text(p)?.to_text()),
        Some(None) => role.password = None,
        None => {}
    }
    Ok(())
}

pub async fn handle(fe: &Frontend, session: &mut Session, statement: AccessStatement) -> Result<StatementResult> {
    let changes = statement.changes_catalog();
    let result = run(fe, session, statement).await;
    if changes {
        fe.catalog().roles_changed();
    }
    result
}

async fn run(fe: &Frontend, session: &mut Session, statement: AccessStatement) -> Result<StatementResult> {
    let catalog = fe.catalog();
    let access = &catalog.access;
    let store = catalog.store().as_ref();
    let checker = Checker::new(catalog, &session.identity);
    let tag = statement.tag();
    match statement {
        AccessStatement::CreateRole { name, if_not_exists, options } => {
            let superuser =
                options.superuser == Some(true) || options.in_role.iter().any(|r| access.reaches_superuser(r));
            checker.require_role_admin(superuser, "create role")?;
            let mut role = RoleDef::new(&name);
            role.member_of = options.in_role.iter().cloned().collect();
            apply(&mut role, &options)?;
            access.create_role(store, role, if_not_exists)?;
        }
        AccessStatement::AlterRole { name, options } => {
            let target = access.role(&name).ok_or_else(|| no_role(&name))?;
            let own_password_only = name == checker.role() && options == only_password(&options);
            if !own_password_only {
                let superuser = access.reaches_superuser(&target.name) || options.superuser.is_some();
                checker.require_role_admin(superuser, "alter role")?;
            }
            access.alter_role(store, &name, |role| apply(role, &options))?;
        }
        AccessStatement::RenameRole { name, to } => {
            let target = access.role(&name).ok_or_else(|| no_role(&name))?;
            checker.require_role_admin(access.reaches_superuser(&target.name), "rename role")?;
            if name == session.identity.user {
                return Err(WeirError::new(SqlState::FEATURE_NOT_SUPPORTED, "session user cannot be renamed"));
            }
            let owned = owned_by(fe, &name);
            if !owned.is_empty() {
                return Err(WeirError::unsupported(format!(
                    "renaming a role that owns relations ({}); drop or recreate them under another role first",
                    owned.join(", ")
                )));
            }
            access.rename_role(store, &name, &to)?;
        }
        AccessStatement::DropRole { names, if_exists } => {
            // Every role checked before any is dropped.
            let mut dropped = Vec::new();
            for name in &names {
                let Some(target) = access.role(name) else {
                    if if_exists {
                        continue;
                    }
                    return Err(no_role(name));
                };
                checker.require_role_admin(access.reaches_superuser(&target.name), "drop role")?;
                if *name == session.identity.user || *name == checker.role() {
                    return Err(WeirError::new(SqlState("55006"), format!("current user cannot be dropped ({name})")));
                }
                let owned = owned_by(fe, name);
                if !owned.is_empty() {
                    return Err(WeirError::new(
                        SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
                        format!("role \"{name}\" cannot be dropped because some objects depend on it"),
                    )
                    .with_hint(format!("It owns {}: drop them first.", owned.join(", "))));
                }
                if target.from_config {
                    return Err(from_config(name));
                }
                dropped.push(name);
            }
            for name in dropped {
                access.drop_role(store, name, true)?;
            }
        }
        AccessStatement::SetRole(role) => {
            let role = role.unwrap_or_else(|| session.identity.user.clone());
            let user = &session.identity.user;
            let user_is_superuser = session.identity.unlisted || access.is_superuser(user);
            if access.role(&role).is_none() && !(role == *user && session.identity.unlisted) {
                return Err(no_role(&role));
            }
            if role != *user && !user_is_superuser && !access.is_member(user, &role) {
                return Err(denied(format!("permission denied to set role \"{role}\"")));
            }
            session.identity.set_role(&role);
            // Plans may hold the old role's name (`current_user`, folded into constants).
            session.plans.clear();
        }
        AccessStatement::Privileges { .. } | AccessStatement::Membership { .. } => {
            return super::grant::handle(fe, session, statement).await;
        }
    }
    Ok(StatementResult::command(tag))
}

/// The options with everything but the password left unset.
fn only_password(options: &RoleOptions) -> RoleOptions {
    RoleOptions { password: options.password.clone(), ..Default::default() }
}

/// The relations role `name` owns, as "kind name".
pub fn owned_by(fe: &Frontend, name: &str) -> Vec<String> {
    fe.catalog()
        .relations()
        .iter()
        .filter(|r| r.def.owner == name && r.def.kind != crate::catalog::RelationKind::Index)
        .map(|r| r.def.name.clone())
        .collect()
}
