//! The rollouts service: releases and their signed artifacts (issue 15), and later staged
//! rollouts and deploy-to-all.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`
//! (publishing and listing for the gateway, artifacts for the agent channel); `consumers.rs`,
//! `tasks.rs` and `drivers/` appear with their first content. The plane never holds the
//! release signing key: it stores and serves what was signed where `capstan release` ran.
#![forbid(unsafe_code)]

pub mod domain;
pub mod rpc;
pub mod store;

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
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
    let rpc = rpc::routes(service.rpc(), state);
    service.run(rpc, Vec::new(), shutdown).await
}
