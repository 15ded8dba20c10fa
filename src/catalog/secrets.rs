//! Secrets in connector options: which options are secrets, where their values may come from,
//! and their redaction wherever Weir shows options or statement text.
//!
//! - **Which**: an option whose last name part says it holds a credential
//!   (`properties.sasl.password`, `properties.ssl.key.password`, `properties.ssl.key.pem`,
//!   `properties.sasl.jaas.config`, `s3.secret_access_key`, `schema.registry.password`, ...:
//!   [`is_secret`]), and the password of a Postgres URL.
//! - **From where**: a secret option `X` may instead be given as `X.ref = 'env:NAME'` (an
//!   environment variable of the server whose name starts with [`ENV_PREFIX`]) or `X.ref =
//!   'file:/path'` (a file's contents, a trailing newline dropped: Kubernetes Secrets mounted as
//!   files) in the server's secrets directory ([`set_directory`], `--secrets-dir`). The
//!   reference is what the catalog keeps; [`resolved`] reads the value each time a connector is
//!   made from the options (CREATE, the server's start), so the value is never stored and a
//!   rotated one is taken at a restart. Only secret options, and only those places: an SQL user
//!   can neither read another option's value back through an error (`topic.ref`) nor send the
//!   server's other variables (its S3 keys) or files to a broker of their choosing.
//! - **Redaction**: [`redact_sql`] masks secret values in statement text (logs, `SHOW CREATE`),
//!   [`scrub`] masks them in messages (errors that quote the statement).
//!
//! Called by the connector registry (resolution) and by the session and SHOW handlers
//! (redaction).

use std::borrow::Cow;
use std::sync::OnceLock;

use regex::Regex;

use super::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

/// The suffix of an option that names where its value comes from.
pub const REFERENCE: &str = ".ref";

/// What a redacted value reads as.
pub const REDACTED: &str = "[redacted]";

/// What the names of environment variables secret references may read start with.
pub const ENV_PREFIX: &str = "WEIR_SECRET_";

static DIRECTORY: std::sync::RwLock<Option<std::path::PathBuf>> = std::sync::RwLock::new(None);

/// The directory secret references may read files from (the server's `secrets_dir`).
pub fn set_directory(directory: std::path::PathBuf) {
    *DIRECTORY.write().unwrap_or_else(|e| e.into_inner()) = Some(directory);
}

fn directory() -> std::path::PathBuf {
    let set = DIRECTORY.read().unwrap_or_else(|e| e.into_inner()).clone();
    set.unwrap_or_else(|| std::path::PathBuf::from(crate::config::DEFAULT_SECRETS_DIR))
}

/// The contents of `path` if it lies in the secrets directory (after resolving links and
/// `..`), for the reference `key`.
fn secret_file(key: &str, path: &str) -> Result<String> {
    let invalid = |message: String| WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message);
    let allowed = directory();
    let inside = std::fs::canonicalize(path)
        .ok()
        .zip(std::fs::canonicalize(&allowed).ok())
        .is_some_and(|(file, dir)| file.starts_with(dir));
    if !inside {
        return Err(invalid(format!(
            "option {key}: {path} is not a readable file in the server's secrets directory ({})",
            allowed.display()
        ))
        .with_hint("Put the secret in a file there, or start the server with --secrets-dir."));
    }
    std::fs::read_to_string(path).map_err(|e| invalid(format!("option {key}: cannot read the file {path}: {e}")))
}

/// Whether the option `key` holds a credential (compared case-insensitively).
pub fn is_secret(key: &str) -> bool {
    let key = key.to_ascii_lowercase();
    if key.ends_with(REFERENCE) {
        return false;
    }
    ["password", "secret", "jaas.config", "key.pem", "user.info", "token"].iter().any(|word| key.ends_with(word))
        || key.ends_with("secret_access_key")
}

/// `options` with every `X.ref` replaced by `X` and the value it refers to; 22023 when a
/// reference is malformed, names a variable that is not set or a file that cannot be read, or
/// when both `X` and `X.ref` are given.
pub fn resolved(options: &ConnectorOptions) -> Result<Cow<'_, ConnectorOptions>> {
    if !options.0.keys().any(|k| k.ends_with(REFERENCE)) {
        return Ok(Cow::Borrowed(options));
    }
    let invalid = |message: String| WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message);
    let mut out = options.clone();
    for (key, reference) in &options.0 {
        let Some(name) = key.strip_suffix(REFERENCE) else { continue };
        if options.0.contains_key(name) {
            return Err(invalid(format!("option {name} is given twice: as a value and as {key}")));
        }
        if !is_secret(name) {
            return Err(invalid(format!(
                "option {key}: only secrets (passwords, keys, secrets, tokens) may be given by reference"
            )));
        }
        let value = match reference.split_once(':') {
            Some(("env", variable)) if !variable.starts_with(ENV_PREFIX) => {
                return Err(invalid(format!(
                "option {key}: secret references read only environment variables named {ENV_PREFIX}*, not {variable}"
            )))
            }
            Some(("env", variable)) => std::env::var(variable).map_err(|_| {
                invalid(format!("option {key}: the environment variable {variable} is not set in the server"))
            })?,
            Some(("file", path)) => {
                let text = secret_file(key, path)?;
                text.strip_suffix('\n').map(|t| t.strip_suffix('\r').unwrap_or(t)).unwrap_or(&text).to_string()
            }
            _ => {
                return Err(invalid(format!("option {key} must be 'env:VARIABLE' or 'file:/path', not '{reference}'")))
            }
        };
        out.0.remove(key);
        out.0.insert(name.to_string(), value);
    }
    Ok(Cow::Owned(out))
}

/// Options as Debug shows them: secret values masked.
impl std::fmt::Debug for ConnectorOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.0.iter().map(|(key, value)| (key, if is_secret(key) { REDACTED } else { value.as_str() }));
        f.debug_map().entries(shown).finish()
    }
}

/// `key = 'value'` pairs of a statement's WITH options whose key is a secret, and the password
/// part of a URL (`//user:password@`, `password=...`).
fn patterns() -> &'static [Regex; 2] {
    static PATTERNS: OnceLock<[Regex; 2]> = OnceLock::new();
    PATTERNS.get_or_init(|| {
        [
            Regex::new(r#"(?i)((?:"[^"]*"|[a-z_][a-z0-9_.]*)\s*=\s*)'((?:[^']|'')*)'"#).expect("valid"),
            Regex::new(r"(?i)(//[^:/@\s']+:)([^@/\s']+)(@)|([?&]password=)([^&\s']+)").expect("valid"),
        ]
    })
}

/// The option name of a `key = 'value'` match (`key =` without the `=`, spaces and quotes).
fn key_of<'t>(c: &regex::Captures<'t>) -> &'t str {
    let key = c.get(1).map_or("", |m| m.as_str());
    key.trim_end_matches(|ch: char| ch == '=' || ch.is_whitespace()).trim_matches('"')
}

/// The secret values written in `sql`'s text (as [`redact_sql`] would mask them).
pub fn secret_values(sql: &str) -> Vec<String> {
    let [pairs, urls] = patterns();
    let mut values = Vec::new();
    for c in pairs.captures_iter(sql) {
        if is_secret(key_of(&c)) && !c[2].is_empty() {
            values.push(c[2].replace("''", "'"));
        }
    }
    for c in urls.captures_iter(sql) {
        if let Some(v) = c.get(2).or_else(|| c.get(5)) {
            values.push(v.as_str().to_string());
        }
    }
    values
}

/// `sql` with the value of every secret option and every URL password replaced by [`REDACTED`].
pub fn redact_sql(sql: &str) -> Cow<'_, str> {
    let masked = patterns()[0].replace_all(sql, |c: &regex::Captures<'_>| {
        if is_secret(key_of(c)) {
            format!("{}'{REDACTED}'", &c[1])
        } else {
            c[0].to_string()
        }
    });
    match masked {
        Cow::Borrowed(text) => redact_urls(text),
        Cow::Owned(text) => Cow::Owned(redact_urls(&text).into_owned()),
    }
}

/// `text` with the password of every URL in it (`//user:password@`, `password=...`) masked.
pub fn redact_urls(text: &str) -> Cow<'_, str> {
    patterns()[1].replace_all(text, |c: &regex::Captures<'_>| match (c.get(1), c.get(4)) {
        (Some(user), _) => format!("{}{REDACTED}@", user.as_str()),
        (_, Some(parameter)) => format!("{}{REDACTED}", parameter.as_str()),
        _ => c[0].to_string(),
    })
}

/// `message` with every one of `secrets` replaced by [`REDACTED`].
pub fn scrub(message: &str, secrets: &[String]) -> String {
    let mut out = message.to_string();
    for secret in secrets.iter().filter(|s| s.len() >= 3) {
        out = out.replace(secret.as_str(), REDACTED);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn secret_options_are_masked_and_others_kept() {
        let sql = "CREATE SOURCE s WITH (connector = 'kafka', properties.sasl.username = 'alice', \
                   properties.sasl.password = 'it''s', properties.ssl.key.password='k3y', \
                   s3.secret_access_key = 'AKIA', properties.sasl.password.ref = 'env:P') FORMAT PLAIN ENCODE JSON";
        let redacted = redact_sql(sql);
        assert_eq!(
            redacted,
            "CREATE SOURCE s WITH (connector = 'kafka', properties.sasl.username = 'alice', \
             properties.sasl.password = '[redacted]', properties.ssl.key.password='[redacted]', \
             s3.secret_access_key = '[redacted]', properties.sasl.password.ref = 'env:P') FORMAT PLAIN ENCODE JSON"
        );
        assert_eq!(secret_values(sql), vec!["it's", "k3y", "AKIA"]);
        let options = ConnectorOptions(
            [("properties.sasl.password", "k3y"), ("topic", "t")]
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        assert_eq!(format!("{options:?}"), r#"{"properties.sasl.password": "[redacted]", "topic": "t"}"#);
    }

    #[test]
    fn url_passwords_are_masked() {
        let sql = "CREATE SINK k FROM v WITH (connector = 'jdbc', \
                   jdbc.url = 'jdbc:postgresql://h:5432/db?user=u&password=pw1&sslmode=require', \
                   url = 'postgres://bob:pw2@h/db')";
        let redacted = redact_sql(sql);
        assert!(!redacted.contains("pw1") && !redacted.contains("pw2"), "{redacted}");
        assert!(redacted.contains("password=[redacted]&sslmode=require") && redacted.contains("//bob:[redacted]@h"));
        assert_eq!(secret_values(sql), vec!["pw1", "pw2"]);
        assert_eq!(
            scrub("could not parse pw1 near pw2", &secret_values(sql)),
            "could not parse [redacted] near [redacted]"
        );
    }

    #[test]
    fn references_are_resolved_and_checked() {
        let secrets = std::env::temp_dir().join(format!("weir-secrets-{}", std::process::id()));
        std::fs::create_dir_all(&secrets).unwrap();
        set_directory(secrets.clone());
        let dir = secrets.join("s3-key");
        std::fs::write(&dir, "from-file\n").unwrap();
        let outside = std::env::temp_dir().join(format!("weir-not-a-secret-{}", std::process::id()));
        std::fs::write(&outside, "private").unwrap();
        std::env::set_var("WEIR_SECRET_TEST_REF", "from-env");
        let options = |pairs: &[(&str, String)]| {
            ConnectorOptions(pairs.iter().map(|(k, v)| (k.to_string(), v.clone())).collect())
        };
        let given = options(&[
            ("properties.sasl.password.ref", "env:WEIR_SECRET_TEST_REF".into()),
            ("s3.secret_access_key.ref", format!("file:{}", dir.display())),
        ]);
        let got = resolved(&given).unwrap();
        assert_eq!(got.get("properties.sasl.password"), Some("from-env"));
        assert_eq!(got.get("s3.secret_access_key"), Some("from-file"));
        assert!(got.get("properties.sasl.password.ref").is_none());
        for bad in [
            options(&[("x.password.ref", "env:WEIR_SECRET_TEST_UNSET".into())]),
            options(&[("x.password.ref", "env:HOME".into())]),
            options(&[("x.password.ref", format!("file:{}", outside.display()))]),
            options(&[("x.password.ref", format!("file:{}/../{}", secrets.display(), outside.display()))]),
            options(&[("x.password.ref", "file:/nonexistent/weir".into())]),
            options(&[("x.password.ref", "vault:a".into())]),
            options(&[("topic.ref", "env:WEIR_SECRET_TEST_REF".into())]),
            options(&[("x.password", "a".into()), ("x.password.ref", "env:WEIR_SECRET_TEST_REF".into())]),
        ] {
            assert_eq!(resolved(&bad).unwrap_err().state, SqlState::INVALID_PARAMETER_VALUE, "{bad:?}");
        }
        std::fs::remove_dir_all(secrets).unwrap();
        std::fs::remove_file(outside).unwrap();
    }
}
