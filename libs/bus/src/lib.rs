//! The bus: NATS JetStream streams for events and commands, typed publishing that awaits the
//! server's ack, durable consumers with bounded redelivery and a dead-letter subject, and
//! request/reply rpc. `async-nats` is used here and nowhere else.
#![forbid(unsafe_code)]

pub mod access;
pub mod bodies;
mod consumer;
mod publish;
pub mod rpc;
#[cfg(feature = "testsuite")]
pub mod testsuite;

pub use consumer::{ConsumerSpec, Delivery, HandlerError};
pub use publish::Outgoing;
pub use rpc::{IntoRpcError, RpcServer};

use async_nats::jetstream::{self, stream};
use capstan_events::{Domain, DEAD_LETTER_STREAM, DEAD_LETTER_SUBJECTS, MAX_MESSAGE_BYTES};
use secrecy::ExposeSecret;
pub use secrecy::SecretString;
use std::{path::PathBuf, sync::Arc, time::Duration};

/// What can go wrong on the bus, named for what the caller can do about it.
#[derive(Debug, thiserror::Error)]
pub enum BusError {
    /// The server cannot be reached or did not answer in time; trying again later may work.
    #[error("bus unavailable: {0}")]
    Unavailable(String),
    /// The server answered and refused (a bad stream config, a message too large, ...).
    #[error("bus refused: {0}")]
    Refused(String),
}

/// How long events stay in their stream for late or new subscribers.
pub const EVENT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long JetStream remembers a message id to drop a duplicate publish.
pub const DUPLICATE_WINDOW: Duration = Duration::from_secs(120);

/// A connection to NATS with its JetStream context; cheap to clone.
#[derive(Clone)]
pub struct Bus {
    client: async_nats::Client,
    jetstream: jetstream::Context,
    /// The bucket of large rpc bodies, looked up or created on first use.
    bodies: Arc<tokio::sync::OnceCell<jetstream::object_store::ObjectStore>>,
}

/// Who a connection proves to be. No credentials is how `capstan all` talks to a local server
/// that asks for none.
#[derive(Clone, Default)]
pub enum Credentials {
    #[default]
    None,
    UserPassword {
        user: String,
        password: SecretString,
    },
    /// An nkey seed (`SU...`); the server holds its public key.
    NkeySeed(SecretString),
    /// A `.creds` file (a user JWT and its nkey seed), for servers run in operator mode.
    CredsFile(PathBuf),
}

impl std::fmt::Debug for Credentials {
    /// Names the kind and the user, never a secret.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::None => f.write_str("none"),
            Credentials::UserPassword { user, .. } => write!(f, "user {user:?} with a password"),
            Credentials::NkeySeed(_) => f.write_str("an nkey seed"),
            Credentials::CredsFile(path) => write!(f, "creds file {}", path.display()),
        }
    }
}

/// Where and how to connect.
#[derive(Debug, Clone)]
pub struct ConnectOptions {
    /// `nats://host:4222`, or `tls://host:4222` to require TLS.
    pub url: String,
    /// The connection's name, as the server's monitoring shows it.
    pub name: String,
    /// The prefix of this connection's reply subjects (`_INBOX.<domain>`): a user may read
    /// only its own replies. `None` keeps the client's `_INBOX`.
    pub inbox_prefix: Option<String>,
    pub credentials: Credentials,
    /// Certificates (PEM) the server's certificate must chain to; setting it requires TLS.
    pub tls_ca_file: Option<PathBuf>,
    /// A client certificate and its key (PEM), for servers that verify clients.
    pub tls_client: Option<(PathBuf, PathBuf)>,
}

impl ConnectOptions {
    /// No credentials, no TLS, the client's own inbox prefix: what tests and a local plane use.
    pub fn new(url: &str, name: &str) -> ConnectOptions {
        ConnectOptions {
            url: url.to_string(),
            name: name.to_string(),
            inbox_prefix: None,
            credentials: Credentials::None,
            tls_ca_file: None,
            tls_client: None,
        }
    }
}

impl Bus {
    /// Connects to `url` without credentials (see [`Bus::connect_with`]).
    pub async fn connect(url: &str, name: &str) -> Result<Bus, BusError> {
        Bus::connect_with(&ConnectOptions::new(url, name)).await
    }

    /// Connects, retrying the first connection in the background so a plane started just
    /// before its NATS server still comes up; later disconnects reconnect on their own. What
    /// the server refuses (credentials, a subject outside the user's permissions) is logged as
    /// a warning naming it.
    pub async fn connect_with(options: &ConnectOptions) -> Result<Bus, BusError> {
        let url = options.url.as_str();
        let connection = options.name.clone();
        let mut nats = async_nats::ConnectOptions::new()
            .name(&options.name)
            .retry_on_initial_connect()
            .event_callback(move |event| {
                let connection = connection.clone();
                async move {
                    if let async_nats::Event::ServerError(error) = event {
                        tracing::warn!(%connection, %error, "the NATS server refused something");
                    }
                }
            })
            .connection_timeout(Duration::from_secs(5))
            .request_timeout(Some(Duration::from_secs(10)))
            .reconnect_delay_callback(|attempts| {
                Duration::from_millis((50 * 2u64.saturating_pow(attempts.min(6) as u32)).min(2_000))
            });
        if let Some(prefix) = &options.inbox_prefix {
            nats = nats.custom_inbox_prefix(prefix);
        }
        nats = match &options.credentials {
            Credentials::None => nats,
            Credentials::UserPassword { user, password } => {
                nats.user_and_password(user.clone(), password.expose_secret().to_string())
            }
            Credentials::NkeySeed(seed) => nats.nkey(seed.expose_secret().to_string()),
            Credentials::CredsFile(path) => nats.credentials_file(path).await.map_err(|error| {
                BusError::Refused(format!(
                    "reading the creds file {}: {error}",
                    path.display()
                ))
            })?,
        };
        if let Some(ca) = &options.tls_ca_file {
            nats = nats.add_root_certificates(ca.clone()).require_tls(true);
        }
        if let Some((certificate, key)) = &options.tls_client {
            nats = nats
                .add_client_certificate(certificate.clone(), key.clone())
                .require_tls(true);
        }
        let client = tokio::time::timeout(Duration::from_secs(30), nats.connect(url))
            .await
            .map_err(|_| BusError::Unavailable(format!("no answer from {url} within 30 s")))?
            .map_err(|error| BusError::Unavailable(format!("cannot connect to {url}: {error}")))?;
        let jetstream = jetstream::ContextBuilder::new()
            .timeout(Duration::from_secs(10))
            .build(client.clone());
        Ok(Bus {
            client,
            jetstream,
            bodies: Arc::new(tokio::sync::OnceCell::new()),
        })
    }

    /// Creates or updates the event stream and command stream of `domain`, and the shared
    /// conditions and dead-letter streams. Idempotent: every replica runs it at start.
    pub async fn ensure_streams(&self, domain: Domain) -> Result<(), BusError> {
        self.ensure_stream(stream::Config {
            name: domain.events_stream(),
            subjects: vec![domain.events_subjects()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: EVENT_RETENTION,
            duplicate_window: DUPLICATE_WINDOW,
            max_message_size: MAX_MESSAGE_BYTES as i32,
            description: Some(format!("facts published by the {domain} service")),
            ..Default::default()
        })
        .await?;
        self.ensure_stream(stream::Config {
            name: domain.commands_stream(),
            subjects: vec![domain.commands_subjects()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::WorkQueue,
            duplicate_window: DUPLICATE_WINDOW,
            max_message_size: MAX_MESSAGE_BYTES as i32,
            description: Some(format!("requests for the {domain} service to act")),
            ..Default::default()
        })
        .await?;
        self.ensure_stream(stream::Config {
            name: capstan_events::conditions::STREAM.to_string(),
            subjects: vec![capstan_events::conditions::SUBJECTS.to_string()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: EVENT_RETENTION,
            duplicate_window: DUPLICATE_WINDOW,
            max_message_size: MAX_MESSAGE_BYTES as i32,
            description: Some("conditions every service judges, read by incidents".into()),
            ..Default::default()
        })
        .await?;
        self.ensure_stream(stream::Config {
            name: DEAD_LETTER_STREAM.to_string(),
            subjects: vec![DEAD_LETTER_SUBJECTS.to_string()],
            storage: stream::StorageType::File,
            retention: stream::RetentionPolicy::Limits,
            max_age: EVENT_RETENTION,
            duplicate_window: DUPLICATE_WINDOW,
            description: Some("messages a consumer could not take, with the reason".into()),
            ..Default::default()
        })
        .await
    }

    async fn ensure_stream(&self, config: stream::Config) -> Result<(), BusError> {
        let name = config.name.clone();
        self.jetstream
            .create_or_update_stream(config)
            .await
            .map(|_| ())
            .map_err(|error| classify(format!("ensuring stream {name}: {error}")))
    }

    /// The underlying client, for the rpc module and the test suite.
    pub(crate) fn client(&self) -> &async_nats::Client {
        &self.client
    }

    pub(crate) fn jetstream(&self) -> &jetstream::Context {
        &self.jetstream
    }

    /// Waits until everything written so far has reached the server.
    pub async fn flush(&self) -> Result<(), BusError> {
        self.client
            .flush()
            .await
            .map_err(|error| BusError::Unavailable(error.to_string()))
    }
}

/// Connection trouble is worth retrying; anything else the server said is a refusal.
fn classify(message: String) -> BusError {
    let lowered = message.to_ascii_lowercase();
    if lowered.contains("timed out")
        || lowered.contains("timeout")
        || lowered.contains("no responders")
        || lowered.contains("disconnect")
        || lowered.contains("connection")
        || lowered.contains("broken pipe")
    {
        BusError::Unavailable(message)
    } else {
        BusError::Refused(message)
    }
}
