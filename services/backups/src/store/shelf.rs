//! The storage pass's rows (migration 0003): a node's shelf stamps (BK-15, BK-17) and the
//! chains retention found surplus (BK-12), and the `pruned` event in the transaction that
//! forgets the deleted chains; the orphans the sweep saw (migration 0005).

use capstan_events::backups::Pruned;
use capstan_events::Envelope;
use capstan_events::NodeId;
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};

use super::{space, Result, Space};
use crate::domain::keys::NodeKey;

/// What the pass last stamped for a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, sqlx::FromRow)]
pub struct Shelf {
    pub checked_at: Option<DateTime<Utc>>,
    pub newest_at: Option<DateTime<Utc>>,
    pub problem: Option<String>,
    pub pass_error: Option<String>,
    pub pass_error_at: Option<DateTime<Utc>>,
    /// The orphan sweep's counts: seen and waiting out their day, and deleted so far.
    pub orphans_waiting: i32,
    pub orphans_deleted: i64,
    pub orphan_bytes_deleted: i64,
}

pub async fn shelf(connection: &mut PgConnection, node: NodeId) -> Result<Shelf> {
    Ok(sqlx::query_as(
        "SELECT checked_at, newest_at, problem, pass_error, pass_error_at, orphans_waiting,
             orphans_deleted, orphan_bytes_deleted FROM shelf WHERE node_id = $1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?
    .unwrap_or_default())
}

/// BK-17: every live space was listed at `at` and the newest write seen was `newest`.
pub async fn stamp_listed(
    connection: &mut PgConnection,
    node: NodeId,
    at: DateTime<Utc>,
    newest: Option<DateTime<Utc>>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO shelf (node_id, checked_at, newest_at) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE SET checked_at = $2, newest_at = $3,
             pass_error = NULL, pass_error_at = NULL",
    )
    .bind(node)
    .bind(at)
    .bind(newest)
    .execute(connection)
    .await?;
    Ok(())
}

/// BK-15: the storage check's line (`None`: every backup is whole).
pub async fn stamp_problem(
    connection: &mut PgConnection,
    node: NodeId,
    problem: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO shelf (node_id, problem) VALUES ($1, $2)
         ON CONFLICT (node_id) DO UPDATE SET problem = $2",
    )
    .bind(node)
    .bind(problem)
    .execute(connection)
    .await?;
    Ok(())
}

/// Why the pass could not finish its look; the stamps stay as they were.
pub async fn pass_failed(
    connection: &mut PgConnection,
    node: NodeId,
    error: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO shelf (node_id, pass_error, pass_error_at) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO UPDATE SET pass_error = $2, pass_error_at = $3",
    )
    .bind(node)
    .bind(error)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// The node's spaces that still hold backups (active and draining), each with its target.
pub async fn live_spaces(connection: &mut PgConnection, node: NodeId) -> Result<Vec<Space>> {
    let ids: Vec<i64> = sqlx::query_scalar(
        "SELECT id FROM spaces WHERE node_id = $1 AND state IN ('active', 'draining') ORDER BY id",
    )
    .bind(node)
    .fetch_all(&mut *connection)
    .await?;
    let mut spaces = Vec::with_capacity(ids.len());
    for id in ids {
        if let Some(found) = space(connection, id).await? {
            spaces.push(found);
        }
    }
    Ok(spaces)
}

/// When a pass first found each chain of `space` surplus: (full_seq, since).
pub async fn surplus(
    connection: &mut PgConnection,
    space: i64,
) -> Result<Vec<(i64, DateTime<Utc>)>> {
    Ok(
        sqlx::query_as("SELECT full_seq, since FROM surplus WHERE space_id = $1")
            .bind(space)
            .fetch_all(connection)
            .await?,
    )
}

/// BK-12: a pass found the chain surplus at `since` (the first finding stays).
pub async fn mark_surplus(
    connection: &mut PgConnection,
    space: i64,
    full_seq: i64,
    since: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO surplus (space_id, full_seq, since) VALUES ($1, $2, $3)
         ON CONFLICT DO NOTHING",
    )
    .bind(space)
    .bind(full_seq)
    .bind(since)
    .execute(connection)
    .await?;
    Ok(())
}

/// The chain is kept (or gone): it is no longer surplus.
pub async fn clear_surplus(connection: &mut PgConnection, space: i64, full_seq: i64) -> Result<()> {
    sqlx::query("DELETE FROM surplus WHERE space_id = $1 AND full_seq = $2")
        .bind(space)
        .bind(full_seq)
        .execute(connection)
        .await?;
    Ok(())
}

/// Retention deleted `event.seqs` from the space: said once, with the surplus rows forgotten.
pub async fn pruned(connection: &mut PgConnection, event: Pruned, full_seqs: &[i64]) -> Result<()> {
    sqlx::query("DELETE FROM surplus WHERE space_id = $1 AND full_seq = ANY($2)")
        .bind(event.space_id)
        .bind(full_seqs)
        .execute(&mut *connection)
        .await?;
    let subject = Some(format!("node/{}", event.node_id));
    outbox::push(connection, Envelope::new(event, subject)).await
}

/// The runs of `node` that claim their objects against the orphan sweep: recorded as landed,
/// or opened for a job of this service that has not ended.
pub async fn claimed_seqs(connection: &mut PgConnection, node: NodeId) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT runs.seq FROM runs LEFT JOIN jobs ON jobs.job_id = runs.job_id
         WHERE runs.node_id = $1
           AND (runs.landed_at IS NOT NULL
                OR (jobs.job_id IS NOT NULL AND jobs.finished_at IS NULL))",
    )
    .bind(node)
    .fetch_all(connection)
    .await?)
}

/// The orphans of `space` earlier passes recorded: their key and when first seen.
pub async fn orphans(
    connection: &mut PgConnection,
    space: i64,
) -> Result<Vec<(NodeKey, DateTime<Utc>)>> {
    let rows: Vec<(i64, String, DateTime<Utc>)> =
        sqlx::query_as("SELECT seq, name, first_seen FROM orphans WHERE space_id = $1")
            .bind(space)
            .fetch_all(connection)
            .await?;
    Ok(rows
        .into_iter()
        .map(|(seq, name, first_seen)| (NodeKey { seq, name }, first_seen))
        .collect())
}

/// A pass saw `key` (of `bytes`) unclaimed for the first time at `at`.
pub async fn orphan_seen(
    connection: &mut PgConnection,
    space: i64,
    key: &NodeKey,
    bytes: u64,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO orphans (space_id, seq, name, bytes, first_seen) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING",
    )
    .bind(space)
    .bind(key.seq)
    .bind(&key.name)
    .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// `key` is no orphan any more (claimed, gone, or deleted by the sweep).
pub async fn forget_orphan(connection: &mut PgConnection, space: i64, key: &NodeKey) -> Result<()> {
    sqlx::query("DELETE FROM orphans WHERE space_id = $1 AND seq = $2 AND name = $3")
        .bind(space)
        .bind(key.seq)
        .bind(&key.name)
        .execute(connection)
        .await?;
    Ok(())
}

/// The sweep's counts for the node: `waiting` now, and `deleted` orphans of `bytes` more.
pub async fn count_orphans(
    connection: &mut PgConnection,
    node: NodeId,
    waiting: usize,
    deleted: usize,
    bytes: u64,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO shelf (node_id, orphans_waiting, orphans_deleted, orphan_bytes_deleted)
         VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id) DO UPDATE SET orphans_waiting = $2,
             orphans_deleted = shelf.orphans_deleted + $3,
             orphan_bytes_deleted = shelf.orphan_bytes_deleted + $4",
    )
    .bind(node)
    .bind(i32::try_from(waiting).unwrap_or(i32::MAX))
    .bind(i64::try_from(deleted).unwrap_or(i64::MAX))
    .bind(i64::try_from(bytes).unwrap_or(i64::MAX))
    .execute(connection)
    .await?;
    Ok(())
}
