//! `SET name = value` (`weir.epoch_clock` pins the server's epoch clock, `dataflow::clock`), `SET name TO DEFAULT`, `SET TIME ZONE ...`, `SET NAMES ...`, and the
//! transaction-characteristics forms drivers send (accepted; Weir runs every statement at its own
//! commit).

use datafusion::sql::sqlparser::ast::{Expr, Set, Value};

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
