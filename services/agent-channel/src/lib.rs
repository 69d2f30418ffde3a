//! The agent-channel service: the node registry, joins, the job queue and everything agents send (claims, results, leaves); the only service that talks to agents, through the gateway.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs`,
//! `consumers.rs`, `tasks.rs`, `drivers/`; each appears with its first content.
#![forbid(unsafe_code)]

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

pub const DOMAIN: Domain = Domain::AgentChannel;

/// The migrations of the `agent_channel` schema, embedded from `migrations/agent_channel/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/agent_channel");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let rpc = service.rpc();
    service.run(rpc, Vec::new(), shutdown).await
}
