//! The facts of other services this one keeps, written from their events through the inbox:
//! what incidents adds to the kit's node projection (`capstan_store::nodes`: its pairing
//! time, recipes and container from reports, a row for a node first heard of by a report or a
//! placement), check-ins (its `nodes_seen` reports), operators (the
//! gateway's); and the agent cases the claims carry. A projection is rebuilt by replaying the
//! stream into an empty table (docs/incidents.md says how).

use capstan_events::agent_channel::NodeSeen;
use capstan_events::gateway::OperatorChanged;
use capstan_store::PgConnection;
use chrono::{DateTime, Utc};
use sqlx::types::Json;

use super::{case_state_word, Result};
use crate::domain::cases::{CaseOutcome, StoredCase};
use crate::domain::NodeId;

/// A node was paired (approved) at `at`, after the kit's projection wrote the approval
/// ([`capstan_runtime::NodeEvent`]): its latest pairing starts now, with no check-in heard.
pub async fn node_paired(
    connection: &mut PgConnection,
    node: NodeId,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query("UPDATE nodes SET paired_at = $2, last_checkin_at = NULL WHERE node_id = $1")
        .bind(node)
        .bind(at)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// A node's pairing ended (it left, or an operator disconnected it): no agent to be silent.
pub async fn node_unpaired(connection: &mut PgConnection, node: NodeId) -> Result<()> {
    sqlx::query("UPDATE nodes SET paired_at = NULL WHERE node_id = $1")
        .bind(node)
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// A claim reported the node's recipes (by name) and container.
pub async fn node_reported(
    connection: &mut PgConnection,
    node: NodeId,
    recipes: Option<&[String]>,
    container: Option<Option<&str>>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO nodes (node_id, recipes, container) VALUES ($1, COALESCE($2, '[]'), $4)
         ON CONFLICT (node_id) DO UPDATE
         SET recipes = COALESCE($2, nodes.recipes),
             container = CASE WHEN $3 THEN $4 ELSE nodes.container END",
    )
    .bind(node)
    .bind(recipes.map(|names| Json(names.to_vec())))
    .bind(container.is_some())
    .bind(container.flatten())
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The agent channel's report of check-ins stamped, as of its clock `as_of`.
pub async fn checkins(
    connection: &mut PgConnection,
    as_of: DateTime<Utc>,
    seen: &[NodeSeen],
) -> Result<()> {
    let ids: Vec<NodeId> = seen.iter().map(|node| node.node_id).collect();
    let stamps: Vec<DateTime<Utc>> = seen.iter().map(|node| node.last_seen_at).collect();
    sqlx::query(
        "UPDATE nodes SET last_checkin_at = GREATEST(nodes.last_checkin_at, seen.at)
         FROM UNNEST($1::bigint[], $2::timestamptz[]) AS seen (node_id, at)
         WHERE nodes.node_id = seen.node_id",
    )
    .bind(&ids)
    .bind(&stamps)
    .execute(&mut *connection)
    .await?;
    // Reports may arrive out of order; the record runs as far as the latest.
    sqlx::query(
        "INSERT INTO checkins_known (id, as_of) VALUES (1, $1)
         ON CONFLICT (id) DO UPDATE SET as_of = GREATEST(checkins_known.as_of, EXCLUDED.as_of)",
    )
    .bind(as_of)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A node's Docker host, as the agent channel placed it at `at`, for a node this service has
/// no row of yet: the kit's projection updated a known node (an announcement older than the
/// one applied changing nothing); here a placement heard first still makes the row, as a
/// report does, so grouping under the host holds from the start.
pub async fn placed_unknown(
    connection: &mut PgConnection,
    node: NodeId,
    host: Option<NodeId>,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO nodes (node_id, host_node_id, placed_at) VALUES ($1, $2, $3)
         ON CONFLICT (node_id) DO NOTHING",
    )
    .bind(node)
    .bind(host)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The gateway's latest word on an operator.
pub async fn operator(connection: &mut PgConnection, changed: &OperatorChanged) -> Result<()> {
    sqlx::query(
        "INSERT INTO operators (operator_id, name, level, email, active)
         VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT (operator_id) DO UPDATE
         SET name = EXCLUDED.name, level = EXCLUDED.level, email = EXCLUDED.email,
             active = EXCLUDED.active",
    )
    .bind(changed.operator_id)
    .bind(&changed.name)
    .bind(i16::from(u8::from(changed.level)))
    .bind(changed.email.as_deref())
    .bind(changed.active)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// A case the intake took for the first time.
async fn stored_case(connection: &mut PgConnection, node: NodeId, case: &StoredCase) -> Result<()> {
    sqlx::query(
        "INSERT INTO cases (node_id, source, id, state, opened_at, closed_at, summary,
            notes, last_note, body, last_seen_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(node)
    .bind(case.source.as_str())
    .bind(case.id)
    .bind(case_state_word(case.state))
    .bind(case.opened_at)
    .bind(case.closed_at)
    .bind(&case.summary)
    .bind(i32::try_from(case.notes).unwrap_or(i32::MAX))
    .bind(case.last_note.as_deref())
    .bind(case.body.as_deref())
    .bind(case.last_seen_at)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Writes what one claim's case intake decided for `node` (AC-47).
pub async fn case_outcomes(
    connection: &mut PgConnection,
    node: NodeId,
    outcomes: &[CaseOutcome],
    now: DateTime<Utc>,
) -> Result<()> {
    for outcome in outcomes {
        match outcome {
            CaseOutcome::Stored(case) => stored_case(connection, node, case).await?,
            CaseOutcome::Updated {
                source,
                id,
                notes,
                last_note,
                body,
                last_seen_at,
                closed_at,
            } => {
                sqlx::query(
                    "UPDATE cases SET notes = $4, last_note = $5, body = COALESCE($6, body),
                        last_seen_at = $7,
                        state = CASE WHEN $8::timestamptz IS NULL THEN state ELSE 'closed' END,
                        closed_at = COALESCE($8, closed_at)
                     WHERE node_id = $1 AND source = $2 AND id = $3",
                )
                .bind(node)
                .bind(source.as_str())
                .bind(id)
                .bind(i32::try_from(*notes).unwrap_or(i32::MAX))
                .bind(last_note.as_deref())
                .bind(body.as_deref())
                .bind(last_seen_at)
                .bind(closed_at)
                .execute(&mut *connection)
                .await?;
            }
            CaseOutcome::CloseNotHeard { source, id, at } => {
                sqlx::query(
                    "UPDATE cases SET state = 'closed', closed_at = $4
                     WHERE node_id = $1 AND source = $2 AND id = $3",
                )
                .bind(node)
                .bind(source.as_str())
                .bind(id)
                .bind(at)
                .execute(&mut *connection)
                .await?;
            }
            CaseOutcome::Refused { source, id, reason } => {
                sqlx::query(
                    "INSERT INTO case_refusals (node_id, source, case_id, reason, at)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (node_id, source) DO UPDATE
                     SET case_id = EXCLUDED.case_id, reason = EXCLUDED.reason, at = EXCLUDED.at,
                         refusals = case_refusals.refusals + 1",
                )
                .bind(node)
                .bind(source)
                .bind(id)
                .bind(reason.to_string())
                .bind(now)
                .execute(&mut *connection)
                .await?;
            }
        }
    }
    Ok(())
}

/// The latest refused case per source of `node`: `(source, case id, reason)`.
pub async fn case_refusals(
    connection: &mut PgConnection,
    node: NodeId,
) -> Result<Vec<(String, Option<i64>, String)>> {
    Ok(sqlx::query_as(
        "SELECT source, case_id, reason FROM case_refusals WHERE node_id = $1 ORDER BY source",
    )
    .bind(node)
    .fetch_all(&mut *connection)
    .await?)
}
