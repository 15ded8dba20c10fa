//! Roles and privileges: who exists, who is a member of whom, and who may do what to which
//! relation. PostgreSQL's model as far as a streaming database needs it.
//!
//! - A role ([`RoleDef`]) may log in or not, be a superuser (every check passes), create roles
//!   (`CREATEROLE`), be a member of other roles and inherit their privileges (always: Weir has
//!   no `NOINHERIT`), and have a password, kept only as a SCRAM-SHA-256 verifier
//!   ([`crate::catalog::password`]).
//! - Roles of `[[auth.users]]` in the config file are superusers that log in; they live in the
//!   config (read again at every start) and SQL cannot alter or drop them.
//! - A relation's owner is recorded in its definition (`RelationDef::owner`, written in the
//!   batch that creates it; empty for relations made before roles: owned by the superusers).
//!   The owner, and members of the owner, hold every privilege on it and alone may drop it or
//!   grant on it.
//! - Grants on relations ([`Privileges`] per grantee, `PUBLIC` included) and on the database
//!   (`CREATE`) are kept here, deleted in the batch that drops their relation.
//!
//! Invariants: every change is durable before it returns and is one write batch; a role that
//! owns a relation cannot be dropped; a membership never makes a cycle. Read by the frontend's
//! statement checks (`frontend::authorize`), the server's authentication, and the pg_catalog
//! relations that show roles; changed by the role and GRANT statements' handlers.

use std::collections::{BTreeMap, BTreeSet};

use parking_lot::RwLock;
use serde::{Deserialize, Serialize};

use crate::catalog::password::Verifier;
use crate::error::{Result, SqlState, WeirError};
use crate::state::keys::{meta_key, TableId};
use crate::state::store::{ScanControl, StateStore, WriteBatch};

/// The grantee name that stands for every role.
pub const PUBLIC: &str = "public";

/// A privilege on a relation or the database.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Privilege {
    Select,
    Insert,
    Update,
    Delete,
    Truncate,
    /// On a source or sink: build on it (a source) and see its connector (both).
    Usage,
    /// On the database: create relations.
    Create,
}

impl Privilege {
    const ALL: [Privilege; 7] = [
        Privilege::Select,
        Privilege::Insert,
        Privilege::Update,
        Privilege::Delete,
        Privilege::Truncate,
        Privilege::Usage,
        Privilege::Create,
    ];

    fn bit(self) -> u8 {
        1 << self as u8
    }

    /// Its name in SQL and in `information_schema.table_privileges`.
    pub fn name(self) -> &'static str {
        match self {
            Privilege::Select => "SELECT",
            Privilege::Insert => "INSERT",
            Privilege::Update => "UPDATE",
            Privilege::Delete => "DELETE",
            Privilege::Truncate => "TRUNCATE",
            Privilege::Usage => "USAGE",
            Privilege::Create => "CREATE",
        }
    }

    pub fn from_name(name: &str) -> Option<Privilege> {
        Privilege::ALL.into_iter().find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Its letter in an ACL item (`r` select, `a` insert, `w` update, `d` delete, `D` truncate,
    /// `U` usage, `C` create), as `relacl` shows it.
    fn letter(self) -> char {
        match self {
            Privilege::Select => 'r',
            Privilege::Insert => 'a',
            Privilege::Update => 'w',
            Privilege::Delete => 'd',
            Privilege::Truncate => 'D',
            Privilege::Usage => 'U',
            Privilege::Create => 'C',
        }
    }
}

/// The privileges a relation of its kind can have: tables SELECT, INSERT, UPDATE, DELETE,
/// TRUNCATE; views and materialized views SELECT; sources SELECT and USAGE; sinks USAGE.
pub fn applicable(relation: &crate::catalog::Relation) -> &'static [Privilege] {
    use crate::catalog::RelationKind;
    use Privilege::*;
    match relation.def.kind {
        RelationKind::Table if relation.is_source() => &[Select, Usage],
        RelationKind::Table => &[Select, Insert, Update, Delete, Truncate],
        RelationKind::View | RelationKind::MaterializedView => &[Select],
        RelationKind::Sink => &[Usage],
        RelationKind::Index => &[],
    }
}

/// A set of privileges.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Privileges(u8);

impl Privileges {
    pub fn of(privileges: &[Privilege]) -> Privileges {
        Privileges(privileges.iter().fold(0, |acc, p| acc | p.bit()))
    }

    pub fn contains(self, p: Privilege) -> bool {
        self.0 & p.bit() != 0
    }

    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    pub fn union(self, other: Privileges) -> Privileges {
        Privileges(self.0 | other.0)
    }

    pub fn without(self, other: Privileges) -> Privileges {
        Privileges(self.0 & !other.0)
    }

    pub fn iter(self) -> impl Iterator<Item = Privilege> {
        Privilege::ALL.into_iter().filter(move |p| self.contains(*p))
    }

    /// The letters of an ACL item.
    pub fn letters(self) -> String {
        self.iter().map(Privilege::letter).collect()
    }
}

/// A role, as stored (`catalog/role/<name>`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RoleDef {
    pub name: String,
    pub oid: u32,
    #[serde(default)]
    pub superuser: bool,
    #[serde(default)]
    pub create_role: bool,
    #[serde(default)]
    pub create_db: bool,
    #[serde(default)]
    pub login: bool,
    /// At most this many sessions at once; -1 for no limit.
    #[serde(default = "no_limit")]
    pub connection_limit: i32,
    /// The password's SCRAM-SHA-256 verifier, in PostgreSQL's text form.
    #[serde(default)]
    pub password: Option<String>,
    /// The roles it is a member of (and inherits the privileges of).
    #[serde(default)]
    pub member_of: BTreeSet<String>,
    /// Defined by `[[auth.users]]` in the config file: never stored, not for SQL to change.
    #[serde(skip)]
    pub from_config: bool,
}

fn no_limit() -> i32 {
    -1
}

impl RoleDef {
    /// A role with PostgreSQL's defaults (`NOLOGIN NOSUPERUSER`); its oid is given when it is
    /// created.
    pub fn new(name: &str) -> RoleDef {
        RoleDef {
            name: name.to_string(),
            oid: 0,
            superuser: false,
            create_role: false,
            create_db: false,
            login: false,
            connection_limit: -1,
            password: None,
            member_of: BTreeSet::new(),
            from_config: false,
        }
    }

    /// Its password's verifier, if it has one (a malformed one is none: it cannot log in).
    pub fn verifier(&self) -> Option<Verifier> {
        self.password.as_deref().and_then(|p| Verifier::parse(p).ok())
    }
}

/// The grants on one relation or the database, by grantee (`catalog/acl/<id>`).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Acl {
    pub grants: BTreeMap<String, Privileges>,
}

/// What a grant is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Object {
    Relation(TableId),
    Database,
}

/// A relation's owner as its definition records it: empty for relations made before roles,
/// which the superusers own.
pub type Owner<'a> = &'a str;

const ROLE_PREFIX: &str = "catalog/role/";
const ACL_PREFIX: &str = "catalog/acl/";
const NEXT_OID_KEY: &str = "catalog/role_next_oid";
/// OIDs of roles made by SQL; below them, those of the config's users (from 10, PostgreSQL's
/// bootstrap superuser's).
const FIRST_ROLE_OID: u32 = 16384;

fn role_key(name: &str) -> Vec<u8> {
    meta_key(&format!("{ROLE_PREFIX}{name}"))
}

fn acl_key(object: Object) -> Vec<u8> {
    match object {
        Object::Relation(id) => meta_key(&format!("{ACL_PREFIX}{id:010}")),
        Object::Database => meta_key(&format!("{ACL_PREFIX}database")),
    }
}

/// Adds the deletion of `id`'s grants to `wb` (the batch that drops the relation).
pub fn delete_grants(id: TableId, wb: &mut WriteBatch) {
    wb.delete(acl_key(Object::Relation(id)));
}

#[derive(Default)]
struct Inner {
    roles: BTreeMap<String, RoleDef>,
    acls: BTreeMap<Object, Acl>,
    next_oid: u32,
}

/// The roles and grants of one data directory.
pub struct Access {
    inner: RwLock<Inner>,
}

impl std::fmt::Debug for Access {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Access")
    }
}

fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(value).map_err(|e| WeirError::internal(format!("encoding a role or grant: {e}")))
}

fn corrupt(what: &[u8], e: impl std::fmt::Display) -> WeirError {
    WeirError::new(SqlState::DATA_CORRUPTED, format!("catalog entry {} is corrupt: {e}", String::from_utf8_lossy(what)))
}

/// 42704 for a role that does not exist.
pub fn no_role(name: &str) -> WeirError {
    WeirError::new(SqlState::UNDEFINED_OBJECT, format!("role \"{name}\" does not exist"))
}

impl Access {
    /// The roles and grants `store` holds.
    pub fn open(store: &dyn StateStore) -> Result<Access> {
        let mut inner = Inner { next_oid: FIRST_ROLE_OID, ..Default::default() };
        store.scan_prefix(&meta_key(ROLE_PREFIX), &mut |k, v| {
            let role: RoleDef = serde_json::from_slice(v).map_err(|e| corrupt(&k[4..], e))?;
            inner.roles.insert(role.name.clone(), role);
            Ok(ScanControl::Continue)
        })?;
        store.scan_prefix(&meta_key(ACL_PREFIX), &mut |k, v| {
            let acl: Acl = serde_json::from_slice(v).map_err(|e| corrupt(&k[4..], e))?;
            let suffix = String::from_utf8_lossy(&k[4 + ACL_PREFIX.len()..]).to_string();
            let object = match suffix.as_str() {
                "database" => Object::Database,
                id => Object::Relation(id.parse().map_err(|e| corrupt(&k[4..], e))?),
            };
            inner.acls.insert(object, acl);
            Ok(ScanControl::Continue)
        })?;
        if let Some(v) = store.get(&meta_key(NEXT_OID_KEY))? {
            let bytes: [u8; 4] = v.as_slice().try_into().map_err(|_| corrupt(NEXT_OID_KEY.as_bytes(), "length"))?;
            inner.next_oid = u32::from_be_bytes(bytes);
        }
        Ok(Access { inner: RwLock::new(inner) })
    }

    /// Adds the config file's users (`[[auth.users]]`): superusers that log in with their
    /// verifiers, never stored, beside the roles made by SQL (the config's wins a clash).
    pub fn add_config_users(&self, users: &[(String, Verifier)]) {
        let mut inner = self.inner.write();
        for (i, (name, verifier)) in users.iter().enumerate() {
            let mut role = RoleDef::new(name);
            role.oid = 10 + i as u32;
            role.superuser = true;
            role.create_role = true;
            role.create_db = true;
            role.login = true;
            role.password = Some(verifier.to_text());
            role.from_config = true;
            if inner.roles.get(name).is_some_and(|r| !r.from_config) {
                tracing::warn!(role = %name, "role defined by [[auth.users]] and by SQL: the config file's is used");
            }
            inner.roles.insert(name.clone(), role);
        }
    }

    /// The role named `name`.
    pub fn role(&self, name: &str) -> Option<RoleDef> {
        self.inner.read().roles.get(name).cloned()
    }

    /// Every role, by name.
    pub fn roles(&self) -> Vec<RoleDef> {
        self.inner.read().roles.values().cloned().collect()
    }

    pub fn is_superuser(&self, name: &str) -> bool {
        self.inner.read().roles.get(name).is_some_and(|r| r.superuser)
    }

    /// Whether `name` is a superuser or a member (through any roles) of one: a member may
    /// `SET ROLE` to it, so only superusers may grant or manage such a role.
    pub fn reaches_superuser(&self, name: &str) -> bool {
        let inner = self.inner.read();
        inner.roles.values().any(|r| r.superuser && Self::member_in(&inner, name, &r.name))
    }

    /// Whether `role` is `of` or a member of it, directly or through other roles.
    pub fn is_member(&self, role: &str, of: &str) -> bool {
        Self::member_in(&self.inner.read(), role, of)
    }

    fn member_in(inner: &Inner, role: &str, of: &str) -> bool {
        let mut seen = BTreeSet::new();
        let mut todo = vec![role.to_string()];
        while let Some(r) = todo.pop() {
            if r == of {
                return true;
            }
            if !seen.insert(r.clone()) {
                continue;
            }
            if let Some(def) = inner.roles.get(&r) {
                todo.extend(def.member_of.iter().cloned());
            }
        }
        false
    }

    /// Whether `role` may act as the owner `owner` of something: a superuser, or a member of
    /// the owner. An empty owner (made before roles) is the superusers'.
    pub fn acts_as_owner(&self, role: &str, owner: Owner) -> bool {
        let inner = self.inner.read();
        inner.roles.get(role).is_some_and(|r| r.superuser) || !owner.is_empty() && Self::member_in(&inner, role, owner)
    }

    /// Whether `role` holds `privilege` on `object`, owned by `owner` (ignored for the
    /// database): as a superuser, through ownership, or by a grant to it, to a role it is a
    /// member of, or to PUBLIC.
    pub fn allows(&self, role: &str, object: Object, owner: Owner, privilege: Privilege) -> bool {
        let inner = self.inner.read();
        if inner.roles.get(role).is_some_and(|r| r.superuser) {
            return true;
        }
        if object != Object::Database && !owner.is_empty() && Self::member_in(&inner, role, owner) {
            return true;
        }
        let Some(acl) = inner.acls.get(&object) else { return false };
        acl.grants
            .iter()
            .any(|(grantee, p)| p.contains(privilege) && (grantee == PUBLIC || Self::member_in(&inner, role, grantee)))
    }

    /// The grants on `object`.
    pub fn grants(&self, object: Object) -> Acl {
        self.inner.read().acls.get(&object).cloned().unwrap_or_default()
    }

    /// Records a new role; false (and no change) when it exists and `if_not_exists`.
    pub fn create_role(&self, store: &dyn StateStore, mut role: RoleDef, if_not_exists: bool) -> Result<bool> {
        let mut inner = self.inner.write();
        if role.name == PUBLIC || role.name.starts_with("pg_") {
            return Err(WeirError::new(SqlState::RESERVED_NAME, format!("role name \"{}\" is reserved", role.name)));
        }
        if inner.roles.contains_key(&role.name) {
            if if_not_exists {
                return Ok(false);
            }
            return Err(WeirError::new(SqlState::DUPLICATE_OBJECT, format!("role \"{}\" already exists", role.name)));
        }
        for of in &role.member_of {
            if !inner.roles.contains_key(of) {
                return Err(no_role(of));
            }
        }
        role.oid = inner.next_oid;
        let mut wb = WriteBatch::default();
        wb.put(role_key(&role.name), encode(&role)?);
        wb.put(meta_key(NEXT_OID_KEY), (role.oid + 1).to_be_bytes().to_vec());
        store.write(wb)?;
        inner.next_oid = role.oid + 1;
        inner.roles.insert(role.name.clone(), role);
        Ok(true)
    }

    /// Changes role `name` by `change` (ALTER ROLE, memberships).
    pub fn alter_role(
        &self,
        store: &dyn StateStore,
        name: &str,
        change: impl FnOnce(&mut RoleDef) -> Result<()>,
    ) -> Result<()> {
        let mut inner = self.inner.write();
        let mut role = inner.roles.get(name).cloned().ok_or_else(|| no_role(name))?;
        if role.from_config {
            return Err(from_config(name));
        }
        change(&mut role)?;
        role.name = name.to_string();
        for of in &role.member_of {
            if !inner.roles.contains_key(of) {
                return Err(no_role(of));
            }
            if Self::member_in(&inner, of, name) {
                return Err(WeirError::new(
                    SqlState::INVALID_GRANT_OPERATION,
                    format!("role \"{of}\" is a member of role \"{name}\""),
                ));
            }
        }
        let mut wb = WriteBatch::default();
        wb.put(role_key(name), encode(&role)?);
        store.write(wb)?;
        inner.roles.insert(name.to_string(), role);
        Ok(())
    }

    /// Renames role `old` to `new`, and every membership and grant naming it. Owners of
    /// relations are in their definitions: the caller refuses to rename a role that owns any.
    pub fn rename_role(&self, store: &dyn StateStore, old: &str, new: &str) -> Result<()> {
        let mut inner = self.inner.write();
        let mut role = inner.roles.get(old).cloned().ok_or_else(|| no_role(old))?;
        if role.from_config {
            return Err(from_config(old));
        }
        if inner.roles.contains_key(new) {
            return Err(WeirError::new(SqlState::DUPLICATE_OBJECT, format!("role \"{new}\" already exists")));
        }
        let mut wb = WriteBatch::default();
        wb.delete(role_key(old));
        role.name = new.to_string();
        wb.put(role_key(new), encode(&role)?);
        let mut members = Vec::new();
        for other in inner.roles.values() {
            if other.member_of.contains(old) {
                let mut changed = other.clone();
                changed.member_of.remove(old);
                changed.member_of.insert(new.to_string());
                if !changed.from_config {
                    wb.put(role_key(&changed.name), encode(&changed)?);
                }
                members.push(changed);
            }
        }
        let mut acls = Vec::new();
        for (object, acl) in &inner.acls {
            if let Some(p) = acl.grants.get(old) {
                let mut changed = acl.clone();
                changed.grants.remove(old);
                changed.grants.insert(new.to_string(), *p);
                wb.put(acl_key(*object), encode(&changed)?);
                acls.push((*object, changed));
            }
        }
        store.write(wb)?;
        inner.roles.remove(old);
        inner.roles.insert(new.to_string(), role);
        for m in members {
            inner.roles.insert(m.name.clone(), m);
        }
        inner.acls.extend(acls);
        Ok(())
    }

    /// Drops role `name`, its memberships and the grants to it; false when it does not exist
    /// and `if_exists`. The caller has checked that it owns nothing.
    pub fn drop_role(&self, store: &dyn StateStore, name: &str, if_exists: bool) -> Result<bool> {
        let mut inner = self.inner.write();
        let Some(role) = inner.roles.get(name) else {
            if if_exists {
                return Ok(false);
            }
            return Err(no_role(name));
        };
        if role.from_config {
            return Err(from_config(name));
        }
        let mut wb = WriteBatch::default();
        wb.delete(role_key(name));
        let mut members = Vec::new();
        for other in inner.roles.values().filter(|r| r.member_of.contains(name)) {
            let mut changed = other.clone();
            changed.member_of.remove(name);
            if !changed.from_config {
                wb.put(role_key(&changed.name), encode(&changed)?);
            }
            members.push(changed);
        }
        let mut acls = Vec::new();
        for (object, acl) in &inner.acls {
            if acl.grants.contains_key(name) {
                let mut changed = acl.clone();
                changed.grants.remove(name);
                wb.put(acl_key(*object), encode(&changed)?);
                acls.push((*object, changed));
            }
        }
        store.write(wb)?;
        inner.roles.remove(name);
        for m in members {
            inner.roles.insert(m.name.clone(), m);
        }
        inner.acls.extend(acls);
        Ok(true)
    }

    /// Adds (`grant`) or takes away privileges `privileges` on `object` for `grantees`.
    pub fn change_grants(
        &self,
        store: &dyn StateStore,
        object: Object,
        grantees: &[String],
        privileges: Privileges,
        grant: bool,
    ) -> Result<()> {
        let mut inner = self.inner.write();
        for g in grantees {
            if g != PUBLIC && !inner.roles.contains_key(g) {
                return Err(no_role(g));
            }
        }
        let mut acl = inner.acls.get(&object).cloned().unwrap_or_default();
        for g in grantees {
            let now = acl.grants.get(g).copied().unwrap_or_default();
            let next = if grant { now.union(privileges) } else { now.without(privileges) };
            if next.is_empty() {
                acl.grants.remove(g);
            } else {
                acl.grants.insert(g.clone(), next);
            }
        }
        let mut wb = WriteBatch::default();
        wb.put(acl_key(object), encode(&acl)?);
        store.write(wb)?;
        inner.acls.insert(object, acl);
        Ok(())
    }

    /// Forgets the grants of a relation whose drop has been written ([`delete_grants`]).
    pub fn forget(&self, id: TableId) {
        self.inner.write().acls.remove(&Object::Relation(id));
    }
}

/// 42501 for a change to a role `[[auth.users]]` defines.
pub fn from_config(name: &str) -> WeirError {
    WeirError::new(
        SqlState::INSUFFICIENT_PRIVILEGE,
        format!("role \"{name}\" is defined by [[auth.users]] in the config file; change it there"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::memory::MemoryStore;

    fn access(store: &MemoryStore) -> Access {
        let a = Access::open(store).unwrap();
        a.add_config_users(&[("admin".into(), Verifier::from_password("pw"))]);
        a
    }

    #[test]
    fn privileges_come_from_grants_membership_ownership_and_superusers() {
        let store = MemoryStore::default();
        let a = access(&store);
        for name in ["reader", "alice", "owner"] {
            let mut r = RoleDef::new(name);
            r.login = true;
            a.create_role(&store, r, false).unwrap();
        }
        a.alter_role(&store, "alice", |r| {
            r.member_of.insert("reader".into());
            Ok(())
        })
        .unwrap();
        let t = Object::Relation(1000);
        a.change_grants(&store, t, &["reader".into()], Privileges::of(&[Privilege::Select]), true).unwrap();
        assert!(a.allows("alice", t, "owner", Privilege::Select));
        assert!(!a.allows("alice", t, "owner", Privilege::Insert));
        assert!(a.allows("owner", t, "owner", Privilege::Insert));
        assert!(a.allows("admin", t, "owner", Privilege::Delete));
        assert!(!a.allows("nobody", t, "owner", Privilege::Select));
        // Relations made before roles belong to the superusers.
        assert!(!a.acts_as_owner("owner", ""));
        assert!(a.acts_as_owner("admin", ""));

        // Everything survives a restart; the config's user is not stored.
        let again = access(&store);
        assert!(again.allows("alice", t, "owner", Privilege::Select));
        assert!(again.role("admin").unwrap().from_config);
        assert!(store.get(&role_key("admin")).unwrap().is_none());

        // A membership cycle is refused; dropping a role takes its memberships and grants.
        let cycle = a.alter_role(&store, "reader", |r| {
            r.member_of.insert("alice".into());
            Ok(())
        });
        assert_eq!(cycle.unwrap_err().state, SqlState::INVALID_GRANT_OPERATION);
        a.drop_role(&store, "reader", false).unwrap();
        assert!(!a.allows("alice", t, "owner", Privilege::Select));
        assert!(a.role("alice").unwrap().member_of.is_empty());
        assert!(a.grants(t).grants.is_empty());
        assert!(a.drop_role(&store, "admin", false).is_err());
    }

    #[test]
    fn public_grants_reach_every_role_and_renames_follow() {
        let store = MemoryStore::default();
        let a = access(&store);
        a.create_role(&store, RoleDef::new("bob"), false).unwrap();
        let t = Object::Relation(1001);
        a.change_grants(&store, t, &[PUBLIC.into()], Privileges::of(&[Privilege::Select, Privilege::Insert]), true)
            .unwrap();
        assert!(a.allows("bob", t, "admin", Privilege::Insert));
        a.change_grants(&store, t, &[PUBLIC.into()], Privileges::of(&[Privilege::Insert]), false).unwrap();
        assert!(!a.allows("bob", t, "admin", Privilege::Insert));
        a.change_grants(&store, t, &["bob".into()], Privileges::of(&[Privilege::Update]), true).unwrap();
        a.rename_role(&store, "bob", "robert").unwrap();
        assert!(a.allows("robert", t, "admin", Privilege::Update));
        assert!(a.role("bob").is_none());
        let again = access(&store);
        assert!(again.allows("robert", t, "admin", Privilege::Update));
        assert_eq!(a.create_role(&store, RoleDef::new("public"), false).unwrap_err().state, SqlState::RESERVED_NAME);
    }
}
