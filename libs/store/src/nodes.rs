//! The node projection every service embeds: the agent channel's node events (`node_approved`,
//! `node_reported`, `placement_changed`, `node_left`, `node_disconnected`) and provisioning's
//! `install_state_changed` (PV-01) kept in a `nodes` table of the embedding service's own
//! schema, and read through the small API below.
//!
//! The table's kit columns are [`TABLE`] (`nodes.sql`): a new service's first migration
//! creates it so; the services that kept a projection of their own before converted theirs to
//! it (their `0010_node_projection.sql`). A service may add columns of its own, which these
//! writes leave alone.
//!
//! Each write is idempotent and order-tolerant where the events allow: an approval makes or
//! refreshes the row; a report, a placement or an unpairing of a node never approved changes
//! nothing; an older placement, report or install state heard late (a redelivery) never
//! overwrites a newer. An install state heard before the node's approval (provisioning says
//! `installing` while the machine is still being set up, before its agent exists) is kept in
//! `early_install_states` and taken by the approval that makes the row.

use crate::StoreError;

/// The `CREATE TABLE nodes` of the kit's columns (what a service's migration creates).
pub const TABLE: &str = include_str!("nodes.sql");

use capstan_events::agent_channel::{NodeApproved, NodeReported, PlacementChanged};
use capstan_events::provisioning::{InstallState, InstallStateChanged};
use capstan_events::{NodeId, Word as _};
use sqlx::types::{
    chrono::{DateTime, Utc},
    Json,
};
use sqlx::PgConnection;

/// A node as this service knows it from the agent channel's events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub node_id: NodeId,
    pub name: String,
    pub fingerprint: String,
    pub addresses: Vec<String>,
    pub site_root: Option<String>,
    pub container: Option<String>,
    pub host_node_id: Option<NodeId>,
    pub paired: bool,
    pub vocabulary: Vec<String>,
    pub agent_version: Option<String>,
    /// When the node's agent last reported (`None`: it has not reported since its approval
    /// was heard here).
    pub reported_at: Option<DateTime<Utc>>,
    /// Provisioning's install state (PV-01): `None` is operational.
    pub install_state: Option<InstallState>,
}

impl Node {
    /// PV-01: only a node with no install state is operational; the rest are skipped by
    /// backups, rollouts, uptime, health and incident sources, and stay listed.
    pub fn is_operational(&self) -> bool {
        self.install_state.is_none()
    }
}

#[derive(sqlx::FromRow)]
struct NodeRow {
    node_id: NodeId,
    name: String,
    fingerprint: String,
    addresses: Json<Vec<String>>,
    site_root: Option<String>,
    container: Option<String>,
    host_node_id: Option<NodeId>,
    paired: bool,
    vocabulary: Vec<String>,
    agent_version: Option<String>,
    reported_at: Option<DateTime<Utc>>,
    install_state: Option<String>,
}

impl TryFrom<NodeRow> for Node {
    type Error = StoreError;

    /// The row as a node; an install state the contract does not name (only this module
    /// writes the column, from the contract's words) fails the read naming it.
    fn try_from(row: NodeRow) -> Result<Self, StoreError> {
        let install_state = match row.install_state.as_deref() {
            None => None,
            Some(word) => Some(InstallState::parse(word).ok_or_else(|| {
                StoreError::Database(format!(
                    "node {}: {word:?} is not an install state",
                    row.node_id
                ))
            })?),
        };
        Ok(Node {
            node_id: row.node_id,
            name: row.name,
            fingerprint: row.fingerprint,
            addresses: row.addresses.0,
            site_root: row.site_root,
            container: row.container,
            host_node_id: row.host_node_id,
            paired: row.paired,
            vocabulary: row.vocabulary,
            agent_version: row.agent_version,
            reported_at: row.reported_at,
            install_state,
        })
    }
}

const COLUMNS: &str = "node_id, name, fingerprint, addresses, site_root, container, \
     host_node_id, paired, vocabulary, agent_version, reported_at, install_state";

/// `node_approved` at `at`: the node is paired, known by its name, key, addresses, site root
/// and container (a re-approval refreshes them; what a later report said of its site root is
/// replaced by the join's).
pub async fn approved(
    connection: &mut PgConnection,
    approved: &NodeApproved,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO nodes (node_id, name, fingerprint, addresses, site_root, container, paired,
                            approved_at)
         VALUES ($1, $2, $3, $4, $5, $6, true, $7)
         ON CONFLICT (node_id) DO UPDATE
         SET name = EXCLUDED.name, fingerprint = EXCLUDED.fingerprint,
             addresses = EXCLUDED.addresses, site_root = EXCLUDED.site_root,
             container = EXCLUDED.container, paired = true,
             approved_at = COALESCE(nodes.approved_at, EXCLUDED.approved_at)",
    )
    .bind(approved.node_id)
    .bind(&approved.name)
    .bind(&approved.fingerprint)
    .bind(Json(&approved.addresses))
    .bind(approved.site_root.as_deref())
    .bind(approved.container.as_deref())
    .bind(at)
    .execute(&mut *connection)
    .await?;
    // An install state heard before this first approval is the node's now, unless the row
    // already holds a newer one.
    sqlx::query(
        "WITH early AS (DELETE FROM early_install_states WHERE node_id = $1
                        RETURNING install_state, changed_at)
         UPDATE nodes SET install_state = early.install_state, install_state_at = early.changed_at
         FROM early
         WHERE nodes.node_id = $1
           AND (nodes.install_state_at IS NULL OR nodes.install_state_at <= early.changed_at)",
    )
    .bind(approved.node_id)
    .execute(connection)
    .await?;
    Ok(())
}

/// `install_state_changed` (PV-01): the node's install state, unless a newer change was heard
/// already. A node not approved here yet keeps it in `early_install_states` for its approval.
pub async fn install_state_changed(
    connection: &mut PgConnection,
    changed: &InstallStateChanged,
) -> Result<(), StoreError> {
    let state = changed.state.map(|state| state.as_str());
    sqlx::query(
        "UPDATE nodes SET install_state = $2, install_state_at = $3
         WHERE node_id = $1 AND (install_state_at IS NULL OR install_state_at <= $3)",
    )
    .bind(changed.node_id)
    .bind(state)
    .bind(changed.changed_at)
    .execute(&mut *connection)
    .await?;
    sqlx::query(
        "INSERT INTO early_install_states (node_id, install_state, changed_at)
         SELECT $1, $2, $3 WHERE NOT EXISTS (SELECT 1 FROM nodes WHERE node_id = $1)
         ON CONFLICT (node_id) DO UPDATE
         SET install_state = EXCLUDED.install_state, changed_at = EXCLUDED.changed_at
         WHERE early_install_states.changed_at <= EXCLUDED.changed_at",
    )
    .bind(changed.node_id)
    .bind(state)
    .bind(changed.changed_at)
    .execute(connection)
    .await?;
    Ok(())
}

/// `node_reported` at `at`: its agent's version and words. A report without a site root (a
/// siteless node, an event from before the field) keeps the root known from the join or an
/// earlier report.
pub async fn reported(
    connection: &mut PgConnection,
    reported: &NodeReported,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE nodes SET agent_version = $2, vocabulary = $3,
                site_root = COALESCE($4, site_root), reported_at = $5
         WHERE node_id = $1 AND (reported_at IS NULL OR reported_at <= $5)",
    )
    .bind(reported.node_id)
    .bind(&reported.agent_version)
    .bind(&reported.vocabulary)
    .bind(reported.site_root.as_deref())
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// `placement_changed` at `at`: the Docker host the node sits on, or none.
pub async fn placed(
    connection: &mut PgConnection,
    placed: &PlacementChanged,
    at: DateTime<Utc>,
) -> Result<(), StoreError> {
    sqlx::query(
        "UPDATE nodes SET host_node_id = $2, placed_at = $3
         WHERE node_id = $1 AND (placed_at IS NULL OR placed_at <= $3)",
    )
    .bind(placed.node_id)
    .bind(placed.host_node_id)
    .bind(at)
    .execute(connection)
    .await?;
    Ok(())
}

/// `node_left` or `node_disconnected`: the node has no paired agent. Its row stays (what the
/// service keeps about it still names it).
pub async fn unpaired(connection: &mut PgConnection, node: NodeId) -> Result<(), StoreError> {
    sqlx::query("UPDATE nodes SET paired = false WHERE node_id = $1")
        .bind(node)
        .execute(connection)
        .await?;
    Ok(())
}

/// The node, when this service has heard of it.
pub async fn node(connection: &mut PgConnection, node: NodeId) -> Result<Option<Node>, StoreError> {
    let row: Option<NodeRow> =
        sqlx::query_as(&format!("SELECT {COLUMNS} FROM nodes WHERE node_id = $1"))
            .bind(node)
            .fetch_optional(connection)
            .await?;
    row.map(Node::try_from).transpose()
}

/// Whether the node has a paired agent now (false for a node never heard of).
pub async fn is_paired(connection: &mut PgConnection, node: NodeId) -> Result<bool, StoreError> {
    let paired: Option<bool> = sqlx::query_scalar("SELECT paired FROM nodes WHERE node_id = $1")
        .bind(node)
        .fetch_optional(connection)
        .await?;
    Ok(paired.unwrap_or(false))
}

/// Every node with a paired agent, by id.
pub async fn paired(connection: &mut PgConnection) -> Result<Vec<Node>, StoreError> {
    let rows: Vec<NodeRow> = sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM nodes WHERE paired ORDER BY node_id"
    ))
    .fetch_all(connection)
    .await?;
    rows.into_iter().map(Node::try_from).collect()
}

/// The nodes whose containers sit on `host` now.
pub async fn placed_on(
    connection: &mut PgConnection,
    host: NodeId,
) -> Result<Vec<NodeId>, StoreError> {
    Ok(
        sqlx::query_scalar("SELECT node_id FROM nodes WHERE host_node_id = $1 ORDER BY node_id")
            .bind(host)
            .fetch_all(connection)
            .await?,
    )
}
