//! The monitor service: uptime checks, served-certificate checks and edge-versus-direct probes.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::Monitor;

/// The migrations of the `monitor` schema, embedded from `migrations/monitor/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/monitor");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
