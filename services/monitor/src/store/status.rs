//! The SQL of the status cadence (MO-05, MO-06) and the health dots (MO-07): the projection of
//! the agent channel's node vocabulary and status jobs, the jobs this service asked for, each
//! node's latest readings and its dot.

use capstan_events::agent_channel::{JobOutcome, RequestJob};
use capstan_events::monitor::{Health, HealthChanged, HealthDot};
use capstan_events::Envelope;
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{unknown, Result};
use crate::domain::cadence::{DATA_ROOT_WORDS, REBOOT_WORDS, WORDS};
use crate::domain::NodeId;
use capstan_events::Word as _;

/// Whether the monitor keeps `primitive`'s jobs.
pub fn kept(primitive: &str) -> bool {
    WORDS.contains(&primitive)
}

/// Whether a job of `primitive` reboots the machine (MO-06).
pub fn reboots(primitive: &str) -> bool {
    REBOOT_WORDS.contains(&primitive)
}

/// Whether a job of `primitive` encrypts, decrypts or re-keys the data root (MO-06).
pub fn data_root_job(primitive: &str) -> bool {
    DATA_ROOT_WORDS.contains(&primitive)
}

/// A reboot of `node` was asked at `at`: host_report is asked every two minutes until a
/// report finished after it carries a boot id other than the newest report's now (MO-06).
/// A later asking restarts the wait; an older one (a late event) changes nothing.
pub async fn reboot_asked(
    connection: &mut PgConnection,
    node: NodeId,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO host_report_triggers (node_id, reboot_asked_at, reboot_boot_id)
         VALUES ($1, $2, (SELECT result->>'boot_id' FROM readings
                          WHERE node_id = $1 AND primitive = 'host_report'))
         ON CONFLICT (node_id) DO UPDATE
         SET reboot_asked_at = EXCLUDED.reboot_asked_at, reboot_boot_id = EXCLUDED.reboot_boot_id
         WHERE host_report_triggers.reboot_asked_at IS NULL
            OR host_report_triggers.reboot_asked_at < EXCLUDED.reboot_asked_at",
    )
    .bind(node)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A data-root job on `node` ended at `at`: a host_report is asked at once (MO-06).
pub async fn data_root_job_ended(
    connection: &mut PgConnection,
    node: NodeId,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO host_report_triggers (node_id, data_root_job_ended_at) VALUES ($1, $2)
         ON CONFLICT (node_id) DO UPDATE
         SET data_root_job_ended_at = greatest(host_report_triggers.data_root_job_ended_at,
                                               EXCLUDED.data_root_job_ended_at)",
    )
    .bind(node)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A job of a kept word was queued (a later word about it stands).
pub async fn job_queued(
    connection: &mut PgConnection,
    job: i64,
    node: NodeId,
    primitive: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO status_jobs (job_id, node_id, primitive, state) VALUES ($1, $2, $3, 'queued')
         ON CONFLICT (job_id) DO NOTHING",
    )
    .bind(job)
    .bind(node)
    .bind(primitive)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A job of a kept word was claimed (unless it is already known finished).
pub async fn job_claimed(
    connection: &mut PgConnection,
    job: i64,
    node: NodeId,
    primitive: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO status_jobs (job_id, node_id, primitive, state) VALUES ($1, $2, $3, 'running')
         ON CONFLICT (job_id) DO UPDATE SET state = 'running' WHERE status_jobs.state = 'queued'",
    )
    .bind(job)
    .bind(node)
    .bind(primitive)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A job of a kept word finished at `at`; unless it was withdrawn (which says nothing of the
/// node) and unless a later one is already kept, it becomes the node's reading of the word.
/// Whether it did.
#[allow(clippy::too_many_arguments)]
pub async fn job_finished(
    connection: &mut PgConnection,
    job: i64,
    node: NodeId,
    primitive: &str,
    outcome: JobOutcome,
    result: Option<&serde_json::Value>,
    at: DateTime<Utc>,
) -> Result<bool> {
    sqlx::query(
        "INSERT INTO status_jobs (job_id, node_id, primitive, state, outcome, finished_at)
         VALUES ($1, $2, $3, 'finished', $4, $5)
         ON CONFLICT (job_id) DO UPDATE
         SET state = 'finished', outcome = EXCLUDED.outcome, finished_at = EXCLUDED.finished_at",
    )
    .bind(job)
    .bind(node)
    .bind(primitive)
    .bind(outcome.as_str())
    .bind(at)
    .execute(&mut *connection)
    .await?;
    if outcome == JobOutcome::Withdrawn {
        return Ok(false);
    }
    let kept = sqlx::query(
        "INSERT INTO readings (node_id, primitive, job_id, outcome, result, finished_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (node_id, primitive) DO UPDATE
         SET job_id = EXCLUDED.job_id, outcome = EXCLUDED.outcome, result = EXCLUDED.result,
             finished_at = EXCLUDED.finished_at
         WHERE (readings.finished_at, readings.job_id) < (EXCLUDED.finished_at, EXCLUDED.job_id)",
    )
    .bind(node)
    .bind(primitive)
    .bind(job)
    .bind(outcome.as_str())
    .bind(result.map(Json))
    .bind(at)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    Ok(kept > 0)
}

/// A node's latest reading of a word.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Reading {
    pub node_id: NodeId,
    pub job_id: i64,
    pub outcome: String,
    pub result: Option<Json<serde_json::Value>>,
    pub finished_at: DateTime<Utc>,
}

impl Reading {
    pub fn outcome(&self) -> Result<JobOutcome> {
        JobOutcome::parse(&self.outcome).ok_or_else(|| unknown("job outcome", &self.outcome))
    }
}

/// The node's latest reading of `primitive`.
pub async fn reading(
    connection: &mut PgConnection,
    node: NodeId,
    primitive: &str,
) -> Result<Option<Reading>> {
    Ok(sqlx::query_as(
        "SELECT node_id, job_id, outcome, result, finished_at FROM readings
         WHERE node_id = $1 AND primitive = $2",
    )
    .bind(node)
    .bind(primitive)
    .fetch_optional(&mut *connection)
    .await?)
}

/// Every node's latest reading of `primitive`, by node.
pub async fn readings(connection: &mut PgConnection, primitive: &str) -> Result<Vec<Reading>> {
    Ok(sqlx::query_as(
        "SELECT node_id, job_id, outcome, result, finished_at FROM readings
         WHERE primitive = $1 ORDER BY node_id",
    )
    .bind(primitive)
    .fetch_all(&mut *connection)
    .await?)
}

// ---- health --------------------------------------------------------------------------------

/// The node's dot as last judged, locked for the rest of the transaction.
pub async fn health(connection: &mut PgConnection, node: NodeId) -> Result<Option<Health>> {
    let row: Option<(String, Json<Vec<String>>)> =
        sqlx::query_as("SELECT dot, reasons FROM health WHERE node_id = $1 FOR UPDATE")
            .bind(node)
            .fetch_optional(&mut *connection)
            .await?;
    row.map(|(dot, reasons)| {
        Ok(Health {
            dot: HealthDot::parse(&dot).ok_or_else(|| unknown("health dot", &dot))?,
            reasons: reasons.0,
        })
    })
    .transpose()
}

/// Writes the node's dot and tells it (`health_changed`), in the caller's transaction.
pub async fn set_health(
    connection: &mut PgConnection,
    node: NodeId,
    health: &Health,
    checked_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO health (node_id, dot, reasons, checked_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id) DO UPDATE
         SET dot = EXCLUDED.dot, reasons = EXCLUDED.reasons, checked_at = EXCLUDED.checked_at",
    )
    .bind(node)
    .bind(health.dot.as_str())
    .bind(Json(&health.reasons))
    .bind(checked_at)
    .execute(&mut *connection)
    .await?;
    let event = HealthChanged {
        node_id: node,
        health: health.clone(),
        checked_at,
    };
    outbox::push(
        connection,
        Envelope::new(event, Some(format!("node/{node}"))),
    )
    .await
}

// ---- the pass ------------------------------------------------------------------------------

/// One node and one word as a pass sees them.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct CadenceRow {
    pub node_id: NodeId,
    pub paired: bool,
    pub operational: bool,
    pub vocabulary: Option<Vec<String>>,
    pub word: String,
    pub open: bool,
    pub completed_at: Option<DateTime<Utc>>,
    pub requested_at: Option<DateTime<Utc>>,
    /// For host_report (MO-06): the newest report's data-root run and boot id, and when it
    /// finished; the reboot asked and the boot id then; the newest data-root job's end.
    pub data_root_run: Option<String>,
    pub boot_id: Option<String>,
    pub reported_at: Option<DateTime<Utc>>,
    pub reboot_asked_at: Option<DateTime<Utc>>,
    pub reboot_boot_id: Option<String>,
    pub data_root_job_ended_at: Option<DateTime<Utc>>,
}

/// Every paired node that reported words, with each kept word's cover facts (and, for
/// host_report, what shortens its window).
pub async fn cadence(connection: &mut PgConnection) -> Result<Vec<CadenceRow>> {
    let words: Vec<String> = WORDS.iter().map(|word| word.to_string()).collect();
    Ok(sqlx::query_as(
        "SELECT n.node_id, n.paired, n.install_state IS NULL AS operational,
                CASE WHEN n.reported_at IS NULL THEN NULL ELSE n.vocabulary END AS vocabulary,
                w.word,
                EXISTS (SELECT 1 FROM status_jobs j
                        WHERE j.node_id = n.node_id AND j.primitive = w.word
                          AND j.state <> 'finished') AS open,
                (SELECT max(j.finished_at) FROM status_jobs j
                 WHERE j.node_id = n.node_id AND j.primitive = w.word
                   AND j.outcome = 'completed') AS completed_at,
                r.requested_at,
                hr.result->'data_root'->>'run' AS data_root_run,
                hr.result->>'boot_id' AS boot_id,
                hr.finished_at AS reported_at,
                t.reboot_asked_at, t.reboot_boot_id, t.data_root_job_ended_at
         FROM nodes n
         CROSS JOIN UNNEST($1::text[]) AS w (word)
         LEFT JOIN status_requests r ON r.node_id = n.node_id AND r.primitive = w.word
         LEFT JOIN readings hr ON hr.node_id = n.node_id AND hr.primitive = w.word
                              AND w.word = 'host_report'
         LEFT JOIN host_report_triggers t ON t.node_id = n.node_id AND w.word = 'host_report'
         WHERE n.paired AND n.reported_at IS NOT NULL
         ORDER BY n.node_id, w.word",
    )
    .bind(&words)
    .fetch_all(&mut *connection)
    .await?)
}

/// Asks the agent channel for a job of `word` on `node` (the `request_job` command, through
/// the outbox) and notes the asking, in the caller's transaction.
pub async fn request(
    connection: &mut PgConnection,
    node: NodeId,
    word: &str,
    key: &str,
    requested_by: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO status_requests (node_id, primitive, requested_at, idempotency_key)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id, primitive) DO UPDATE
         SET requested_at = EXCLUDED.requested_at, idempotency_key = EXCLUDED.idempotency_key",
    )
    .bind(node)
    .bind(word)
    .bind(at)
    .bind(key)
    .execute(&mut *connection)
    .await?;
    let command = RequestJob {
        idempotency_key: key.to_string(),
        node_id: node,
        primitive: word.to_string(),
        params: serde_json::json!({}),
        requested_by: requested_by.to_string(),
    };
    outbox::push_command_from(
        connection,
        crate::DOMAIN,
        Envelope::new(command, Some(format!("node/{node}"))),
    )
    .await
}

/// Counts a pass run at `at` (the marker tests wait on).
pub async fn count_pass(connection: &mut PgConnection, at: DateTime<Utc>) -> Result<()> {
    sqlx::query("UPDATE status_passes SET passes = passes + 1, last_pass_at = $1")
        .bind(at)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Forgets finished status jobs older than `before` (the window has long passed them; the
/// readings keep each node's latest).
pub async fn prune_status_jobs(
    connection: &mut PgConnection,
    before: DateTime<Utc>,
) -> Result<u64> {
    Ok(
        sqlx::query("DELETE FROM status_jobs WHERE state = 'finished' AND finished_at < $1")
            .bind(before)
            .execute(&mut *connection)
            .await?
            .rows_affected(),
    )
}

// ---- fleet security ------------------------------------------------------------------------

/// A paired machine (not a site container) with its latest finished `host_report`.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct MachineRow {
    pub node_id: NodeId,
    pub name: String,
    pub outcome: Option<String>,
    pub result: Option<Json<serde_json::Value>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl MachineRow {
    /// Its report's outcome, if it has one.
    pub fn outcome(&self) -> Result<Option<JobOutcome>> {
        self.outcome
            .as_deref()
            .map(|text| JobOutcome::parse(text).ok_or_else(|| unknown("job outcome", text)))
            .transpose()
    }
}

/// Every paired machine and its latest host report, by node.
pub async fn machines(connection: &mut PgConnection) -> Result<Vec<MachineRow>> {
    Ok(sqlx::query_as(
        "SELECT n.node_id, n.name, r.outcome, r.result, r.finished_at
         FROM nodes n
         LEFT JOIN readings r ON r.node_id = n.node_id AND r.primitive = 'host_report'
         WHERE n.paired AND n.container IS NULL
         ORDER BY n.node_id",
    )
    .fetch_all(&mut *connection)
    .await?)
}

/// The paired nodes whose site runs in a container: (container, node id, name).
pub async fn site_nodes(connection: &mut PgConnection) -> Result<Vec<(String, NodeId, String)>> {
    Ok(sqlx::query_as(
        "SELECT container, node_id, name FROM nodes
         WHERE paired AND container IS NOT NULL ORDER BY node_id",
    )
    .fetch_all(&mut *connection)
    .await?)
}
