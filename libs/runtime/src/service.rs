//! A running service: its store, its bus, and the parts it runs until shutdown.

use anyhow::Context;
use capstan_bus::{Bus, ConnectOptions, Credentials, Outgoing, RpcServer, SecretString};
use capstan_events::Word as _;
use capstan_events::{
    rpc::{ErrorCode, Health, RpcError},
    Domain,
};
use capstan_settings::{NatsCredentials, Settings};
use capstan_store::Migrator;
use capstan_store::{OutboxRelay, Publisher, RelayMessage, Store};
use futures::future::BoxFuture;
use std::sync::Arc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;
use tracing::{error, info};

/// A long-running part of a service (a consumer, a periodic task, the HTTP server): given the
/// shutdown token, it returns when told to stop or when it fails.
pub type Part = Box<dyn FnOnce(CancellationToken) -> BoxFuture<'static, anyhow::Result<()>> + Send>;

/// The relay's view of the bus.
pub struct BusPublisher(pub Bus);

impl Publisher for BusPublisher {
    fn publish_batch(&self, messages: Vec<RelayMessage>) -> BoxFuture<'_, Result<usize, String>> {
        let outgoing = messages
            .into_iter()
            .map(|message| Outgoing {
                subject: message.subject,
                message_id: message.message_id.to_string(),
                payload: message.payload.into(),
                traceparent: message.traceparent,
            })
            .collect();
        Box::pin(async move {
            self.0
                .publish_batch(outgoing)
                .await
                .map_err(|error| error.to_string())
        })
    }
}

/// How `domain` connects to NATS: the configured credentials and TLS, its own connection
/// name, and its own reply prefix (`_INBOX.<domain>`), the only replies its user may read.
pub fn bus_options(settings: &Settings, domain: Domain) -> ConnectOptions {
    let nats = &settings.nats;
    let credentials = match nats.credentials() {
        NatsCredentials::None => Credentials::None,
        NatsCredentials::UserPassword { user, password } => Credentials::UserPassword {
            user: user.to_string(),
            password: SecretString::from(password.to_string()),
        },
        NatsCredentials::NkeySeed(seed) => {
            Credentials::NkeySeed(SecretString::from(seed.to_string()))
        }
        NatsCredentials::CredsFile(path) => Credentials::CredsFile(path.to_path_buf()),
    };
    ConnectOptions {
        url: nats.url.clone(),
        name: format!("capstan-{}", domain.service_name()),
        inbox_prefix: Some(domain.inbox_prefix()),
        credentials,
        tls_ca_file: nats.tls_ca_file.clone(),
        tls_client: nats.tls_cert_file.clone().zip(nats.tls_key_file.clone()),
    }
}

/// A started service: connected, migrated, its streams in place.
#[derive(Clone)]
pub struct Service {
    pub domain: Domain,
    pub settings: Settings,
    pub store: Store,
    pub bus: Bus,
}

impl Service {
    /// Connects to the database and migrates the service's schema, then connects to the bus
    /// and ensures the service's streams. Every step says what failed.
    pub async fn start(
        settings: &Settings,
        domain: Domain,
        migrator: &'static Migrator,
    ) -> anyhow::Result<Service> {
        let store = Store::connect(
            settings.database.url(),
            domain.as_str(),
            settings.database.max_connections,
        )
        .await
        .with_context(|| format!("starting {domain}: connecting to the database"))?;
        store
            .migrate(migrator)
            .await
            .with_context(|| format!("starting {domain}: migrating its schema"))?;
        let bus = Bus::connect_with(&bus_options(settings, domain))
            .await
            .with_context(|| format!("starting {domain}: connecting to NATS"))?;
        bus.ensure_streams(domain)
            .await
            .with_context(|| format!("starting {domain}: creating its streams"))?;
        Ok(Service {
            domain,
            settings: settings.clone(),
            store,
            bus,
        })
    }

    /// The rpc server of this service with the health question already answered; add the
    /// service's own routes to it.
    pub fn rpc(&self) -> RpcServer {
        let store = self.store.clone();
        let domain = self.domain;
        let replica = uuid::Uuid::now_v7();
        RpcServer::new(self.bus.clone(), self.domain).route_health(move || {
            let store = store.clone();
            async move {
                store.ping().await.map_err(|error| {
                    RpcError::new(ErrorCode::Unavailable, format!("{domain}: {error}"))
                })?;
                Ok(Health {
                    service: domain.service_name(),
                    version: env!("CARGO_PKG_VERSION").to_string(),
                    ready: true,
                    replica: Some(replica),
                })
            }
        })
    }

    /// Runs the rpc server, the outbox relay and `parts` together until `shutdown` or the
    /// first failure (which stops the rest), then closes the database. Parts stop first, the
    /// relay last, so what they wrote still goes out.
    pub async fn run(
        self,
        rpc: RpcServer,
        parts: Vec<Part>,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        let domain = self.domain;
        let stop_parts = shutdown.child_token();
        let stop_relay = CancellationToken::new();
        let mut running: JoinSet<anyhow::Result<()>> = JoinSet::new();
        {
            let stop = stop_parts.clone();
            running.spawn(async move {
                rpc.serve(stop)
                    .await
                    .with_context(|| format!("{domain}: serving rpc"))
            });
        }
        for part in parts {
            running.spawn(part(stop_parts.clone()));
        }
        let relay = OutboxRelay::new(
            self.store.clone(),
            Arc::new(BusPublisher(self.bus.clone())),
            self.settings.outbox.batch_size,
            self.settings.outbox.poll_interval(),
        );
        let relay = tokio::spawn(relay.run(stop_relay.clone()));
        info!(service = %domain, "service running");

        let mut first_failure = None;
        while let Some(finished) = running.join_next().await {
            let failure = match finished {
                Ok(Ok(())) => None,
                Ok(Err(error)) => Some(error),
                Err(panic) => Some(anyhow::anyhow!("{domain}: a part panicked: {panic}")),
            };
            if let Some(error) = failure {
                error!(service = %domain, error = format!("{error:#}"), "part failed, stopping the service");
                stop_parts.cancel();
                first_failure.get_or_insert(error);
            } else if !stop_parts.is_cancelled() {
                // A part that ends on its own before shutdown is a fault too.
                stop_parts.cancel();
                first_failure.get_or_insert(anyhow::anyhow!("{domain}: a part stopped by itself"));
            }
        }
        info!(service = %domain, "parts stopped, flushing the outbox relay");
        stop_relay.cancel();
        let _ = relay.await;
        self.store.close().await;
        // NATS may be gone; a stop must not wait for it forever.
        let _ = tokio::time::timeout(capstan_bus::rpc::SHUTDOWN_GRACE, self.bus.flush()).await;
        info!(service = %domain, "service stopped");
        first_failure.map_or(Ok(()), Err)
    }
}

/// Migrates one service's schema and returns: what `capstan migrate` runs.
pub async fn migrate_only(
    settings: &Settings,
    domain: Domain,
    migrator: &'static Migrator,
) -> anyhow::Result<()> {
    let store = Store::connect(settings.database.url(), domain.as_str(), 1)
        .await
        .with_context(|| format!("{domain}: connecting to the database"))?;
    store
        .migrate(migrator)
        .await
        .with_context(|| format!("{domain}: migrating"))?;
    store.close().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use secrecy::ExposeSecret;

    #[test]
    fn a_service_connects_with_the_configured_credentials_and_its_own_reply_prefix() {
        let settings = Settings::load_from(
            None,
            [
                ("CAPSTAN__NATS__USER", "agent_channel"),
                ("CAPSTAN__NATS__PASSWORD", "s3cret"),
            ]
            .map(|(key, value)| (key.to_string(), value.to_string())),
        )
        .unwrap();
        let options = bus_options(&settings, Domain::AgentChannel);
        assert_eq!(
            options.inbox_prefix.as_deref(),
            Some("_INBOX.agent_channel")
        );
        assert!(matches!(
            &options.credentials,
            Credentials::UserPassword { user, password }
                if user == "agent_channel" && password.expose_secret() == "s3cret"
        ));
        assert!(!format!("{options:?}").contains("s3cret"));

        let open = bus_options(
            &Settings::load_from(None, Vec::new()).unwrap(),
            Domain::Billing,
        );
        assert!(matches!(open.credentials, Credentials::None));
        assert_eq!(open.tls_ca_file, None);
    }
}
