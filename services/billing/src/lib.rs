//! The billing service: service tenants and their ladder, paid-through dates, allowances and order checks.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::Billing;

/// The migrations of the `billing` schema, embedded from `migrations/billing/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/billing");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
