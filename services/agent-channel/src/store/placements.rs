//! The placements announced (`placement_changed`): which Docker host each container node was
//! last said to sit on, so a change is announced once, in the transaction that made it.

use capstan_events::NodeId;
use std::collections::HashMap;

use capstan_store::PgConnection;

use super::{NodeRow, Result, NODE_COLUMNS};

/// The lock every settling of placements takes for the rest of its transaction: two changes
/// settled at once would each read placement without the other's change, and one would be lost.
const PLACEMENTS_LOCK: &str = "capstan-agent-channel-placements";

/// A node's container, as [`crate::domain::fleet::container_named`] reads it, in SQL.
const CONTAINER_OF: &str =
    "CASE WHEN nodes.facts ? 'container' THEN nodes.facts ->> 'container' ELSE nodes.container END";

/// Takes the placements lock for the rest of the transaction. Statements after it see every
/// change committed before it was granted.
pub async fn lock_placements(connection: &mut PgConnection) -> Result<()> {
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
        .bind(PLACEMENTS_LOCK)
        .execute(connection)
        .await?;
    Ok(())
}

/// The nodes whose placement a change to the facts of `touched` may move: those nodes, the
/// nodes announced under one of them, and the nodes whose container one of their latest
/// completed host reports lists.
pub async fn placement_candidates(
    connection: &mut PgConnection,
    touched: &[NodeId],
) -> Result<Vec<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes
         WHERE nodes.id = ANY($1)
            OR nodes.id IN (SELECT node_id FROM placements WHERE host_node_id = ANY($1))
            OR ({CONTAINER_OF}) IN (
                SELECT listed.entry ->> 'name'
                FROM unnest($1::bigint[]) AS host (id)
                CROSS JOIN LATERAL (
                    SELECT j.outcome, j.result
                    FROM jobs j
                    WHERE j.node_id = host.id AND j.primitive = 'host_report'
                      AND j.finished_at IS NOT NULL AND j.outcome IS NOT NULL
                      AND j.outcome <> 'withdrawn'
                    ORDER BY j.finished_at DESC, j.id DESC
                    LIMIT 1
                ) AS latest
                CROSS JOIN LATERAL jsonb_array_elements(
                    CASE WHEN jsonb_typeof(latest.result -> 'containers') = 'array'
                         THEN latest.result -> 'containers' ELSE '[]'::jsonb END
                ) AS listed (entry)
                WHERE latest.outcome = 'completed')
         ORDER BY nodes.id"
    ))
    .bind(touched)
    .fetch_all(connection)
    .await?)
}

/// The host each of `nodes` was last announced under; a node absent was announced under none.
pub async fn announced_hosts(
    connection: &mut PgConnection,
    nodes: &[NodeId],
) -> Result<HashMap<NodeId, NodeId>> {
    let rows: Vec<(NodeId, NodeId)> = sqlx::query_as(
        "SELECT node_id, host_node_id FROM placements
         WHERE node_id = ANY($1) AND host_node_id IS NOT NULL",
    )
    .bind(nodes)
    .fetch_all(connection)
    .await?;
    Ok(rows.into_iter().collect())
}

/// Records that `node` was announced under `host` (or under none).
pub async fn announce_host(
    connection: &mut PgConnection,
    node: NodeId,
    host: Option<NodeId>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO placements (node_id, host_node_id) VALUES ($1, $2)
         ON CONFLICT (node_id) DO UPDATE SET host_node_id = EXCLUDED.host_node_id",
    )
    .bind(node)
    .bind(host)
    .execute(connection)
    .await?;
    Ok(())
}

/// The nodes that name a container or were announced under a host: all whose placement can
/// name a host.
pub async fn placed_or_named_containers(connection: &mut PgConnection) -> Result<Vec<NodeId>> {
    Ok(sqlx::query_scalar(&format!(
        "SELECT id FROM nodes WHERE ({CONTAINER_OF}) IS NOT NULL
         UNION
         SELECT node_id FROM placements WHERE host_node_id IS NOT NULL"
    ))
    .fetch_all(connection)
    .await?)
}
