//! The agent channel's SQL. Every statement is bound, never built from input; callers hold the
//! transaction, so a state change and the events it causes commit together.

use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};
use sqlx::types::Json;
use std::time::Duration;
use uuid::Uuid;

use crate::domain::{claims::NodeFacts, joins::JoinRecordState, REJECTED_REOPENABLE_FOR};
use capstan_events::agent_channel::{rpc::JobState, JobOutcome, UnknownState};
use capstan_events::provisioning::InstallState;
use capstan_events::Word;

pub mod health;
mod jobs;
mod listing;
mod placements;
mod provisioned;
pub use jobs::*;
pub use listing::*;
pub use placements::*;
pub use provisioned::*;

type Result<T> = std::result::Result<T, StoreError>;

/// A state kept as text, read through its spelling: a spelling the enum does not know fails the
/// read with the error naming it (`"cancelled" is not a job state`), never a guess. Fields use
/// it as `#[sqlx(try_from = "Spelled<JobState>")]`.
pub struct Spelled<T>(T);

impl<T> sqlx::Type<sqlx::Postgres> for Spelled<T> {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r, T: TryFrom<String, Error = UnknownState>> sqlx::Decode<'r, sqlx::Postgres> for Spelled<T> {
    fn decode(
        value: sqlx::postgres::PgValueRef<'r>,
    ) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        let text = <String as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        Ok(Spelled(T::try_from(text)?))
    }
}

macro_rules! spelled {
    ($($state:ty),*) => {$(
        impl From<Spelled<$state>> for $state {
            fn from(spelled: Spelled<$state>) -> $state {
                spelled.0
            }
        }
    )*};
}
spelled!(JobState, JobOutcome, JoinRecordState);

/// A closed word of the contract kept as text, read through its spelling ([`Word::parse`]): a
/// spelling it does not know fails the read naming it. For a nullable column, as
/// `Option<Worded<InstallState>>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Worded<T>(pub T);

impl<T> sqlx::Type<sqlx::Postgres> for Worded<T> {
    fn type_info() -> sqlx::postgres::PgTypeInfo {
        <String as sqlx::Type<sqlx::Postgres>>::type_info()
    }

    fn compatible(ty: &sqlx::postgres::PgTypeInfo) -> bool {
        <String as sqlx::Type<sqlx::Postgres>>::compatible(ty)
    }
}

impl<'r, T: Word> sqlx::Decode<'r, sqlx::Postgres> for Worded<T> {
    fn decode(
        value: sqlx::postgres::PgValueRef<'r>,
    ) -> std::result::Result<Self, sqlx::error::BoxDynError> {
        let text = <&str as sqlx::Decode<sqlx::Postgres>>::decode(value)?;
        T::parse(text)
            .map(Worded)
            .ok_or_else(|| format!("{text:?} is not a {}", std::any::type_name::<T>()).into())
    }
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct NodeRow {
    pub id: NodeId,
    pub name: String,
    pub public_key: Option<String>,
    pub fingerprint: Option<String>,
    pub addresses: Json<Vec<String>>,
    pub site_root: Option<String>,
    pub container: Option<String>,
    pub agent_version: Option<String>,
    pub vocabulary: Json<Vec<String>>,
    pub claim_bytes: Option<i64>,
    pub facts: Json<Map<String, Value>>,
    pub connected_at: Option<DateTime<Utc>>,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub left_at: Option<DateTime<Utc>>,
    /// Provisioning's install state (PV-01): `None` is operational.
    pub install_state: Option<Worded<InstallState>>,
}

impl NodeRow {
    pub fn node_facts(&self) -> NodeFacts {
        NodeFacts {
            agent_version: self.agent_version.clone(),
            vocabulary: self.vocabulary.0.clone(),
            claim_bytes: self.claim_bytes.map(|bytes| bytes as u64),
            site_root: self.site_root.clone(),
            facts: self.facts.0.clone(),
        }
    }

    /// The container its agent runs in (`fleet::container_named`).
    pub fn container_name(&self) -> Option<&str> {
        crate::domain::fleet::container_named(self.container.as_deref(), &self.facts.0)
    }
}

const NODE_COLUMNS: &str = "id, name, public_key, fingerprint, addresses, site_root, container, \
     agent_version, vocabulary, claim_bytes, facts, connected_at, last_seen_at, left_at, \
     install_state";

pub async fn node_by_id(connection: &mut PgConnection, id: NodeId) -> Result<Option<NodeRow>> {
    Ok(
        sqlx::query_as(&format!("SELECT {NODE_COLUMNS} FROM nodes WHERE id = $1"))
            .bind(id)
            .fetch_optional(connection)
            .await?,
    )
}

/// The node, locked for the rest of the transaction: claims of one node are taken one at a time.
pub async fn lock_node(connection: &mut PgConnection, id: NodeId) -> Result<Option<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

pub async fn node_by_fingerprint(
    connection: &mut PgConnection,
    fingerprint: &str,
) -> Result<Option<NodeRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS} FROM nodes WHERE fingerprint = $1"
    ))
    .bind(fingerprint)
    .fetch_optional(connection)
    .await?)
}

/// Every paired node's version and update facts, by name.
pub async fn node_updates(
    connection: &mut PgConnection,
) -> Result<Vec<crate::domain::updates::NodeUpdateRow>> {
    let rows: Vec<NodeUpdateRow> = sqlx::query_as(
        "SELECT id, name, agent_version, facts->>'update_state', facts->>'update_offered',
                facts->>'update_reason', facts->>'update_trial', facts->'last_update_refusal'
         FROM nodes WHERE fingerprint IS NOT NULL ORDER BY name, id",
    )
    .fetch_all(connection)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(node_id, name, agent_version, state, offered, reason, trial, last_refusal)| {
                crate::domain::updates::NodeUpdateRow {
                    node_id,
                    name,
                    agent_version,
                    update_state: state,
                    update_offered: offered,
                    update_reason: reason,
                    update_trial: trial,
                    last_refusal: last_refusal.map(|kept| kept.0),
                }
            },
        )
        .collect())
}

/// A row of [`node_updates`].
type NodeUpdateRow = (
    NodeId,
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<Json<Value>>,
);

/// Every paired node with its key (standard base64), to know them before their first request.
pub async fn paired_keys(connection: &mut PgConnection) -> Result<Vec<(NodeId, String)>> {
    Ok(
        sqlx::query_as("SELECT id, public_key FROM nodes WHERE public_key IS NOT NULL")
            .fetch_all(connection)
            .await?,
    )
}

/// The nodes with a job waiting to be handed out.
pub async fn nodes_with_pending(connection: &mut PgConnection) -> Result<Vec<NodeId>> {
    Ok(
        sqlx::query_scalar("SELECT DISTINCT node_id FROM jobs WHERE state = 'pending'")
            .fetch_all(connection)
            .await?,
    )
}

pub struct Binding<'a> {
    pub public_key: &'a str,
    pub fingerprint: &'a str,
    pub addresses: &'a [String],
    pub site_root: Option<&'a str>,
    pub container: Option<&'a str>,
    pub agent_version: &'a str,
}

pub async fn insert_node(
    connection: &mut PgConnection,
    name: &str,
    binding: &Binding<'_>,
) -> Result<NodeId> {
    Ok(sqlx::query_scalar(
        "INSERT INTO nodes (name, public_key, fingerprint, addresses, site_root, container, agent_version, connected_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7, now()) RETURNING id",
    )
    .bind(name)
    .bind(binding.public_key)
    .bind(binding.fingerprint)
    .bind(Json(binding.addresses))
    .bind(binding.site_root)
    .bind(binding.container)
    .bind(binding.agent_version)
    .fetch_one(connection)
    .await?)
}

/// Binds a key to an existing node that has none; fills an empty site root and container from
/// the join (AC-06, AC-52), never replacing a set one. Returns false when the node is gone or
/// already paired.
pub async fn bind_key(
    connection: &mut PgConnection,
    node_id: NodeId,
    binding: &Binding<'_>,
) -> Result<bool> {
    let updated = sqlx::query(
        "UPDATE nodes SET public_key = $2, fingerprint = $3, addresses = $4,
             site_root = COALESCE(NULLIF(site_root, ''), $5), container = COALESCE(container, $6),
             agent_version = $7, connected_at = now(), left_at = NULL
         WHERE id = $1 AND fingerprint IS NULL",
    )
    .bind(node_id)
    .bind(binding.public_key)
    .bind(binding.fingerprint)
    .bind(Json(binding.addresses))
    .bind(binding.site_root)
    .bind(binding.container)
    .bind(binding.agent_version)
    .execute(connection)
    .await?
    .rows_affected();
    Ok(updated == 1)
}

/// Forgets a node's key (AC-37, AC-38): one path for the node's leave and the operator's
/// disconnect; a leave also records when the node left.
pub async fn forget_key(connection: &mut PgConnection, node_id: NodeId, left: bool) -> Result<()> {
    sqlx::query(
        "UPDATE nodes SET public_key = NULL, fingerprint = NULL,
             left_at = CASE WHEN $2 THEN now() ELSE left_at END
         WHERE id = $1",
    )
    .bind(node_id)
    .bind(left)
    .execute(connection)
    .await?;
    Ok(())
}

pub async fn save_facts(
    connection: &mut PgConnection,
    node_id: NodeId,
    facts: &NodeFacts,
    now: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "UPDATE nodes SET agent_version = $2, vocabulary = $3, claim_bytes = $4, facts = $5, last_seen_at = $6,
             site_root = $7
         WHERE id = $1",
    )
    .bind(node_id)
    .bind(&facts.agent_version)
    .bind(Json(&facts.vocabulary))
    .bind(facts.claim_bytes.map(|bytes| bytes as i64))
    .bind(Json(&facts.facts))
    .bind(now)
    .bind(&facts.site_root)
    .execute(connection)
    .await?;
    Ok(())
}

/// A claim's heartbeat (`last_seen_at`), one statement: a quiet claim's outside any
/// transaction, the locked claim's inside its own. Only a paired node's, and never backwards (a
/// slower request stamping an older time).
pub async fn heartbeat(
    connection: &mut PgConnection,
    node_id: NodeId,
    now: DateTime<Utc>,
) -> Result<()> {
    sqlx::query(
        "UPDATE nodes SET last_seen_at = $2 \
         WHERE id = $1 AND fingerprint IS NOT NULL \
           AND (last_seen_at IS NULL OR last_seen_at < $2)",
    )
    .bind(node_id)
    .bind(now)
    .execute(connection)
    .await?;
    Ok(())
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct JoinRow {
    pub id: Uuid,
    pub public_key: String,
    pub fingerprint: String,
    pub name: String,
    pub source_address: String,
    pub addresses: Json<Vec<String>>,
    pub agent_version: String,
    pub site_root: Option<String>,
    pub container: Option<String>,
    /// A spelling the service does not know fails the read.
    #[sqlx(try_from = "Spelled<JoinRecordState>")]
    pub state: JoinRecordState,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    pub decided_at: Option<DateTime<Utc>>,
    pub node_id: Option<NodeId>,
}

const JOIN_COLUMNS: &str = "id, public_key, fingerprint, name, source_address, addresses, \
     agent_version, site_root, container, state, requested_at, expires_at, decided_at, node_id";

pub async fn join_by_id(connection: &mut PgConnection, id: Uuid) -> Result<Option<JoinRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOIN_COLUMNS} FROM joins WHERE id = $1 FOR UPDATE"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

/// The latest request of a key, locked.
pub async fn latest_join_of_key(
    connection: &mut PgConnection,
    fingerprint: &str,
) -> Result<Option<JoinRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {JOIN_COLUMNS} FROM joins WHERE fingerprint = $1 ORDER BY requested_at DESC LIMIT 1 FOR UPDATE"
    ))
    .bind(fingerprint)
    .fetch_optional(connection)
    .await?)
}

pub struct NewJoin<'a> {
    pub id: Uuid,
    pub public_key: &'a str,
    pub fingerprint: &'a str,
    pub name: &'a str,
    pub source_address: &'a str,
    /// What the per-source cap counts by ([`crate::domain::rate::source_network`]).
    pub source_network: &'a str,
    pub addresses: &'a [String],
    pub agent_version: &'a str,
    pub site_root: Option<&'a str>,
    pub container: Option<&'a str>,
    pub expires_at: DateTime<Utc>,
}

pub async fn insert_join(connection: &mut PgConnection, join: &NewJoin<'_>) -> Result<()> {
    sqlx::query(
        "INSERT INTO joins (id, public_key, fingerprint, name, source_address, addresses, agent_version,
                            site_root, container, state, expires_at, source_network)
         VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, 'pending', $10, $11)",
    )
    .bind(join.id)
    .bind(join.public_key)
    .bind(join.fingerprint)
    .bind(join.name)
    .bind(join.source_address)
    .bind(Json(join.addresses))
    .bind(join.agent_version)
    .bind(join.site_root)
    .bind(join.container)
    .bind(join.expires_at)
    .bind(join.source_network)
    .execute(connection)
    .await?;
    Ok(())
}

/// Renews a request with what the node says now (name, addresses, version may change).
pub async fn renew_join(connection: &mut PgConnection, id: Uuid, join: &NewJoin<'_>) -> Result<()> {
    sqlx::query(
        "UPDATE joins SET state = 'pending', name = $2, source_address = $3, addresses = $4,
             agent_version = $5, site_root = $6, container = $7, expires_at = $8,
             source_network = $9
         WHERE id = $1",
    )
    .bind(id)
    .bind(join.name)
    .bind(join.source_address)
    .bind(Json(join.addresses))
    .bind(join.agent_version)
    .bind(join.site_root)
    .bind(join.container)
    .bind(join.expires_at)
    .bind(join.source_network)
    .execute(connection)
    .await?;
    Ok(())
}

/// Pending requests, from one source network and in all.
pub async fn pending_counts(connection: &mut PgConnection, network: &str) -> Result<(i64, i64)> {
    Ok(sqlx::query_as(
        "SELECT count(*) FILTER (WHERE source_network = $1), count(*)
         FROM joins WHERE state = 'pending' AND expires_at > now()",
    )
    .bind(network)
    .fetch_one(connection)
    .await?)
}

pub async fn decide_join(
    connection: &mut PgConnection,
    id: Uuid,
    state: JoinRecordState,
    by: &str,
    node_id: Option<NodeId>,
) -> Result<()> {
    sqlx::query("UPDATE joins SET state = $2, decided_at = now(), decided_by = $3, node_id = $4 WHERE id = $1")
        .bind(id)
        .bind(state.as_str())
        .bind(by)
        .bind(node_id)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn reopen_join(
    connection: &mut PgConnection,
    id: Uuid,
    expires_at: DateTime<Utc>,
) -> Result<()> {
    sqlx::query("UPDATE joins SET state = 'pending', decided_at = NULL, decided_by = NULL, expires_at = $2 WHERE id = $1")
        .bind(id)
        .bind(expires_at)
        .execute(connection)
        .await?;
    Ok(())
}

/// Marks unrenewed requests expired and retires keys rejected longer ago than they may be
/// reopened; returns counts.
pub async fn sweep_joins(connection: &mut PgConnection) -> Result<(u64, u64)> {
    let expired = sqlx::query(
        "UPDATE joins SET state = 'expired' WHERE state = 'pending' AND expires_at <= now()",
    )
    .execute(&mut *connection)
    .await?
    .rows_affected();
    let retired = sqlx::query(
        "UPDATE joins SET state = 'retired'
         WHERE state = 'rejected' AND decided_at <= now() - make_interval(secs => $1)",
    )
    .bind(REJECTED_REOPENABLE_FOR.as_secs_f64())
    .execute(connection)
    .await?
    .rows_affected();
    Ok((expired, retired))
}

/// Records a nonce of a key at `now`; false when the key used it within `window` before (a
/// replay). `now` is the agent channel's clock, the one the signature's skew was judged by.
pub async fn record_nonce(
    connection: &mut PgConnection,
    fingerprint: &str,
    nonce: &str,
    now: DateTime<Utc>,
    window: Duration,
) -> Result<bool> {
    let inserted = sqlx::query(
        "INSERT INTO nonces (fingerprint, nonce, seen_at) VALUES ($1, $2, $3)
         ON CONFLICT (fingerprint, nonce) DO UPDATE SET seen_at = $3
             WHERE nonces.seen_at < $3 - make_interval(secs => $4)",
    )
    .bind(fingerprint)
    .bind(nonce)
    .bind(now)
    .bind(window.as_secs_f64())
    .execute(connection)
    .await?
    .rows_affected();
    Ok(inserted == 1)
}

/// Forgets nonces seen more than `window` before `now`.
pub async fn prune_nonces(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    window: Duration,
) -> Result<u64> {
    Ok(
        sqlx::query("DELETE FROM nonces WHERE seen_at < $1 - make_interval(secs => $2)")
            .bind(now)
            .bind(window.as_secs_f64())
            .execute(connection)
            .await?
            .rows_affected(),
    )
}

/// A node with what its claim needs to know at a glance: whether a job waits for it and
/// whether a running one has outlived its budget.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Glance {
    #[sqlx(flatten)]
    pub node: NodeRow,
    pub has_pending: bool,
    pub has_running: bool,
    pub has_stale: bool,
}

/// One read, no lock: what a claim that changes nothing needs to answer without writing.
pub async fn glance(connection: &mut PgConnection, node_id: NodeId) -> Result<Option<Glance>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {NODE_COLUMNS},
             EXISTS (SELECT 1 FROM jobs WHERE node_id = nodes.id AND state = 'pending') AS has_pending,
             EXISTS (SELECT 1 FROM jobs WHERE node_id = nodes.id AND state = 'running') AS has_running,
             EXISTS (SELECT 1 FROM jobs WHERE node_id = nodes.id AND state = 'running'
                     AND claimed_at + make_interval(secs => budget_s) < now()) AS has_stale
         FROM nodes WHERE id = $1"
    ))
    .bind(node_id)
    .fetch_optional(connection)
    .await?)
}

/// A node-signed request's read once its signature has verified ([`arrive_all`]): the node
/// holding its key with its glance, and whether its nonce was new for that key (recorded by the
/// same statement, as [`record_nonce`] does). Never taken before the signature is checked: a
/// nonce is remembered only for a request its key signed. For a claim the plane will take, a
/// fresh request also stamps the node's heartbeat when it is due (as [`heartbeat`]), so a
/// quiet claim costs no statement of its own.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Arrival {
    #[sqlx(flatten)]
    pub node: NodeRow,
    pub has_pending: bool,
    pub has_running: bool,
    pub has_stale: bool,
    pub fresh: bool,
    /// The heartbeat this statement stamped, if it did.
    pub stamped_at: Option<DateTime<Utc>>,
}

impl Arrival {
    /// The node's glance, moved out of the arrival (never a second copy of the node's row).
    pub fn into_glance(self) -> Glance {
        let mut node = self.node;
        if self.stamped_at.is_some() {
            node.last_seen_at = self.stamped_at;
        }
        Glance {
            node,
            has_pending: self.has_pending,
            has_running: self.has_running,
            has_stale: self.has_stale,
        }
    }
}

/// One node-signed request's arrival, as [`arrive_all`] takes it.
#[derive(Debug, Clone)]
pub struct Arriving {
    pub fingerprint: String,
    pub nonce: String,
    pub now: DateTime<Utc>,
    /// A claim the plane will take: stamp the heartbeat when it is due.
    pub stamp: bool,
}

/// [`arrive_all`]'s one statement: the arrivals' nonces recorded, the due heartbeats of free
/// nodes stamped, and each arrival's node with what its claim will need to know.
fn arrivals_statement() -> &'static str {
    static STATEMENT: std::sync::LazyLock<String> = std::sync::LazyLock::new(|| {
        let node_columns = NODE_COLUMNS
            .split(',')
            .map(|column| format!("n.{}", column.trim()))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "WITH asked AS (
                 SELECT * FROM unnest($1::text[], $2::text[], $3::timestamptz[], $4::bool[])
                     WITH ORDINALITY AS a(fingerprint, nonce, at, stamp, ord)
             ),
             node AS (
                 SELECT a.ord, a.nonce, a.at, a.stamp, {node_columns}
                 FROM asked a JOIN nodes n ON n.fingerprint = a.fingerprint
             ),
             recorded AS (
                 INSERT INTO nonces (fingerprint, nonce, seen_at)
                     SELECT fingerprint, nonce, at FROM node ORDER BY fingerprint, nonce
                 ON CONFLICT (fingerprint, nonce) DO UPDATE SET seen_at = EXCLUDED.seen_at
                     WHERE nonces.seen_at < EXCLUDED.seen_at - make_interval(secs => $5)
                 RETURNING fingerprint, nonce
             ),
             due AS (
                 SELECT node.id, max(node.at) AS at
                 FROM node JOIN recorded USING (fingerprint, nonce)
                 WHERE node.stamp
                   AND (node.last_seen_at IS NULL
                        OR node.last_seen_at <= node.at - make_interval(secs => $6))
                 GROUP BY node.id
             ),
             free AS (
                 SELECT nodes.id FROM nodes JOIN due USING (id)
                 WHERE nodes.last_seen_at IS NULL
                    OR nodes.last_seen_at <= due.at - make_interval(secs => $6)
                 FOR UPDATE OF nodes SKIP LOCKED
             ),
             stamped AS (
                 UPDATE nodes SET last_seen_at = due.at
                 FROM due
                 WHERE nodes.id = due.id AND nodes.id IN (SELECT id FROM free)
                 RETURNING nodes.id, nodes.last_seen_at
             )
             SELECT node.*,
                 EXISTS (SELECT 1 FROM jobs WHERE node_id = node.id AND state = 'pending') AS has_pending,
                 EXISTS (SELECT 1 FROM jobs WHERE node_id = node.id AND state = 'running') AS has_running,
                 EXISTS (SELECT 1 FROM jobs WHERE node_id = node.id AND state = 'running'
                         AND claimed_at + make_interval(secs => budget_s) < now()) AS has_stale,
                 EXISTS (SELECT 1 FROM recorded r
                         WHERE r.fingerprint = node.fingerprint AND r.nonce = node.nonce) AS fresh,
                 (SELECT s.last_seen_at FROM stamped s WHERE s.id = node.id) AS stamped_at
             FROM node"
        )
    });
    STATEMENT.as_str()
}

/// The arrivals of many node-signed requests in one statement (one commit), each as the
/// request's own statement would take it: the node holding its fingerprint with its glance,
/// its nonce recorded at its `now` unless that key used it within `window`, and for a fresh
/// one with `stamp`, the node's heartbeat stamped when it is at least `resolution` old. The
/// answer holds one entry per arrival, in their order: `None` where no node holds the key.
///
/// Every `(fingerprint, nonce)` must appear once (a nonce upsert may touch its row once per
/// statement); the caller answers a repeat within the batch as a replay
/// (`crate::arrivals`). Nonces are written in key order, so two batches that meet on the
/// same keys wait for each other rather than deadlock. A heartbeat whose node row another
/// transaction holds is not stamped here (`SKIP LOCKED`): one held node never stalls the
/// arrivals of the rest; its claim sees the heartbeat still due and stamps it in its own slot.
pub async fn arrive_all(
    connection: &mut PgConnection,
    arrivals: &[Arriving],
    window: Duration,
    resolution: Duration,
) -> Result<Vec<Option<Arrival>>> {
    #[derive(sqlx::FromRow)]
    struct Row {
        ord: i64,
        #[sqlx(flatten)]
        arrival: Arrival,
    }
    let fingerprints: Vec<&str> = arrivals.iter().map(|a| a.fingerprint.as_str()).collect();
    let nonces: Vec<&str> = arrivals.iter().map(|a| a.nonce.as_str()).collect();
    let times: Vec<DateTime<Utc>> = arrivals.iter().map(|a| a.now).collect();
    let stamps: Vec<bool> = arrivals.iter().map(|a| a.stamp).collect();
    let rows: Vec<Row> = sqlx::query_as(arrivals_statement())
        .bind(fingerprints)
        .bind(nonces)
        .bind(times)
        .bind(stamps)
        .bind(window.as_secs_f64())
        .bind(resolution.as_secs_f64())
        .fetch_all(connection)
        .await?;
    let mut answers: Vec<Option<Arrival>> = arrivals.iter().map(|_| None).collect();
    for row in rows {
        // `WITH ORDINALITY` counts from 1.
        if let Some(slot) = usize::try_from(row.ord - 1)
            .ok()
            .and_then(|index| answers.get_mut(index))
        {
            *slot = Some(row.arrival);
        }
    }
    Ok(answers)
}

/// The paired nodes stamped since the last `nodes_seen` report (less `overlap`; every paired
/// node with a stamp for the first report), and the time this report is as of, which becomes
/// the last report's time. Call it under the report's advisory lock.
pub async fn seen_since_last_report(
    connection: &mut PgConnection,
    overlap: std::time::Duration,
) -> Result<(DateTime<Utc>, Vec<capstan_events::agent_channel::NodeSeen>)> {
    let previous: Option<DateTime<Utc>> =
        sqlx::query_scalar("SELECT as_of FROM seen_reports WHERE id = 1")
            .fetch_optional(&mut *connection)
            .await?;
    let as_of: DateTime<Utc> = sqlx::query_scalar(
        "INSERT INTO seen_reports (id, as_of) VALUES (1, clock_timestamp())
         ON CONFLICT (id) DO UPDATE SET as_of = EXCLUDED.as_of
         RETURNING as_of",
    )
    .fetch_one(&mut *connection)
    .await?;
    let since = previous.map(|at| at - chrono::Duration::from_std(overlap).unwrap_or_default());
    let rows: Vec<(NodeId, DateTime<Utc>)> = sqlx::query_as(
        "SELECT id, last_seen_at FROM nodes
         WHERE public_key IS NOT NULL AND last_seen_at IS NOT NULL
           AND ($1::timestamptz IS NULL OR last_seen_at >= $1)
         ORDER BY id",
    )
    .bind(since)
    .fetch_all(&mut *connection)
    .await?;
    let seen = rows
        .into_iter()
        .map(
            |(node_id, last_seen_at)| capstan_events::agent_channel::NodeSeen {
                node_id,
                last_seen_at,
            },
        )
        .collect();
    Ok((as_of, seen))
}
