//! The statements that manage roles and privileges, read by Weir itself (sqlparser knows some
//! of them only in other dialects' forms and none of role membership or `ON SOURCE`):
//!
//! ```sql
//! CREATE ROLE | USER | GROUP [IF NOT EXISTS] name [[WITH] option ...]
//! ALTER ROLE | USER | GROUP name [WITH] option ... | RENAME TO new
//! DROP ROLE | USER | GROUP [IF EXISTS] name [, ...]
//! GRANT { privilege [, ...] | ALL [PRIVILEGES] } ON { [TABLE | VIEW | MATERIALIZED VIEW | SOURCE | SINK] name [, ...]
//!       | ALL TABLES IN SCHEMA public | DATABASE name } TO { role | PUBLIC } [, ...]
//! REVOKE ... FROM ...
//! GRANT role [, ...] TO role [, ...]     REVOKE role [, ...] FROM role [, ...]
//! SET ROLE name | NONE     RESET ROLE
//! ```
//! options: `[NO]SUPERUSER`, `[NO]CREATEDB`, `[NO]CREATEROLE`, `[NO]LOGIN`, `[NO]INHERIT`,
//! `CONNECTION LIMIT n`, `[ENCRYPTED] PASSWORD 'text' | NULL`, `IN ROLE role [, ...]`.
//! `CREATE USER` logs in by default, as in PostgreSQL. Called by the parser for each statement
//! [`may_be_one`] lets through; run by `handler::roles` and `handler::grant`.

use datafusion::sql::sqlparser::dialect::PostgreSqlDialect;
use datafusion::sql::sqlparser::tokenizer::{Token, Tokenizer};

use crate::catalog::access::{Privilege, PUBLIC};
use crate::error::{Result, WeirError};

/// A role's attributes as a statement sets them; None leaves one as it is (or at its default).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleOptions {
    pub superuser: Option<bool>,
    pub create_db: Option<bool>,
    pub create_role: Option<bool>,
    pub login: Option<bool>,
    pub connection_limit: Option<i32>,
    /// `PASSWORD 'text'` (Some(Some)) or `PASSWORD NULL` (Some(None)).
    pub password: Option<Option<String>>,
    /// `IN ROLE a, b`: roles the new role is a member of.
    pub in_role: Vec<String>,
}

/// What kind of relation a GRANT names (`ON TABLE` takes tables, views and sources alike, as
/// PostgreSQL's does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RelationWord {
    Table,
    View,
    MaterializedView,
    Source,
    Sink,
}

/// What a GRANT or REVOKE is on.
#[derive(Debug, Clone, PartialEq)]
pub enum GrantTarget {
    Relations(RelationWord, Vec<String>),
    /// `ALL TABLES IN SCHEMA public`: every relation there is now.
    AllInSchema,
    Database(String),
}

#[derive(Debug, Clone, PartialEq)]
pub enum AccessStatement {
    CreateRole {
        name: String,
        if_not_exists: bool,
        options: RoleOptions,
    },
    AlterRole {
        name: String,
        options: RoleOptions,
    },
    RenameRole {
        name: String,
        to: String,
    },
    DropRole {
        names: Vec<String>,
        if_exists: bool,
    },
    /// GRANT (`grant`) or REVOKE of privileges; `privileges` None is ALL.
    Privileges {
        grant: bool,
        privileges: Option<Vec<Privilege>>,
        target: GrantTarget,
        grantees: Vec<String>,
    },
    /// GRANT or REVOKE of role membership.
    Membership {
        grant: bool,
        roles: Vec<String>,
        members: Vec<String>,
    },
    /// `SET ROLE name` (None: `SET ROLE NONE`, `RESET ROLE`).
    SetRole(Option<String>),
}

impl AccessStatement {
    /// The command tag a client is sent.
    pub fn tag(&self) -> &'static str {
        match self {
            AccessStatement::CreateRole { .. } => "CREATE ROLE",
            AccessStatement::AlterRole { .. } | AccessStatement::RenameRole { .. } => "ALTER ROLE",
            AccessStatement::DropRole { .. } => "DROP ROLE",
            AccessStatement::Privileges { grant: true, .. } | AccessStatement::Membership { grant: true, .. } => {
                "GRANT"
            }
            AccessStatement::Privileges { grant: false, .. } | AccessStatement::Membership { grant: false, .. } => {
                "REVOKE"
            }
            AccessStatement::SetRole(_) => "SET",
        }
    }

    /// Whether it changes stored roles or grants (and so completes with a checkpoint).
    pub fn changes_catalog(&self) -> bool {
        !matches!(self, AccessStatement::SetRole(_))
    }
}

impl std::fmt::Display for AccessStatement {
    /// The statement with any password masked (logs and errors).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AccessStatement::CreateRole { name, .. } => write!(f, "CREATE ROLE {name} ..."),
            AccessStatement::AlterRole { name, .. } => write!(f, "ALTER ROLE {name} ..."),
            AccessStatement::RenameRole { name, to } => write!(f, "ALTER ROLE {name} RENAME TO {to}"),
            AccessStatement::DropRole { names, .. } => write!(f, "DROP ROLE {}", names.join(", ")),
            AccessStatement::Privileges { grant, grantees, .. } => {
                write!(f, "{} ... {}", if *grant { "GRANT" } else { "REVOKE" }, grantees.join(", "))
            }
            AccessStatement::Membership { grant, roles, members } => write!(
                f,
                "{} {} {} {}",
                if *grant { "GRANT" } else { "REVOKE" },
                roles.join(", "),
                if *grant { "TO" } else { "FROM" },
                members.join(", ")
            ),
            AccessStatement::SetRole(r) => write!(f, "SET ROLE {}", r.as_deref().unwrap_or("NONE")),
        }
    }
}

/// Whether `sql` may hold one of these statements (a cheap test before tokenizing).
pub fn may_be_one(sql: &str) -> bool {
    static START: std::sync::OnceLock<regex::Regex> = std::sync::OnceLock::new();
    START
        .get_or_init(|| {
            regex::Regex::new(
                r"(?i)(^|;)\s*(grant|revoke|(create|alter|drop)\s+(role|user|group)|(set|reset)\s+role)\b",
            )
            .expect("valid")
        })
        .is_match(sql)
}

/// The tokens of a statement, without whitespace, and a cursor over them.
struct Words {
    tokens: Vec<Token>,
    at: usize,
}

impl Words {
    fn peek_keyword(&self, offset: usize) -> Option<String> {
        match self.tokens.get(self.at + offset) {
            Some(Token::Word(w)) if w.quote_style.is_none() => Some(w.value.to_ascii_uppercase()),
            _ => None,
        }
    }

    fn is(&self, keyword: &str) -> bool {
        self.peek_keyword(0).as_deref() == Some(keyword)
    }

    /// Takes the keywords `keywords` if they come next.
    fn take(&mut self, keywords: &[&str]) -> bool {
        let all = keywords.iter().enumerate().all(|(i, k)| self.peek_keyword(i).as_deref() == Some(*k));
        if all {
            self.at += keywords.len();
        }
        all
    }

    fn expect(&mut self, keyword: &str) -> Result<()> {
        if self.take(&[keyword]) {
            Ok(())
        } else {
            Err(self.error(&format!("expected {keyword}")))
        }
    }

    fn error(&self, what: &str) -> WeirError {
        let near = self.tokens.get(self.at).map(|t| t.to_string()).unwrap_or_else(|| "end of input".into());
        WeirError::syntax(format!("{what} at or near \"{near}\""))
    }

    fn done(&self) -> bool {
        self.at >= self.tokens.len()
    }

    /// A name: an unquoted identifier folds to lower case, a quoted one is kept.
    fn name(&mut self) -> Result<String> {
        match self.tokens.get(self.at) {
            Some(Token::Word(w)) => {
                self.at += 1;
                Ok(if w.quote_style.is_some() { w.value.clone() } else { w.value.to_ascii_lowercase() })
            }
            _ => Err(self.error("expected a name")),
        }
    }

    /// A relation name, `public.` allowed before it.
    fn relation(&mut self) -> Result<String> {
        let first = self.name()?;
        if matches!(self.tokens.get(self.at), Some(Token::Period)) {
            self.at += 1;
            if first != crate::catalog::DEFAULT_SCHEMA {
                return Err(WeirError::new(
                    crate::error::SqlState("3F000"),
                    format!("schema \"{first}\" does not exist"),
                ));
            }
            return self.name();
        }
        Ok(first)
    }

    fn comma(&mut self) -> bool {
        if matches!(self.tokens.get(self.at), Some(Token::Comma)) {
            self.at += 1;
            true
        } else {
            false
        }
    }

    fn names(&mut self, one: fn(&mut Words) -> Result<String>) -> Result<Vec<String>> {
        let mut out = vec![one(self)?];
        while self.comma() {
            out.push(one(self)?);
        }
        Ok(out)
    }

    /// A role name, or PUBLIC (as `public`) where `public` may stand.
    fn grantee(&mut self) -> Result<String> {
        let _ = self.take(&["ROLE"]) || self.take(&["GROUP"]) || self.take(&["USER"]);
        if self.take(&["PUBLIC"]) {
            return Ok(PUBLIC.to_string());
        }
        self.name()
    }

    fn string(&mut self) -> Result<String> {
        match self.tokens.get(self.at) {
            Some(Token::SingleQuotedString(s)) | Some(Token::EscapedStringLiteral(s)) => {
                let s = s.clone();
                self.at += 1;
                Ok(s)
            }
            // Not quoting what is there: it may be a password written without quotes.
            _ => Err(WeirError::syntax("expected a quoted string (a password is written in single quotes)")),
        }
    }

    fn integer(&mut self) -> Result<i32> {
        let negative = matches!(self.tokens.get(self.at), Some(Token::Minus));
        if negative {
            self.at += 1;
        }
        match self.tokens.get(self.at) {
            Some(Token::Number(n, _)) => {
                let v: i32 = n.parse().map_err(|_| self.error("expected an integer"))?;
                self.at += 1;
                Ok(if negative { -v } else { v })
            }
            _ => Err(self.error("expected an integer")),
        }
    }
}

/// The statement `sql` is, if it is one of these.
pub fn parse(sql: &str) -> Result<Option<AccessStatement>> {
    let tokens = Tokenizer::new(&PostgreSqlDialect {}, sql).tokenize().map_err(|e| WeirError::syntax(e.to_string()))?;
    let tokens: Vec<Token> = tokens
        .into_iter()
        .filter(|t| !matches!(t, Token::Whitespace(_)))
        .take_while(|t| !matches!(t, Token::SemiColon))
        .collect();
    let mut w = Words { tokens, at: 0 };
    let role_word = |w: &Words, at: usize| matches!(w.peek_keyword(at).as_deref(), Some("ROLE" | "USER" | "GROUP"));
    let statement = if w.is("CREATE") && role_word(&w, 1) {
        let user = w.peek_keyword(1).as_deref() == Some("USER");
        w.at += 2;
        let if_not_exists = w.take(&["IF", "NOT", "EXISTS"]);
        let name = w.name()?;
        let mut options = role_options(&mut w)?;
        if user && options.login.is_none() {
            options.login = Some(true);
        }
        AccessStatement::CreateRole { name, if_not_exists, options }
    } else if w.is("ALTER") && role_word(&w, 1) {
        w.at += 2;
        let name = w.name()?;
        if w.take(&["RENAME", "TO"]) {
            AccessStatement::RenameRole { name, to: w.name()? }
        } else {
            let options = role_options(&mut w)?;
            if !options.in_role.is_empty() {
                return Err(WeirError::syntax("IN ROLE is for CREATE ROLE; use GRANT role TO name"));
            }
            AccessStatement::AlterRole { name, options }
        }
    } else if w.is("DROP") && role_word(&w, 1) {
        w.at += 2;
        let if_exists = w.take(&["IF", "EXISTS"]);
        AccessStatement::DropRole { names: w.names(Words::name)?, if_exists }
    } else if w.is("GRANT") || w.is("REVOKE") {
        let grant = w.is("GRANT");
        w.at += 1;
        grant_or_revoke(&mut w, grant)?
    } else if w.take(&["SET", "ROLE"]) || w.take(&["SET", "SESSION", "ROLE"]) || w.take(&["SET", "LOCAL", "ROLE"]) {
        if w.take(&["NONE"]) {
            AccessStatement::SetRole(None)
        } else {
            let name = match w.tokens.get(w.at) {
                Some(Token::SingleQuotedString(_)) => w.string()?,
                _ => w.name()?,
            };
            AccessStatement::SetRole(Some(name))
        }
    } else if w.take(&["RESET", "ROLE"]) {
        AccessStatement::SetRole(None)
    } else {
        return Ok(None);
    };
    if !w.done() {
        return Err(w.error("syntax error"));
    }
    Ok(Some(statement))
}

fn role_options(w: &mut Words) -> Result<RoleOptions> {
    let mut o = RoleOptions::default();
    w.take(&["WITH"]);
    while !w.done() {
        let Some(word) = w.peek_keyword(0) else { return Err(w.error("expected a role option")) };
        w.at += 1;
        match word.as_str() {
            "SUPERUSER" => o.superuser = Some(true),
            "NOSUPERUSER" => o.superuser = Some(false),
            "CREATEDB" => o.create_db = Some(true),
            "NOCREATEDB" => o.create_db = Some(false),
            "CREATEROLE" => o.create_role = Some(true),
            "NOCREATEROLE" => o.create_role = Some(false),
            "LOGIN" => o.login = Some(true),
            "NOLOGIN" => o.login = Some(false),
            // Weir's roles always inherit; NOINHERIT is refused rather than ignored.
            "INHERIT" => {}
            "NOINHERIT" => return Err(WeirError::unsupported("NOINHERIT: Weir's roles always inherit")),
            "CONNECTION" => {
                w.expect("LIMIT")?;
                let n = w.integer()?;
                if n < -1 {
                    return Err(WeirError::new(
                        crate::error::SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid connection limit: {n}"),
                    ));
                }
                o.connection_limit = Some(n);
            }
            "ENCRYPTED" | "PASSWORD" => {
                if word == "ENCRYPTED" {
                    w.expect("PASSWORD")?;
                }
                o.password = Some(if w.take(&["NULL"]) { None } else { Some(w.string()?) });
            }
            "IN" => {
                if !(w.take(&["ROLE"]) || w.take(&["GROUP"])) {
                    return Err(w.error("expected ROLE"));
                }
                o.in_role.extend(w.names(Words::name)?);
            }
            other => return Err(WeirError::unsupported(format!("role option {other}"))),
        }
    }
    Ok(o)
}

fn grant_or_revoke(w: &mut Words, grant: bool) -> Result<AccessStatement> {
    // Privileges on something, or roles to roles: the first tells by ON coming before TO/FROM.
    let on_at = w.tokens[w.at..]
        .iter()
        .position(|t| matches!(t, Token::Word(k) if k.quote_style.is_none() && k.value.eq_ignore_ascii_case("ON")));
    let to_word = if grant { "TO" } else { "FROM" };
    if on_at.is_none() {
        let roles = w.names(Words::name)?;
        w.expect(to_word)?;
        let members = w.names(Words::grantee)?;
        if members.iter().any(|m| m == PUBLIC) {
            return Err(WeirError::syntax("role membership cannot be granted to PUBLIC"));
        }
        return Ok(AccessStatement::Membership { grant, roles, members });
    }
    let privileges = if w.take(&["ALL"]) {
        w.take(&["PRIVILEGES"]);
        None
    } else {
        let mut list = Vec::new();
        loop {
            let word = w.peek_keyword(0).ok_or_else(|| w.error("expected a privilege"))?;
            let p = Privilege::from_name(&word).ok_or_else(|| {
                WeirError::unsupported(format!(
                    "privilege {word}: Weir has SELECT, INSERT, UPDATE, DELETE, TRUNCATE, USAGE and CREATE"
                ))
            })?;
            w.at += 1;
            list.push(p);
            if !w.comma() {
                break;
            }
        }
        Some(list)
    };
    w.expect("ON")?;
    let target = if w.take(&["ALL", "TABLES", "IN", "SCHEMA"]) {
        let schema = w.name()?;
        if schema != crate::catalog::DEFAULT_SCHEMA {
            return Err(WeirError::new(crate::error::SqlState("3F000"), format!("schema \"{schema}\" does not exist")));
        }
        GrantTarget::AllInSchema
    } else if w.take(&["DATABASE"]) {
        GrantTarget::Database(w.name()?)
    } else {
        let word = if w.take(&["TABLE"]) {
            RelationWord::Table
        } else if w.take(&["MATERIALIZED", "VIEW"]) {
            RelationWord::MaterializedView
        } else if w.take(&["VIEW"]) {
            RelationWord::View
        } else if w.take(&["SOURCE"]) {
            RelationWord::Source
        } else if w.take(&["SINK"]) {
            RelationWord::Sink
        } else {
            RelationWord::Table
        };
        GrantTarget::Relations(word, w.names(Words::relation)?)
    };
    w.expect(to_word)?;
    let grantees = w.names(Words::grantee)?;
    if w.take(&["WITH", "GRANT", "OPTION"]) {
        return Err(WeirError::unsupported("WITH GRANT OPTION: only owners and superusers grant"));
    }
    if !grant {
        let _ = w.take(&["CASCADE"]) || w.take(&["RESTRICT"]);
    }
    Ok(AccessStatement::Privileges { grant, privileges, target, grantees })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(sql: &str) -> AccessStatement {
        parse(sql).unwrap().unwrap_or_else(|| panic!("{sql} is not an access statement"))
    }

    #[test]
    fn role_statements() {
        assert_eq!(
            parsed("CREATE USER Alice WITH PASSWORD 'x' CONNECTION LIMIT 3 IN ROLE readers"),
            AccessStatement::CreateRole {
                name: "alice".into(),
                if_not_exists: false,
                options: RoleOptions {
                    login: Some(true),
                    password: Some(Some("x".into())),
                    connection_limit: Some(3),
                    in_role: vec!["readers".into()],
                    ..Default::default()
                }
            }
        );
        assert_eq!(
            parsed("create role \"Ops\" superuser nologin"),
            AccessStatement::CreateRole {
                name: "Ops".into(),
                if_not_exists: false,
                options: RoleOptions { superuser: Some(true), login: Some(false), ..Default::default() }
            }
        );
        assert_eq!(
            parsed("ALTER ROLE a PASSWORD NULL"),
            AccessStatement::AlterRole {
                name: "a".into(),
                options: RoleOptions { password: Some(None), ..Default::default() }
            }
        );
        assert_eq!(
            parsed("alter user a rename to b"),
            AccessStatement::RenameRole { name: "a".into(), to: "b".into() }
        );
        assert_eq!(
            parsed("DROP ROLE IF EXISTS a, b;"),
            AccessStatement::DropRole { names: vec!["a".into(), "b".into()], if_exists: true }
        );
        assert_eq!(parsed("SET ROLE reader"), AccessStatement::SetRole(Some("reader".into())));
        assert_eq!(parsed("RESET ROLE"), AccessStatement::SetRole(None));
        assert!(parse("CREATE TABLE t (a int)").unwrap().is_none());
        assert!(parse("CREATE ROLE a NOINHERIT").is_err());
        assert!(parse("CREATE ROLE a FROBNICATE").is_err());
        let unquoted = parse("CREATE ROLE a PASSWORD hunter2").unwrap_err();
        assert!(!unquoted.message.contains("hunter2"), "{}", unquoted.message);
    }

    #[test]
    fn grants() {
        assert_eq!(
            parsed("GRANT SELECT, insert ON TABLE public.t, v TO reader, PUBLIC"),
            AccessStatement::Privileges {
                grant: true,
                privileges: Some(vec![Privilege::Select, Privilege::Insert]),
                target: GrantTarget::Relations(RelationWord::Table, vec!["t".into(), "v".into()]),
                grantees: vec!["reader".into(), "public".into()],
            }
        );
        assert_eq!(
            parsed("REVOKE ALL PRIVILEGES ON MATERIALIZED VIEW mv FROM reader CASCADE"),
            AccessStatement::Privileges {
                grant: false,
                privileges: None,
                target: GrantTarget::Relations(RelationWord::MaterializedView, vec!["mv".into()]),
                grantees: vec!["reader".into()],
            }
        );
        assert_eq!(
            parsed("GRANT USAGE ON SOURCE bids TO etl"),
            AccessStatement::Privileges {
                grant: true,
                privileges: Some(vec![Privilege::Usage]),
                target: GrantTarget::Relations(RelationWord::Source, vec!["bids".into()]),
                grantees: vec!["etl".into()],
            }
        );
        assert_eq!(
            parsed("GRANT CREATE ON DATABASE dev TO etl"),
            AccessStatement::Privileges {
                grant: true,
                privileges: Some(vec![Privilege::Create]),
                target: GrantTarget::Database("dev".into()),
                grantees: vec!["etl".into()],
            }
        );
        assert_eq!(
            parsed("GRANT readers, writers TO alice"),
            AccessStatement::Membership {
                grant: true,
                roles: vec!["readers".into(), "writers".into()],
                members: vec!["alice".into()]
            }
        );
        assert_eq!(
            parsed("REVOKE readers FROM alice"),
            AccessStatement::Membership { grant: false, roles: vec!["readers".into()], members: vec!["alice".into()] }
        );
        assert!(parse("GRANT SELECT ON t TO a WITH GRANT OPTION").is_err());
        assert!(parse("GRANT EXECUTE ON t TO a").is_err());
        assert!(may_be_one("  grant select on t to a"));
        assert!(may_be_one("select 1; DROP USER a"));
        assert!(!may_be_one("select grantee from information_schema.table_privileges"));
    }
}
