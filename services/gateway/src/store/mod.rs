//! The gateway's SQL (schema `gateway`): operators, their API tokens (kept only as SHA-256
//! digests) and the audit log of operator acts. Every value is a bound parameter.

use capstan_events::rpc::Level;
use capstan_store::{PgConnection, Store, StoreError};
use serde_json::Value;

/// Creates an operator; a taken name is [`StoreError::AlreadyExists`].
pub async fn insert_operator(
    connection: &mut PgConnection,
    name: &str,
    level: Level,
) -> Result<i64, StoreError> {
    let id = sqlx::query_scalar("INSERT INTO operators (name, level) VALUES ($1, $2) RETURNING id")
        .bind(name)
        .bind(i16::from(u8::from(level)))
        .fetch_one(&mut *connection)
        .await?;
    operator_changed(connection, id).await?;
    Ok(id)
}

/// Tells the plane operator `id` as it now is (`operator_changed`, through the outbox in the
/// caller's transaction).
pub async fn operator_changed(connection: &mut PgConnection, id: i64) -> Result<(), StoreError> {
    let (name, level, email, active): (String, i16, Option<String>, bool) = sqlx::query_as(
        "SELECT name, level, email, disabled_at IS NULL FROM operators WHERE id = $1",
    )
    .bind(id)
    .fetch_one(&mut *connection)
    .await?;
    let level = u8::try_from(level)
        .ok()
        .and_then(|level| Level::try_from(level).ok())
        .ok_or_else(|| StoreError::Database(format!("operator {name} has level {level}")))?;
    let changed = capstan_events::gateway::OperatorChanged {
        operator_id: id,
        name,
        level,
        email,
        active,
        changed_at: chrono::Utc::now(),
    };
    capstan_store::outbox::push(
        connection,
        capstan_events::Envelope::new(changed, Some(format!("operator/{id}"))),
    )
    .await
}

/// Operator `name`'s id and mail address, if there is such an operator.
pub async fn operator_contact(
    store: &Store,
    name: &str,
) -> Result<Option<(i64, Option<String>)>, StoreError> {
    Ok(
        sqlx::query_as("SELECT id, email FROM operators WHERE name = $1 AND disabled_at IS NULL")
            .bind(name)
            .fetch_optional(store.pool())
            .await?,
    )
}

/// Sets operator `name`'s mail address (`None` removes it) and tells the plane; false when
/// there is no such operator.
pub async fn set_email(store: &Store, name: &str, email: Option<&str>) -> Result<bool, StoreError> {
    let mut transaction = store.begin().await?;
    let id: Option<i64> = sqlx::query_scalar(
        "UPDATE operators SET email = $2 WHERE name = $1 AND disabled_at IS NULL RETURNING id",
    )
    .bind(name)
    .bind(email)
    .fetch_optional(&mut *transaction)
    .await?;
    let Some(id) = id else {
        return Ok(false);
    };
    operator_changed(&mut transaction, id).await?;
    transaction.commit().await?;
    Ok(true)
}

/// Records a token of `operator_id` by its digest.
pub async fn insert_token(
    connection: &mut PgConnection,
    operator_id: i64,
    token_sha256: &[u8],
    label: &str,
) -> Result<i64, StoreError> {
    let id = sqlx::query_scalar(
        "INSERT INTO api_tokens (operator_id, token_sha256, label) VALUES ($1, $2, $3) RETURNING id",
    )
    .bind(operator_id)
    .bind(token_sha256)
    .bind(label)
    .fetch_one(connection)
    .await?;
    Ok(id)
}

/// The operator (name, level) a live token belongs to: not revoked, its operator not
/// disabled. Notes the token's use, at most once a minute, so a busy client does not write on
/// every request.
pub async fn operator_by_token(
    store: &Store,
    token_sha256: &[u8],
) -> Result<Option<(String, Level)>, StoreError> {
    let found: Option<(String, i16)> = sqlx::query_as(
        "WITH found AS (
             SELECT t.id AS token_id, o.name, o.level
             FROM api_tokens t JOIN operators o ON o.id = t.operator_id
             WHERE t.token_sha256 = $1 AND t.revoked_at IS NULL AND o.disabled_at IS NULL
         ), touched AS (
             UPDATE api_tokens SET last_used_at = now()
             WHERE id = (SELECT token_id FROM found)
               AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
         )
         SELECT name, level FROM found",
    )
    .bind(token_sha256)
    .fetch_optional(store.pool())
    .await?;
    found
        .map(|(name, level)| {
            let level = u8::try_from(level)
                .ok()
                .and_then(|level| Level::try_from(level).ok())
                .ok_or_else(|| {
                    StoreError::Database(format!("operator {name} has level {level}"))
                })?;
            Ok((name, level))
        })
        .transpose()
}

/// Revokes the token with this digest; whether one was live.
pub async fn revoke_token(store: &Store, token_sha256: &[u8]) -> Result<bool, StoreError> {
    let revoked = sqlx::query(
        "UPDATE api_tokens SET revoked_at = now() WHERE token_sha256 = $1 AND revoked_at IS NULL",
    )
    .bind(token_sha256)
    .execute(store.pool())
    .await?;
    Ok(revoked.rows_affected() > 0)
}

/// One operator act, as the audit log keeps it.
#[derive(Debug, Clone, PartialEq)]
pub struct AuditEntry {
    /// The operator who acted; for a refused sign-in, the name tried (which may be no
    /// operator's); for a `capstan admin` act, `capstan admin`.
    pub operator: String,
    /// Their level; none for a name that is no operator's (kept as 0).
    pub level: Option<Level>,
    pub address: Option<String>,
    /// `approve_join`, `cancel_job`, ...
    pub action: &'static str,
    /// `join/<uuid>`, `node/17`, `job/42`.
    pub target: Option<String>,
    /// `ok`, or the error code it was answered with.
    pub outcome: String,
    pub detail: Value,
}

pub async fn insert_audit(store: &Store, entry: &AuditEntry) -> Result<(), StoreError> {
    sqlx::query(
        "INSERT INTO audit_log (operator, level, address, action, target, outcome, detail)
         VALUES ($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(&entry.operator)
    .bind(entry.level.map_or(0, |level| i16::from(u8::from(level))))
    .bind(&entry.address)
    .bind(entry.action)
    .bind(&entry.target)
    .bind(&entry.outcome)
    .bind(&entry.detail)
    .execute(store.pool())
    .await?;
    Ok(())
}

mod sessions;
pub use sessions::*;

/// A level as stored (`smallint`), checked.
fn level_of(name: &str, level: i16) -> Result<Level, StoreError> {
    u8::try_from(level)
        .ok()
        .and_then(|level| Level::try_from(level).ok())
        .ok_or_else(|| StoreError::Database(format!("operator {name} has level {level}")))
}
