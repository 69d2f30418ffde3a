//! The status pass (MO-05, MO-06): on its interval, one replica at a time, every stale node is
//! asked for `check_status` and `host_report` through the agent channel's `request_job`, by the
//! cover rule in `domain/cadence.rs`. The asking and its note commit together, so a pass that
//! fails asks nothing and the next pass decides again.

use std::time::Duration;

use capstan_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::domain::cadence::{self, Candidate, Cover, REQUESTED_BY};
use crate::store::status;

/// The lock that makes one replica run each status pass.
pub const STATUS_LOCK: &str = "capstan-monitor-status";

/// How the status pass runs.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    pub every: Duration,
    pub window: chrono::Duration,
}

/// Runs a status pass every `cadence.every` until `stop`, the first one interval after the
/// start (a replica that restarts does not pass at once; the agents it would ask have just been
/// asked, or will be at the next pass).
pub async fn status(store: Store, cadence: Cadence, stop: CancellationToken) -> anyhow::Result<()> {
    tokio::select! {
        _ = stop.cancelled() => return Ok(()),
        _ = tokio::time::sleep(cadence.every) => {}
    }
    capstan_runtime::periodic::every(cadence.every, "monitor status pass", stop, || {
        let store = store.clone();
        async move { pass(&store, Utc::now(), cadence.window).await.map(|_| ()) }
    })
    .await
}

/// One pass at `now`: asks each stale node for each word it lacks cover for; how many jobs it
/// asked for (none when another replica is running a pass).
pub async fn pass(
    store: &Store,
    now: DateTime<Utc>,
    window: chrono::Duration,
) -> Result<usize, StoreError> {
    let Some(mut transaction) = store.lead_tick(STATUS_LOCK).await? else {
        return Ok(0);
    };
    let rows = status::cadence(&mut transaction).await?;
    let mut asked = 0;
    for row in &rows {
        let node = Candidate {
            node_id: row.node_id,
            paired: row.paired,
            operational: row.operational,
            vocabulary: row.vocabulary.as_ref().map(|words| words.0.as_slice()),
        };
        let cover = Cover {
            open: row.open,
            completed_at: row.completed_at,
            requested_at: row.requested_at,
        };
        if !cadence::due(&node, &row.word, &cover, now, window) {
            continue;
        }
        let key = cadence::idempotency_key(row.node_id, &row.word, now, window);
        status::request(
            &mut transaction,
            row.node_id,
            &row.word,
            &key,
            REQUESTED_BY,
            now,
        )
        .await?;
        asked += 1;
    }
    status::count_pass(&mut transaction, now).await?;
    status::prune_status_jobs(&mut transaction, now - window * 2).await?;
    transaction.commit().await?;
    debug!(asked, nodes = rows.len(), "status pass");
    Ok(asked)
}
