//! The dns service: DNS drivers and the additive reconciler, registrars, managed domains, reverse DNS and certificate state.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::Dns;

/// The migrations of the `dns` schema, embedded from `migrations/dns/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/dns");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
