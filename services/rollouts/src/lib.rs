//! The rollouts service: releases and their signed artifacts, staged rollouts and deploy-to-all.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

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
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
