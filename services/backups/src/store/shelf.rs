//! The storage pass's rows (migration 0003): a node's shelf stamps (BK-15, BK-17) and the
//! chains retention found surplus (BK-12), and the `pruned` event in the transaction that
//! forgets the deleted chains.

use capstan_events::backups::Pruned;
use capstan_events::Envelope;
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};

use super::{space, Result, Space};

/// What the pass last stamped for a node.
#[derive(Debug, Clone, PartialEq, Eq, Default, sqlx::FromRow)]
pub struct Shelf {
    pub checked_at: Option<DateTime<Utc>>,
    pub newest_at: Option<DateTime<Utc>>,
    pub problem: Option<String>,
    pub pass_error: Option<String>,
    pub pass_error_at: Option<DateTime<Utc>>,
}

pub async fn shelf(connection: &mut PgConnection, node: i64) -> Result<Shelf> {
    Ok(sqlx::query_as(
        "SELECT checked_at, newest_at, problem, pass_error, pass_error_at FROM shelf
         WHERE node_id = $1",
    )
    .bind(node)
    .fetch_optional(connection)
    .await?
    .unwrap_or_default())
}

/// BK-17: every live space was listed at `at` and the newest write seen was `newest`.
pub async fn stamp_listed(
    connection: &mut PgConnection,
    node: i64,
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
    node: i64,
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
    node: i64,
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
pub async fn live_spaces(connection: &mut PgConnection, node: i64) -> Result<Vec<Space>> {
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
