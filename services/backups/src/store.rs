//! The backups service's SQL: targets (credentials sealed), storage spaces and the runs the
//! broker opened. Rows are read into the contract's words; an unknown word fails the read.

use capstan_events::backups::{Provider, TargetChanged};
use capstan_events::Envelope;
use capstan_events::NodeId;
use capstan_events::Word as _;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

pub mod coverage;
pub mod health;
pub mod schedule;
pub mod shelf;

type Result<T> = std::result::Result<T, StoreError>;

/// A target's row (its sealed credentials apart).
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct TargetRow {
    pub id: i64,
    pub name: String,
    pub provider: String,
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub folder: String,
    pub sealed_credentials: Vec<u8>,
    pub conditional_writes: bool,
    pub is_default: bool,
    pub created_at: DateTime<Utc>,
}

impl TargetRow {
    pub fn provider(&self) -> Result<Provider> {
        Provider::parse(&self.provider)
            .ok_or_else(|| StoreError::Database(format!("{:?} is not a provider", self.provider)))
    }
}

const TARGET_COLUMNS: &str = "id, name, provider, endpoint, region, bucket, folder, \
     sealed_credentials, conditional_writes, is_default, created_at";

pub async fn targets(connection: &mut PgConnection) -> Result<Vec<TargetRow>> {
    Ok(
        sqlx::query_as(&format!("SELECT {TARGET_COLUMNS} FROM targets ORDER BY id"))
            .fetch_all(connection)
            .await?,
    )
}

pub async fn target(connection: &mut PgConnection, id: i64) -> Result<Option<TargetRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {TARGET_COLUMNS} FROM targets WHERE id = $1"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

pub async fn name_taken(connection: &mut PgConnection, name: &str) -> Result<bool> {
    Ok(
        sqlx::query_scalar("SELECT EXISTS (SELECT 1 FROM targets WHERE name = $1)")
            .bind(name)
            .fetch_one(connection)
            .await?,
    )
}

/// The next target id, taken before the row is written (its credentials are sealed to it).
pub async fn next_target_id(connection: &mut PgConnection) -> Result<i64> {
    Ok(
        sqlx::query_scalar("SELECT nextval(pg_get_serial_sequence('targets', 'id'))")
            .fetch_one(connection)
            .await?,
    )
}

/// A new target's row.
pub struct NewTargetRow<'a> {
    pub id: i64,
    pub name: &'a str,
    pub provider: Provider,
    pub endpoint: &'a str,
    pub region: &'a str,
    pub bucket: &'a str,
    pub folder: &'a str,
    pub sealed_credentials: &'a [u8],
    pub conditional_writes: bool,
    pub is_default: bool,
    pub created_by: &'a str,
}

pub async fn insert_target(connection: &mut PgConnection, row: &NewTargetRow<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO targets (id, name, provider, endpoint, region, bucket, folder,
             sealed_credentials, conditional_writes, is_default, created_by)
         OVERRIDING SYSTEM VALUE VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
    )
    .bind(row.id)
    .bind(row.name)
    .bind(row.provider.as_str())
    .bind(row.endpoint)
    .bind(row.region)
    .bind(row.bucket)
    .bind(row.folder)
    .bind(row.sealed_credentials)
    .bind(row.conditional_writes)
    .bind(row.is_default)
    .bind(row.created_by)
    .execute(connection)
    .await?;
    Ok(())
}

/// Makes `id` where new backups go (and no other target).
pub async fn set_default(connection: &mut PgConnection, id: i64) -> Result<()> {
    sqlx::query("UPDATE targets SET is_default = false WHERE is_default AND id <> $1")
        .bind(id)
        .execute(&mut *connection)
        .await?;
    sqlx::query("UPDATE targets SET is_default = true WHERE id = $1")
        .bind(id)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn default_target(connection: &mut PgConnection) -> Result<Option<TargetRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {TARGET_COLUMNS} FROM targets WHERE is_default"
    ))
    .fetch_optional(connection)
    .await?)
}

pub async fn target_changed(connection: &mut PgConnection, event: TargetChanged) -> Result<()> {
    let subject = Some(format!("target/{}", event.target_id));
    outbox::push(connection, Envelope::new(event, subject)).await
}

// ---- spaces and runs ----------------------------------------------------------------------

/// A storage space with its target's row.
#[derive(Debug, Clone)]
pub struct Space {
    pub id: i64,
    pub node_id: NodeId,
    pub state: String,
    pub target: TargetRow,
}

#[derive(sqlx::FromRow)]
struct SpaceRow {
    id: i64,
    node_id: NodeId,
    state: String,
    target_id: i64,
}

async fn with_target(connection: &mut PgConnection, row: SpaceRow) -> Result<Space> {
    let target = target(connection, row.target_id)
        .await?
        .ok_or(StoreError::NotFound)?;
    Ok(Space {
        id: row.id,
        node_id: row.node_id,
        state: row.state,
        target,
    })
}

/// A node's active space, locked (BK-03: where its new backups go).
pub async fn active_space(connection: &mut PgConnection, node: NodeId) -> Result<Option<Space>> {
    let row: Option<SpaceRow> = sqlx::query_as(
        "SELECT id, node_id, state, target_id FROM spaces
         WHERE node_id = $1 AND state = 'active' FOR UPDATE",
    )
    .bind(node)
    .fetch_optional(&mut *connection)
    .await?;
    match row {
        Some(row) => Ok(Some(with_target(connection, row).await?)),
        None => Ok(None),
    }
}

/// Opens a node's active space on `target` (BK-01).
pub async fn open_space(connection: &mut PgConnection, node: NodeId, target: i64) -> Result<i64> {
    Ok(
        sqlx::query_scalar("INSERT INTO spaces (target_id, node_id) VALUES ($1, $2) RETURNING id")
            .bind(target)
            .bind(node)
            .fetch_one(connection)
            .await?,
    )
}

pub async fn space(connection: &mut PgConnection, id: i64) -> Result<Option<Space>> {
    let row: Option<SpaceRow> =
        sqlx::query_as("SELECT id, node_id, state, target_id FROM spaces WHERE id = $1")
            .bind(id)
            .fetch_optional(&mut *connection)
            .await?;
    match row {
        Some(row) => Ok(Some(with_target(connection, row).await?)),
        None => Ok(None),
    }
}

/// A run the broker opened.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct RunRow {
    pub node_id: NodeId,
    pub seq: i64,
    pub space_id: i64,
    pub job_id: i64,
}

pub async fn run(connection: &mut PgConnection, node: NodeId, seq: i64) -> Result<Option<RunRow>> {
    Ok(sqlx::query_as(
        "SELECT node_id, seq, space_id, job_id FROM runs WHERE node_id = $1 AND seq = $2",
    )
    .bind(node)
    .bind(seq)
    .fetch_optional(connection)
    .await?)
}

pub async fn runs_of(
    connection: &mut PgConnection,
    node: NodeId,
    seqs: &[i64],
) -> Result<Vec<RunRow>> {
    Ok(sqlx::query_as(
        "SELECT node_id, seq, space_id, job_id FROM runs WHERE node_id = $1 AND seq = ANY($2)",
    )
    .bind(node)
    .bind(seqs)
    .fetch_all(connection)
    .await?)
}

/// The newest seq the node has run, if any.
pub async fn newest_seq(connection: &mut PgConnection, node: NodeId) -> Result<Option<i64>> {
    Ok(
        sqlx::query_scalar("SELECT max(seq) FROM runs WHERE node_id = $1")
            .bind(node)
            .fetch_one(connection)
            .await?,
    )
}

/// Opens run `seq` of `node` for `job` in `space`; false when a run with that seq or job is
/// already there (the caller reads it).
pub async fn open_run(
    connection: &mut PgConnection,
    node: NodeId,
    seq: i64,
    space: i64,
    job: i64,
    kind: Option<&str>,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO runs (node_id, seq, space_id, job_id, kind) VALUES ($1, $2, $3, $4, $5)
         ON CONFLICT DO NOTHING",
    )
    .bind(node)
    .bind(seq)
    .bind(space)
    .bind(job)
    .bind(kind)
    .execute(connection)
    .await?;
    Ok(inserted.rows_affected() == 1)
}
