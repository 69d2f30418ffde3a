//! Periodic work: the reconciler's pass (one replica per pass, IN-03..IN-07) and the delivery
//! of signals (every replica takes what is due; a lease keeps two from sending one delivery).

use capstan_events::NodeId;
use capstan_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::consumers::WRITES_LOCK;
use crate::domain::delivery::Backoff;
use crate::domain::grouping::host_critical_kinds;
use crate::domain::reconcile::{reconcile_node, NodeContext};
use crate::domain::record::Incident;
use crate::domain::sources::{Registry, SourceName};
use crate::drivers::Drivers;
use crate::store::{self, signals, Audience};

/// The advisory lock that makes one replica run each pass.
pub const PASS_LOCK: &str = "capstan-incidents-pass";
/// Deliveries taken in one look.
pub const DELIVERIES_PER_LOOK: i64 = 20;

/// What one pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PassReport {
    pub led: bool,
    pub nodes: usize,
    pub effects: usize,
}

/// Runs a pass every `interval` until `shutdown`.
pub async fn reconcile(
    store: Store,
    registry: Arc<Registry>,
    interval: Duration,
    mail_enabled: bool,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(interval, "incidents pass", shutdown, || async {
        let report = pass(&store, &registry, mail_enabled, Utc::now()).await?;
        if report.effects > 0 {
            info!(
                nodes = report.nodes,
                effects = report.effects,
                "incidents pass"
            );
        }
        Ok::<(), StoreError>(())
    })
    .await
}

/// One pass at `now`, if no other replica is passing: every node's conditions (the registry's
/// sources, and what other services reported happening) against the incidents held, hosts before their containers (so a
/// container's incident can be folded under its host's), written in one transaction.
pub async fn pass(
    store: &Store,
    registry: &Registry,
    mail_enabled: bool,
    now: DateTime<Utc>,
) -> Result<PassReport, StoreError> {
    let Some(mut transaction) = store.lead_tick(PASS_LOCK).await? else {
        return Ok(PassReport::default());
    };
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(WRITES_LOCK)
        .execute(&mut *transaction)
        .await?;
    let mut nodes = store::nodes(&mut transaction).await?;
    // Hosts (and plain machines) first, then containers.
    nodes.sort_by_key(|node| (node.docker_host.is_some(), node.node_id));
    let mut held: HashMap<NodeId, Vec<Incident>> = HashMap::new();
    for incident in store::held(&mut transaction, None).await? {
        held.entry(incident.node_id).or_default().push(incident);
    }
    let reported = store::conditions::happening(&mut transaction).await?;
    let silences = store::active_silences(&mut transaction, now).await?;
    let recipients = store::recipients(&mut transaction, mail_enabled).await?;
    let webhooks = store::webhook_targets(&mut transaction).await?;
    let audience = Audience {
        recipients: &recipients,
        webhooks: &webhooks,
    };
    let mut host_critical: HashMap<NodeId, Vec<SourceName>> = HashMap::new();
    let mut effects_written = 0;
    let empty = Vec::new();
    for node in &nodes {
        let node_reported = reported.get(&node.node_id).map_or(&[][..], Vec::as_slice);
        let conditions = registry.conditions(node, node_reported, now);
        let node_held = held.get(&node.node_id).unwrap_or(&empty);
        if node.docker_host.is_none() {
            host_critical.insert(node.node_id, host_critical_kinds(node_held, &conditions));
        }
        let kinds = node
            .docker_host
            .and_then(|host| host_critical.get(&host))
            .map_or(&[][..], Vec::as_slice);
        let context = NodeContext {
            node,
            silences: &silences,
            host_critical: kinds,
        };
        let effects = reconcile_node(&context, node_held, &conditions, now);
        if effects.is_empty() {
            continue;
        }
        effects_written += effects.len();
        store::apply(&mut transaction, &effects, audience, now).await?;
    }
    transaction.commit().await?;
    Ok(PassReport {
        led: true,
        nodes: nodes.len(),
        effects: effects_written,
    })
}

/// Sends what is due every `interval` until `shutdown`.
pub async fn deliver(
    store: Store,
    drivers: Arc<Drivers>,
    backoff: Backoff,
    interval: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(interval, "incidents deliveries", shutdown, || async {
        while deliver_due(&store, &drivers, &backoff, Utc::now()).await?
            == DELIVERIES_PER_LOOK as usize
        {}
        Ok::<(), StoreError>(())
    })
    .await
}

/// Takes the deliveries due at `now`, attempts each and records how it went; how many were
/// taken.
pub async fn deliver_due(
    store: &Store,
    drivers: &Drivers,
    backoff: &Backoff,
    now: DateTime<Utc>,
) -> Result<usize, StoreError> {
    let due = {
        let mut transaction = store.begin().await?;
        let due = signals::take_due(&mut transaction, now, DELIVERIES_PER_LOOK).await?;
        transaction.commit().await?;
        due
    };
    for delivery in &due {
        let outcome = drivers.attempt(store, delivery).await;
        if let Err(reason) = &outcome {
            warn!(delivery = delivery.id, channel = %delivery.channel, %reason, "delivery failed");
        }
        let mut transaction = store.begin().await?;
        let detail = match &outcome {
            Ok(answer) => answer.clone(),
            Err(reason) => reason.to_string(),
        };
        let attempt = (outcome.is_ok(), detail.as_str());
        signals::record_attempt(&mut transaction, delivery, attempt, backoff, Utc::now()).await?;
        transaction.commit().await?;
    }
    Ok(due.len())
}
