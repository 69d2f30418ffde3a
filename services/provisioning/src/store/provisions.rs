//! Provisions: each step stored with its time before the next starts (a restarted service
//! resumes without repeating a finished step), the replica running one holding a lease on it.

use capstan_events::provisioning::{AccountFlag, CloudProvider, InstallKind, ProvisionStep};
use capstan_events::{NodeId, Word as _};
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Utc};
use uuid::Uuid;

type Result<T> = std::result::Result<T, StoreError>;

/// A provision with its account's words.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct ProvisionRow {
    pub id: i64,
    pub account_id: i64,
    pub account_label: String,
    pub provider: String,
    pub flag: String,
    pub kind: String,
    pub name: String,
    pub region: String,
    pub size: String,
    pub image: String,
    pub step: String,
    pub step_since: DateTime<Utc>,
    pub failure: Option<String>,
    pub retries: i32,
    pub instance_id: Option<String>,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    pub node_id: Option<NodeId>,
    pub expected_key: Option<String>,
    pub sealed_root_password: Option<Vec<u8>>,
    pub host_key: Option<String>,
    pub install_log: String,
    pub password_retired: bool,
    pub join_id: Option<Uuid>,
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
}

fn unknown(what: &str, text: &str) -> StoreError {
    StoreError::Database(format!("{text:?} is not a {what}"))
}

impl ProvisionRow {
    pub fn step(&self) -> Result<ProvisionStep> {
        ProvisionStep::parse(&self.step).ok_or_else(|| unknown("provision step", &self.step))
    }
    pub fn kind(&self) -> Result<InstallKind> {
        InstallKind::parse(&self.kind).ok_or_else(|| unknown("install kind", &self.kind))
    }
    pub fn provider(&self) -> Result<CloudProvider> {
        CloudProvider::parse(&self.provider).ok_or_else(|| unknown("provider", &self.provider))
    }
    pub fn flag(&self) -> Result<AccountFlag> {
        AccountFlag::parse(&self.flag).ok_or_else(|| unknown("flag", &self.flag))
    }
}

const COLUMNS: &str = "p.id, p.account_id, a.label AS account_label, a.provider, a.flag, p.kind, \
     p.name, p.region, p.size, p.image, p.step, p.step_since, p.failure, p.retries, \
     p.instance_id, p.ipv4, p.ipv6, p.node_id, p.expected_key, p.sealed_root_password, \
     p.host_key, p.install_log, p.password_retired, p.join_id, p.requested_by, p.requested_at";

/// What an operator asked for.
pub struct NewProvision<'a> {
    pub account_id: i64,
    pub kind: InstallKind,
    pub name: &'a str,
    pub region: &'a str,
    pub size: &'a str,
    pub image: &'a str,
    pub requested_by: &'a str,
    pub at: DateTime<Utc>,
}

/// Saves a new provision at `requested` (with its first step row); `AlreadyExists` when a
/// provision of that name is in flight.
pub async fn insert_provision(
    connection: &mut PgConnection,
    new: &NewProvision<'_>,
) -> Result<i64> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO provisions (account_id, kind, name, region, size, image, step, step_since,
             requested_by, requested_at)
         VALUES ($1, $2, $3, $4, $5, $6, 'requested', $7, $8, $7) RETURNING id",
    )
    .bind(new.account_id)
    .bind(new.kind.as_str())
    .bind(new.name)
    .bind(new.region)
    .bind(new.size)
    .bind(new.image)
    .bind(new.at)
    .bind(new.requested_by)
    .fetch_one(&mut *connection)
    .await?;
    step_row(connection, id, ProvisionStep::Requested, new.at, None).await?;
    Ok(id)
}

async fn step_row(
    connection: &mut PgConnection,
    id: i64,
    step: ProvisionStep,
    at: DateTime<Utc>,
    detail: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO provision_steps (provision_id, step, at, detail) VALUES ($1, $2, $3, $4)",
    )
    .bind(id)
    .bind(step.as_str())
    .bind(at)
    .bind(detail)
    .execute(connection)
    .await?;
    Ok(())
}

pub async fn provision(connection: &mut PgConnection, id: i64) -> Result<Option<ProvisionRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM provisions p JOIN accounts a ON a.id = p.account_id WHERE p.id = $1"
    ))
    .bind(id)
    .fetch_optional(connection)
    .await?)
}

/// Newest first, at most `limit`, of a flag and/or in flight only.
pub async fn provisions(
    connection: &mut PgConnection,
    flag: Option<AccountFlag>,
    in_flight: bool,
    limit: i64,
) -> Result<Vec<ProvisionRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM provisions p JOIN accounts a ON a.id = p.account_id
         WHERE ($1::text IS NULL OR a.flag = $1)
           AND (NOT $2 OR p.step NOT IN ('done', 'install_failed'))
         ORDER BY p.id DESC LIMIT $3"
    ))
    .bind(flag.map(|flag| flag.as_str()))
    .bind(in_flight)
    .bind(limit)
    .fetch_all(connection)
    .await?)
}

/// The provisions whose machines may join: installing or done, with addresses.
pub async fn joinable(connection: &mut PgConnection) -> Result<Vec<ProvisionRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {COLUMNS} FROM provisions p JOIN accounts a ON a.id = p.account_id
         WHERE cardinality(p.ipv4) + cardinality(p.ipv6) > 0 ORDER BY p.id"
    ))
    .fetch_all(connection)
    .await?)
}

/// A step a provision entered, for its page.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct StepRow {
    pub step: String,
    pub at: DateTime<Utc>,
    pub detail: Option<String>,
}

pub async fn steps(connection: &mut PgConnection, id: i64) -> Result<Vec<StepRow>> {
    Ok(sqlx::query_as(
        "SELECT step, at, detail FROM provision_steps WHERE provision_id = $1 ORDER BY at, step",
    )
    .bind(id)
    .fetch_all(connection)
    .await?)
}

/// The provisions in flight whose lease is free at `now` (none held, or lapsed).
pub async fn due(connection: &mut PgConnection, now: DateTime<Utc>) -> Result<Vec<i64>> {
    Ok(sqlx::query_scalar(
        "SELECT id FROM provisions WHERE step NOT IN ('done', 'install_failed')
           AND (lease_until IS NULL OR lease_until < $1)
           AND (retry_at IS NULL OR retry_at <= $1) ORDER BY id",
    )
    .bind(now)
    .fetch_all(connection)
    .await?)
}

/// Takes (or renews) the lease on a provision for `holder` until `until`; false when another
/// holds it unexpired or the provision is no longer in flight.
pub async fn lease(
    connection: &mut PgConnection,
    id: i64,
    holder: &str,
    now: DateTime<Utc>,
    until: DateTime<Utc>,
) -> Result<bool> {
    let taken = sqlx::query(
        "UPDATE provisions SET lease_holder = $2, lease_until = $4
         WHERE id = $1 AND step NOT IN ('done', 'install_failed')
           AND (lease_holder = $2 OR lease_until IS NULL OR lease_until < $3)",
    )
    .bind(id)
    .bind(holder)
    .bind(now)
    .bind(until)
    .execute(connection)
    .await?;
    Ok(taken.rows_affected() == 1)
}

pub async fn release(connection: &mut PgConnection, id: i64, holder: &str) -> Result<()> {
    sqlx::query(
        "UPDATE provisions SET lease_holder = NULL, lease_until = NULL
         WHERE id = $1 AND lease_holder = $2",
    )
    .bind(id)
    .bind(holder)
    .execute(connection)
    .await?;
    Ok(())
}

/// Moves a provision to `step` at `at` (with its step row); `failure` for `install_failed`.
pub async fn set_step(
    connection: &mut PgConnection,
    id: i64,
    step: ProvisionStep,
    at: DateTime<Utc>,
    detail: Option<&str>,
    failure: Option<&str>,
) -> Result<()> {
    sqlx::query(
        "UPDATE provisions SET step = $2, step_since = $3, failure = $4, retry_at = NULL WHERE id = $1",
    )
        .bind(id)
        .bind(step.as_str())
        .bind(at)
        .bind(failure)
        .execute(&mut *connection)
        .await?;
    step_row(connection, id, step, at, detail.or(failure)).await
}

/// Retry (PV-02): back to `requested`, one more retry counted.
pub async fn retried(
    connection: &mut PgConnection,
    id: i64,
    at: DateTime<Utc>,
    by: &str,
) -> Result<()> {
    sqlx::query(
        "UPDATE provisions SET step = 'requested', step_since = $2, failure = NULL,
             retries = retries + 1, lease_holder = NULL, lease_until = NULL, retry_at = NULL
             WHERE id = $1",
    )
    .bind(id)
    .bind(at)
    .execute(&mut *connection)
    .await?;
    step_row(
        connection,
        id,
        ProvisionStep::Requested,
        at,
        Some(&format!("retried by {by}")),
    )
    .await
}

pub async fn set_password(
    connection: &mut PgConnection,
    id: i64,
    sealed: Option<&[u8]>,
) -> Result<()> {
    sqlx::query("UPDATE provisions SET sealed_root_password = $2 WHERE id = $1")
        .bind(id)
        .bind(sealed)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn set_instance(connection: &mut PgConnection, id: i64, instance: &str) -> Result<()> {
    sqlx::query("UPDATE provisions SET instance_id = $2 WHERE id = $1")
        .bind(id)
        .bind(instance)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn set_addresses(
    connection: &mut PgConnection,
    id: i64,
    ipv4: &[String],
    ipv6: &[String],
) -> Result<()> {
    sqlx::query("UPDATE provisions SET ipv4 = $2, ipv6 = $3 WHERE id = $1")
        .bind(id)
        .bind(ipv4)
        .bind(ipv6)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn set_node(connection: &mut PgConnection, id: i64, node: NodeId) -> Result<()> {
    sqlx::query("UPDATE provisions SET node_id = $2 WHERE id = $1")
        .bind(id)
        .bind(node)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn set_host_key(connection: &mut PgConnection, id: i64, host_key: &str) -> Result<()> {
    sqlx::query("UPDATE provisions SET host_key = $2 WHERE id = $1 AND host_key IS NULL")
        .bind(id)
        .bind(host_key)
        .execute(connection)
        .await?;
    Ok(())
}

/// The install's masked output so far (replaced whole: the page shows the latest run's).
pub async fn set_install_log(connection: &mut PgConnection, id: i64, log: &str) -> Result<()> {
    sqlx::query("UPDATE provisions SET install_log = $2 WHERE id = $1")
        .bind(id)
        .bind(log)
        .execute(connection)
        .await?;
    Ok(())
}

pub async fn set_expected_key(connection: &mut PgConnection, id: i64, key: &str) -> Result<()> {
    sqlx::query("UPDATE provisions SET expected_key = $2 WHERE id = $1")
        .bind(id)
        .bind(key)
        .execute(connection)
        .await?;
    Ok(())
}

/// The root password was retired and proven refused (PV-06): its sealed copy is dropped.
pub async fn password_retired(connection: &mut PgConnection, id: i64) -> Result<()> {
    sqlx::query(
        "UPDATE provisions SET password_retired = true, sealed_root_password = NULL WHERE id = $1",
    )
    .bind(id)
    .execute(connection)
    .await?;
    Ok(())
}

/// The join its agent was admitted with.
pub async fn set_join(connection: &mut PgConnection, id: i64, join: Uuid) -> Result<()> {
    sqlx::query("UPDATE provisions SET join_id = $2 WHERE id = $1")
        .bind(id)
        .bind(join)
        .execute(connection)
        .await?;
    Ok(())
}

/// A step that stopped short for a reason that may pass is looked at again from `at`.
pub async fn later(connection: &mut PgConnection, id: i64, at: DateTime<Utc>) -> Result<()> {
    sqlx::query("UPDATE provisions SET retry_at = $2 WHERE id = $1")
        .bind(id)
        .bind(at)
        .execute(connection)
        .await?;
    Ok(())
}
