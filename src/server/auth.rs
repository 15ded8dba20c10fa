//! Connection startup: protocol negotiation, the database check, the host rules
//! (`[[auth.hba]]`, else `auth.method`), authentication (trust, cleartext password, or
//! SCRAM-SHA-256 against the role's stored verifier), the role's LOGIN and connection limits
//! and `max_connections`, the ParameterStatus messages a client expects, and registration for
//! CancelRequest.
//!
//! The SCRAM exchange (RFC 5802/7677, what PostgreSQL's server does) is Weir's own: pgwire's
//! needs the salted password, which lets whoever holds it log in; Weir keeps only verifiers
//! (`catalog::password`, ADR 35). A name that is no role, or a role without a password, goes
//! through the same exchange with a made-up verifier and fails at its end, as in PostgreSQL,
//! so a client cannot tell which names exist. A failure is 28P01 (28000 for host rules and
//! NOLOGIN) and changes nothing.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use futures::{Sink, SinkExt};
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, ServerParameterProvider,
    StartupHandler,
};
use pgwire::api::{
    ClientInfo, ConnectionHandle, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::startup::{Authentication, PasswordMessageFamily, SASLInitialResponse};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::catalog::password::{random_bytes, Verifier};
use crate::catalog::Catalog;
use crate::config::{AuthConfig, AuthMethod};
use crate::error::SqlState;
use crate::frontend::session::startup_parameters;

/// Sessions superusers may open beyond `max_connections` (PostgreSQL's reserved slots).
const SUPERUSER_RESERVED: usize = 3;

/// How a session logged in, kept in the connection's extensions for its session
/// (`server::session`): whether its user is no role (trust).
#[derive(Debug)]
pub struct Login {
    pub unlisted: bool,
}

/// The ParameterStatus values sent once authentication succeeds.
#[derive(Debug)]
pub struct WeirParameters {
    pub superuser: bool,
}

impl ServerParameterProvider for WeirParameters {
    fn server_parameters<C: ClientInfo>(&self, client: &C) -> Option<HashMap<String, String>> {
        let mut params: HashMap<String, String> =
            startup_parameters().into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let metadata = client.metadata();
        if let Some(app) = metadata.get(pgwire::api::METADATA_APPLICATION_NAME) {
            params.insert("application_name".into(), app.clone());
        }
        if let Some(user) = metadata.get(pgwire::api::METADATA_USER) {
            params.insert("session_authorization".into(), user.clone());
            params.insert("is_superuser".into(), if self.superuser { "on" } else { "off" }.into());
        }
        Some(params)
    }
}

/// Sessions open now, in all and by role: `max_connections` and roles' `CONNECTION LIMIT`.
#[derive(Debug, Default)]
pub struct Connections {
    open: parking_lot::Mutex<(usize, HashMap<String, usize>)>,
}

/// A session's place among [`Connections`], given back when the connection ends.
pub struct Slot {
    connections: Arc<Connections>,
    role: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut open = self.connections.open.lock();
        open.0 = open.0.saturating_sub(1);
        if let Some(n) = open.1.get_mut(&self.role) {
            *n = n.saturating_sub(1);
        }
    }
}

impl Connections {
    /// A slot for a session of `role`, or the error that refuses it (53300).
    fn take(
        self: &Arc<Self>,
        role: &str,
        superuser: bool,
        role_limit: i32,
        max: usize,
    ) -> std::result::Result<Slot, PgWireError> {
        let mut open = self.open.lock();
        let limit = if superuser { max + SUPERUSER_RESERVED } else { max };
        if open.0 >= limit {
            return Err(fatal(SqlState::TOO_MANY_CONNECTIONS, "sorry, too many clients already".into()));
        }
        let of_role = open.1.get(role).copied().unwrap_or(0);
        if !superuser && role_limit >= 0 && of_role >= role_limit as usize {
            return Err(fatal(SqlState::TOO_MANY_CONNECTIONS, format!("too many connections for role \"{role}\"")));
        }
        open.0 += 1;
        *open.1.entry(role.to_string()).or_insert(0) += 1;
        Ok(Slot { connections: Arc::clone(self), role: role.to_string() })
    }
}

fn fatal(code: SqlState, message: String) -> PgWireError {
    PgWireError::UserError(Box::new(ErrorInfo::new("FATAL".into(), code.0.into(), message)))
}

fn password_failed(user: &str) -> PgWireError {
    fatal(SqlState::INVALID_PASSWORD, format!("password authentication failed for user \"{user}\""))
}

/// Where an exchange is.
enum Phase {
    Start,
    /// Waiting for a cleartext password.
    Password,
    /// Waiting for SCRAM's client-first message.
    ScramFirst,
    /// Waiting for SCRAM's client-final message.
    ScramFinal(Box<ScramExchange>),
}

struct ScramExchange {
    verifier: Verifier,
    /// The role exists and has a password (else the exchange is played out and fails).
    genuine: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
    /// base64 of the GS2 header, what the client's `c=` must say.
    channel_binding: String,
}

/// The startup handler; one per connection.
pub struct WeirStartup {
    database: String,
    auth: Arc<AuthConfig>,
    catalog: Arc<Catalog>,
    connections: Arc<Connections>,
    manager: Arc<ConnectionManager>,
    pids: RandomPidSecretKeyGenerator,
    phase: tokio::sync::Mutex<Phase>,
}

impl WeirStartup {
    pub fn new(
        database: &str,
        auth: Arc<AuthConfig>,
        catalog: Arc<Catalog>,
        connections: Arc<Connections>,
        manager: Arc<ConnectionManager>,
    ) -> WeirStartup {
        WeirStartup {
            database: database.to_string(),
            auth,
            catalog,
            connections,
            manager,
            pids: RandomPidSecretKeyGenerator::default(),
            phase: tokio::sync::Mutex::new(Phase::Start),
        }
    }

    /// The method the host rules (or `auth.method`) give a connection of `user` to `database`.
    fn method<C: ClientInfo>(
        &self,
        client: &C,
        user: &str,
        database: &str,
    ) -> std::result::Result<AuthMethod, PgWireError> {
        if self.auth.hba.is_empty() {
            return Ok(self.auth.method);
        }
        let address = client.socket_addr().ip();
        let tls = client.is_secure();
        let access = &self.catalog.access;
        let rule = self.auth.hba.iter().find(|rule| {
            let user_matches = match rule.user.strip_prefix('+') {
                _ if rule.user == "all" => true,
                Some(group) => access.is_member(user, group),
                None => rule.user == user,
            };
            user_matches && rule.takes(database, address, tls)
        });
        let ssl = if tls { "on" } else { "off" };
        match rule {
            None => Err(fatal(
                SqlState::INVALID_AUTHORIZATION,
                format!("no host rule ([[auth.hba]]) for host \"{address}\", user \"{user}\", database \"{database}\", SSL {ssl}"),
            )),
            Some(rule) if rule.method == AuthMethod::Reject => Err(fatal(
                SqlState::INVALID_AUTHORIZATION,
                format!("a host rule ([[auth.hba]]) rejects the connection for host \"{address}\", user \"{user}\", database \"{database}\", SSL {ssl}"),
            )),
            Some(rule) => Ok(rule.method),
        }
    }

    /// The verifier `user` authenticates against: its role's, or (no such role, or no
    /// password) a made-up one no password matches, with the same salt at every attempt
    /// (from the name and a secret of this process, as PostgreSQL's mock salt), made without
    /// hashing anything, so the two take the same time and look alike to the client.
    fn verifier_of(&self, user: &str) -> (Verifier, bool) {
        let role = self.catalog.access.role(user);
        match role.as_ref().and_then(|r| r.verifier()) {
            Some(v) => (v, true),
            None => {
                static SECRET: std::sync::LazyLock<[u8; 32]> = std::sync::LazyLock::new(random_bytes::<32>);
                (Verifier::unmatchable(&SECRET[..], user), false)
            }
        }
    }

    /// Authentication has succeeded (or was not asked for): the role's LOGIN and connection
    /// limits, then the session starts.
    async fn admit<C>(&self, client: &mut C) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
        let role = self.catalog.access.role(&user);
        if role.as_ref().is_some_and(|r| !r.login) {
            return Err(fatal(SqlState::INVALID_AUTHORIZATION, format!("role \"{user}\" is not permitted to log in")));
        }
        // A name that is no role (trust only: the other methods need a role's verifier) acts
        // as a superuser (frontend::authorize); decided now, once: if the role goes later, its
        // sessions keep no privileges rather than gaining a superuser's.
        let unlisted = role.is_none();
        client.session_extensions().insert(Login { unlisted });
        let superuser = role.as_ref().is_none_or(|r| r.superuser);
        let limit = role.as_ref().map(|r| r.connection_limit).unwrap_or(-1);
        let slot = self.connections.take(&user, superuser, limit, self.auth.max_connections)?;
        client.session_extensions().insert(Arc::new(slot));
        let (pid, secret) = self.pids.generate(client);
        client.set_pid_and_secret_key(pid, secret.clone());
        let (handle, guard) = self.manager.register(pid, secret);
        client.session_extensions().insert::<Arc<ConnectionHandle>>(handle);
        client.session_extensions().insert(guard);
        finish_authentication(client, &WeirParameters { superuser }).await?;
        client.set_state(PgWireConnectionState::ReadyForQuery);
        Ok(())
    }
}

/// The parts of SCRAM's client-first message: GS2 header and the bare message, with its nonce.
fn client_first(data: &[u8]) -> Option<(String, String, String)> {
    let text = std::str::from_utf8(data).ok()?;
    // gs2-header: "n,," or "y,," (no channel binding; "p=..." is refused), an optional authzid.
    let mut parts = text.splitn(3, ',');
    let flag = parts.next()?;
    let authzid = parts.next()?;
    let bare = parts.next()?;
    if !(flag == "n" || flag == "y") || !authzid.is_empty() {
        return None;
    }
    let nonce = bare.split(',').find_map(|p| p.strip_prefix("r="))?.to_string();
    if nonce.is_empty() {
        return None;
    }
    Some((format!("{flag},,"), bare.to_string(), nonce))
}

#[async_trait]
impl StartupHandler for WeirStartup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        let mut phase = self.phase.lock().await;
        match (&*phase, message) {
            (Phase::Start, PgWireFrontendMessage::Startup(startup)) => {
                let user = startup.parameters.get("user").cloned().unwrap_or_default();
                let database = startup.parameters.get("database").cloned().unwrap_or_else(|| user.clone());
                if database != self.database {
                    return Err(fatal(
                        SqlState("3D000"),
                        format!("database \"{database}\" does not exist (this server serves \"{}\")", self.database),
                    ));
                }
                protocol_negotiation(client, &startup).await?;
                save_startup_parameters_to_metadata(client, &startup);
                match self.method(client, &user, &database)? {
                    AuthMethod::Trust => self.admit(client).await,
                    AuthMethod::Reject => Err(fatal(
                        SqlState::INVALID_AUTHORIZATION,
                        format!("auth.method = \"reject\" refuses the connection of user \"{user}\""),
                    )),
                    AuthMethod::Password => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client.send(PgWireBackendMessage::Authentication(Authentication::CleartextPassword)).await?;
                        *phase = Phase::Password;
                        Ok(())
                    }
                    AuthMethod::Scram => {
                        client.set_state(PgWireConnectionState::AuthenticationInProgress);
                        client
                            .send(PgWireBackendMessage::Authentication(Authentication::SASL(vec![
                                "SCRAM-SHA-256".to_string()
                            ])))
                            .await?;
                        *phase = Phase::ScramFirst;
                        Ok(())
                    }
                }
            }
            (Phase::Password, PgWireFrontendMessage::PasswordMessageFamily(message)) => {
                let password = message.into_password()?.password;
                let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
                let (verifier, genuine) = self.verifier_of(&user);
                // PBKDF2 takes milliseconds: off the runtime's threads.
                let matches =
                    tokio::task::spawn_blocking(move || verifier.matches_password(&password)).await.unwrap_or(false);
                if !(matches && genuine) {
                    return Err(password_failed(&user));
                }
                *phase = Phase::Start;
                self.admit(client).await
            }
            (Phase::ScramFirst, PgWireFrontendMessage::PasswordMessageFamily(message)) => {
                let initial = sasl_initial_response(message)?;
                if initial.auth_method != "SCRAM-SHA-256" {
                    return Err(PgWireError::UnsupportedSASLAuthMethod(initial.auth_method));
                }
                let data = initial.data.unwrap_or_default();
                let Some((gs2, client_first_bare, client_nonce)) = client_first(&data) else {
                    return Err(PgWireError::InvalidScramMessage("malformed SCRAM client-first message".into()));
                };
                let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
                let (verifier, genuine) = self.verifier_of(&user);
                let nonce = format!("{client_nonce}{}", STANDARD.encode(random_bytes::<18>()));
                let server_first = format!("r={nonce},s={},i={}", STANDARD.encode(&verifier.salt), verifier.iterations);
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASLContinue(
                        server_first.clone().into_bytes().into(),
                    )))
                    .await?;
                *phase = Phase::ScramFinal(Box::new(ScramExchange {
                    verifier,
                    genuine,
                    client_first_bare,
                    server_first,
                    nonce,
                    channel_binding: STANDARD.encode(gs2),
                }));
                Ok(())
            }
            (Phase::ScramFinal(exchange), PgWireFrontendMessage::PasswordMessageFamily(message)) => {
                let user = client.metadata().get(pgwire::api::METADATA_USER).cloned().unwrap_or_default();
                let response = message.into_sasl_response()?;
                let text = std::str::from_utf8(&response.data)
                    .map_err(|_| PgWireError::InvalidScramMessage("client-final is not UTF-8".into()))?;
                let (without_proof, proof) = text
                    .rsplit_once(",p=")
                    .ok_or_else(|| PgWireError::InvalidScramMessage("client-final without a proof".into()))?;
                let field = |name: &str| without_proof.split(',').find_map(|p| p.strip_prefix(name)).unwrap_or("");
                if field("c=") != exchange.channel_binding || field("r=") != exchange.nonce {
                    return Err(PgWireError::InvalidScramMessage("channel binding or nonce mismatch".into()));
                }
                let proof = STANDARD.decode(proof).unwrap_or_default();
                let auth_message = format!("{},{},{without_proof}", exchange.client_first_bare, exchange.server_first);
                let signature = exchange.verifier.check_proof(auth_message.as_bytes(), &proof);
                let (Some(signature), true) = (signature, exchange.genuine) else {
                    return Err(password_failed(&user));
                };
                let server_final = format!("v={}", STANDARD.encode(signature));
                client
                    .send(PgWireBackendMessage::Authentication(Authentication::SASLFinal(
                        server_final.into_bytes().into(),
                    )))
                    .await?;
                *phase = Phase::Start;
                self.admit(client).await
            }
            // Anything else before authentication completes (a startup packet again, a
            // password nobody asked for) is a protocol violation.
            _ => Err(fatal(SqlState("08P01"), "unexpected message during authentication".into())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_messages_are_read_as_rfc_5802_says() {
        let (gs2, bare, nonce) = client_first(b"n,,n=,r=rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(
            (gs2.as_str(), bare.as_str(), nonce.as_str()),
            ("n,,", "n=,r=rOprNGfwEbeRWgbNEkqO", "rOprNGfwEbeRWgbNEkqO")
        );
        assert_eq!(STANDARD.encode("n,,"), "biws");
        assert!(client_first(b"p=tls-server-end-point,,n=,r=x").is_none());
        assert!(client_first(b"n,a=admin,n=,r=x").is_none());
        assert!(client_first(b"n,,n=,").is_none());
    }

    #[test]
    fn connection_limits_count_sessions_and_free_them() {
        let c = Arc::new(Connections::default());
        let a = c.take("reader", false, 1, 2).unwrap();
        assert!(c.take("reader", false, 1, 2).is_err());
        let _b = c.take("other", false, -1, 2).unwrap();
        assert!(c.take("other", false, -1, 2).is_err(), "max_connections reached");
        let admin = c.take("admin", true, -1, 2).unwrap();
        drop((a, admin));
        assert!(c.take("reader", false, 1, 2).is_ok());
    }
}

/// The SASLInitialResponse of a password-family message, its framing checked first: pgwire's
/// decoder panicked on a body cut short or a data length past its end (the connection's task
/// died without an error to the client; found by fuzzing, `fuzz/regressions/wire/`).
fn sasl_initial_response(message: PasswordMessageFamily) -> PgWireResult<SASLInitialResponse> {
    if let PasswordMessageFamily::Raw(body) = &message {
        let malformed = || PgWireError::InvalidScramMessage("malformed SASLInitialResponse message".into());
        let nul = body.iter().position(|&b| b == 0).ok_or_else(malformed)?;
        let rest = &body[nul + 1..];
        let length = rest.get(..4).ok_or_else(malformed)?;
        let length = i32::from_be_bytes([length[0], length[1], length[2], length[3]]);
        if length != -1 && usize::try_from(length).map_or(true, |n| n > rest.len() - 4) {
            return Err(malformed());
        }
    }
    message.into_sasl_initial_response()
}
