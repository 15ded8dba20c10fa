//! One client session as the front end sees it: who is connected, the session's settings
//! (`SET` / `SHOW`), its DataFusion context, and its transaction block state.
//!
//! Settings follow Postgres: names are case-insensitive, each has a default, some are
//! read-only, and those Postgres reports to clients (`GUC_REPORT`) are queued as ParameterStatus
//! messages when they change. Unknown names are an error (42704) unless they contain a dot
//! (custom settings, as in Postgres).

use std::collections::BTreeMap;
use std::sync::Arc;

use datafusion::prelude::SessionContext;

use crate::error::{Result, SqlState, WeirError};

/// The Postgres version Weir reports; clients use it to pick protocol features.
pub const SERVER_VERSION: &str = "15.0";

/// A known setting: its canonical name, default, whether clients are told of changes, and
/// whether users may change it.
struct SettingSpec {
    name: &'static str,
    default: &'static str,
    reported: bool,
    read_only: bool,
    description: &'static str,
}

const SETTINGS: &[SettingSpec] = &[
    SettingSpec {
        name: "application_name",
        default: "",
        reported: true,
        read_only: false,
        description: "Sets the application name to be reported in statistics and logs.",
    },
    SettingSpec {
        name: "bytea_output",
        default: "hex",
        reported: false,
        read_only: false,
        description: "Sets the output format for bytea.",
    },
    SettingSpec {
        name: "client_encoding",
        default: "UTF8",
        reported: true,
        read_only: false,
        description: "Sets the client's character set encoding.",
    },
    SettingSpec {
        name: "client_min_messages",
        default: "notice",
        reported: false,
        read_only: false,
        description: "Sets the message levels that are sent to the client.",
    },
    SettingSpec {
        name: "DateStyle",
        default: "ISO, MDY",
        reported: true,
        read_only: false,
        description: "Sets the display format for date and time values.",
    },
    SettingSpec {
        name: "default_transaction_isolation",
        default: "read committed",
        reported: false,
        read_only: false,
        description: "Sets the transaction isolation level of each new transaction.",
    },
    SettingSpec {
        name: "default_transaction_read_only",
        default: "off",
        reported: true,
        read_only: false,
        description: "Sets the default read-only status of new transactions.",
    },
    SettingSpec {
        name: "extra_float_digits",
        default: "1",
        reported: false,
        read_only: false,
        description: "Sets the number of digits displayed for floating-point values.",
    },
    SettingSpec {
        name: "idle_in_transaction_session_timeout",
        default: "0",
        reported: false,
        read_only: false,
        description: "Accepted for compatibility.",
    },
    SettingSpec {
        name: "implicit_flush",
        default: "false",
        reported: false,
        read_only: false,
        description: "Weir: each DML statement waits until its changes are visible in every view.",
    },
    SettingSpec {
        name: "integer_datetimes",
        default: "on",
        reported: true,
        read_only: true,
        description: "Shows whether datetimes are integer based.",
    },
    SettingSpec {
        name: "IntervalStyle",
        default: "postgres",
        reported: true,
        read_only: false,
        description: "Sets the display format for interval values.",
    },
    SettingSpec {
        name: "streaming_parallelism",
        default: "0",
        reported: false,
        read_only: false,
        description: "Weir: shards a new materialized view's operators run in (0 = one per core).",
    },
    SettingSpec {
        name: "min_parallel_table_scan_size",
        default: "8MB",
        reported: false,
        read_only: false,
        description: "Sets the minimum amount of table data for a parallel scan.",
    },
    SettingSpec {
        name: "jit",
        default: "off",
        reported: false,
        read_only: false,
        description: "Accepted for compatibility; Weir has no JIT to switch.",
    },
    SettingSpec {
        name: "is_superuser",
        default: "on",
        reported: true,
        read_only: true,
        description: "Shows whether the current user is a superuser.",
    },
    SettingSpec {
        name: "lc_messages",
        default: "en_US.UTF-8",
        reported: false,
        read_only: false,
        description: "Sets the language in which messages are displayed.",
    },
    SettingSpec {
        name: "lock_timeout",
        default: "0",
        reported: false,
        read_only: false,
        description: "Accepted for compatibility.",
    },
    SettingSpec {
        name: "max_identifier_length",
        default: "63",
        reported: false,
        read_only: true,
        description: "Shows the maximum identifier length.",
    },
    SettingSpec {
        name: "search_path",
        default: "\"$user\", public",
        reported: true,
        read_only: false,
        description: "Sets the schema search order for names that are not schema-qualified.",
    },
    SettingSpec {
        name: "server_encoding",
        default: "UTF8",
        reported: true,
        read_only: true,
        description: "Shows the server (database) character set encoding.",
    },
    SettingSpec {
        name: "server_version",
        default: SERVER_VERSION,
        reported: true,
        read_only: true,
        description: "Shows the server version.",
    },
    SettingSpec {
        name: "server_version_num",
        default: "150000",
        reported: false,
        read_only: true,
        description: "Shows the server version as an integer.",
    },
    SettingSpec {
        name: "standard_conforming_strings",
        default: "on",
        reported: true,
        read_only: false,
        description: "Causes '...' strings to treat backslashes literally.",
    },
    SettingSpec {
        name: "statement_timeout",
        default: "0",
        reported: false,
        read_only: false,
        description: "Sets the maximum allowed duration of any statement (milliseconds, 0 = none).",
    },
    SettingSpec {
        name: "TimeZone",
        default: "UTC",
        reported: true,
        read_only: false,
        description: "Sets the time zone for displaying and interpreting time stamps.",
    },
    SettingSpec {
        name: "transaction_isolation",
        default: "read committed",
        reported: false,
        read_only: false,
        description: "Sets the current transaction's isolation level.",
    },
    SettingSpec {
        name: "transaction_read_only",
        default: "off",
        reported: false,
        read_only: false,
        description: "Sets the current transaction's read-only status.",
    },
];

fn spec(name: &str) -> Option<&'static SettingSpec> {
    SETTINGS.iter().find(|s| s.name.eq_ignore_ascii_case(name))
}

/// The settings reported to a client right after it connects.
pub fn startup_parameters() -> Vec<(&'static str, &'static str)> {
    SETTINGS.iter().filter(|s| s.reported).map(|s| (s.name, s.default)).collect()
}

/// Every known setting with its default value and description.
pub fn all_defaults() -> Vec<(&'static str, &'static str, &'static str)> {
    SETTINGS.iter().map(|s| (s.name, s.default, s.description)).collect()
}

/// Who a session is: the user it logged in as (`session_user`) and the role its statements run
/// as (`current_user`, which `SET ROLE` changes), read by the SQL functions of those names and by
/// the privilege checks (`frontend::authorize`).
#[derive(Debug)]
pub struct Identity {
    pub user: String,
    role: parking_lot::RwLock<String>,
    /// The user is no role: trust authentication let it in under a name the catalog does not
    /// know (or it is one of the server's own sessions), and it acts as a superuser.
    pub unlisted: bool,
}

impl Identity {
    pub fn new(user: &str, unlisted: bool) -> Identity {
        Identity { user: user.to_string(), role: parking_lot::RwLock::new(user.to_string()), unlisted }
    }

    /// The role statements run as.
    pub fn role(&self) -> String {
        self.role.read().clone()
    }

    pub fn set_role(&self, role: &str) {
        *self.role.write() = role.to_string();
    }

    /// Whether it acts as its unlisted user now (no SET ROLE to a role since): a superuser
    /// that owns nothing by name.
    pub fn acts_unlisted(&self) -> bool {
        self.unlisted && *self.role.read() == self.user
    }
}

pub struct Session {
    pub user: String,
    pub identity: Arc<Identity>,
    pub database: String,
    pub ctx: SessionContext,
    /// Values set in this session, by canonical name (lower case for custom settings).
    values: Values,
    /// ParameterStatus messages owed to the client.
    reports: Vec<(String, String)>,
    /// Plans of statements run before, to run again.
    pub plans: super::plan_cache::PlanCache,
    /// Statements kept by SQL `PREPARE`, by name (`handler::prepare`).
    pub prepared: std::collections::HashMap<String, super::handler::prepare::Prepared>,
    /// The open transaction block's writes, if any (`handler::transaction`); the same slot
    /// the DataFusion context carries to the table providers.
    pub transaction: Arc<crate::catalog::transaction::TransactionSlot>,
    /// How its scans are planned; the same settings the DataFusion context carries to the
    /// table providers.
    scan_settings: Arc<crate::catalog::scan::ScanSettings>,
}

impl Session {
    pub fn new(identity: Arc<Identity>, database: String, ctx: SessionContext) -> Session {
        let user = identity.user.clone();
        let values: Values = Arc::default();
        register_current_setting(&ctx, &user, &values);
        let (transaction, scan_settings) = {
            let state = ctx.state_ref();
            let state = state.read();
            (
                state.config().get_extension::<crate::catalog::transaction::TransactionSlot>().unwrap_or_default(),
                state.config().get_extension::<crate::catalog::scan::ScanSettings>().unwrap_or_default(),
            )
        };
        Session {
            transaction,
            scan_settings,
            identity,
            user,
            database,
            ctx,
            values,
            reports: Vec::new(),
            plans: Default::default(),
            prepared: Default::default(),
        }
    }

    /// The role a relation this session makes is owned by: its current role, or none (the
    /// superusers') for a user that is no role.
    pub fn owner(&self) -> String {
        if self.identity.acts_unlisted() {
            String::new()
        } else {
            self.identity.role()
        }
    }

    /// The current value of a setting, or 42704 if there is no such setting.
    pub fn get(&self, name: &str) -> Result<String> {
        lookup(&self.values, &self.user, name)
    }

    /// Changes a setting; `None` resets it to its default.
    pub fn set(&mut self, name: &str, value: Option<String>) -> Result<()> {
        // Plans were made under the old settings.
        self.plans.clear();
        let Some(s) = spec(name) else {
            if !name.contains('.') {
                return Err(unknown(name));
            }
            match value {
                Some(v) => self.values.write().insert(name.to_ascii_lowercase(), v),
                None => self.values.write().remove(&name.to_ascii_lowercase()),
            };
            return Ok(());
        };
        if s.read_only {
            return Err(WeirError::new(SqlState("55P02"), format!("parameter \"{}\" cannot be changed", s.name)));
        }
        let value = value.unwrap_or_else(|| s.default.to_string());
        let value = self.apply(s.name, value)?;
        if s.reported {
            self.reports.push((s.name.to_string(), value.clone()));
        }
        self.values.write().insert(s.name.to_string(), value);
        Ok(())
    }

    /// `RESET ALL`: every setting this session changed goes back to its default (the read-only
    /// ones cannot have changed).
    pub fn reset_all(&mut self) -> Result<()> {
        let changed: Vec<String> = self.values.read().keys().cloned().collect();
        for name in changed {
            if !spec(&name).is_some_and(|s| s.read_only) {
                self.set(&name, None)?;
            }
        }
        Ok(())
    }

    /// Validates a value and pushes it into DataFusion where it matters there. Returns the value
    /// as it should be displayed.
    fn apply(&mut self, name: &str, value: String) -> Result<String> {
        match name {
            "TimeZone" => {
                let offset = timezone_offset(&value).ok_or_else(|| {
                    WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for parameter \"TimeZone\": \"{value}\""),
                    )
                })?;
                let state = self.ctx.state_ref();
                state.write().config_mut().options_mut().execution.time_zone = Some(offset);
                Ok(value)
            }
            "client_encoding" => {
                let v = value.to_ascii_uppercase().replace('-', "");
                if v != "UTF8" && v != "UNICODE" {
                    return Err(WeirError::new(
                        SqlState("22023"),
                        format!(
                            "invalid value for parameter \"client_encoding\": \"{value}\" (only UTF8 is supported)"
                        ),
                    ));
                }
                Ok("UTF8".into())
            }
            "implicit_flush"
            | "standard_conforming_strings"
            | "transaction_read_only"
            | "default_transaction_read_only" => parse_bool(&value)
                .map(|b| {
                    if name == "implicit_flush" {
                        b.to_string()
                    } else if b {
                        "on".into()
                    } else {
                        "off".into()
                    }
                })
                .ok_or_else(|| {
                    WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("parameter \"{name}\" requires a Boolean value"),
                    )
                }),
            "min_parallel_table_scan_size" => {
                apply_parallel_scan_size(&self.scan_settings, &value)?;
                Ok(value)
            }
            "streaming_parallelism" => match value.parse::<usize>() {
                Ok(n) if n <= 64 => Ok(n.to_string()),
                _ => Err(WeirError::new(
                    SqlState::INVALID_PARAMETER_VALUE,
                    format!("streaming_parallelism must be a number from 0 to 64, not \"{value}\""),
                )),
            },
            "statement_timeout" | "lock_timeout" | "idle_in_transaction_session_timeout" | "extra_float_digits" => {
                let digits: String = value.chars().take_while(|c| c.is_ascii_digit() || *c == '-').collect();
                digits.parse::<i64>().map_err(|_| {
                    WeirError::new(
                        SqlState::INVALID_PARAMETER_VALUE,
                        format!("invalid value for parameter \"{name}\": \"{value}\""),
                    )
                })?;
                Ok(value)
            }
            _ => Ok(value),
        }
    }

    /// Every known setting with its value and description (SHOW ALL).
    pub fn all(&self) -> Vec<(String, String, String)> {
        SETTINGS
            .iter()
            .map(|s| (s.name.to_string(), self.get(s.name).unwrap_or_default(), s.description.to_string()))
            .collect()
    }

    /// Takes the ParameterStatus messages owed to the client.
    pub fn take_reports(&mut self) -> Vec<(String, String)> {
        std::mem::take(&mut self.reports)
    }

    /// Shards for a new view: `streaming_parallelism`, or one per core when it is 0.
    pub fn streaming_parallelism(&self) -> usize {
        match self.get("streaming_parallelism").ok().and_then(|v| v.parse::<usize>().ok()) {
            Some(n) if n > 0 => n,
            _ => std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
        }
    }

    /// `statement_timeout` (milliseconds, or with a unit: `5s`, `2min`), None when 0.
    pub fn statement_timeout(&self) -> Option<std::time::Duration> {
        let value = self.get("statement_timeout").ok()?;
        let v = value.trim().to_ascii_lowercase();
        let digits: String = v.chars().take_while(|c| c.is_ascii_digit()).collect();
        let n: u64 = digits.parse().ok()?;
        let millis = match v[digits.len()..].trim() {
            "" | "ms" => n,
            "s" => n * 1000,
            "min" => n * 60_000,
            "h" => n * 3_600_000,
            _ => return None,
        };
        (millis > 0).then(|| std::time::Duration::from_millis(millis))
    }

    pub fn implicit_flush(&self) -> bool {
        self.get("implicit_flush").map(|v| v == "true").unwrap_or(false)
    }
}

/// A size setting's bytes, as PostgreSQL reads it: a whole number with a unit (`B`, `kB`, `MB`,
/// `GB`, `TB`, case as written), or alone a number of 8 kB blocks.
fn size_setting(value: &str) -> Option<u64> {
    let value = value.trim();
    let digits = value.find(|c: char| !c.is_ascii_digit()).unwrap_or(value.len());
    let number: u64 = value[..digits].parse().ok()?;
    let unit: u64 = match value[digits..].trim() {
        "" => 8 << 10,
        "B" => 1,
        "kB" => 1 << 10,
        "MB" => 1 << 20,
        "GB" => 1 << 30,
        "TB" => 1 << 40,
        _ => return None,
    };
    number.checked_mul(unit)
}

/// `min_parallel_table_scan_size = value` into the session's scan settings (by SET and by
/// `set_config`); 22023 for a size [`size_setting`] cannot read.
fn apply_parallel_scan_size(settings: &crate::catalog::scan::ScanSettings, value: &str) -> Result<()> {
    let bytes = size_setting(value).ok_or_else(|| {
        WeirError::new(
            SqlState::INVALID_PARAMETER_VALUE,
            format!("invalid value for parameter \"min_parallel_table_scan_size\": \"{value}\""),
        )
        .with_hint("Valid units for this parameter are \"B\", \"kB\", \"MB\", \"GB\", and \"TB\"; a number alone counts 8 kB blocks.")
    })?;
    settings.set_parts_from_bytes(bytes);
    Ok(())
}

/// Values set in a session, by canonical name; shared with its `current_setting` function.
type Values = Arc<parking_lot::RwLock<BTreeMap<String, String>>>;

fn lookup(values: &Values, user: &str, name: &str) -> Result<String> {
    if name.eq_ignore_ascii_case("session_authorization") {
        return Ok(user.to_string());
    }
    let values = values.read();
    match spec(name) {
        Some(s) => Ok(values.get(s.name).cloned().unwrap_or_else(|| s.default.to_string())),
        None => values.get(&name.to_ascii_lowercase()).cloned().ok_or_else(|| unknown(name)),
    }
}

/// `current_setting(name [, missing_ok])` and `set_config(name, value, is_local)` over this
/// session's settings (set_config refuses TimeZone and client_encoding, which need SET).
fn register_current_setting(ctx: &SessionContext, user: &str, values: &Values) {
    use super::function_args::argument_arrays;
    use datafusion::arrow::array::{Array, AsArray, StringArray};
    use datafusion::arrow::datatypes::DataType;
    use datafusion::logical_expr::expr_fn::SimpleScalarUDF;
    use datafusion::logical_expr::{ColumnarValue, ScalarUDF, Signature, TypeSignature, Volatility};
    let values_for_set = Arc::clone(values);
    let (values, user) = (Arc::clone(values), user.to_string());
    let signature = Signature::one_of(
        vec![TypeSignature::Exact(vec![DataType::Utf8]), TypeSignature::Exact(vec![DataType::Utf8, DataType::Boolean])],
        Volatility::Stable,
    );
    let udf = SimpleScalarUDF::new_with_signature(
        "current_setting",
        signature,
        DataType::Utf8,
        Arc::new(move |args| {
            let (n, arrays) = argument_arrays(args)?;
            let names = arrays[0].as_string::<i32>();
            let missing_ok = arrays.get(1);
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                if names.is_null(i) {
                    out.push(None);
                    continue;
                }
                match lookup(&values, &user, names.value(i)) {
                    Ok(v) => out.push(Some(v)),
                    Err(_) if missing_ok.as_ref().is_some_and(|m| m.as_boolean().value(i)) => out.push(None),
                    Err(e) => return Err(e.into()),
                }
            }
            Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
        }),
    );
    ctx.register_udf(ScalarUDF::from(udf));

    // set_config(name, value, is_local): what drivers call instead of SET.
    let values = Arc::clone(&values_for_set);
    let scan_settings = ctx.state_ref().read().config().get_extension::<crate::catalog::scan::ScanSettings>();
    let set_config = SimpleScalarUDF::new_with_signature(
        "set_config",
        Signature::exact(vec![DataType::Utf8, DataType::Utf8, DataType::Boolean], Volatility::Volatile),
        DataType::Utf8,
        Arc::new(move |args| {
            let (n, arrays) = argument_arrays(args)?;
            let (names, new_values) = (arrays[0].as_string::<i32>(), arrays[1].as_string::<i32>());
            let mut out = Vec::with_capacity(n);
            for i in 0..n {
                let name = names.value(i);
                let key = match spec(name) {
                    Some(s) if s.read_only => {
                        return Err(WeirError::new(
                            SqlState("55P02"),
                            format!("parameter \"{}\" cannot be changed", s.name),
                        )
                        .into())
                    }
                    // These also reconfigure the session's query engine, which only SET does.
                    Some(s) if matches!(s.name, "TimeZone" | "client_encoding") => {
                        return Err(WeirError::unsupported(format!(
                            "set_config cannot change \"{}\"; use SET {} = ...",
                            s.name, s.name
                        ))
                        .into())
                    }
                    Some(s) => s.name.to_string(),
                    None if name.contains('.') => name.to_ascii_lowercase(),
                    None => return Err(unknown(name).into()),
                };
                let value = if new_values.is_null(i) { String::new() } else { new_values.value(i).to_string() };
                // Read by the table providers from the session's scan settings, as SET does.
                if let Some(settings) = scan_settings.as_ref().filter(|_| key == "min_parallel_table_scan_size") {
                    apply_parallel_scan_size(settings, &value)?;
                }
                values.write().insert(key, value.clone());
                out.push(Some(value));
            }
            Ok(ColumnarValue::Array(Arc::new(StringArray::from(out))))
        }),
    );
    ctx.register_udf(ScalarUDF::from(set_config));
}

fn unknown(name: &str) -> WeirError {
    WeirError::new(SqlState::UNDEFINED_PARAMETER, format!("unrecognized configuration parameter \"{name}\""))
}

fn parse_bool(v: &str) -> Option<bool> {
    match v.to_ascii_lowercase().as_str() {
        "on" | "true" | "yes" | "1" | "t" => Some(true),
        "off" | "false" | "no" | "0" | "f" => Some(false),
        _ => None,
    }
}

/// The fixed UTC offset DataFusion should use for a Postgres time zone name. Named zones other
/// than UTC are passed through for DataFusion (chrono-tz) to resolve.
fn timezone_offset(tz: &str) -> Option<String> {
    let t = tz.trim();
    if t.eq_ignore_ascii_case("utc") || t.eq_ignore_ascii_case("gmt") || t.eq_ignore_ascii_case("z") || t == "Etc/UTC" {
        return Some("+00:00".into());
    }
    if t.starts_with('+') || t.starts_with('-') {
        return Some(t.to_string());
    }
    if t.contains('/') {
        return Some(t.to_string());
    }
    None
}
