//! The provisioning service: cloud accounts and provider drivers, provisions, bootstrap installs and site copies.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

pub mod domain;
pub mod drivers;
#[cfg(feature = "testsuite")]
pub mod standin;

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::Provisioning;

/// The migrations of the `provisioning` schema, embedded from `migrations/provisioning/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/provisioning");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
