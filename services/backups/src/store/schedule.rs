//! The loop's SQL: the fleet policy and node positions (BK-08), the node facts projected from
//! the agent channel, every job this service asked for (an open one holds its machine's turn,
//! BK-09; a unique index makes two turns on one machine impossible), and what each run and
//! verify came to.

use capstan_events::agent_channel::RequestJob;
use capstan_events::backups::rpc::{BackupMode, FleetPolicy, PolicyFields, RunKind};
use capstan_events::Envelope;
use capstan_events::NodeId;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};
use serde_json::Value;
use uuid::Uuid;

use crate::domain::manifest::Trusted;
use crate::domain::policy::{default_fleet, Stored};
use crate::domain::schedule::Landed;
use capstan_events::Word as _;

type Result<T> = std::result::Result<T, StoreError>;

/// Who the schedule's jobs are asked by.
pub const REQUESTED_BY: &str = "service/backups";

#[derive(sqlx::FromRow)]
struct FieldsRow {
    every_minutes: Option<i32>,
    window_start_hour: Option<i16>,
    window_hours: Option<i16>,
    mode: Option<String>,
    keep_days: Option<i32>,
    full_every_days: Option<i32>,
    verify_every_days: Option<i32>,
    keep_daily: Option<i32>,
    keep_weekly: Option<i32>,
    keep_monthly: Option<i32>,
}

impl FieldsRow {
    fn fields(&self) -> Result<Option<PolicyFields>> {
        let (
            Some(every_minutes),
            Some(window_start_hour),
            Some(window_hours),
            Some(mode),
            Some(keep_days),
            Some(full_every_days),
            Some(verify_every_days),
            Some(keep_daily),
            Some(keep_weekly),
            Some(keep_monthly),
        ) = (
            self.every_minutes,
            self.window_start_hour,
            self.window_hours,
            self.mode.as_deref(),
            self.keep_days,
            self.full_every_days,
            self.verify_every_days,
            self.keep_daily,
            self.keep_weekly,
            self.keep_monthly,
        )
        else {
            return Ok(None);
        };
        let mode = BackupMode::parse(mode)
            .ok_or_else(|| StoreError::Database(format!("{mode:?} is not a backup mode")))?;
        let whole = |value: i32| u32::try_from(value).unwrap_or(0);
        let hour = |value: i16| u8::try_from(value).unwrap_or(0);
        Ok(Some(PolicyFields {
            every_minutes: whole(every_minutes),
            window_start_hour: hour(window_start_hour),
            window_hours: hour(window_hours),
            mode,
            keep_days: whole(keep_days),
            full_every_days: whole(full_every_days),
            verify_every_days: whole(verify_every_days),
            keep_daily: whole(keep_daily),
            keep_weekly: whole(keep_weekly),
            keep_monthly: whole(keep_monthly),
        }))
    }
}

const FIELD_COLUMNS: &str = "every_minutes, window_start_hour, window_hours, mode, keep_days, \
     full_every_days, verify_every_days, keep_daily, keep_weekly, keep_monthly";

/// The fleet policy (the built-in default while none was saved), who saved it and when.
pub async fn fleet_policy(
    connection: &mut PgConnection,
) -> Result<(FleetPolicy, Option<String>, Option<DateTime<Utc>>)> {
    #[derive(sqlx::FromRow)]
    struct Row {
        enabled: bool,
        changed_by: String,
        changed_at: DateTime<Utc>,
        #[sqlx(flatten)]
        fields: FieldsRow,
    }
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT enabled, changed_by, changed_at, {FIELD_COLUMNS} FROM fleet_policy"
    ))
    .fetch_optional(connection)
    .await?;
    match row {
        None => Ok((default_fleet(), None, None)),
        Some(row) => {
            let fields = row
                .fields
                .fields()?
                .ok_or_else(|| StoreError::Database("the fleet policy lacks a field".into()))?;
            Ok((
                FleetPolicy {
                    enabled: row.enabled,
                    fields,
                },
                Some(row.changed_by),
                Some(row.changed_at),
            ))
        }
    }
}

pub async fn set_fleet_policy(
    connection: &mut PgConnection,
    policy: &FleetPolicy,
    by: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    let fields = &policy.fields;
    sqlx::query(&format!(
        "INSERT INTO fleet_policy (singleton, enabled, changed_by, changed_at, {FIELD_COLUMNS})
         VALUES (true, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13)
         ON CONFLICT (singleton) DO UPDATE SET enabled = $1, changed_by = $2, changed_at = $3,
             every_minutes = $4, window_start_hour = $5, window_hours = $6, mode = $7,
             keep_days = $8, full_every_days = $9, verify_every_days = $10, keep_daily = $11,
             keep_weekly = $12, keep_monthly = $13"
    ))
    .bind(policy.enabled)
    .bind(by)
    .bind(at)
    .bind(fields.every_minutes as i32)
    .bind(i16::from(fields.window_start_hour))
    .bind(i16::from(fields.window_hours))
    .bind(fields.mode.as_str())
    .bind(fields.keep_days as i32)
    .bind(fields.full_every_days as i32)
    .bind(fields.verify_every_days as i32)
    .bind(fields.keep_daily as i32)
    .bind(fields.keep_weekly as i32)
    .bind(fields.keep_monthly as i32)
    .execute(connection)
    .await?;
    Ok(())
}

/// A node's stored position, who decided it and when (`Fleet`, nobody, for no row).
pub async fn node_policy(
    connection: &mut PgConnection,
    node: NodeId,
) -> Result<(Stored, Option<String>, Option<DateTime<Utc>>)> {
    #[derive(sqlx::FromRow)]
    struct Row {
        position: String,
        decided_by: String,
        decided_at: DateTime<Utc>,
        #[sqlx(flatten)]
        fields: FieldsRow,
    }
    let row: Option<Row> = sqlx::query_as(&format!(
        "SELECT position, decided_by, decided_at, {FIELD_COLUMNS} FROM node_policies
         WHERE node_id = $1"
    ))
    .bind(node)
    .fetch_optional(connection)
    .await?;
    let Some(row) = row else {
        return Ok((Stored::Fleet, None, None));
    };
    let stored = match row.position.as_str() {
        "off" => Stored::Off,
        "own" => Stored::Own(row.fields.fields()?.ok_or_else(|| {
            StoreError::Database(format!("node {node}'s own policy lacks a field"))
        })?),
        other => {
            return Err(StoreError::Database(format!(
                "{other:?} is not a stored position"
            )))
        }
    };
    Ok((stored, Some(row.decided_by), Some(row.decided_at)))
}

pub async fn set_node_policy(
    connection: &mut PgConnection,
    node: NodeId,
    stored: &Stored,
    by: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query("DELETE FROM node_policies WHERE node_id = $1")
        .bind(node)
        .execute(&mut *connection)
        .await?;
    let (position, fields) = match stored {
        // BK-08: following the fleet stores nothing (who chose it is the audit's).
        Stored::Fleet => return Ok(()),
        Stored::Off => ("off", None),
        Stored::Own(fields) => ("own", Some(fields)),
    };
    sqlx::query(&format!(
        "INSERT INTO node_policies (node_id, position, decided_by, decided_at, {FIELD_COLUMNS})
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)"
    ))
    .bind(node)
    .bind(position)
    .bind(by)
    .bind(at)
    .bind(fields.map(|f| f.every_minutes as i32))
    .bind(fields.map(|f| i16::from(f.window_start_hour)))
    .bind(fields.map(|f| i16::from(f.window_hours)))
    .bind(fields.map(|f| f.mode.as_str()))
    .bind(fields.map(|f| f.keep_days as i32))
    .bind(fields.map(|f| f.full_every_days as i32))
    .bind(fields.map(|f| f.verify_every_days as i32))
    .bind(fields.map(|f| f.keep_daily as i32))
    .bind(fields.map(|f| f.keep_weekly as i32))
    .bind(fields.map(|f| f.keep_monthly as i32))
    .execute(connection)
    .await?;
    Ok(())
}

// ---- the node projection ------------------------------------------------------------------

/// A node as the agent channel told of it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    pub node_id: NodeId,
    pub name: String,
    pub fingerprint: String,
    pub paired: bool,
    pub host_node_id: Option<NodeId>,
    pub vocabulary: Vec<String>,
    pub install_state: Option<String>,
    pub approved_at: DateTime<Utc>,
}

const NODE_COLUMNS: &str =
    "node_id, name, fingerprint, paired, host_node_id, vocabulary, install_state, approved_at";

pub async fn node(connection: &mut PgConnection, node: NodeId) -> Result<Option<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE node_id = $1"
    ))
    .bind(node)
    .fetch_optional(connection)
    .await?)
}

pub async fn nodes(connection: &mut PgConnection) -> Result<Vec<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE paired ORDER BY node_id"
    ))
    .fetch_all(connection)
    .await?)
}

// ---- jobs and turns -----------------------------------------------------------------------

/// A job this service asked for.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JobRow {
    pub idempotency_key: String,
    pub correlation_id: Uuid,
    pub job_id: Option<i64>,
    pub node_id: NodeId,
    pub machine: String,
    pub primitive: String,
    pub params: sqlx::types::Json<Value>,
    pub seq: Option<i64>,
    pub requested_by: String,
    pub dispatched_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub outcome: Option<String>,
    pub reason: Option<String>,
}

const JOB_COLUMNS: &str = "idempotency_key, correlation_id, job_id, node_id, machine, primitive, \
     params, seq, requested_by, dispatched_at, finished_at, outcome, reason";

/// The job that holds `machine`'s turn, if one does.
pub async fn holder(connection: &mut PgConnection, machine: &str) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE machine = $1 AND finished_at IS NULL"
    ))
    .bind(machine)
    .fetch_optional(connection)
    .await?)
}

/// A job to ask for.
pub struct Dispatch<'a> {
    pub key: String,
    pub node_id: NodeId,
    pub machine: String,
    pub primitive: &'a str,
    pub params: Value,
    pub seq: Option<i64>,
    pub requested_by: &'a str,
    pub at: DateTime<Utc>,
}

/// Takes the machine's turn and asks the agent channel for the job in the same transaction
/// (the `request_job` goes through the outbox). `Err(holder)` when the machine's turn is held
/// (nothing is written); `Ok(false)` when this key was asked for before (nothing is sent
/// twice).
pub async fn dispatch(
    connection: &mut PgConnection,
    job: Dispatch<'_>,
) -> Result<std::result::Result<bool, JobRow>> {
    if let Some(held) = holder(connection, &job.machine).await? {
        return Ok(Err(held));
    }
    let correlation = Uuid::now_v7();
    let inserted = sqlx::query(
        "INSERT INTO jobs (idempotency_key, correlation_id, node_id, machine, primitive, params,
             seq, requested_by, dispatched_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT DO NOTHING",
    )
    .bind(&job.key)
    .bind(correlation)
    .bind(job.node_id)
    .bind(&job.machine)
    .bind(job.primitive)
    .bind(sqlx::types::Json(&job.params))
    .bind(job.seq)
    .bind(job.requested_by)
    .bind(job.at)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    if inserted == 0 {
        // The key was asked for before, or another transaction took the turn a moment ago.
        if let Some(held) = holder(connection, &job.machine).await? {
            if held.idempotency_key != job.key {
                return Ok(Err(held));
            }
        }
        return Ok(Ok(false));
    }
    let request = RequestJob {
        idempotency_key: job.key,
        node_id: job.node_id,
        primitive: job.primitive.to_string(),
        params: job.params,
        requested_by: job.requested_by.to_string(),
    };
    outbox::push_command_from(
        connection,
        crate::DOMAIN,
        Envelope::new(request, Some(format!("node/{}", job.node_id))).correlated(Some(correlation)),
    )
    .await?;
    Ok(Ok(true))
}

/// The unfinished job of ours on `node` with `correlation` (the id we gave its `request_job`),
/// if it is agent channel job `job_id` or we have not heard its id yet: what the broker serves
/// (issue 27).
pub async fn issued_job(
    connection: &mut PgConnection,
    correlation: Uuid,
    node: NodeId,
    job_id: i64,
) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOB_COLUMNS} FROM jobs WHERE correlation_id = $1 AND node_id = $2
           AND (job_id IS NULL OR job_id = $3) AND finished_at IS NULL"
    ))
    .bind(correlation)
    .bind(node)
    .bind(job_id)
    .fetch_optional(connection)
    .await?)
}

/// The agent channel's job id for a key, once it said.
pub async fn job_id_of(connection: &mut PgConnection, key: &str) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar("SELECT job_id FROM jobs WHERE idempotency_key = $1")
            .bind(key)
            .fetch_optional(connection)
            .await?
            .flatten(),
    )
}

/// `job_queued`: the job id of a request of ours.
pub async fn job_queued(
    connection: &mut PgConnection,
    correlation: Uuid,
    job_id: i64,
) -> Result<()> {
    sqlx::query("UPDATE jobs SET job_id = $2 WHERE correlation_id = $1 AND job_id IS NULL")
        .bind(correlation)
        .bind(job_id)
        .execute(connection)
        .await?;
    Ok(())
}

/// `job_finished` of a request of ours: ends it (its turn is free) and returns it, or `None`
/// when it is not ours or was ended before (each end is applied once).
pub async fn job_finished(
    connection: &mut PgConnection,
    correlation: Uuid,
    job_id: i64,
    outcome: &str,
    reason: Option<&str>,
    at: DateTime<Utc>,
) -> Result<Option<JobRow>> {
    Ok(sqlx::query_as(&format!(
        "UPDATE jobs SET job_id = $2, outcome = $3, reason = $4, finished_at = $5
         WHERE correlation_id = $1 AND finished_at IS NULL RETURNING {JOB_COLUMNS}"
    ))
    .bind(correlation)
    .bind(job_id)
    .bind(outcome)
    .bind(reason)
    .bind(at)
    .fetch_optional(connection)
    .await?)
}

/// Frees turns whose request the agent channel never took (no job id after `before`): they
/// are ended `lost` with the reason, so a machine is never held forever by a dropped command.
pub async fn release_untaken(
    connection: &mut PgConnection,
    before: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Result<u64> {
    Ok(sqlx::query(
        "UPDATE jobs SET outcome = 'lost', finished_at = $2,
             reason = 'the agent channel never took the request'
         WHERE finished_at IS NULL AND job_id IS NULL AND dispatched_at < $1",
    )
    .bind(before)
    .bind(now)
    .execute(connection)
    .await?
    .rows_affected())
}

/// When the node's newest job of `primitive` was dispatched, and its seq (BK-07, BK-18).
pub async fn last_dispatch(
    connection: &mut PgConnection,
    node: NodeId,
    primitive: &str,
) -> Result<Option<(DateTime<Utc>, Option<i64>)>> {
    Ok(sqlx::query_as(
        "SELECT dispatched_at, seq FROM jobs WHERE node_id = $1 AND primitive = $2
         ORDER BY dispatched_at DESC LIMIT 1",
    )
    .bind(node)
    .bind(primitive)
    .fetch_optional(connection)
    .await?)
}

/// The newest seq the node has used: opened by the broker, or asked for (BK-14).
pub async fn newest_used_seq(connection: &mut PgConnection, node: NodeId) -> Result<Option<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT max(seq) FROM (
             SELECT seq FROM runs WHERE node_id = $1
             UNION ALL SELECT seq FROM jobs WHERE node_id = $1 AND primitive = 'backup_run'
         ) used",
    )
    .bind(node)
    .fetch_one(connection)
    .await?)
}

/// The newest run that landed, and when its chain's full started.
pub async fn newest_landed(
    connection: &mut PgConnection,
    node: NodeId,
) -> Result<Option<(Landed, Option<DateTime<Utc>>)>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        seq: i64,
        kind: String,
        full_seq: i64,
        started_at: DateTime<Utc>,
        active: bool,
        full_started_at: Option<DateTime<Utc>>,
    }
    let row: Option<Row> = sqlx::query_as(
        "SELECT r.seq, r.kind, r.full_seq, r.started_at, s.state = 'active' AS active,
                (SELECT f.started_at FROM runs f
                 WHERE f.node_id = r.node_id AND f.seq = r.full_seq AND f.landed_at IS NOT NULL
                   AND f.space_id = r.space_id) AS full_started_at
         FROM runs r JOIN spaces s ON s.id = r.space_id
         WHERE r.node_id = $1 AND r.landed_at IS NOT NULL
         ORDER BY r.seq DESC LIMIT 1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?;
    let Some(row) = row else {
        return Ok(None);
    };
    let kind = RunKind::parse(&row.kind)
        .ok_or_else(|| StoreError::Database(format!("{:?} is not a run kind", row.kind)))?;
    Ok(Some((
        Landed {
            seq: row.seq,
            kind,
            full_seq: row.full_seq,
            started_at: row.started_at,
            in_active_space: row.active,
        },
        row.full_started_at,
    )))
}

/// Records what a run's trusted manifest says; false when the broker opened no such run for
/// this job (its claim is not believed).
pub async fn run_landed(
    connection: &mut PgConnection,
    node: NodeId,
    job_id: i64,
    run: &Trusted,
    at: DateTime<Utc>,
) -> Result<bool> {
    Ok(sqlx::query(
        "UPDATE runs SET kind = $4, full_seq = $5, previous_seq = $6, started_at = $7,
             finished_at = $8, bytes = $9, manifest = $10, landed_at = $11
         WHERE node_id = $1 AND seq = $2 AND job_id = $3",
    )
    .bind(node)
    .bind(run.seq)
    .bind(job_id)
    .bind(run.kind.as_str())
    .bind(run.full_seq)
    .bind(run.previous_seq)
    .bind(run.started_at)
    .bind(run.finished_at)
    .bind(run.bytes)
    .bind(sqlx::types::Json(&run.manifest))
    .bind(at)
    .execute(connection)
    .await?
    .rows_affected()
        == 1)
}

/// One verify's end.
pub struct VerifyEnd<'a> {
    pub job_id: i64,
    pub node_id: NodeId,
    pub seq: i64,
    pub level: u8,
    pub ok: bool,
    pub finished_at: DateTime<Utc>,
    pub checked: Option<&'a Value>,
    pub problems: &'a [String],
    pub requested_by: &'a str,
}

/// Records a verify (once) and, when it passed, stamps the run verified.
pub async fn verify_finished(connection: &mut PgConnection, end: &VerifyEnd<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO verifies (job_id, node_id, seq, level, ok, finished_at, checked, problems,
             requested_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ON CONFLICT (job_id) DO NOTHING",
    )
    .bind(end.job_id)
    .bind(end.node_id)
    .bind(end.seq)
    .bind(i16::from(end.level))
    .bind(end.ok)
    .bind(end.finished_at)
    .bind(end.checked.map(sqlx::types::Json))
    .bind(sqlx::types::Json(end.problems))
    .bind(end.requested_by)
    .execute(&mut *connection)
    .await?;
    if end.ok {
        sqlx::query(
            "UPDATE runs SET verified_at = greatest(verified_at, $3)
             WHERE node_id = $1 AND seq = $2",
        )
        .bind(end.node_id)
        .bind(end.seq)
        .bind(end.finished_at)
        .execute(connection)
        .await?;
    }
    Ok(())
}

// ---- what the node's Backups tab reads ----------------------------------------------------

/// A run that landed, with its space.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct LandedRow {
    pub seq: i64,
    pub kind: String,
    pub full_seq: i64,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    pub bytes: i64,
    pub verified_at: Option<DateTime<Utc>>,
    pub space_id: i64,
    pub space_state: String,
    pub target_id: i64,
    pub target_name: String,
    pub requested_by: Option<String>,
}

/// The node's runs that landed, newest first.
pub async fn landed_runs(connection: &mut PgConnection, node: NodeId) -> Result<Vec<LandedRow>> {
    Ok(sqlx::query_as(
        "SELECT r.seq, r.kind, r.full_seq, r.started_at, r.finished_at, r.bytes, r.verified_at,
                s.id AS space_id, s.state AS space_state, t.id AS target_id, t.name AS target_name,
                j.requested_by
         FROM runs r JOIN spaces s ON s.id = r.space_id JOIN targets t ON t.id = s.target_id
         LEFT JOIN jobs j ON j.job_id = r.job_id
         WHERE r.node_id = $1 AND r.landed_at IS NOT NULL
         ORDER BY r.seq DESC",
    )
    .bind(node)
    .fetch_all(connection)
    .await?)
}

/// A verify as recorded.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct VerifyRow {
    pub job_id: i64,
    pub seq: i64,
    pub level: i16,
    pub ok: bool,
    pub finished_at: DateTime<Utc>,
    pub checked: Option<sqlx::types::Json<Value>>,
    pub problems: sqlx::types::Json<Vec<String>>,
}

pub async fn last_verify(connection: &mut PgConnection, node: NodeId) -> Result<Option<VerifyRow>> {
    Ok(sqlx::query_as(
        "SELECT job_id, seq, level, ok, finished_at, checked, problems FROM verifies
         WHERE node_id = $1 ORDER BY finished_at DESC, job_id DESC LIMIT 1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?)
}

/// The newest backup_run that ended, when it did not land: its reason.
pub async fn last_failure(connection: &mut PgConnection, node: NodeId) -> Result<Option<String>> {
    let row: Option<(String, Option<String>, Option<i64>)> = sqlx::query_as(
        "SELECT outcome, reason, seq FROM jobs
         WHERE node_id = $1 AND primitive = 'backup_run' AND finished_at IS NOT NULL
         ORDER BY finished_at DESC LIMIT 1",
    )
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    let Some((outcome, reason, seq)) = row else {
        return Ok(None);
    };
    if outcome == "completed" && reason.is_none() {
        return Ok(None);
    }
    Ok(Some(format!(
        "run {} {}: {}",
        seq.unwrap_or_default(),
        outcome,
        reason.unwrap_or_else(|| "no reason given".into())
    )))
}

/// The target of `id`, if it exists.
pub async fn target_exists(connection: &mut PgConnection, id: i64) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM targets WHERE id = $1)")
            .bind(id)
            .fetch_one(connection)
            .await?,
    )
}

/// BK-02: the node's new backups go to `target`; its active space there opens (or a draining
/// one there comes back) and the old one starts draining. Nothing is copied.
pub async fn move_to(connection: &mut PgConnection, node: NodeId, target: i64) -> Result<i64> {
    sqlx::query(
        "UPDATE spaces SET state = 'draining' WHERE node_id = $1 AND state = 'active'
             AND target_id <> $2",
    )
    .bind(node)
    .bind(target)
    .execute(&mut *connection)
    .await?;
    if let Some(id) = sqlx::query_scalar::<_, i64>(
        "SELECT id FROM spaces WHERE node_id = $1 AND target_id = $2 AND state = 'active'",
    )
    .bind(node)
    .bind(target)
    .fetch_optional(&mut *connection)
    .await?
    {
        return Ok(id);
    }
    crate::store::open_space(connection, node, target).await
}
