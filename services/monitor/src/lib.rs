//! The monitor service: uptime checks, served-certificate checks, the status cadence, the
//! health dots and edge-versus-direct probes.
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs` (the
//! gateway's questions), `consumers.rs` (the agent channel's node events), `tasks.rs` (the
//! checks and certificate reads on their cadence), `drivers/` (the resolver, HTTP and TLS).
#![forbid(unsafe_code)]

pub mod app;
pub mod consumers;
pub mod domain;
pub mod drivers;
pub mod rpc;
pub mod settings;
pub mod store;
pub mod tasks;

use capstan_events::Domain;
use capstan_runtime::outbound::Outbound;
use capstan_runtime::{consume_patiently, Part, Service};
use capstan_settings::Settings;
use settings::MonitorSettings;
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio_util::sync::CancellationToken;

use crate::drivers::Prober;
use crate::tasks::Pace;

pub const DOMAIN: Domain = Domain::Monitor;

/// The migrations of the `monitor` schema, embedded from `migrations/monitor/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/monitor");

/// How the checks run, from settings.
pub fn pace(monitor: &MonitorSettings) -> Pace {
    Pace {
        tick: monitor.tick(),
        concurrency: monitor.concurrency as usize,
        cert_interval: chrono::Duration::seconds(i64::from(monitor.cert_interval_secs)),
        cert_warn_days: monitor.cert_warn_days,
        timeout: monitor.timeout(),
    }
}

/// How the status pass runs, from settings (MO-05, MO-06).
pub fn cadence(monitor: &MonitorSettings) -> tasks::status::Cadence {
    tasks::status::Cadence {
        every: std::time::Duration::from_secs(u64::from(monitor.status_pass_secs)),
        windows: domain::cadence::Windows {
            hourly: chrono::Duration::seconds(i64::from(monitor.status_refresh_secs)),
            data_root_run: chrono::Duration::seconds(i64::from(monitor.data_root_refresh_secs)),
            reboot: chrono::Duration::seconds(i64::from(monitor.reboot_refresh_secs)),
        },
    }
}

/// Runs the service until `shutdown`.
pub async fn run(
    settings: Settings,
    monitor: MonitorSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let prober = Arc::new(Prober::new(&monitor, Outbound::from_settings(&settings))?);
    run_with(settings, monitor, prober, shutdown).await
}

/// As [`run`], with the checks' prober given (tests trust their own certificate authority).
pub async fn run_with(
    settings: Settings,
    monitor: MonitorSettings,
    prober: Arc<Prober>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    let pace = pace(&monitor);
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let state = rpc::State {
        store: service.store.clone(),
        min_interval_secs: monitor.min_interval_secs,
        prober: prober.clone(),
    };
    let rpc = rpc::routes(service.rpc(), state);
    let mut parts: Vec<Part> = Vec::new();
    for spec in consumers::specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let service = service.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                // The agent channel's stream may not exist until it first starts.
                consume_patiently(&service, spec, Arc::new(consumers::NodeEvents), stop).await
            })
        }));
    }
    {
        let (store, prober) = (service.store.clone(), prober.clone());
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::uptime(store, prober, pace, stop))
        }));
    }
    {
        let (store, prober) = (service.store.clone(), prober.clone());
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::certificates(store, prober, pace, stop))
        }));
    }
    {
        let (store, prober) = (service.store.clone(), prober.clone());
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::edge_probes(store, prober, pace, stop))
        }));
    }
    {
        let store = service.store.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::prune(store, stop))
        }));
    }
    {
        let store = service.store.clone();
        let cadence = cadence(&monitor);
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::status::status(store, cadence, stop))
        }));
    }
    service.run(rpc, parts, shutdown).await
}
