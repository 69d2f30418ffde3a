//! The care of what is stored, every tick by one replica (its own lock, beside the schedule's):
//! for each node with a live space, the storage pass (`storage_pass`: witness, storage check,
//! retention) when it is due — never listed, a run landed since the last listing (BK-17's
//! witness), or the last listing older than the node's interval (once per backup cycle) — and
//! then the node's backup health (BK-21) judged anew, sent when it changed.

use std::collections::BTreeSet;
use std::time::Duration;

use capstan_store::StoreError;
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;

use crate::domain::health::{judge, HealthFacts};
use crate::domain::policy::{effective, tiers};
use crate::domain::retention::keep_days;
use crate::domain::schedule::{excluded, NodeFacts};
use crate::rpc::State;
use crate::storage_pass::{pass_node, PassPolicy};
use crate::store::{health, schedule, shelf};

/// The lock that makes one replica care for the storage each tick.
pub const CARE_LOCK: &str = "capstan-backups-care";

/// Runs the care every `every` until `stop`.
pub async fn care(state: State, every: Duration, stop: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(every, "caring for stored backups", stop, || {
        let state = state.clone();
        async move { tick(&state, Utc::now()).await }
    })
    .await
}

/// One pass of the care over every node.
pub async fn tick(state: &State, now: DateTime<Utc>) -> Result<(), StoreError> {
    let Some(mut lock) = state.store.lead_tick(CARE_LOCK).await? else {
        return Ok(());
    };
    let (fleet, _, _) = schedule::fleet_policy(&mut lock).await?;
    let nodes = schedule::nodes(&mut lock).await?;
    for node in nodes {
        let (stored, _, _) = schedule::node_policy(&mut lock, node.node_id).await?;
        let policy = effective(&fleet, &stored);
        let facts = NodeFacts {
            paired: node.paired,
            install_state: node.install_state.clone(),
            vocabulary: node.vocabulary.clone(),
        };
        let every = chrono::Duration::minutes(i64::from(policy.fields.every_minutes));
        let spaces = shelf::live_spaces(&mut lock, node.node_id).await?;
        let runs = health::runs(&mut lock, node.node_id).await?;
        let listed = shelf::shelf(&mut lock, node.node_id).await?;
        let due = listed.checked_at.is_none_or(|checked| {
            runs.newest_landed_at.is_some_and(|landed| landed > checked) || now - checked >= every
        });
        if !spaces.is_empty() && due {
            let verified_seqs: BTreeSet<i64> = health::verified_seqs(&mut lock, node.node_id)
                .await?
                .into_iter()
                .collect();
            let pass = PassPolicy {
                keep_days: keep_days(None, policy.fields.keep_days),
                tiers: tiers(&policy.fields),
                verified_seqs,
            };
            let report = pass_node(state, node.node_id, &pass, now).await?;
            if !report.errors.is_empty() {
                tracing::warn!(node = node.node_id.get(), errors = ?report.errors, "the storage pass could not finish");
            }
        }
        let listed = shelf::shelf(&mut lock, node.node_id).await?;
        let (recovery_key, _) = health::recovery_key(&mut lock, node.node_id).await?;
        let verify = health::verify(&mut lock, node.node_id).await?;
        let facts = HealthFacts {
            scheduled: excluded(&facts, &policy).is_none(),
            scheduled_since: node.approved_at,
            paired_at: node.approved_at,
            every,
            verify_every_days: policy.fields.verify_every_days,
            recovery_key,
            last_run: runs.last_run,
            last_success: runs.last_success,
            first_success_at: runs.first_success_at,
            last_full: runs.last_full,
            previous_full_bytes: runs.previous_full_bytes,
            shelf_checked_at: listed.checked_at,
            shelf_newest_at: listed.newest_at,
            shelf_problem: listed.problem,
            verify,
        };
        health::judged(&mut lock, node.node_id, &judge(&facts, now), now).await?;
    }
    lock.commit().await?;
    Ok(())
}
