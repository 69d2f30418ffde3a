//! The provisioning service: cloud accounts and provider drivers, provisions, bootstrap installs
//! and auto-approval of the joins they bring (issue 29).
//!
//! Its rooms, as in every service: `domain/` (pure rules), `store.rs` (its SQL), `rpc.rs` (the
//! gateway's questions: accounts and offers), `drivers/` (the cloud providers behind one seam,
//! and the token seal), `settings.rs` (its section); `standin/` (the providers' stand-ins, for
//! tests, behind the `testsuite` feature). `consumers.rs` and `tasks.rs` appear with their
//! first content (the bootstrap, auto-approval, the cleanup).
#![forbid(unsafe_code)]

pub mod app;
pub mod consumers;
pub mod domain;
pub mod drivers;
pub mod rpc;
pub mod settings;
#[cfg(feature = "testsuite")]
pub mod standin;
pub mod store;
pub mod tasks;

use capstan_events::Domain;
use capstan_runtime::{consume_patiently, Part, Service};
use capstan_settings::Settings;
use settings::ProvisioningSettings;
use sqlx::migrate::Migrator;
use std::sync::Arc;
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;

use crate::drivers::seal::Sealer;
use crate::drivers::Providers;

pub const DOMAIN: Domain = Domain::Provisioning;

/// The migrations of the `provisioning` schema, embedded from `migrations/provisioning/`.
pub static MIGRATOR: Migrator = sqlx::migrate!("../../migrations/provisioning");

/// The drivers' maker, from settings.
pub fn providers(own: &ProvisioningSettings) -> Providers {
    Providers {
        linode_base_url: own.linode_base_url.clone(),
        hetzner_base_url: own.hetzner_base_url.clone(),
        limits: own.limits(),
        http: drivers::api::http(),
    }
}

/// The provisions' running work: the workflow over those in flight (woken by `wake`) and the
/// auto-approval pass (woken by the workflow's `judge`).
fn provision_parts(
    workflow: app::workflow::Workflow,
    wake: Arc<Notify>,
    at_once: usize,
) -> Vec<Part> {
    let approval = workflow.clone();
    let judge = workflow.judge.clone();
    vec![
        Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::provisions::provisions(workflow, wake, at_once, stop))
        }),
        Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::provisions::approval(approval, judge, stop))
        }),
    ]
}

/// Runs the service until `shutdown`.
pub async fn run(
    settings: Settings,
    own: ProvisioningSettings,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    if own.seal_key().is_none() {
        tracing::warn!(
            "no seal key is set (CAPSTAN__PROVISIONING__SEAL_KEY_FILE): cloud accounts cannot be added or used"
        );
    }
    let service = Service::start(&settings, DOMAIN, &MIGRATOR).await?;
    let own = Arc::new(own);
    let wake = Arc::new(Notify::new());
    let joined = Arc::new(Notify::new());
    let state = rpc::State {
        store: service.store.clone(),
        sealer: Sealer::new(own.seal_key()),
        providers: providers(&own),
        settings: own.clone(),
        wake: wake.clone(),
    };
    let rpc = rpc::routes(service.rpc(), state.clone());
    let workflow = app::workflow::Workflow {
        store: service.store.clone(),
        sealer: Sealer::new(own.seal_key()),
        providers: providers(&own),
        settings: own.clone(),
        bus: service.bus.clone(),
        holder: format!("provisioning-{}", uuid::Uuid::now_v7()),
        judge: joined.clone(),
        agent: Arc::default(),
        outbound: capstan_runtime::outbound::Outbound::from_settings(&settings),
    };
    let mut parts = provision_parts(workflow, wake, own.concurrency as usize);
    let events = Arc::new(consumers::Events { joined });
    for spec in consumers::specs(settings.bus.max_deliver, settings.bus.ack_wait()) {
        let (service, events) = (service.clone(), events.clone());
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(async move {
                // The agent channel's stream may not exist until it first starts.
                consume_patiently(&service, spec, events, stop).await
            })
        }));
    }
    {
        let state = state.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::transfer::watch(state, stop))
        }));
    }
    {
        let cleanup = tasks::cleanup::Cleanup {
            enabled: own.test_cloud_cleanup,
            max_age: chrono::Duration::hours(i64::from(own.test_cloud_max_age_hours)),
            plane_node: own.plane_node.clone(),
        };
        let state = state.clone();
        parts.push(Box::new(move |stop: CancellationToken| {
            Box::pin(tasks::cleanup::clean(state, cleanup, stop))
        }));
    }
    service.run(rpc, parts, shutdown).await
}
