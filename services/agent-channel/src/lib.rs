//! The agent-channel service: the node registry, joins, the job queue, and everything agents
//! send (claims, results, leaves, job status); the only service that talks to agents, through
//! the gateway. Other services ask it for work with `capstan.cmd.agent_channel.request_job` and
//! read `capstan.events.agent_channel.job_finished`.
#![forbid(unsafe_code)]

mod actions;
mod arrivals;
mod consumers;
pub mod domain;
mod rpc;
pub mod settings;
mod store;
mod tasks;
mod wake;

use capstan_events::Domain;
use capstan_runtime::{consume_patiently, consume_with_inbox, Part, Service};
use capstan_settings::Settings;
use settings::AgentChannelSettings;
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::AgentChannel;

/// The migrations of the `agent_channel` schema, embedded from `migrations/agent_channel/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/agent_channel");

/// What is read ahead at start, none of it fatal: the node keys, the container placements,
/// and the nodes with jobs waiting.
async fn warm(state: &rpc::State) {
    match state.keys.warm(&state.store).await {
        Ok(known) => tracing::info!(known, "node keys decoded"),
        // Not fatal: each key is then looked up at its node's first request.
        Err(error) => tracing::warn!(%error, "node keys not decoded ahead"),
    }
    match tasks::settle_placements(&state.store).await {
        Ok(containers) => tracing::info!(containers, "container placements settled"),
        // Not fatal: each placement is settled again when a fact of it changes.
        Err(error) => tracing::warn!(%error, "container placements not settled at start"),
    }
    // The nodes with jobs already waiting go ahead of plain renewals from the first request:
    // after a restart, the whole fleet renews at once.
    match state.wake.warm(&state.store).await {
        Ok(waiting) => tracing::info!(waiting, "nodes with jobs waiting"),
        Err(error) => tracing::warn!(%error, "nodes with jobs waiting not read ahead"),
    }
}

/// Runs the service until `shutdown`.
pub async fn run(
    settings: Settings,
    agent_channel: AgentChannelSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let slots = rpc::agent_slots(settings.database.max_connections);
    let wake = Arc::new(wake::Wake::default());
    let state = rpc::State {
        store: service.store.clone(),
        wake: wake.clone(),
        limits: Arc::new(rpc::Limits::from_settings(&agent_channel)),
        keys: Arc::new(rpc::Keys::default()),
        arrivals: arrivals::Arrivals::start(
            service.store.clone(),
            wake,
            domain::NONCE_WINDOW,
            domain::LAST_SEEN_RESOLUTION,
        ),
        stopping: shutdown.clone(),
        agent_slots: Arc::new(tokio::sync::Semaphore::new(slots)),
        plain_slots: Arc::new(tokio::sync::Semaphore::new(domain::claims::plain_slots(
            slots,
        ))),
        intake: Arc::new(tokio::sync::Semaphore::new(rpc::INTAKE_PERMITS)),
    };
    warm(&state).await;
    let rpc = rpc::routes(service.rpc(), state.clone(), service.bus.clone());
    let listening = {
        let (wake, store) = (state.wake.clone(), state.store.clone());
        let part: Part =
            Box::new(move |stop: CancellationToken| Box::pin(wake.listen(store, stop)));
        part
    };
    let sweeping = {
        let (store, limits, wake) = (
            state.store.clone(),
            state.limits.clone(),
            state.wake.clone(),
        );
        let part: Part = Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::run(store, limits, wake, stop))
        });
        part
    };
    let reporting = {
        let store = state.store.clone();
        let part: Part =
            Box::new(move |stop: CancellationToken| Box::pin(tasks::report_seen(store, stop)));
        part
    };
    let commands = {
        let service = service.clone();
        let spec = consumers::spec(settings.bus.max_deliver, settings.bus.ack_wait());
        let part: Part = Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                consume_with_inbox(&service, spec, Arc::new(consumers::Commands), stop).await
            })
        });
        part
    };
    let mut parts = vec![listening, sweeping, reporting, commands];
    for spec in consumers::event_specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let service = service.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                // The monitor's and provisioning's streams may not exist until they first start.
                consume_patiently(&service, spec, Arc::new(consumers::OtherEvents), stop).await
            })
        }));
    }
    service.run(rpc, parts, shutdown).await
}
