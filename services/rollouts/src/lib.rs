//! The rollouts service: releases of the agent and their signed artifacts (issue 15), and
//! staged rollouts of site releases and patch runs (issue 16).
//!
//! Its rooms, as in every service: `domain/` (pure rules: releases, the rollout engine, its
//! verdicts and plans), `store.rs` (its SQL; `store/staged.rs` for rollouts), `rpc.rs`
//! (publishing and listing for the gateway, artifacts for the agent channel; `rpc/staged.rs`
//! for rollouts), `consumers.rs` (node facts, job ends, incidents), `tasks.rs` (the clock's
//! advance). The plane never holds the release signing key: it stores and serves what was
//! signed where `capstan release` ran.
#![forbid(unsafe_code)]

pub mod app;
pub mod consumers;
pub mod domain;
pub mod rpc;
pub mod store;
pub mod tasks;

use capstan_events::Domain;
use capstan_runtime::{consume_patiently, Part, Service};
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::Rollouts;

/// The migrations of the `rollouts` schema, embedded from `migrations/rollouts/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/rollouts");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let state = rpc::State {
        store: service.store.clone(),
    };
    let staged = rpc::staged::State {
        store: service.store.clone(),
    };
    let rpc = rpc::staged::routes(rpc::routes(service.rpc(), state), staged);
    let mut parts: Vec<Part> = Vec::new();
    for spec in consumers::specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let service = service.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                // The other services' streams may not exist until they first start.
                consume_patiently(&service, spec, Arc::new(consumers::Events), stop).await
            })
        }));
    }
    {
        let store = service.store.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::advance(store, tasks::ADVANCE_EVERY, stop))
        }));
    }
    service.run(rpc, parts, shutdown).await
}
