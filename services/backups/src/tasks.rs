//! Periodic work: every tick, one replica runs the schedule (BK-05): for each node that takes
//! part (BK-06) and whose machine's turn is free (BK-09), a level-2 verify when one is due
//! (BK-18; a backup due on the same tick waits for it), else a backup when one is due by the
//! last run's start (BK-07). Each is a `request_job` to the agent channel through the outbox,
//! under an idempotency key, committed with the turn it takes.

pub mod care;

use capstan_events::NodeId;
use std::time::Duration;

use capstan_events::agent_channel::machine_key;
use capstan_events::backups::rpc::RunKind;
use capstan_store::{PgConnection, Store, StoreError};
use chrono::{DateTime, Utc};
use serde_json::json;
use tokio_util::sync::CancellationToken;

use crate::domain::policy::{effective, Stored};
use crate::domain::schedule::{
    self, backup_due, excluded, next_run, verify_due, NodeFacts, BACKUP_RUN,
};
use crate::store::schedule::{self as store, Dispatch, NodeRow, REQUESTED_BY};
use capstan_events::Word as _;

/// The lock that makes one replica run the schedule each tick.
pub const SCHEDULE_LOCK: &str = "capstan-backups-schedule";
/// A request the agent channel has not taken in this long frees its machine's turn.
pub const UNTAKEN_AFTER: chrono::Duration = chrono::Duration::minutes(15);

/// Runs the schedule every `every` until `stop`.
pub async fn schedule(
    store: Store,
    every: Duration,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(every, "scheduling backups", stop, || {
        let store = store.clone();
        async move { tick(&store, Utc::now()).await }
    })
    .await
}

/// One pass of the schedule.
pub async fn tick(store: &Store, now: DateTime<Utc>) -> Result<(), StoreError> {
    let Some(mut transaction) = store.lead_tick(SCHEDULE_LOCK).await? else {
        return Ok(());
    };
    store::release_untaken(&mut transaction, now - UNTAKEN_AFTER, now).await?;
    let (fleet, _, _) = store::fleet_policy(&mut transaction).await?;
    let has_default = crate::store::default_target(&mut transaction)
        .await?
        .is_some();
    for node in store::nodes(&mut transaction).await? {
        let (stored, _, _) = store::node_policy(&mut transaction, node.node_id).await?;
        consider(&mut transaction, &node, &stored, &fleet, has_default, now).await?;
    }
    transaction.commit().await?;
    Ok(())
}

async fn consider(
    connection: &mut PgConnection,
    node: &NodeRow,
    stored: &Stored,
    fleet: &capstan_events::backups::rpc::FleetPolicy,
    has_default: bool,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let policy = effective(fleet, stored);
    let facts = NodeFacts {
        paired: node.paired,
        install_state: node.install_state.clone(),
        vocabulary: node.vocabulary.clone(),
    };
    if excluded(&facts, &policy).is_some() {
        return Ok(());
    }
    let machine = machine_key(node.node_id, node.host_node_id);
    if store::holder(connection, &machine).await?.is_some() {
        return Ok(());
    }
    let landed = store::newest_landed(connection, node.node_id).await?;
    let last_verify = store::last_dispatch(connection, node.node_id, "verify_backup")
        .await?
        .map(|(at, seq)| (at, seq.unwrap_or_default()));
    let newest_seq = landed.as_ref().map(|(run, _)| run.seq);
    if facts.vocabulary.iter().any(|word| word == "verify_backup")
        && verify_due(&policy.fields, newest_seq, last_verify, now)
    {
        let seq = newest_seq.unwrap_or_default();
        let job = Dispatch {
            key: format!("backups/node-{}/verify-2/run-{seq}", node.node_id),
            node_id: node.node_id,
            machine,
            primitive: "verify_backup",
            params: json!({"seq": seq, "level": 2}),
            seq: Some(seq),
            requested_by: REQUESTED_BY,
            at: now,
        };
        // A backup due on the same tick waits for it (BK-09).
        store::dispatch(connection, job).await?.ok();
        return Ok(());
    }
    let last_start = store::last_dispatch(connection, node.node_id, BACKUP_RUN)
        .await?
        .map(|(at, _)| at);
    if !backup_due(&policy.fields, last_start, now) {
        return Ok(());
    }
    if !has_default
        && crate::store::active_space(connection, node.node_id)
            .await?
            .is_none()
    {
        // Nowhere to write: no target is where new backups go (the Targets page says so).
        return Ok(());
    }
    let job = backup_job(
        connection,
        node.node_id,
        machine,
        &policy.fields,
        REQUESTED_BY,
        now,
    )
    .await?;
    store::dispatch(connection, job).await?.ok();
    Ok(())
}

/// The next `backup_run` of a node, as the policy's mode and its chain decide.
pub async fn backup_job<'a>(
    connection: &mut PgConnection,
    node: NodeId,
    machine: String,
    fields: &capstan_events::backups::rpc::PolicyFields,
    requested_by: &'a str,
    now: DateTime<Utc>,
) -> Result<Dispatch<'a>, StoreError> {
    let used = store::newest_used_seq(connection, node).await?;
    let landed = store::newest_landed(connection, node).await?;
    let next = next_run(
        fields,
        used,
        landed.as_ref().map(|(run, _)| run),
        landed.as_ref().and_then(|(_, full)| *full),
        now,
    );
    Ok(run_dispatch(node, machine, &next, requested_by, now))
}

/// The dispatch of run `next`.
pub fn run_dispatch<'a>(
    node: NodeId,
    machine: String,
    next: &schedule::NextRun,
    requested_by: &'a str,
    now: DateTime<Utc>,
) -> Dispatch<'a> {
    let mut params = json!({"seq": next.seq, "kind": next.kind.as_str()});
    if let (RunKind::Incremental, Some(previous)) = (next.kind, next.previous_seq) {
        params["previous_seq"] = json!(previous);
    }
    Dispatch {
        key: format!("backups/node-{node}/run-{}", next.seq),
        node_id: node,
        machine,
        primitive: BACKUP_RUN,
        params,
        seq: Some(next.seq),
        requested_by,
        at: now,
    }
}
