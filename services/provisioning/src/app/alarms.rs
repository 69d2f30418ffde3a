//! The alarms this service raises on the plane's own node (the node named by
//! `provisioning.plane_node`, found in the node projection: `tasks::due::plane_node`), each a
//! condition judged through `store::watch` (kept, and published through the outbox only when it
//! changes), for incidents to open.

use capstan_events::provisioning::provisions::SECOND_JOIN;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};

use crate::domain::approval::SecondJoin;
use crate::store::watch;
use crate::tasks::due;

/// AC-11: a second join from a provisioned machine's address after its agent was admitted.
/// Raised on the plane's own node; with none known, the alarm is logged (and the join's card
/// still shows it) and nothing is published.
pub async fn second_join(
    connection: &mut PgConnection,
    plane_node: Option<&str>,
    second: &SecondJoin,
    evidence: &str,
    now: DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(node) = due::plane_node(connection, plane_node).await? else {
        tracing::error!(provision_id = second.provision_id, address = %second.address, plane_node = ?plane_node,
            "AC-11 alarm: a second join from a provisioned machine; no plane node is known to raise it on (set CAPSTAN__PROVISIONING__PLANE_NODE)");
        return Ok(());
    };
    watch::judge(connection, &SECOND_JOIN, node, Some(evidence), now).await?;
    Ok(())
}
