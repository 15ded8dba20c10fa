//! The `WITH (...)` options of a source, with typed access. Every key a connector does not
//! read is an error when the source is created, so a misspelt option is caught at once.

use std::collections::BTreeMap;

use crate::error::{Result, SqlState, WeirError};

/// Options as given, keys lower-cased. Debug output masks secret values (its impl is in
/// [`super::secrets`]), so options with resolved secrets never print them.
#[derive(Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ConnectorOptions(pub BTreeMap<String, String>);

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

impl ConnectorOptions {
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// A whole number option, or `default`.
    pub fn u64_or(&self, key: &str, default: u64) -> Result<u64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| invalid(format!("option {key} must be a whole number, not '{v}'"))),
        }
    }

    pub fn i64_or(&self, key: &str, default: i64) -> Result<i64> {
        match self.get(key) {
            None => Ok(default),
            Some(v) => v.trim().parse().map_err(|_| invalid(format!("option {key} must be a whole number, not '{v}'"))),
        }
    }

    /// Fails on keys outside `known`.
    pub fn only(&self, known: &[&str]) -> Result<()> {
        self.only_or(known, |_| false)
    }

    /// Fails on keys outside `known` for which `also` is false (a connector passing a family of
    /// keys through, such as Kafka's `properties.*`).
    pub fn only_or(&self, known: &[&str], also: impl Fn(&str) -> bool) -> Result<()> {
        match self.0.keys().find(|k| !known.contains(&k.as_str()) && !also(k)) {
            Some(unknown) => {
                Err(invalid(format!("unknown option {unknown}; this connector takes {}", known.join(", "))))
            }
            None => Ok(()),
        }
    }
}
