//! The machines inventory's rows: the nodes as the agent channel told of them (the kit's
//! projection with this service's `os`), what is written down about each machine, the
//! instances of ours (provisions' and adoptions'), and the adoptions (PV-52, PV-53).

use capstan_events::provisioning::machines::MachineNoteBody;
use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, NaiveDate, Utc};
use sqlx::types::Json;

type Result<T> = std::result::Result<T, StoreError>;

/// A node as the inventory reads it, with its install state: the projection's, else the one
/// its newest provision implies (installing while in flight, `install_failed` when failed).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    pub node_id: NodeId,
    pub name: String,
    pub addresses: Json<Vec<String>>,
    pub container: Option<String>,
    pub host_node_id: Option<NodeId>,
    pub paired: bool,
    pub fingerprint: String,
    pub install_state: Option<String>,
    pub os: Option<String>,
}

const NODE_SELECT: &str = "SELECT n.node_id, n.name, n.addresses, n.container, n.host_node_id, \
     n.paired, n.fingerprint, \
     COALESCE(n.install_state, CASE p.step \
         WHEN 'install_failed' THEN 'install_failed' \
         WHEN 'done' THEN NULL \
         WHEN NULL THEN NULL \
         ELSE 'installing' END) AS install_state, \
     n.os \
     FROM nodes n \
     LEFT JOIN LATERAL (SELECT step FROM provisions WHERE node_id = n.node_id \
                        ORDER BY id DESC LIMIT 1) p ON true";

/// Every node this service heard of, by id.
pub async fn nodes(connection: &mut PgConnection) -> Result<Vec<NodeRow>> {
    Ok(sqlx::query_as(&format!("{NODE_SELECT} ORDER BY n.node_id"))
        .fetch_all(connection)
        .await?)
}

/// One node.
pub async fn node(connection: &mut PgConnection, node: NodeId) -> Result<Option<NodeRow>> {
    Ok(
        sqlx::query_as(&format!("{NODE_SELECT} WHERE n.node_id = $1"))
            .bind(node)
            .fetch_optional(connection)
            .await?,
    )
}

/// The node called `name` (the newest when a name was reused).
pub async fn node_named(connection: &mut PgConnection, name: &str) -> Result<Option<NodeId>> {
    Ok(sqlx::query_scalar(
        "SELECT node_id FROM nodes WHERE name = $1 ORDER BY paired DESC, node_id DESC LIMIT 1",
    )
    .bind(name)
    .fetch_optional(connection)
    .await?)
}

/// The OS a node's host report named.
pub async fn set_os(connection: &mut PgConnection, node: NodeId, os: &str) -> Result<()> {
    sqlx::query("UPDATE nodes SET os = $2 WHERE node_id = $1")
        .bind(node)
        .bind(os)
        .execute(connection)
        .await?;
    Ok(())
}

/// What is written down about a machine.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NoteRow {
    pub machine_id: String,
    pub purpose: String,
    pub owner: String,
    pub serves: String,
    pub release: String,
    pub retire_by: Option<NaiveDate>,
    pub confirmed_at: Option<DateTime<Utc>>,
    pub confirmed_by: Option<String>,
}

const NOTE_COLUMNS: &str =
    "machine_id, purpose, owner, serves, release, retire_by, confirmed_at, confirmed_by";

pub async fn notes(connection: &mut PgConnection) -> Result<Vec<NoteRow>> {
    Ok(
        sqlx::query_as(&format!("SELECT {NOTE_COLUMNS} FROM machine_notes"))
            .fetch_all(connection)
            .await?,
    )
}

pub async fn note(connection: &mut PgConnection, machine_id: &str) -> Result<Option<NoteRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NOTE_COLUMNS} FROM machine_notes WHERE machine_id = $1"
    ))
    .bind(machine_id)
    .fetch_optional(connection)
    .await?)
}

/// Writes every field down and confirms it (Save confirms, PV-53).
pub async fn save_note(
    connection: &mut PgConnection,
    machine_id: &str,
    body: &MachineNoteBody,
    at: DateTime<Utc>,
    by: &str,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO machine_notes (machine_id, purpose, owner, serves, release, retire_by,
                                    confirmed_at, confirmed_by, written_at, written_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $7, $8)
         ON CONFLICT (machine_id) DO UPDATE
         SET purpose = EXCLUDED.purpose, owner = EXCLUDED.owner, serves = EXCLUDED.serves,
             release = EXCLUDED.release, retire_by = EXCLUDED.retire_by,
             confirmed_at = EXCLUDED.confirmed_at, confirmed_by = EXCLUDED.confirmed_by,
             written_at = EXCLUDED.written_at, written_by = EXCLUDED.written_by",
    )
    .bind(machine_id)
    .bind(body.purpose.trim())
    .bind(body.owner.trim())
    .bind(body.serves.trim())
    .bind(body.release.trim())
    .bind(body.retire_by)
    .bind(at)
    .bind(by)
    .execute(connection)
    .await?;
    Ok(())
}

/// Confirms what is written as it stands; `false` when nothing is written.
pub async fn confirm_note(
    connection: &mut PgConnection,
    machine_id: &str,
    at: DateTime<Utc>,
    by: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "UPDATE machine_notes SET confirmed_at = $2, confirmed_by = $3 WHERE machine_id = $1",
    )
    .bind(machine_id)
    .bind(at)
    .bind(by)
    .execute(connection)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// An instance of ours: made by a finished provision or adopted for a node.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct InstanceRow {
    pub node_id: Option<NodeId>,
    pub account_id: i64,
    pub instance_id: String,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    pub region: String,
}

/// Every instance a provision made (done) or an adoption recorded.
pub async fn our_instances(connection: &mut PgConnection) -> Result<Vec<InstanceRow>> {
    Ok(sqlx::query_as(
        "SELECT node_id, account_id, instance_id, ipv4, ipv6, region FROM provisions
         WHERE instance_id IS NOT NULL AND step = 'done'
         UNION ALL
         SELECT node_id, account_id, instance_id,
                CASE WHEN ipv4 IS NULL THEN '{}'::text[] ELSE ARRAY[ipv4] END,
                CASE WHEN ipv6 IS NULL THEN '{}'::text[] ELSE ARRAY[ipv6] END,
                region
         FROM adoptions",
    )
    .fetch_all(connection)
    .await?)
}

/// Which node records each instance (a provision's or an adoption's), for PV-52's "no other
/// node's provision records it".
pub async fn recorded_instances(connection: &mut PgConnection) -> Result<Vec<(String, NodeId)>> {
    Ok(sqlx::query_as(
        "SELECT instance_id, node_id FROM provisions
         WHERE instance_id IS NOT NULL AND node_id IS NOT NULL
         UNION
         SELECT instance_id, node_id FROM adoptions",
    )
    .fetch_all(connection)
    .await?)
}

/// Whether a provision of `node` holds an instance (then there is nothing to adopt, PV-52).
pub async fn provision_holds_instance(connection: &mut PgConnection, node: NodeId) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "SELECT EXISTS (SELECT 1 FROM provisions WHERE node_id = $1 AND instance_id IS NOT NULL)",
    )
    .bind(node)
    .fetch_one(connection)
    .await?)
}

/// A new adoption.
pub struct NewAdoption<'a> {
    pub node_id: NodeId,
    pub account_id: i64,
    pub provider: &'a str,
    pub instance_id: &'a str,
    pub ipv4: Option<&'a str>,
    pub ipv6: Option<&'a str>,
    pub region: &'a str,
    pub at: DateTime<Utc>,
    pub by: &'a str,
}

/// Records an adoption; a node adopted already, or a server adopted for another, is
/// `AlreadyExists`.
pub async fn insert_adoption(connection: &mut PgConnection, row: &NewAdoption<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO adoptions (node_id, account_id, provider, instance_id, ipv4, ipv6, region,
                                adopted_at, adopted_by)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
    )
    .bind(row.node_id)
    .bind(row.account_id)
    .bind(row.provider)
    .bind(row.instance_id)
    .bind(row.ipv4)
    .bind(row.ipv6)
    .bind(row.region)
    .bind(row.at)
    .bind(row.by)
    .execute(connection)
    .await?;
    Ok(())
}

/// Whether `node` has an adoption.
pub async fn adopted(connection: &mut PgConnection, node: NodeId) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM adoptions WHERE node_id = $1)")
            .bind(node)
            .fetch_one(connection)
            .await?,
    )
}
