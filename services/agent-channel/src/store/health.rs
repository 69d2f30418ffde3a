//! Each node's health dot as the monitor judged it (MO-07): the projection of its
//! `health_changed` events. The agent channel never judges a dot itself.

use capstan_events::monitor::{Health, HealthDot};
use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use sqlx::types::Json;
use std::collections::HashMap;

use super::Result;
use capstan_events::Word as _;

/// The dot of a node the monitor has not judged.
pub fn never_checked() -> Health {
    Health {
        dot: HealthDot::Gray,
        reasons: vec!["never checked".to_string()],
    }
}

/// Keeps the monitor's judgement of `node` from a check finished at `checked_at`, unless a
/// judgement of a later check is already kept (a redelivered or late event changes nothing).
pub async fn apply(
    connection: &mut PgConnection,
    node: NodeId,
    health: &Health,
    checked_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO node_health (node_id, dot, reasons, checked_at) VALUES ($1, $2, $3, $4)
         ON CONFLICT (node_id) DO UPDATE
         SET dot = EXCLUDED.dot, reasons = EXCLUDED.reasons, checked_at = EXCLUDED.checked_at
         WHERE node_health.checked_at <= EXCLUDED.checked_at",
    )
    .bind(node)
    .bind(health.dot.as_str())
    .bind(Json(&health.reasons))
    .bind(checked_at)
    .execute(connection)
    .await?;
    Ok(())
}

/// The kept dots of `nodes` (a node never judged is absent).
pub async fn of(
    connection: &mut PgConnection,
    nodes: &[NodeId],
) -> Result<HashMap<NodeId, Health>> {
    let rows: Vec<(NodeId, String, Json<Vec<String>>)> =
        sqlx::query_as("SELECT node_id, dot, reasons FROM node_health WHERE node_id = ANY($1)")
            .bind(nodes)
            .fetch_all(connection)
            .await?;
    rows.into_iter()
        .map(|(node, dot, reasons)| {
            let dot = HealthDot::parse(&dot)
                .ok_or_else(|| StoreError::Database(format!("{dot:?} is not a health dot")))?;
            Ok((
                node,
                Health {
                    dot,
                    reasons: reasons.0,
                },
            ))
        })
        .collect()
}
