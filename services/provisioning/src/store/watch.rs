//! What the periodic watches keep: the conditions this service judged as last published (so a
//! judge publishes a change only, through the outbox), when each task last ran, and the
//! test-cloud cleanup's record per account (PV-55).

use capstan_events::conditions::{ConditionChanged, ConditionKind};
use capstan_events::NodeId;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

type Result<T> = std::result::Result<T, StoreError>;

/// Judges `kind` on `node` at `now`: `Some(evidence)` happening, `None` not. Writes and
/// publishes (outbox, the caller's transaction) only when the judgement or the evidence
/// changed; `true` when it did.
pub async fn judge(
    connection: &mut PgConnection,
    kind: &ConditionKind,
    node: NodeId,
    evidence: Option<&str>,
    now: DateTime<Utc>,
) -> Result<bool> {
    let before: Option<(bool, String, Option<DateTime<Utc>>)> = sqlx::query_as(
        "SELECT happening, evidence, since FROM conditions WHERE name = $1 AND node_id = $2
         FOR UPDATE",
    )
    .bind(kind.name)
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    let changed = match (&before, evidence) {
        (None, None) => false,
        (Some((happening, _, _)), None) => *happening,
        (Some((true, was, _)), Some(now_evidence)) => was != now_evidence,
        (_, Some(_)) => true,
    };
    if !changed {
        return Ok(false);
    }
    let condition: ConditionChanged = match evidence {
        Some(evidence) => {
            let since = match &before {
                Some((true, _, Some(since))) => *since,
                _ => now,
            };
            kind.happening(node, evidence, since, now)
        }
        None => kind.not_happening(node, now),
    };
    sqlx::query(
        "INSERT INTO conditions (name, node_id, happening, evidence, since, observed_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         ON CONFLICT (name, node_id) DO UPDATE
         SET happening = EXCLUDED.happening, evidence = EXCLUDED.evidence,
             since = EXCLUDED.since, observed_at = EXCLUDED.observed_at",
    )
    .bind(kind.name)
    .bind(node)
    .bind(condition.happening)
    .bind(&condition.evidence)
    .bind(condition.since)
    .bind(now)
    .execute(&mut *connection)
    .await?;
    outbox::push_condition(connection, condition).await?;
    Ok(true)
}

/// The nodes `kind` is happening on, as last published.
pub async fn happening_on(
    connection: &mut PgConnection,
    kind: &ConditionKind,
) -> Result<Vec<NodeId>> {
    Ok(sqlx::query_scalar(
        "SELECT node_id FROM conditions WHERE name = $1 AND happening ORDER BY node_id",
    )
    .bind(kind.name)
    .fetch_all(connection)
    .await?)
}

/// When `task` last ran to its end.
pub async fn last_run(connection: &mut PgConnection, task: &str) -> Result<Option<DateTime<Utc>>> {
    Ok(
        sqlx::query_scalar("SELECT ran_at FROM task_runs WHERE task = $1")
            .bind(task)
            .fetch_optional(connection)
            .await?,
    )
}

/// Records that `task` ran at `at`, with what it came to.
pub async fn ran(
    connection: &mut PgConnection,
    task: &str,
    at: DateTime<Utc>,
    outcome: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO task_runs (task, ran_at, outcome) VALUES ($1, $2, $3)
         ON CONFLICT (task) DO UPDATE SET ran_at = EXCLUDED.ran_at, outcome = EXCLUDED.outcome",
    )
    .bind(task)
    .bind(at)
    .bind(outcome)
    .execute(connection)
    .await?;
    Ok(())
}

/// One account's cleanup pass, as recorded.
#[derive(Debug, Clone, Default)]
pub struct CleanupRecord {
    pub refused: Option<String>,
    pub deleted: Vec<String>,
    pub held: Vec<String>,
    pub failed: Vec<String>,
}

pub async fn record_cleanup(
    connection: &mut PgConnection,
    account_id: i64,
    at: DateTime<Utc>,
    record: &CleanupRecord,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO cleanup_runs (account_id, ran_at, refused, deleted, held, failed)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(account_id)
    .bind(at)
    .bind(record.refused.as_deref())
    .bind(&record.deleted)
    .bind(&record.held)
    .bind(&record.failed)
    .execute(connection)
    .await?;
    Ok(())
}
