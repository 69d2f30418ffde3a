//! Docker hosts' placement records (PV-14..PV-17) and the container sites placed on them.

use capstan_events::provisioning::AccountFlag;
use capstan_events::{NodeId, Word as _};
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};

type Result<T> = std::result::Result<T, StoreError>;

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct HostRow {
    pub id: i64,
    pub address: String,
    pub flag: String,
    pub max_sites: i32,
    pub provisioning_enabled: bool,
    pub node_id: Option<NodeId>,
    pub created_at: DateTime<Utc>,
    pub created_by: String,
    pub deleted_at: Option<DateTime<Utc>>,
}

impl HostRow {
    pub fn flag(&self) -> Result<AccountFlag> {
        AccountFlag::parse(&self.flag)
            .ok_or_else(|| StoreError::Database(format!("{:?} is not a flag", self.flag)))
    }
}

const HOST_COLUMNS: &str = "id, address, flag, max_sites, provisioning_enabled, node_id, \
     created_at, created_by, deleted_at";

/// The live host records, oldest first.
pub async fn hosts(connection: &mut PgConnection) -> Result<Vec<HostRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {HOST_COLUMNS} FROM hosts WHERE deleted_at IS NULL ORDER BY id"
    ))
    .fetch_all(connection)
    .await?)
}

/// A live host record, locked for the caller's transaction.
pub async fn host_for_update(connection: &mut PgConnection, id: i64) -> Result<Option<HostRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {HOST_COLUMNS} FROM hosts WHERE id = $1 AND deleted_at IS NULL FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

/// A new host record; a live record at the address is `AlreadyExists`.
pub async fn insert_host(
    connection: &mut PgConnection,
    address: &str,
    flag: AccountFlag,
    max_sites: u32,
    provisioning_enabled: bool,
    at: DateTime<Utc>,
    by: &str,
) -> Result<HostRow> {
    Ok(sqlx::query_as(&format!(
        "INSERT INTO hosts (address, flag, max_sites, provisioning_enabled, created_at, created_by)
         VALUES ($1, $2, $3, $4, $5, $6) RETURNING {HOST_COLUMNS}"
    ))
    .bind(address)
    .bind(flag.as_str())
    .bind(max_sites as i32)
    .bind(provisioning_enabled)
    .bind(at)
    .bind(by)
    .fetch_one(connection)
    .await?)
}

/// Marks a host record deleted.
pub async fn delete_host(
    connection: &mut PgConnection,
    id: i64,
    at: DateTime<Utc>,
    by: &str,
) -> Result<()> {
    sqlx::query("UPDATE hosts SET deleted_at = $2, deleted_by = $3 WHERE id = $1")
        .bind(id)
        .bind(at)
        .bind(by)
        .execute(connection)
        .await?;
    Ok(())
}

/// Links a host record to its own node.
pub async fn link_host(connection: &mut PgConnection, id: i64, node: NodeId) -> Result<()> {
    sqlx::query("UPDATE hosts SET node_id = $2 WHERE id = $1")
        .bind(id)
        .bind(node)
        .execute(connection)
        .await?;
    Ok(())
}

/// The live host records at any of `addresses`, locked.
pub async fn hosts_at(connection: &mut PgConnection, addresses: &[String]) -> Result<Vec<HostRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {HOST_COLUMNS} FROM hosts WHERE deleted_at IS NULL AND address = ANY($1) \
         ORDER BY id FOR UPDATE"
    ))
    .bind(addresses)
    .fetch_all(connection)
    .await?)
}

/// A node as placement reads it: the record its container names (by `container_hosts`, or by
/// the agent channel's placement onto a host's own node).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct PlacedRow {
    pub node_id: NodeId,
    pub name: String,
    pub host_id: Option<i64>,
    pub paired: bool,
}

/// Every node with the host record it sits on, if any.
pub async fn placed(connection: &mut PgConnection) -> Result<Vec<PlacedRow>> {
    Ok(sqlx::query_as(
        "SELECT DISTINCT ON (n.node_id) n.node_id, n.name, COALESCE(c.host_id, h.id) AS host_id, n.paired
         FROM nodes n
         LEFT JOIN container_hosts c ON c.node_id = n.node_id
         LEFT JOIN hosts h ON h.deleted_at IS NULL AND n.host_node_id IS NOT NULL
                          AND h.node_id = n.host_node_id
         ORDER BY n.node_id, h.id",
    )
    .fetch_all(connection)
    .await?)
}

/// Records that a container site sits on a host (PV-14's `ensure_for_node`).
pub async fn place_container(connection: &mut PgConnection, node: NodeId, host: i64) -> Result<()> {
    sqlx::query(
        "INSERT INTO container_hosts (node_id, host_id) VALUES ($1, $2)
         ON CONFLICT (node_id) DO UPDATE SET host_id = EXCLUDED.host_id",
    )
    .bind(node)
    .bind(host)
    .execute(connection)
    .await?;
    Ok(())
}
