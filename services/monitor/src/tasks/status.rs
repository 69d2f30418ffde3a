//! The status pass (MO-05, MO-06): on its interval, one replica at a time, every stale node is
//! asked for `check_status` and `host_report` through the agent channel's `request_job`, by the
//! cover rule in `domain/cadence.rs`. The asking and its note commit together, so a pass that
//! fails asks nothing and the next pass decides again.

use std::time::Duration;

use capstan_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::domain::cadence::{self, Candidate, Cover, HostFacts, Windows, REQUESTED_BY};
use crate::store::status;

/// The lock that makes one replica run each status pass.
pub const STATUS_LOCK: &str = "capstan-monitor-status";

/// How the status pass runs.
#[derive(Debug, Clone, Copy)]
pub struct Cadence {
    pub every: Duration,
    /// The status window, and host_report's shorter ones (MO-06).
    pub windows: Windows,
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
        async move { pass(&store, Utc::now(), &cadence.windows).await.map(|_| ()) }
    })
    .await
}

/// One pass at `now`: asks each stale node for each word it lacks cover for; how many jobs it
/// asked for (none when another replica is running a pass).
pub async fn pass(
    store: &Store,
    now: DateTime<Utc>,
    windows: &Windows,
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
            vocabulary: row.vocabulary.as_deref(),
        };
        let cover = Cover {
            open: row.open,
            completed_at: row.completed_at,
            requested_at: row.requested_at,
        };
        let (due, window, since) =
            if row.word == capstan_events::agent_channel::primitives::HOST_REPORT {
                let facts = HostFacts {
                    data_root_run: row.data_root_run.clone(),
                    boot_id: row.boot_id.clone(),
                    reported_at: row.reported_at,
                    reboot_asked: row
                        .reboot_asked_at
                        .map(|at| (at, row.reboot_boot_id.clone())),
                    // No escrow holder runs in this plane yet, so no node tells it its data root
                    // opened (the rule is in `HostFacts::opened_since_report`).
                    data_root_opened_at: None,
                    data_root_job_ended_at: row.data_root_job_ended_at,
                };
                (
                    cadence::host_report_due(&node, &cover, &facts, now, windows),
                    facts.window(windows),
                    facts.data_root_job_ended_at,
                )
            } else {
                let due = cadence::due(&node, &row.word, &cover, now, windows.hourly);
                (due, windows.hourly, None)
            };
        if !due {
            continue;
        }
        let key = cadence::idempotency_key(row.node_id, &row.word, now, window, since);
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
    status::prune_status_jobs(&mut transaction, now - windows.hourly * 2).await?;
    transaction.commit().await?;
    debug!(asked, nodes = rows.len(), "status pass");
    Ok(asked)
}
