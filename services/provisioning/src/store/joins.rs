//! The agent channel's joins as its events told them, and auto-approval's verdict over each.

use capstan_events::agent_channel::rpc::JoinState;
use capstan_events::agent_channel::JoinRequested;
use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use uuid::Uuid;

type Result<T> = std::result::Result<T, StoreError>;

/// A join heard (or heard again: a reopened or renewed join is pending anew).
pub async fn join_heard(
    connection: &mut PgConnection,
    join: &JoinRequested,
    at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO joins (id, name, fingerprint, source_address, addresses, requested_at, expires_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7)
         ON CONFLICT (id) DO UPDATE SET expires_at = GREATEST(joins.expires_at, EXCLUDED.expires_at),
             state = CASE WHEN joins.state = 'approved' THEN 'approved' ELSE 'pending' END",
    )
    .bind(join.request_id)
    .bind(&join.name)
    .bind(&join.fingerprint)
    .bind(&join.source_address)
    .bind(&join.addresses)
    .bind(at)
    .bind(join.expires_at)
    .execute(connection)
    .await?;
    Ok(())
}

/// The join was approved (by an operator or by this service) for `node`.
pub async fn join_approved(connection: &mut PgConnection, join: Uuid, node: NodeId) -> Result<()> {
    sqlx::query("UPDATE joins SET state = 'approved', node_id = $2, reasons = '{}' WHERE id = $1")
        .bind(join)
        .bind(node)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn join_rejected(connection: &mut PgConnection, join: Uuid) -> Result<()> {
    sqlx::query("UPDATE joins SET state = 'rejected' WHERE id = $1 AND state = 'pending'")
        .bind(join)
        .execute(connection)
        .await?;
    Ok(())
}

/// A join as auto-approval reads it.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JoinRow {
    pub id: Uuid,
    pub name: String,
    pub fingerprint: String,
    pub source_address: String,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub state: String,
    pub node_id: Option<NodeId>,
    pub provision_id: Option<i64>,
    pub reasons: Vec<String>,
    pub key_differs: bool,
    pub second_join: bool,
    pub judged_at: Option<DateTime<Utc>>,
}

impl JoinRow {
    /// The join's state in the agent channel's words (an unknown word fails the read).
    pub fn state(&self) -> Result<JoinState> {
        match self.state.as_str() {
            "pending" => Ok(JoinState::Pending),
            "approved" => Ok(JoinState::Approved),
            "rejected" => Ok(JoinState::Rejected),
            other => Err(StoreError::Database(format!(
                "{other:?} is not a join state"
            ))),
        }
    }
}

const JOIN_COLUMNS: &str = "id, name, fingerprint, source_address, requested_at, expires_at, \
     state, node_id, provision_id, reasons, key_differs, second_join, judged_at";

/// The pending joins not expired at `now`, oldest first.
pub async fn pending_joins(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
) -> Result<Vec<JoinRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOIN_COLUMNS} FROM joins WHERE state = 'pending' AND expires_at > $1
         ORDER BY requested_at, id"
    ))
    .bind(now)
    .fetch_all(connection)
    .await?)
}

/// These joins (those this service knows).
pub async fn joins(connection: &mut PgConnection, ids: &[Uuid]) -> Result<Vec<JoinRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOIN_COLUMNS} FROM joins WHERE id = ANY($1) ORDER BY requested_at, id"
    ))
    .bind(ids)
    .fetch_all(connection)
    .await?)
}

/// The latest join judged for a provision (its page shows the verdict).
pub async fn latest_join_of(
    connection: &mut PgConnection,
    provision: i64,
) -> Result<Option<JoinRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOIN_COLUMNS} FROM joins WHERE provision_id = $1
         ORDER BY (state = 'approved') DESC, requested_at DESC LIMIT 1"
    ))
    .bind(provision)
    .fetch_optional(connection)
    .await?)
}

/// What auto-approval judged of a join.
pub struct Judged<'a> {
    pub provision_id: Option<i64>,
    pub reasons: &'a [String],
    pub key_differs: bool,
    pub second_join: bool,
    pub at: DateTime<Utc>,
}

pub async fn join_judged(
    connection: &mut PgConnection,
    join: Uuid,
    judged: &Judged<'_>,
) -> Result<()> {
    sqlx::query(
        "UPDATE joins SET provision_id = $2, reasons = $3, key_differs = $4, second_join = $5,
             judged_at = $6 WHERE id = $1",
    )
    .bind(join)
    .bind(judged.provision_id)
    .bind(judged.reasons)
    .bind(judged.key_differs)
    .bind(judged.second_join)
    .bind(judged.at)
    .execute(connection)
    .await?;
    Ok(())
}
