//! `SET name = value` (`weir.epoch_clock` pins the server's epoch clock, `dataflow::clock`),
//! `SET name TO DEFAULT`, `SET TIME ZONE ...`, `SET NAMES ...`, and the
//! transaction-characteristics forms drivers send (accepted; Weir runs every statement at its own
//! commit); `RESET name | ALL`, and `DISCARD ALL | PLANS | TEMP | SEQUENCES`, which connection
//! pools (PgBouncer, pgpool) send between clients, so one client's settings and prepared
//! statements never reach the next.

use datafusion::sql::sqlparser::ast::{DiscardObject, Expr, Reset, Set, Value};

use crate::error::{Result, WeirError};
use crate::frontend::{Frontend, Session, StatementResult};

/// The server-wide setting that pins the time epochs carry (`now()` in views; for tests and
/// demonstrations of temporal filters): a timestamp, or `wall`.
const EPOCH_CLOCK: &str = "weir.epoch_clock";

pub fn handle(fe: &Frontend, session: &mut Session, set: Set) -> Result<StatementResult> {
    match set {
        Set::SingleAssignment { variable, values, .. } => {
            let name = variable.to_string();
            let value = setting_value(&values)?;
            if name.eq_ignore_ascii_case(EPOCH_CLOCK) {
                fe.streaming().coordinator.clock.set(value.as_deref())?;
            }
            session.set(&name, value)?;
        }
        Set::SetTimeZone { value, .. } => {
            let value = setting_value(std::slice::from_ref(&value))?;
            session.set("TimeZone", value)?;
        }
        Set::SetNames { charset_name, .. } => session.set("client_encoding", Some(charset_name.value))?,
        Set::SetTransaction { .. } => {}
        Set::SetRole { .. } | Set::SetSessionAuthorization(_) => {
            return Err(WeirError::unsupported("SET ROLE and SET SESSION AUTHORIZATION are not supported"))
        }
        other => return Err(WeirError::unsupported(format!("not supported: {other}"))),
    }
    Ok(StatementResult::command("SET"))
}

/// `RESET name` (as `SET name TO DEFAULT`) and `RESET ALL`.
pub fn reset(fe: &Frontend, session: &mut Session, reset: Reset) -> Result<StatementResult> {
    match reset {
        Reset::ALL => {
            if session.get(EPOCH_CLOCK).is_ok() {
                fe.streaming().coordinator.clock.set(None)?;
            }
            session.reset_all()?;
        }
        Reset::ConfigurationParameter(name) => {
            let name = name.to_string();
            if name.eq_ignore_ascii_case(EPOCH_CLOCK) {
                fe.streaming().coordinator.clock.set(None)?;
            }
            session.set(&name, None)?;
        }
    }
    Ok(StatementResult::command("RESET"))
}

/// `DISCARD ALL` resets every setting and drops the session's prepared statements and plans, as
/// PostgreSQL does; `DISCARD PLANS` drops the plans. Weir has no temporary objects or
/// sequences, so `DISCARD TEMP` and `DISCARD SEQUENCES` have nothing to drop.
pub fn discard(fe: &Frontend, session: &mut Session, what: DiscardObject) -> Result<StatementResult> {
    match what {
        DiscardObject::ALL => {
            reset(fe, session, Reset::ALL)?;
            session.prepared.clear();
            session.plans.clear();
        }
        DiscardObject::PLANS => session.plans.clear(),
        DiscardObject::SEQUENCES | DiscardObject::TEMP => {}
    }
    Ok(StatementResult::command(&format!("DISCARD {what}")))
}

/// The text of a setting's value; None for DEFAULT.
fn setting_value(values: &[Expr]) -> Result<Option<String>> {
    let mut parts = Vec::with_capacity(values.len());
    for v in values {
        let text = match v {
            Expr::Value(v) => match &v.value {
                Value::SingleQuotedString(s) | Value::DoubleQuotedString(s) => s.clone(),
                Value::Number(n, _) => n.to_string(),
                Value::Boolean(b) => b.to_string(),
                other => other.to_string(),
            },
            Expr::Identifier(i) if i.value.eq_ignore_ascii_case("default") && values.len() == 1 => return Ok(None),
            Expr::Identifier(i) => i.value.clone(),
            Expr::UnaryOp { .. } => v.to_string().replace(' ', ""),
            other => other.to_string(),
        };
        parts.push(text);
    }
    Ok(Some(parts.join(", ")))
}
