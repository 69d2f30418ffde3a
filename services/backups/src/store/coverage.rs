//! The fleet coverage's SQL: every paired node with its stored position, its recovery key as
//! last reported, and the targets of its active and draining spaces, in one read.

use capstan_events::backups::rpc::Position;
use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};

use super::Result;
use crate::domain::coverage::NodeFacts;
use crate::domain::health::RecoveryKey;
use capstan_events::Word as _;

#[derive(sqlx::FromRow)]
struct Row {
    node_id: NodeId,
    name: String,
    position: Option<String>,
    recovery_state: Option<String>,
    recovery_fingerprint: Option<String>,
    active_target: Option<i64>,
    draining_targets: Vec<i64>,
}

/// Every paired node as coverage judges it, by id.
pub async fn nodes(connection: &mut PgConnection) -> Result<Vec<NodeFacts>> {
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT n.node_id, n.name, p.position, n.recovery_state, n.recovery_fingerprint,
                (SELECT s.target_id FROM spaces s
                  WHERE s.node_id = n.node_id AND s.state = 'active') AS active_target,
                ARRAY(SELECT DISTINCT s.target_id FROM spaces s
                       WHERE s.node_id = n.node_id AND s.state = 'draining') AS draining_targets
         FROM nodes n LEFT JOIN node_policies p ON p.node_id = n.node_id
         WHERE n.paired
         ORDER BY n.node_id",
    )
    .fetch_all(connection)
    .await?;
    rows.into_iter()
        .map(|row| {
            let position = match row.position.as_deref() {
                None => Position::Fleet,
                Some(text) => Position::parse(text).ok_or_else(|| {
                    StoreError::Database(format!("{text:?} is not a stored position"))
                })?,
            };
            Ok(NodeFacts {
                node_id: row.node_id,
                name: row.name,
                position,
                recovery_key: RecoveryKey::from_report(
                    row.recovery_state.as_deref(),
                    row.recovery_fingerprint.as_deref(),
                ),
                active_target: row.active_target,
                draining_targets: row.draining_targets,
            })
        })
        .collect()
}
