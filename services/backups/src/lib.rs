//! The backups service: backup targets, storage spaces, fleet policy and scheduling, chains, retention and verification.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs` (the
//! operator's targets and the broker), `drivers/` (the S3 storage, the sealing of credentials);
//! `consumers.rs` and `tasks.rs` appear with their first content.
#![forbid(unsafe_code)]

pub mod domain;
pub mod drivers;
pub mod rpc;
pub mod storage_pass;
pub mod store;

use capstan_events::Domain;
use capstan_runtime::Service;
use capstan_settings::Settings;
use sqlx::migrate::Migrator;
use tokio_util::sync::CancellationToken;

use crate::drivers::seal::Sealer;

pub const DOMAIN: Domain = Domain::Backups;

/// The migrations of the `backups` schema, embedded from `migrations/backups/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/backups");

/// Runs the service until `shutdown`.
pub async fn run(settings: Settings, shutdown: CancellationToken) -> anyhow::Result<()> {
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    if settings.backups.seal_key().is_none() {
        tracing::warn!(
            "CAPSTAN__BACKUPS__SEAL_KEY_FILE is not set: backup targets cannot be added or used"
        );
    }
    let state = rpc::State {
        store: service.store.clone(),
        sealer: Sealer::new(settings.backups.seal_key()),
        http: drivers::s3::http(),
        url_ttl: settings.backups.url_ttl(),
    };
    let rpc = rpc::routes(service.rpc(), state);
    service.run(rpc, Vec::new(), shutdown).await
}
