//! The nodes the provisioning service makes before their agent exists (`register_node`) and
//! the install state it tells of each (PV-01).

use capstan_events::provisioning::InstallStateChanged;
use capstan_events::{NodeId, Word as _};
use capstan_store::PgConnection;
use sqlx::types::Json;

use super::{NodeRow, Result, NODE_COLUMNS};
use crate::domain::provisioned::Registration;

/// The node registered under `reference`, if any.
pub async fn node_by_reference(
    connection: &mut PgConnection,
    reference: &str,
) -> Result<Option<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE reference = $1"
    ))
    .bind(reference)
    .fetch_optional(connection)
    .await?)
}

/// Holds the name `name` for the rest of the transaction, so two registrations of one name
/// are decided one after the other.
pub async fn lock_name(connection: &mut PgConnection, name: &str) -> Result<()> {
    sqlx::query(
        "SELECT pg_advisory_xact_lock(hashtextextended('agent_channel.node_name:' || $1, 0))",
    )
    .bind(name)
    .execute(connection)
    .await?;
    Ok(())
}

/// A node other than one that left (its agent said goodbye) holding `name`: the lowest id.
pub async fn live_node_named(connection: &mut PgConnection, name: &str) -> Result<Option<NodeId>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM nodes WHERE name = $1 AND left_at IS NULL ORDER BY id LIMIT 1",
    )
    .bind(name)
    .fetch_optional(connection)
    .await?)
}

/// Makes the node of `registration`, with no key and no agent; `None` when its reference was
/// taken meanwhile (the caller reads that node).
pub async fn insert_registered_node(
    connection: &mut PgConnection,
    registration: &Registration,
) -> Result<Option<NodeId>> {
    Ok(sqlx::query_scalar(
        "INSERT INTO nodes (name, addresses, reference) VALUES ($1, $2, $3)
         ON CONFLICT (reference) DO NOTHING RETURNING id",
    )
    .bind(&registration.name)
    .bind(Json(&registration.addresses))
    .bind(&registration.reference)
    .fetch_optional(connection)
    .await?)
}

/// `install_state_changed`: the node's install state, unless a newer change was applied
/// already. A node unknown here changes nothing (the agent channel makes every node, so no
/// later approval can make this one).
pub async fn install_state_changed(
    connection: &mut PgConnection,
    changed: &InstallStateChanged,
) -> Result<bool> {
    let updated = sqlx::query(
        "UPDATE nodes SET install_state = $2, install_state_at = $3
         WHERE id = $1 AND (install_state_at IS NULL OR install_state_at <= $3)",
    )
    .bind(changed.node_id)
    .bind(changed.state.map(|state| state.as_str()))
    .bind(changed.changed_at)
    .execute(connection)
    .await?
    .rows_affected();
    Ok(updated == 1)
}
