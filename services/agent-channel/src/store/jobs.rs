//! The job queue's SQL.

use capstan_events::agent_channel::{rpc::JobState, JobOutcome};
use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sqlx::types::Json;
use uuid::Uuid;

use super::{Result, Spelled};
use capstan_events::Word as _;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub id: i64,
    pub node_id: NodeId,
    pub primitive: String,
    pub class: String,
    pub params: Json<Value>,
    /// A spelling the contract does not know fails the read (never taken for another state).
    #[sqlx(try_from = "Spelled<JobState>")]
    pub state: JobState,
    pub reason: Option<String>,
    pub result: Option<Json<Value>>,
    pub requested_by: String,
    pub correlation_id: Option<Uuid>,
    pub budget_s: i32,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

impl JobRow {
    /// How the job ended, if it has: the table writes `outcome` equal to `state` whenever a job
    /// ends, so the state says it.
    pub fn outcome(&self) -> Option<JobOutcome> {
        self.state.outcome()
    }
}

const JOB_COLUMNS: &str = "id, node_id, primitive, class, params, state, reason, result, \
     requested_by, correlation_id, budget_s, created_at, claimed_at, finished_at";

pub struct NewJob<'a> {
    pub node_id: NodeId,
    pub primitive: &'a str,
    pub class: &'a str,
    pub params: &'a Value,
    pub requested_by: &'a str,
    pub idempotency_key: Option<&'a str>,
    pub correlation_id: Option<Uuid>,
    pub budget_s: i32,
    /// `pending`, or `refused` for a request the plane turns down at once.
    pub state: JobState,
    pub reason: Option<&'a str>,
}

/// Inserts a job; `None` when its idempotency key already made one (the same key twice makes
/// one job).
pub async fn insert_job(connection: &mut PgConnection, job: &NewJob<'_>) -> Result<Option<JobRow>> {
    let finished = job.state != JobState::Pending;
    Ok(sqlx::query_as(&format!(
        "INSERT INTO jobs (node_id, primitive, class, params, requested_by, idempotency_key, correlation_id,
                           budget_s, state, outcome, reason, finished_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, CASE WHEN $10 THEN $9 END, $11, CASE WHEN $10 THEN now() END)
         ON CONFLICT (idempotency_key) DO NOTHING
         RETURNING {JOB_COLUMNS}"
    ))
    .bind(job.node_id)
    .bind(job.primitive)
    .bind(job.class)
    .bind(Json(job.params))
    .bind(job.requested_by)
    .bind(job.idempotency_key)
    .bind(job.correlation_id)
    .bind(job.budget_s)
    .bind(job.state.as_str())
    .bind(finished)
    .bind(job.reason)
    .fetch_optional(connection)
    .await?)
}

pub async fn job_by_id(connection: &mut PgConnection, id: i64) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

pub async fn job_by_key(connection: &mut PgConnection, key: &str) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE idempotency_key = $1 FOR UPDATE"
    ))
    .bind(key)
    .fetch_optional(connection)
    .await?)
}

pub async fn list_jobs(
    connection: &mut PgConnection,
    node_id: Option<NodeId>,
    state: Option<JobState>,
    limit: i64,
) -> Result<Vec<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE ($1::bigint IS NULL OR node_id = $1)
             AND ($2::text IS NULL OR state = $2) ORDER BY id DESC LIMIT $3"
    ))
    .bind(node_id)
    .bind(state.map(JobState::as_str))
    .bind(limit)
    .fetch_all(connection)
    .await?)
}

/// Ends every running job of a node as lost with `reason` (an idle claim, a leave); returns them.
pub async fn lose_running(
    connection: &mut PgConnection,
    node_id: NodeId,
    reason: &str,
) -> Result<Vec<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "UPDATE jobs SET state = 'lost', outcome = 'lost', reason = $2, finished_at = now()
         WHERE node_id = $1 AND state = 'running' RETURNING {JOB_COLUMNS}"
    ))
    .bind(node_id)
    .bind(reason)
    .fetch_all(connection)
    .await?)
}

/// Ends as lost every running job past its claim budget (AC-29), of one node or of all.
pub async fn lose_stale(
    connection: &mut PgConnection,
    node_id: Option<NodeId>,
    reason: &str,
) -> Result<Vec<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "UPDATE jobs SET state = 'lost', outcome = 'lost', reason = $2, finished_at = now()
         WHERE state = 'running' AND ($1::bigint IS NULL OR node_id = $1)
           AND claimed_at + make_interval(secs => budget_s) < now()
         RETURNING {JOB_COLUMNS}"
    ))
    .bind(node_id)
    .bind(reason)
    .fetch_all(connection)
    .await?)
}

/// Withdraws every pending job of a node (its pairing ended).
pub async fn withdraw_pending(
    connection: &mut PgConnection,
    node_id: NodeId,
    reason: &str,
) -> Result<Vec<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "UPDATE jobs SET state = 'withdrawn', outcome = 'withdrawn', reason = $2, finished_at = now()
         WHERE node_id = $1 AND state = 'pending' RETURNING {JOB_COLUMNS}"
    ))
    .bind(node_id)
    .bind(reason)
    .fetch_all(connection)
    .await?)
}

pub async fn has_running(connection: &mut PgConnection, node_id: NodeId) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM jobs WHERE node_id = $1 AND state = 'running')",
    )
    .bind(node_id)
    .fetch_one(connection)
    .await?)
}

/// The oldest pending job of a node, locked; skipped by any other transaction looking.
pub async fn next_pending(
    connection: &mut PgConnection,
    node_id: NodeId,
) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE node_id = $1 AND state = 'pending'
         ORDER BY id LIMIT 1 FOR UPDATE SKIP LOCKED"
    ))
    .bind(node_id)
    .fetch_optional(connection)
    .await?)
}

pub async fn start_job(connection: &mut PgConnection, id: i64, now: DateTime<Utc>) -> Result<()> {
    sqlx::query(
        "UPDATE jobs SET state = 'running', claimed_at = $2 WHERE id = $1 AND state = 'pending'",
    )
    .bind(id)
    .bind(now)
    .execute(connection)
    .await?;
    Ok(())
}

/// Puts a job handed out within `within_seconds` back to `pending`, when it is still running:
/// its answer was never written to its agent (the gateway says so, `hand_back`), so the node
/// never had it. Rings the node's bell, so a claim already waiting takes it. Whether it did.
pub async fn hand_back(
    connection: &mut PgConnection,
    id: i64,
    within_seconds: i64,
) -> Result<bool> {
    let node: Option<NodeId> = sqlx::query_scalar(
        "UPDATE jobs SET state = 'pending', claimed_at = NULL
         WHERE id = $1 AND state = 'running' AND claimed_at > now() - make_interval(secs => $2)
         RETURNING node_id",
    )
    .bind(id)
    .bind(within_seconds as f64)
    .fetch_optional(&mut *connection)
    .await?;
    let Some(node) = node else {
        return Ok(false);
    };
    sqlx::query("SELECT pg_notify($1, $2)")
        .bind(crate::wake::CHANNEL)
        .bind(node.to_string())
        .execute(connection)
        .await?;
    Ok(true)
}

/// Ends a job: its state and outcome both `outcome`, with what the node said.
pub async fn finish_job(
    connection: &mut PgConnection,
    id: i64,
    outcome: JobOutcome,
    reason: Option<&str>,
    output: Option<&str>,
    result: Option<&Value>,
    marked_by: Option<&str>,
) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "UPDATE jobs SET state = $2, outcome = $2, reason = $3, output = COALESCE($4, output),
             result = $5, marked_by = $6, finished_at = now()
         WHERE id = $1 RETURNING {JOB_COLUMNS}"
    ))
    .bind(id)
    .bind(outcome.as_str())
    .bind(reason)
    .bind(output)
    .bind(result.map(Json))
    .bind(marked_by)
    .fetch_optional(connection)
    .await?)
}

/// The job's state and output.
pub async fn job_output(
    connection: &mut PgConnection,
    id: i64,
) -> Result<Option<(JobState, String)>> {
    let row: Option<(String, String)> =
        sqlx::query_as("SELECT state, output FROM jobs WHERE id = $1")
            .bind(id)
            .fetch_optional(connection)
            .await?;
    row.map(|(state, output)| {
        JobState::try_from(state)
            .map(|state| (state, output))
            .map_err(|unknown| StoreError::Database(format!("job {id}: {unknown}")))
    })
    .transpose()
}

pub async fn refusal_count(
    connection: &mut PgConnection,
    node_id: NodeId,
    window_secs: f64,
) -> Result<i64> {
    Ok(sqlx::query_scalar(
        "SELECT count(*) FROM jobs WHERE node_id = $1 AND outcome = 'refused'
             AND finished_at > now() - make_interval(secs => $2)",
    )
    .bind(node_id)
    .bind(window_secs)
    .fetch_one(connection)
    .await?)
}

/// A finished reading job (`check_status`, `host_report`) as the node list needs it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ReadingRow {
    pub node_id: NodeId,
    pub primitive: String,
    pub id: i64,
    #[sqlx(try_from = "Spelled<JobOutcome>")]
    pub outcome: JobOutcome,
    pub finished_at: DateTime<Utc>,
    pub result: Option<Json<Value>>,
}

/// The latest finished `check_status` and `host_report` of each node in `node_ids`; a job
/// withdrawn on the plane says nothing about the node and is passed over.
pub async fn latest_readings(
    connection: &mut PgConnection,
    node_ids: &[NodeId],
) -> Result<Vec<ReadingRow>> {
    Ok(sqlx::query_as(
        "SELECT latest.node_id, latest.primitive, latest.id, latest.outcome, latest.finished_at,
                latest.result
         FROM unnest($1::bigint[]) AS wanted (node_id)
         CROSS JOIN (VALUES ('check_status'), ('host_report')) AS word (primitive)
         CROSS JOIN LATERAL (
             SELECT j.node_id, j.primitive, j.id, j.outcome, j.finished_at, j.result
             FROM jobs j
             WHERE j.node_id = wanted.node_id AND j.primitive = word.primitive
               AND j.finished_at IS NOT NULL AND j.outcome IS NOT NULL
               AND j.outcome <> 'withdrawn'
             ORDER BY j.finished_at DESC, j.id DESC
             LIMIT 1
         ) AS latest",
    )
    .bind(node_ids)
    .fetch_all(connection)
    .await?)
}

/// The nodes whose latest completed `host_report` lists a container named `name`: where a
/// container node asked for alone may sit.
pub async fn hosts_listing_container(
    connection: &mut PgConnection,
    name: &str,
) -> Result<Vec<NodeId>> {
    Ok(sqlx::query_scalar(
        "SELECT n.id
         FROM nodes n
         CROSS JOIN LATERAL (
             SELECT j.outcome, j.result
             FROM jobs j
             WHERE j.node_id = n.id AND j.primitive = 'host_report'
               AND j.finished_at IS NOT NULL AND j.outcome IS NOT NULL
               AND j.outcome <> 'withdrawn'
             ORDER BY j.finished_at DESC, j.id DESC
             LIMIT 1
         ) AS latest
         WHERE latest.outcome = 'completed'
           AND latest.result -> 'containers' @> jsonb_build_array(jsonb_build_object('name', $1::text))
         ORDER BY n.id",
    )
    .bind(name)
    .fetch_all(connection)
    .await?)
}

#[cfg(test)]
mod tests {
    use super::*;

    // Issue 10, housekeeping: states are the contract's enums down to the row; a row whose
    // state the contract does not know (a schema that drifted from the code) fails its read,
    // never passes for `withdrawn`.
    #[tokio::test]
    async fn a_job_row_in_a_state_the_contract_does_not_know_is_an_error_not_withdrawn() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let store = capstan_store::Store::connect(database.url(), "agent_channel", 2)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        let mut connection = store.pool().acquire().await.unwrap();
        let node: NodeId =
            sqlx::query_scalar("INSERT INTO nodes (name) VALUES ('web-1') RETURNING id")
                .fetch_one(&mut *connection)
                .await
                .unwrap();
        let params = serde_json::json!({});
        let job = insert_job(
            &mut connection,
            &NewJob {
                node_id: node,
                primitive: "check_status",
                class: "read",
                params: &params,
                requested_by: "test",
                idempotency_key: None,
                correlation_id: None,
                budget_s: 60,
                state: JobState::Pending,
                reason: None,
            },
        )
        .await
        .unwrap()
        .unwrap();
        assert_eq!(job.state, JobState::Pending);
        assert_eq!(job.outcome(), None);
        let read = job_by_id(&mut connection, job.id).await.unwrap().unwrap();
        assert_eq!(read.state, JobState::Pending);

        sqlx::query("ALTER TABLE jobs DROP CONSTRAINT jobs_state_check")
            .execute(&mut *connection)
            .await
            .unwrap();
        sqlx::query("UPDATE jobs SET state = 'cancelled' WHERE id = $1")
            .bind(job.id)
            .execute(&mut *connection)
            .await
            .unwrap();
        let refused = job_by_id(&mut connection, job.id).await.unwrap_err();
        assert!(
            refused
                .to_string()
                .contains("\"cancelled\" is not a job state"),
            "{refused}"
        );
        let refused = job_output(&mut connection, job.id).await.unwrap_err();
        assert!(refused.to_string().contains("cancelled"), "{refused}");
    }
}
