//! A client of a Confluent Schema Registry's REST API (Confluent's, Karapace, Redpanda's and
//! Apicurio's compatible endpoint all speak it): a subject's latest schema (or a version of it),
//! a schema by its global id, and registering a schema under a subject; for `ENCODE AVRO`
//! ([`crate::connectors::avro`]) and `ENCODE PROTOBUF` ([`crate::connectors::protobuf`]), each
//! of which checks the schema's kind and reads its text. Protobuf schemas are asked for in the
//! registry's serialized form (`format=serialized`: a base64 `FileDescriptorProto`, as
//! Confluent's own clients ask), with the files they import as references. HTTP basic auth
//! (`schema.registry.username` / `schema.registry.password`) and HTTPS with the machine's CAs
//! or `schema.registry.ca.location`.
//!
//! Requests wait on the connectors' I/O runtime ([`crate::connectors::io_runtime`]); each has a
//! timeout. Errors say which of two things went wrong: the registry answered that it has no
//! such schema ([`Lookup::Missing`]: a message's schema id it does not know is a dead letter),
//! or it could not be asked ([`RegistryError::Unavailable`]: the source retries).

use std::time::Duration;

use crate::catalog::options::ConnectorOptions;
use crate::error::{Result, SqlState, WeirError};

/// The registry options a connector with `ENCODE AVRO` or `ENCODE PROTOBUF` takes.
pub const OPTIONS: &[&str] =
    &["schema.registry", "schema.registry.username", "schema.registry.password", "schema.registry.ca.location"];

/// How long one request may take.
const TIMEOUT: Duration = Duration::from_secs(10);

/// One schema as the registry holds it.
#[derive(Debug, Clone)]
pub struct Registered {
    pub id: u32,
    /// `AVRO` (the registry's default, when its answer names none), `PROTOBUF` or `JSON`.
    pub kind: String,
    pub schema: String,
    /// The schemas it imports (Protobuf's imported files), each a subject's version.
    pub references: Vec<Reference>,
}

/// A schema another refers to: the name it is imported by (a Protobuf file name) and where
/// the registry keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    pub name: String,
    pub subject: String,
    pub version: u32,
}

/// The form a schema is asked for in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Form {
    /// As registered (Avro's JSON).
    Text,
    /// `?format=serialized`: a Protobuf schema as a base64 `FileDescriptorProto`.
    Serialized,
}

impl Form {
    fn query(self) -> &'static str {
        match self {
            Form::Text => "",
            Form::Serialized => "?format=serialized",
        }
    }
}

/// A lookup's answer.
#[derive(Debug)]
pub enum Lookup<T> {
    Found(T),
    /// The registry said it has no such subject, version or id (a 404 with its error code
    /// 40401, 40402 or 40403; another 404, from a proxy or a wrong path, is not this).
    Missing,
    /// It has one, but not one Weir can use (another kind than the source's, an answer
    /// without a schema): why.
    Unusable(String),
}

/// Why a request failed.
#[derive(Debug)]
pub enum RegistryError {
    /// It could not be asked, answered with a server error, or refused the credentials (401,
    /// 403), as a Kafka broker that refuses them: worth asking again once mended (08001).
    Unavailable(String),
    /// It refused the request itself (another 4xx: a schema it rejects) (22023).
    Refused(String),
}

impl RegistryError {
    /// The error while a source reads values, naming the registry by `url`: 08001 whatever
    /// kept it from answering, so the source holds and asks again, never turning values into
    /// dead letters. A refusal (another 4xx) is a registry to mend, as refused credentials are.
    pub fn while_reading(self, url: &str) -> WeirError {
        let (RegistryError::Unavailable(why) | RegistryError::Refused(why)) = self;
        WeirError::new(SqlState::UNABLE_TO_CONNECT, format!("schema registry {url}: {why}"))
    }

    /// The error, naming the registry by `url` (its password, if it has one, masked).
    pub fn into_weir(self, url: &str) -> WeirError {
        match self {
            RegistryError::Unavailable(why) => {
                WeirError::new(SqlState::UNABLE_TO_CONNECT, format!("schema registry {url}: {why}"))
            }
            RegistryError::Refused(why) => {
                WeirError::new(SqlState::INVALID_PARAMETER_VALUE, format!("schema registry {url}: {why}"))
            }
        }
    }
}

/// A registry's address and credentials.
#[derive(Clone)]
pub struct SchemaRegistry {
    /// Its URL as given (requests go there).
    address: String,
    /// Its URL as messages show it, a password in it masked.
    pub url: String,
    client: reqwest::Client,
    auth: Option<(String, String)>,
}

impl std::fmt::Debug for SchemaRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "SchemaRegistry({})", self.url)
    }
}

fn invalid(message: String) -> WeirError {
    WeirError::new(SqlState::INVALID_PARAMETER_VALUE, message)
}

impl SchemaRegistry {
    /// The registry `options` name (`schema.registry`), if they name one.
    pub fn from_options(options: &ConnectorOptions) -> Result<Option<SchemaRegistry>> {
        let Some(url) = options.get("schema.registry") else { return Ok(None) };
        let address = url.trim_end_matches('/').to_string();
        let url = crate::catalog::secrets::redact_urls(&address).into_owned();
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            return Err(invalid(format!("schema.registry must be an http:// or https:// URL, not '{url}'")));
        }
        let mut builder = reqwest::Client::builder().timeout(TIMEOUT).connect_timeout(TIMEOUT);
        if let Some(path) = options.get("schema.registry.ca.location") {
            let pem = std::fs::read(path)
                .map_err(|e| invalid(format!("schema.registry.ca.location: cannot read {path}: {e}")))?;
            let certificate = reqwest::Certificate::from_pem(&pem)
                .map_err(|e| invalid(format!("schema.registry.ca.location {path}: {e}")))?;
            builder = builder.add_root_certificate(certificate);
        }
        let client = builder.build().map_err(|e| invalid(format!("schema registry {url}: {e}")))?;
        let auth = match (options.get("schema.registry.username"), options.get("schema.registry.password")) {
            (Some(user), password) => Some((user.to_string(), password.unwrap_or_default().to_string())),
            (None, Some(_)) => return Err(invalid("schema.registry.password needs schema.registry.username".into())),
            (None, None) => None,
        };
        Ok(Some(SchemaRegistry { address, url, client, auth }))
    }

    /// `GET path` or `POST path` with `body`: the answer's JSON, Missing on 404.
    fn request(
        &self,
        path: &str,
        body: Option<serde_json::Value>,
    ) -> std::result::Result<Lookup<serde_json::Value>, RegistryError> {
        let url = format!("{}{path}", self.address);
        let mut request = match &body {
            Some(body) => self
                .client
                .post(&url)
                .header("Content-Type", "application/vnd.schemaregistry.v1+json")
                .body(body.to_string()),
            None => self.client.get(&url),
        };
        request = request.header("Accept", "application/vnd.schemaregistry.v1+json, application/json");
        if let Some((user, password)) = &self.auth {
            request = request.basic_auth(user, Some(password));
        }
        let answer = crate::connectors::io_runtime::run(async move {
            let response = request.send().await?;
            let status = response.status();
            let text = response.text().await?;
            Ok::<_, reqwest::Error>((status, text))
        });
        let (status, text) = answer.map_err(|e| {
            let why = error_chain(&e);
            RegistryError::Unavailable(crate::catalog::secrets::redact_urls(&why).into_owned())
        })?;
        let body = serde_json::from_str::<serde_json::Value>(&text).ok();
        let said = || {
            body.as_ref()
                .and_then(|v| v.get("message").and_then(|m| m.as_str()).map(str::to_string))
                .unwrap_or_else(|| text.chars().take(200).collect())
        };
        if status == reqwest::StatusCode::NOT_FOUND {
            let code = body.as_ref().and_then(|v| v.get("error_code")).and_then(|c| c.as_u64());
            if matches!(code, Some(40401..=40403)) {
                return Ok(Lookup::Missing);
            }
            return Err(RegistryError::Unavailable(format!("{status} from {path}: {}", said())));
        }
        let refused_credentials =
            status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN;
        if status.is_server_error() || refused_credentials {
            return Err(RegistryError::Unavailable(format!("{status}: {}", said())));
        }
        if !status.is_success() {
            return Err(RegistryError::Refused(format!("{status}: {}", said())));
        }
        serde_json::from_str(&text)
            .map(Lookup::Found)
            .map_err(|e| RegistryError::Unavailable(format!("an answer that is not JSON: {e}")))
    }

    /// The latest schema of `subject`, which must be of `kind`, as a source's reader schema
    /// at CREATE: 42704 (with `hint`) when the registry has no such subject, 22023 when the
    /// schema is of another kind, 08001 when the registry cannot be asked.
    pub fn reader(&self, subject: &str, form: Form, kind: &str, hint: &str) -> Result<Registered> {
        match self.latest(subject, form).map_err(|e| e.into_weir(&self.url))?.and_then(|r| r.of_kind(kind)) {
            Lookup::Found(registered) => Ok(registered),
            Lookup::Unusable(why) => Err(invalid(format!("schema registry {}: subject {subject}: {why}", self.url))),
            Lookup::Missing => Err(WeirError::new(
                SqlState::UNDEFINED_OBJECT,
                format!("schema registry {}: no subject {subject}", self.url),
            )
            .with_hint(hint.to_string())),
        }
    }

    /// The latest schema of `subject`.
    pub fn latest(&self, subject: &str, form: Form) -> std::result::Result<Lookup<Registered>, RegistryError> {
        self.version(subject, None, form)
    }

    /// Version `version` of `subject` (None: the latest).
    pub fn version(
        &self,
        subject: &str,
        version: Option<u32>,
        form: Form,
    ) -> std::result::Result<Lookup<Registered>, RegistryError> {
        let version = version.map_or("latest".to_string(), |v| v.to_string());
        let path = format!("/subjects/{}/versions/{version}{}", encode_path(subject), form.query());
        Ok(self.request(&path, None)?.and_then(|v| registered(&v, None)))
    }

    /// The schema with global id `id`.
    pub fn by_id(&self, id: u32, form: Form) -> std::result::Result<Lookup<Registered>, RegistryError> {
        let answer = self.request(&format!("/schemas/ids/{id}{}", form.query()), None)?;
        Ok(answer.and_then(|v| registered(&v, Some(id))))
    }

    /// Registers `schema` (Avro JSON) under `subject`: its global id (the one it already had,
    /// if the registry knows it).
    pub fn register(&self, subject: &str, schema: &str) -> std::result::Result<u32, RegistryError> {
        let path = format!("/subjects/{}/versions", encode_path(subject));
        match self.request(&path, Some(serde_json::json!({ "schema": schema })))? {
            Lookup::Found(v) => v
                .get("id")
                .and_then(|id| id.as_u64())
                .map(|id| id as u32)
                .ok_or_else(|| RegistryError::Unavailable(format!("no id in its answer: {v}"))),
            Lookup::Missing | Lookup::Unusable(_) => {
                Err(RegistryError::Refused(format!("it has no subject {subject}")))
            }
        }
    }
}

impl<T> Lookup<T> {
    /// The found value's own lookup through `f`.
    pub fn and_then<U>(self, f: impl FnOnce(T) -> Lookup<U>) -> Lookup<U> {
        match self {
            Lookup::Found(v) => f(v),
            Lookup::Missing => Lookup::Missing,
            Lookup::Unusable(why) => Lookup::Unusable(why),
        }
    }
}

impl Registered {
    /// This schema, if it is of `kind` (`AVRO`, `PROTOBUF`); Unusable otherwise.
    pub fn of_kind(self, kind: &str) -> Lookup<Registered> {
        if self.kind != kind {
            return Lookup::Unusable(format!("the schema is {}, not {kind}", self.kind));
        }
        Lookup::Found(self)
    }
}

/// A registry's answer holding one schema with its id (the one asked for, else the answer's).
fn registered(v: &serde_json::Value, id: Option<u32>) -> Lookup<Registered> {
    let kind = v.get("schemaType").and_then(|t| t.as_str()).unwrap_or("AVRO").to_string();
    let schema = v.get("schema").and_then(|s| s.as_str());
    let id = id.or_else(|| v.get("id").and_then(|i| i.as_u64()).map(|i| i as u32));
    let references = v
        .get("references")
        .and_then(|r| r.as_array())
        .map(|all| {
            all.iter()
                .filter_map(|r| {
                    Some(Reference {
                        name: r.get("name")?.as_str()?.to_string(),
                        subject: r.get("subject")?.as_str()?.to_string(),
                        version: u32::try_from(r.get("version")?.as_u64()?).ok()?,
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    match (schema, id) {
        (Some(schema), Some(id)) => Lookup::Found(Registered { id, kind, schema: schema.to_string(), references }),
        _ => Lookup::Unusable("the registry's answer has no schema and id".into()),
    }
}

/// A subject in a URL path (`/` and other reserved characters escaped).
fn encode_path(subject: &str) -> String {
    subject
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// An error with its causes ("error sending request: ... Connection refused").
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
