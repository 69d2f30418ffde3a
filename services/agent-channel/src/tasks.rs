//! Periodic work, run by one replica per tick (a transaction-scoped advisory lock): joins that
//! expired or whose rejection is over a day old, claims past their budget, old nonces; and the
//! `nodes_seen` report of the check-ins stamped since the last one.

use capstan_store::{Store, StoreError};
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{actions, domain::jobs::lost, rpc::Limits, store, wake::Wake};

/// How often the sweep runs (AC-29 also runs it on every poll of the node concerned).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);
/// The advisory lock one replica holds for a sweep ([`Store::lead_tick`]).
pub const SWEEP_LOCK: &str = "capstan-agent-channel-sweep";

/// How often the check-ins stamped since the last report are told (`nodes_seen`).
pub const NODES_SEEN_INTERVAL: Duration = Duration::from_secs(10);
/// Nodes named in one `nodes_seen` event at most (a fleet's report is sent in chunks).
pub const NODES_SEEN_CHUNK: usize = 1000;
/// A report re-reads stamps this far before the last report's time: a check-in stamped with
/// a time before the last report, but committed after it was read, is still told.
pub const NODES_SEEN_OVERLAP: Duration = Duration::from_secs(5);

/// Sends a `nodes_seen` report every [`NODES_SEEN_INTERVAL`] until `shutdown`.
pub async fn report_seen(store: Store, shutdown: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(NODES_SEEN_INTERVAL, "nodes seen report", shutdown, || {
        report_seen_once(&store)
    })
    .await
}

/// One `nodes_seen` report, if no other replica is sending one now: every paired node stamped
/// since the last report (all of them for the first), in chunks, and an empty report when
/// none was, so listeners know how far the record runs.
pub async fn report_seen_once(store: &Store) -> Result<(), StoreError> {
    let Some(mut transaction) = store.lead_tick("capstan-agent-channel-nodes-seen").await? else {
        return Ok(());
    };
    let (as_of, seen) = store::seen_since_last_report(&mut transaction, NODES_SEEN_OVERLAP).await?;
    let mut chunks: Vec<&[capstan_events::agent_channel::NodeSeen]> =
        seen.chunks(NODES_SEEN_CHUNK).collect();
    if chunks.is_empty() {
        chunks.push(&[]);
    }
    for chunk in chunks {
        let report = capstan_events::agent_channel::NodesSeen {
            as_of,
            seen: chunk.to_vec(),
        };
        actions::emit(&mut transaction, report, "nodes".to_string()).await?;
    }
    transaction.commit().await?;
    Ok(())
}

pub async fn run(
    store: Store,
    limits: Arc<Limits>,
    wake: Arc<Wake>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(SWEEP_INTERVAL, "agent channel sweep", shutdown, || {
        limits.prune();
        wake.prune();
        sweep(&store)
    })
    .await
}

/// One sweep, if no other replica is sweeping now.
pub async fn sweep(store: &Store) -> Result<(), StoreError> {
    let Some(mut transaction) = store.lead_tick(SWEEP_LOCK).await? else {
        return Ok(());
    };
    let (expired, retired) = store::sweep_joins(&mut transaction).await?;
    let stale = store::lose_stale(&mut transaction, None, lost::BUDGET).await?;
    actions::announce_all_finished(&mut transaction, &stale).await?;
    let nonces = store::prune_nonces(
        &mut transaction,
        chrono::Utc::now(),
        crate::domain::NONCE_WINDOW,
    )
    .await?;
    transaction.commit().await?;
    if expired + retired + stale.len() as u64 > 0 {
        info!(
            expired,
            retired,
            lost = stale.len(),
            nonces,
            "agent channel sweep"
        );
    }
    Ok(())
}

/// At start: announces every container node's placement that differs from the one last
/// announced (after an upgrade from a plane that announced none, every one). Placements move
/// only in this service's own transactions, so afterwards this finds nothing to send.
pub async fn settle_placements(store: &Store) -> Result<usize, StoreError> {
    let mut transaction = store.begin().await?;
    let nodes = store::placed_or_named_containers(&mut transaction).await?;
    actions::settle_placements(&mut transaction, &nodes).await?;
    transaction.commit().await?;
    Ok(nodes.len())
}
