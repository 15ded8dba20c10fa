//! Connection startup: protocol negotiation, the database check, authentication (trust,
//! cleartext password or SCRAM-SHA-256, per `[auth]` in the config), the ParameterStatus
//! messages a client expects, and registration for CancelRequest.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::Arc;

use async_trait::async_trait;
use futures::Sink;
use pgwire::api::auth::cleartext::CleartextPasswordAuthStartupHandler;
use pgwire::api::auth::sasl::scram::{gen_salted_password, ScramAuth};
use pgwire::api::auth::sasl::SASLAuthStartupHandler;
use pgwire::api::auth::{
    finish_authentication, protocol_negotiation, save_startup_parameters_to_metadata, AuthSource, LoginInfo, Password,
    ServerParameterProvider, StartupHandler,
};
use pgwire::api::{
    ClientInfo, ConnectionHandle, ConnectionManager, PgWireConnectionState, PidSecretKeyGenerator,
    RandomPidSecretKeyGenerator,
};
use pgwire::error::{ErrorInfo, PgWireError, PgWireResult};
use pgwire::messages::{PgWireBackendMessage, PgWireFrontendMessage};

use crate::config::{AuthConfig, AuthMethod, UserConfig};
use crate::frontend::session::startup_parameters;

const SCRAM_ITERATIONS: usize = 4096;

/// The ParameterStatus values sent once authentication succeeds.
#[derive(Debug)]
pub struct WeirParameters;

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
        }
        Some(params)
    }
}

/// Passwords from `[[auth.users]]`.
#[derive(Debug)]
struct ConfiguredUsers {
    users: Vec<UserConfig>,
    scram: bool,
}

#[async_trait]
impl AuthSource for ConfiguredUsers {
    async fn get_password(&self, login: &LoginInfo) -> PgWireResult<Password> {
        let name = login.user().unwrap_or_default();
        let Some(user) = self.users.iter().find(|u| u.name == name) else {
            return Err(PgWireError::InvalidPassword(name.to_string()));
        };
        if self.scram {
            let salt: [u8; 16] = rand_salt();
            Ok(Password::new(Some(salt.to_vec()), gen_salted_password(&user.password, &salt, SCRAM_ITERATIONS)))
        } else {
            Ok(Password::new(None, user.password.as_bytes().to_vec()))
        }
    }
}

fn rand_salt() -> [u8; 16] {
    use std::collections::hash_map::RandomState;
    use std::hash::{BuildHasher, Hasher};
    let mut out = [0u8; 16];
    for chunk in out.chunks_mut(8) {
        let mut h = RandomState::new().build_hasher();
        h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_nanos());
        chunk.copy_from_slice(&h.finish().to_le_bytes()[..chunk.len()]);
    }
    out
}

/// The startup handler for the configured method; one per connection.
pub struct WeirStartup {
    database: String,
    method: AuthMethod,
    manager: Arc<ConnectionManager>,
    cleartext: CleartextPasswordAuthStartupHandler<ConfiguredUsers, WeirParameters>,
    sasl: SASLAuthStartupHandler<WeirParameters>,
    pids: RandomPidSecretKeyGenerator,
}

impl WeirStartup {
    pub fn new(database: &str, auth: &AuthConfig, manager: Arc<ConnectionManager>) -> WeirStartup {
        let password_users = ConfiguredUsers { users: auth.users.clone(), scram: false };
        let scram_users = Arc::new(ConfiguredUsers { users: auth.users.clone(), scram: true });
        let mut scram = ScramAuth::new(scram_users);
        scram.set_iterations(SCRAM_ITERATIONS);
        WeirStartup {
            database: database.to_string(),
            method: auth.method,
            cleartext: CleartextPasswordAuthStartupHandler::new(password_users, WeirParameters)
                .with_connection_manager(Arc::clone(&manager)),
            sasl: SASLAuthStartupHandler::new(Arc::new(WeirParameters))
                .with_scram(scram)
                .with_connection_manager(Arc::clone(&manager)),
            manager,
            pids: RandomPidSecretKeyGenerator::default(),
        }
    }
}

#[async_trait]
impl StartupHandler for WeirStartup {
    async fn on_startup<C>(&self, client: &mut C, message: PgWireFrontendMessage) -> PgWireResult<()>
    where
        C: ClientInfo + Sink<PgWireBackendMessage> + Unpin + Send + Sync,
        C::Error: Debug,
        PgWireError: From<<C as Sink<PgWireBackendMessage>>::Error>,
    {
        if let PgWireFrontendMessage::Startup(ref startup) = message {
            let database = startup.parameters.get("database").or_else(|| startup.parameters.get("user"));
            if let Some(db) = database {
                if db != &self.database {
                    return Err(PgWireError::UserError(Box::new(ErrorInfo::new(
                        "FATAL".into(),
                        "3D000".into(),
                        format!("database \"{db}\" does not exist (this server serves \"{}\")", self.database),
                    ))));
                }
            }
        }
        match self.method {
            AuthMethod::Password => self.cleartext.on_startup(client, message).await,
            AuthMethod::Scram => self.sasl.on_startup(client, message).await,
            AuthMethod::Trust => {
                if let PgWireFrontendMessage::Startup(ref startup) = message {
                    protocol_negotiation(client, startup).await?;
                    save_startup_parameters_to_metadata(client, startup);
                    let (pid, secret) = self.pids.generate(client);
                    client.set_pid_and_secret_key(pid, secret.clone());
                    let (handle, guard) = self.manager.register(pid, secret);
                    client.session_extensions().insert::<Arc<ConnectionHandle>>(handle);
                    client.session_extensions().insert(guard);
                    finish_authentication(client, &WeirParameters).await?;
                    client.set_state(PgWireConnectionState::ReadyForQuery);
                }
                Ok(())
            }
        }
    }
}
