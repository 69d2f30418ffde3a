//! What BK-21 judges from, read from the loop's rows (runs, jobs, verifies, nodes) and the
//! storage pass's (shelf), and the judgement as last sent: a changed judgement is stored and
//! `backups.health_changed` pushed in one transaction, with the conditions of the judgements
//! that changed (`domain/conditions.rs`). BK-22's recovery key columns are
//! written only from a node's own check_status.

use capstan_events::backups::{BackupHealth, HealthChanged};
use capstan_events::Envelope;
use capstan_events::NodeId;
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::Result;
use crate::domain::conditions;

/// `recovery_state, recovery_fingerprint, recovery_reported_at`.
type KeyRow = (Option<String>, Option<String>, Option<DateTime<Utc>>);
/// `seq, outcome, reason, dispatched_at, finished_at` of a backup_run job that ended.
type EndedJob = (
    Option<i64>,
    String,
    Option<String>,
    DateTime<Utc>,
    DateTime<Utc>,
);
use crate::domain::health::{RecoveryKey, RunFacts, VerifyFacts};

/// BK-22: the node's check_status said `state` (and `fingerprint`) at `at`; an older report
/// than the one held changes nothing.
pub async fn recovery_key_reported(
    connection: &mut PgConnection,
    node: NodeId,
    state: &str,
    fingerprint: Option<&str>,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "UPDATE nodes SET recovery_state = $2, recovery_fingerprint = $3, recovery_reported_at = $4
         WHERE node_id = $1 AND (recovery_reported_at IS NULL OR recovery_reported_at <= $4)",
    )
    .bind(node)
    .bind(state)
    .bind(fingerprint)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// The recovery key as last reported, and when.
pub async fn recovery_key(
    connection: &mut PgConnection,
    node: NodeId,
) -> Result<(RecoveryKey, Option<DateTime<Utc>>)> {
    let row: Option<KeyRow> = sqlx::query_as(
        "SELECT recovery_state, recovery_fingerprint, recovery_reported_at FROM nodes
         WHERE node_id = $1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?;
    let (state, fingerprint, at) = row.unwrap_or_default();
    Ok((
        RecoveryKey::from_report(state.as_deref(), fingerprint.as_deref()),
        at,
    ))
}

#[derive(sqlx::FromRow)]
struct RunRow {
    seq: i64,
    kind: Option<String>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    bytes: Option<i64>,
}

fn landed(row: RunRow) -> RunFacts {
    let finished = row.finished_at.unwrap_or_default();
    RunFacts {
        seq: row.seq,
        full: row.kind.as_deref() == Some("full"),
        started_at: row.started_at.unwrap_or(finished),
        finished_at: finished,
        error: None,
        bytes: row.bytes.unwrap_or_default().max(0) as u64,
    }
}

/// The runs BK-21 looks at: the newest backup_run that ended (failed or landed), the newest
/// landed, the first landed's time, the newest landed full and the bytes of the full before.
pub struct Runs {
    pub last_run: Option<RunFacts>,
    pub last_success: Option<RunFacts>,
    pub first_success_at: Option<DateTime<Utc>>,
    pub last_full: Option<RunFacts>,
    pub previous_full_bytes: Option<u64>,
    /// When the newest run landed (the witness is due while storage was listed before it).
    pub newest_landed_at: Option<DateTime<Utc>>,
}

pub async fn runs(connection: &mut PgConnection, node: NodeId) -> Result<Runs> {
    let landed_runs: Vec<RunRow> = sqlx::query_as(
        "SELECT seq, kind, started_at, finished_at, bytes FROM runs
         WHERE node_id = $1 AND landed_at IS NOT NULL ORDER BY seq DESC",
    )
    .bind(node)
    .fetch_all(&mut *connection)
    .await?;
    let newest_landed_at: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT max(landed_at) FROM runs WHERE node_id = $1")
            .bind(node)
            .fetch_one(&mut *connection)
            .await?;
    let first_success_at = landed_runs.last().and_then(|row| row.finished_at);
    let mut fulls = landed_runs
        .iter()
        .filter(|row| row.kind.as_deref() == Some("full"));
    let last_full = fulls.next().map(|row| {
        landed(RunRow {
            seq: row.seq,
            kind: row.kind.clone(),
            started_at: row.started_at,
            finished_at: row.finished_at,
            bytes: row.bytes,
        })
    });
    let previous_full_bytes = fulls
        .next()
        .map(|row| row.bytes.unwrap_or_default().max(0) as u64);
    let last_success = landed_runs.into_iter().next().map(landed);
    // The newest backup_run job that ended: a failure unless its run landed.
    let ended: Option<EndedJob> = sqlx::query_as(
        "SELECT seq, outcome, reason, dispatched_at, finished_at FROM jobs
             WHERE node_id = $1 AND primitive = 'backup_run' AND finished_at IS NOT NULL
             ORDER BY finished_at DESC LIMIT 1",
    )
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    let last_run = match ended {
        Some((seq, outcome, reason, dispatched, finished)) => {
            let seq = seq.unwrap_or_default();
            match &last_success {
                Some(success) if success.seq == seq => Some(success.clone()),
                _ => Some(RunFacts {
                    seq,
                    full: false,
                    started_at: dispatched,
                    finished_at: finished,
                    error: Some(reason.unwrap_or(outcome)),
                    bytes: 0,
                }),
            }
        }
        None => last_success.clone(),
    };
    Ok(Runs {
        last_run,
        last_success,
        first_success_at,
        last_full,
        previous_full_bytes,
        newest_landed_at,
    })
}

/// BK-19: the newest verify that passed, and the newest attempt when it failed after it.
pub async fn verify(connection: &mut PgConnection, node: NodeId) -> Result<VerifyFacts> {
    let passed_at: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT max(finished_at) FROM verifies WHERE node_id = $1 AND ok")
            .bind(node)
            .fetch_one(&mut *connection)
            .await?;
    let last: Option<(bool, DateTime<Utc>, Json<Vec<String>>)> = sqlx::query_as(
        "SELECT ok, finished_at, problems FROM verifies WHERE node_id = $1
         ORDER BY finished_at DESC, job_id DESC LIMIT 1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?;
    let failed = last.and_then(|(ok, at, problems)| {
        (!ok).then(|| {
            let words = if problems.0.is_empty() {
                "the node gave no reason".to_string()
            } else {
                problems.0.join("; ")
            };
            (at, words)
        })
    });
    Ok(VerifyFacts { passed_at, failed })
}

/// Stores `health` when it differs from the judgement last sent, and sends it; true when it
/// changed.
pub async fn judged(
    connection: &mut PgConnection,
    node: NodeId,
    health: &BackupHealth,
    at: DateTime<Utc>,
) -> Result<bool> {
    let held: Option<Json<BackupHealth>> =
        sqlx::query_scalar("SELECT health FROM health WHERE node_id = $1 FOR UPDATE")
            .bind(node)
            .fetch_optional(&mut *connection)
            .await?;
    let unchanged = match &held {
        Some(held) => held.0 == *health,
        // A node never judged unhealthy needs no word until it is.
        None => *health == BackupHealth::default(),
    };
    if unchanged {
        return Ok(false);
    }
    sqlx::query(
        "INSERT INTO health (node_id, health, judged_at) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE SET health = $2, judged_at = $3",
    )
    .bind(node)
    .bind(Json(health))
    .bind(at)
    .execute(&mut *connection)
    .await?;
    let before = held.map(|held| held.0).unwrap_or_default();
    for condition in conditions::changed(node, &before, health, at) {
        outbox::push_condition(connection, condition).await?;
    }
    let event = HealthChanged {
        node_id: node,
        health: health.clone(),
        judged_at: at,
    };
    outbox::push(
        connection,
        Envelope::new(event, Some(format!("node/{node}"))),
    )
    .await?;
    Ok(true)
}

/// The seqs a verify passed for (BK-12's verified chains).
pub async fn verified_seqs(connection: &mut PgConnection, node: NodeId) -> Result<Vec<i64>> {
    Ok(
        sqlx::query_scalar("SELECT seq FROM runs WHERE node_id = $1 AND verified_at IS NOT NULL")
            .bind(node)
            .fetch_all(connection)
            .await?,
    )
}
