//! The backups service: backup targets, storage spaces, fleet policy and scheduling, chains, retention and verification.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs` (the
//! operator's targets and the broker; `rpc/node.rs` the policy, a node's backups and the acts
//! that take its machine's turn), `consumers.rs` (node facts and the ends of the jobs it asked
//! for), `tasks.rs` (the schedule), `drivers/` (the S3 storage, the sealing of credentials).
#![forbid(unsafe_code)]

pub mod consumers;
pub mod domain;
pub mod drivers;
pub mod rpc;
pub mod settings;
pub mod storage_pass;
pub mod store;
pub mod tasks;

use capstan_events::Domain;
use capstan_runtime::{consume_patiently, Part, Service};
use capstan_settings::Settings;
use settings::BackupsSettings;
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::drivers::seal::Sealer;

pub const DOMAIN: Domain = Domain::Backups;

/// The migrations of the `backups` schema, embedded from `migrations/backups/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/backups");

/// Runs the service until `shutdown`.
pub async fn run(
    settings: Settings,
    backups: BackupsSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    if backups.seal_key().is_none() {
        tracing::warn!(
            "CAPSTAN__BACKUPS__SEAL_KEY_FILE is not set: backup targets cannot be added or used"
        );
    }
    let state = rpc::State {
        store: service.store.clone(),
        sealer: Sealer::new(backups.seal_key()).read_from(backups.seal_key_file.clone()),
        http: drivers::s3::http(),
        url_ttl: backups.url_ttl(),
    };
    let node = rpc::node::State {
        store: service.store.clone(),
        job_id_wait: std::time::Duration::from_secs(4),
    };
    let rpc = rpc::node::routes(rpc::routes(service.rpc(), state.clone()), node);
    let mut parts: Vec<Part> = Vec::new();
    for spec in consumers::specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let service = service.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                // The agent channel's stream may not exist until it first starts.
                consume_patiently(&service, spec, Arc::new(consumers::Events), stop).await
            })
        }));
    }
    {
        let store = service.store.clone();
        let every = backups.schedule_every();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::schedule(store, every, stop))
        }));
    }
    {
        // The storage pass and the health judgement (BK-11..BK-17, BK-21), on the schedule's tick.
        let every = backups.schedule_every();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::care::care(state, every, stop))
        }));
    }
    service.run(rpc, parts, shutdown).await
}
