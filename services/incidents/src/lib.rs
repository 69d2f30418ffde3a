//! The incidents service: incident records, timelines, triage and notifications; intake of
//! agent cases and of the conditions other services judge and publish.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store/` (its SQL), `rpc.rs` (the
//! gateway's questions), `consumers.rs` (the agent channel's and the gateway's events),
//! `tasks.rs` (the reconciler's pass and the delivery of signals), `drivers/` (mail and
//! webhooks).
#![forbid(unsafe_code)]

pub mod consumers;
pub mod domain;
pub mod drivers;
pub mod rpc;
pub mod settings;
pub mod store;
pub mod tasks;

use capstan_events::Domain;
use capstan_runtime::outbound::Outbound;
use capstan_runtime::{consume_patiently, Part, Service};
use capstan_settings::{PlaneName, Settings};
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::domain::delivery::{Backoff, GIVE_UP_AFTER, LONGEST_RETRY_GAP};
use crate::domain::sources::{AgentSilent, Registry};
use crate::drivers::{mail::Smtp, webhook::Http, Drivers, Mailer};
use crate::settings::IncidentsSettings;

pub const DOMAIN: Domain = Domain::Incidents;

/// The migrations of the `incidents` schema, embedded from `migrations/incidents/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/incidents");

/// This plane's own sources, registered once (IN-12): `plane:agent_silent`. Other services'
/// conditions are judged by them and heard on the conditions stream (`consumers.rs`).
pub fn registry(incidents: &IncidentsSettings) -> anyhow::Result<Registry> {
    let mut registry = Registry::default();
    registry
        .register(Box::new(
            AgentSilent::new(incidents.agent_silent_secs)
                .map_err(|error| anyhow::anyhow!("incidents.{error}"))?,
        ))
        .map_err(|error| anyhow::anyhow!("{error}"))?;
    Ok(registry)
}

/// The retry schedule of deliveries: the first gap from settings, doubling to the longest.
pub fn backoff(incidents: &IncidentsSettings) -> anyhow::Result<Backoff> {
    let first = chrono::Duration::seconds(incidents.retry_first_secs as i64);
    Backoff::new(first, LONGEST_RETRY_GAP.max(first), GIVE_UP_AFTER)
        .map_err(|error| anyhow::anyhow!("incidents.retry_first_secs: {error}"))
}

/// Where webhooks may go: the plane's address policy (`outbound.allow_private`), which the
/// older, webhooks-only `incidents.webhook_allow_private` can still loosen — either set to true
/// allows private targets and plain `http://` for webhooks.
pub fn webhook_outbound(settings: &Settings, incidents: &IncidentsSettings) -> Outbound {
    if incidents.webhook_allow_private {
        Outbound::allowing_private()
    } else {
        Outbound::from_settings(settings)
    }
}

/// Runs the service until `shutdown`, with its own section and the plane's name its signals
/// carry.
pub async fn run(
    settings: Settings,
    (incidents, plane_name): (IncidentsSettings, PlaneName),
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let registry = Arc::new(registry(&incidents)?);
    let backoff = backoff(&incidents)?;
    let mailer: Option<Box<dyn Mailer>> = match incidents.smtp_url() {
        Some(url) => Some(Box::new(
            Smtp::new(url, &incidents.mail_from).map_err(anyhow::Error::msg)?,
        )),
        None => None,
    };
    let outbound = webhook_outbound(&settings, &incidents);
    let drivers = Arc::new(Drivers {
        mailer,
        poster: Box::new(Http::new(outbound)),
        plane_name: plane_name.text().to_string(),
    });
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let state = rpc::State {
        store: service.store.clone(),
        outbound,
    };
    let rpc = rpc::routes(service.rpc(), state);
    let mail_enabled = drivers.mailer.is_some();
    let mut parts: Vec<Part> = Vec::new();
    for spec in consumers::specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let service = service.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                let events = Arc::new(consumers::Events { mail_enabled });
                // Another service's stream may not exist until that service first starts.
                consume_patiently(&service, spec, events, stop).await
            })
        }));
    }
    {
        let (store, registry) = (service.store.clone(), registry.clone());
        let interval = incidents.pass_interval();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::reconcile(
                store,
                registry,
                interval,
                mail_enabled,
                stop,
            ))
        }));
    }
    {
        let (store, drivers) = (service.store.clone(), drivers.clone());
        let interval = incidents.deliver_interval();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::deliver(store, drivers, backoff, interval, stop))
        }));
    }
    service.run(rpc, parts, shutdown).await
}
