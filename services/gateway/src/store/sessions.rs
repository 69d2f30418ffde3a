//! The SQL of the operator UI: passwords, browser sessions, sign-in failures, an operator's own
//! tokens and the audit log's pages. Every value is a bound parameter; a session is found by
//! the SHA-256 digest of its cookie, never by the cookie itself.

use capstan_events::rpc::Level;
use capstan_store::{PgConnection, Store, StoreError};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::time::Duration;

use super::level_of;

/// What sign-in needs of an operator: a live (not disabled) operator by name.
#[derive(Clone)]
pub struct SignInRecord {
    pub id: i64,
    pub name: String,
    pub level: Level,
    /// `None` for an operator who has only ever had tokens.
    pub password_hash: Option<String>,
    pub must_change_password: bool,
}

impl std::fmt::Debug for SignInRecord {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SignInRecord")
            .field("id", &self.id)
            .field("name", &self.name)
            .field("level", &self.level)
            .field("must_change_password", &self.must_change_password)
            .finish_non_exhaustive()
    }
}

pub async fn operator_for_sign_in(
    store: &Store,
    name: &str,
) -> Result<Option<SignInRecord>, StoreError> {
    let found: Option<(i64, String, i16, Option<String>, bool)> = sqlx::query_as(
        "SELECT id, name, level, password_hash, must_change_password FROM operators
         WHERE name = $1 AND disabled_at IS NULL",
    )
    .bind(name)
    .fetch_optional(store.pool())
    .await?;
    found
        .map(|(id, name, level, password_hash, must_change_password)| {
            Ok(SignInRecord {
                level: level_of(&name, level)?,
                id,
                name,
                password_hash,
                must_change_password,
            })
        })
        .transpose()
}

/// The password hash of operator `operator_id`, for checking the current password.
pub async fn password_hash_of(
    store: &Store,
    operator_id: i64,
) -> Result<Option<String>, StoreError> {
    let found: Option<Option<String>> =
        sqlx::query_scalar("SELECT password_hash FROM operators WHERE id = $1")
            .bind(operator_id)
            .fetch_optional(store.pool())
            .await?;
    Ok(found.flatten())
}

/// Sets the password of operator `name`; whether it exists.
pub async fn set_password(
    store: &Store,
    name: &str,
    password_hash: &str,
    must_change_password: bool,
) -> Result<bool, StoreError> {
    let updated = sqlx::query(
        "UPDATE operators SET password_hash = $2, must_change_password = $3 WHERE name = $1",
    )
    .bind(name)
    .bind(password_hash)
    .bind(must_change_password)
    .execute(store.pool())
    .await?;
    Ok(updated.rows_affected() > 0)
}

/// Gives operator `name` a new password that must be changed at the next sign-in and ends
/// every session of theirs (`capstan admin reset-password`); whether the operator exists.
pub async fn reset_password(
    store: &Store,
    name: &str,
    password_hash: &str,
) -> Result<bool, StoreError> {
    let mut transaction = store.begin().await?;
    let id: Option<i64> = sqlx::query_scalar(
        "UPDATE operators SET password_hash = $2, must_change_password = true WHERE name = $1
         RETURNING id",
    )
    .bind(name)
    .bind(password_hash)
    .fetch_optional(&mut *transaction)
    .await?;
    let Some(id) = id else {
        return Ok(false);
    };
    sqlx::query("DELETE FROM sessions WHERE operator_id = $1")
        .bind(id)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(true)
}

/// Sets operator `operator_id`'s own new password and ends every other session of theirs.
pub async fn change_password(
    store: &Store,
    operator_id: i64,
    password_hash: &str,
    keep_session_id: i64,
) -> Result<(), StoreError> {
    let mut transaction = store.begin().await?;
    sqlx::query(
        "UPDATE operators SET password_hash = $2, must_change_password = false WHERE id = $1",
    )
    .bind(operator_id)
    .bind(password_hash)
    .execute(&mut *transaction)
    .await?;
    sqlx::query("DELETE FROM sessions WHERE operator_id = $1 AND id <> $2")
        .bind(operator_id)
        .bind(keep_session_id)
        .execute(&mut *transaction)
        .await?;
    transaction.commit().await?;
    Ok(())
}

/// The database's clock, the newest failures (at most `limit_*`) of `name` from `address` and
/// of `address` within `window`, and how many failures `name` had from anywhere in it.
pub struct RecentFailures {
    pub now: DateTime<Utc>,
    pub pair: Vec<DateTime<Utc>>,
    pub address: Vec<DateTime<Utc>>,
    pub name: i64,
}

/// A sign-in attempt counted before its password is checked: the transaction that counted it
/// holds `address`'s lock until [`SignInCount::commit`], so attempts from one address are
/// counted one at a time and none can slip past the count while another is being checked.
pub struct SignInCount {
    transaction: capstan_store::Transaction<'static, capstan_store::Postgres>,
    pub recent: RecentFailures,
}

/// Locks `address`'s sign-in count (for the transaction) and reads it with `name`'s. The
/// clock is read after the lock (`clock_timestamp()`, not the transaction's start, `now()`),
/// and a counted attempt is stamped the same way: an attempt that committed while this one
/// waited for the lock is never "in the future" of this one's count.
pub async fn count_sign_in(
    store: &Store,
    name: &str,
    address: &str,
    window: Duration,
    limit_pair: u32,
    limit_address: u32,
) -> Result<SignInCount, StoreError> {
    let mut transaction = store.begin().await?;
    sqlx::query("SELECT pg_advisory_xact_lock(hashtext('capstan-sign-in'), hashtext($1))")
        .bind(address)
        .execute(&mut *transaction)
        .await?;
    type Counts = (DateTime<Utc>, Vec<DateTime<Utc>>, Vec<DateTime<Utc>>, i64);
    let (now, pair, address, name): Counts = sqlx::query_as(
        "WITH clock AS (SELECT clock_timestamp() AS now)
         SELECT clock.now,
                ARRAY(SELECT at FROM sign_in_failures
                      WHERE name = $1 AND address = $2 AND at > clock.now - make_interval(secs => $3)
                      ORDER BY at DESC LIMIT $4),
                ARRAY(SELECT at FROM sign_in_failures
                      WHERE address = $2 AND at > clock.now - make_interval(secs => $3)
                      ORDER BY at DESC LIMIT $5),
                (SELECT count(*) FROM sign_in_failures
                 WHERE name = $1 AND at > clock.now - make_interval(secs => $3))
         FROM clock",
    )
    .bind(name)
    .bind(address)
    .bind(window.as_secs_f64())
    .bind(i64::from(limit_pair))
    .bind(i64::from(limit_address))
    .fetch_one(&mut *transaction)
    .await?;
    Ok(SignInCount {
        transaction,
        recent: RecentFailures {
            now,
            pair,
            address,
            name,
        },
    })
}

impl SignInCount {
    /// Counts this attempt as a failure now, before its password is checked (a success takes
    /// it back with [`forget_sign_in_failure`]); forgets failures older than a day on the way
    /// (the window is shorter). Returns the row's id.
    pub async fn count_failure(mut self, name: &str, address: &str) -> Result<i64, StoreError> {
        let id = sqlx::query_scalar(
            "WITH pruned AS (DELETE FROM sign_in_failures WHERE at < now() - interval '1 day')
             INSERT INTO sign_in_failures (at, name, address) VALUES (clock_timestamp(), $1, $2)
             RETURNING id",
        )
        .bind(name)
        .bind(address)
        .fetch_one(&mut *self.transaction)
        .await?;
        self.transaction.commit().await?;
        Ok(id)
    }
}

/// Takes back the failure counted for an attempt that turned out right (or was never checked).
pub async fn forget_sign_in_failure(store: &Store, id: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sign_in_failures WHERE id = $1")
        .bind(id)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// A successful sign-in clears the failures of its name from its own address; failures from
/// other addresses stay (an operator signing in never resets a stranger's count).
pub async fn clear_sign_in_failures(
    store: &Store,
    name: &str,
    address: &str,
) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sign_in_failures WHERE name = $1 AND address = $2")
        .bind(name)
        .bind(address)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// Starts a session; sessions past their time are swept out on the way.
pub async fn insert_session(
    store: &Store,
    operator_id: i64,
    session_sha256: &[u8],
    csrf_token: &str,
    address: Option<&str>,
    idle: Duration,
    lifetime: Duration,
) -> Result<i64, StoreError> {
    let id = sqlx::query_scalar(
        "WITH swept AS (
             DELETE FROM sessions
             WHERE last_seen_at < now() - make_interval(secs => $5)
                OR created_at < now() - make_interval(secs => $6)
         )
         INSERT INTO sessions (operator_id, session_sha256, csrf_token, address)
         VALUES ($1, $2, $3, $4) RETURNING id",
    )
    .bind(operator_id)
    .bind(session_sha256)
    .bind(csrf_token)
    .bind(address)
    .bind(idle.as_secs_f64())
    .bind(lifetime.as_secs_f64())
    .fetch_one(store.pool())
    .await?;
    Ok(id)
}

/// A live session and its operator.
#[derive(Clone)]
pub struct SessionRecord {
    pub session_id: i64,
    pub operator_id: i64,
    pub name: String,
    pub level: Level,
    pub must_change_password: bool,
    pub csrf_token: String,
}

impl std::fmt::Debug for SessionRecord {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("SessionRecord")
            .field("session_id", &self.session_id)
            .field("name", &self.name)
            .field("level", &self.level)
            .finish_non_exhaustive()
    }
}

/// The session with this digest, if it is within its idle timeout and its lifetime and its
/// operator is not disabled. Notes its use at most once a minute.
pub async fn session_by_digest(
    store: &Store,
    session_sha256: &[u8],
    idle: Duration,
    lifetime: Duration,
) -> Result<Option<SessionRecord>, StoreError> {
    let found: Option<(i64, i64, String, i16, bool, String)> = sqlx::query_as(
        "WITH found AS (
             SELECT s.id, s.operator_id, o.name, o.level, o.must_change_password, s.csrf_token
             FROM sessions s JOIN operators o ON o.id = s.operator_id
             WHERE s.session_sha256 = $1 AND o.disabled_at IS NULL
               AND s.last_seen_at > now() - make_interval(secs => $2)
               AND s.created_at > now() - make_interval(secs => $3)
         ), touched AS (
             UPDATE sessions SET last_seen_at = now()
             WHERE id = (SELECT id FROM found) AND last_seen_at < now() - interval '1 minute'
         )
         SELECT id, operator_id, name, level, must_change_password, csrf_token FROM found",
    )
    .bind(session_sha256)
    .bind(idle.as_secs_f64())
    .bind(lifetime.as_secs_f64())
    .fetch_optional(store.pool())
    .await?;
    found
        .map(
            |(session_id, operator_id, name, level, must_change_password, csrf_token)| {
                Ok(SessionRecord {
                    level: level_of(&name, level)?,
                    session_id,
                    operator_id,
                    name,
                    must_change_password,
                    csrf_token,
                })
            },
        )
        .transpose()
}

pub async fn delete_session(store: &Store, session_id: i64) -> Result<(), StoreError> {
    sqlx::query("DELETE FROM sessions WHERE id = $1")
        .bind(session_id)
        .execute(store.pool())
        .await?;
    Ok(())
}

/// One of an operator's API tokens, as the Account page lists it (never the token).
#[derive(Debug, Clone)]
pub struct TokenRow {
    pub id: i64,
    pub label: String,
    pub created_at: DateTime<Utc>,
    pub last_used_at: Option<DateTime<Utc>>,
    pub revoked_at: Option<DateTime<Utc>>,
}

pub async fn tokens_of(store: &Store, operator_id: i64) -> Result<Vec<TokenRow>, StoreError> {
    type Row = (
        i64,
        String,
        DateTime<Utc>,
        Option<DateTime<Utc>>,
        Option<DateTime<Utc>>,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, label, created_at, last_used_at, revoked_at FROM api_tokens
             WHERE operator_id = $1 ORDER BY revoked_at IS NOT NULL, id DESC LIMIT 500",
    )
    .bind(operator_id)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, label, created_at, last_used_at, revoked_at)| TokenRow {
                id,
                label,
                created_at,
                last_used_at,
                revoked_at,
            },
        )
        .collect())
}

/// Records a new token of `operator_id` by its digest; its id.
pub async fn add_token(
    store: &Store,
    operator_id: i64,
    token_sha256: &[u8],
    label: &str,
) -> Result<i64, StoreError> {
    let mut connection = store.pool().acquire().await?;
    super::insert_token(&mut connection, operator_id, token_sha256, label).await
}

/// Revokes token `token_id` if it belongs to `operator_id` and is live; whether it did.
pub async fn revoke_own_token(
    store: &Store,
    operator_id: i64,
    token_id: i64,
) -> Result<bool, StoreError> {
    let revoked = sqlx::query(
        "UPDATE api_tokens SET revoked_at = now()
         WHERE id = $1 AND operator_id = $2 AND revoked_at IS NULL",
    )
    .bind(token_id)
    .bind(operator_id)
    .execute(store.pool())
    .await?;
    Ok(revoked.rows_affected() > 0)
}

/// One row of the audit log, as its page shows it.
#[derive(Debug, Clone)]
pub struct AuditRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub operator: String,
    pub level: i16,
    pub address: Option<String>,
    pub action: String,
    pub target: Option<String>,
    pub outcome: String,
    pub detail: Value,
}

/// Up to `limit` rows older than `before` (the newest when `None`), newest first.
pub async fn audit_page(
    store: &Store,
    before: Option<i64>,
    limit: i64,
) -> Result<Vec<AuditRow>, StoreError> {
    type Row = (
        i64,
        DateTime<Utc>,
        String,
        i16,
        Option<String>,
        String,
        Option<String>,
        String,
        Value,
    );
    let rows: Vec<Row> = sqlx::query_as(
        "SELECT id, at, operator, level, address, action, target, outcome, detail
         FROM audit_log WHERE ($1::bigint IS NULL OR id < $1) ORDER BY id DESC LIMIT $2",
    )
    .bind(before)
    .bind(limit)
    .fetch_all(store.pool())
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(id, at, operator, level, address, action, target, outcome, detail)| AuditRow {
                id,
                at,
                operator,
                level,
                address,
                action,
                target,
                outcome,
                detail,
            },
        )
        .collect())
}

/// Deletes sessions past `idle` unused or `lifetime` old, and sign-in failures older than a
/// day (longer than any throttling window); how many of each.
pub async fn sweep_sessions_and_failures(
    connection: &mut PgConnection,
    idle: Duration,
    lifetime: Duration,
) -> Result<(u64, u64), StoreError> {
    let sessions = sqlx::query(
        "DELETE FROM sessions
         WHERE last_seen_at < now() - make_interval(secs => $1)
            OR created_at < now() - make_interval(secs => $2)",
    )
    .bind(idle.as_secs_f64())
    .bind(lifetime.as_secs_f64())
    .execute(&mut *connection)
    .await?
    .rows_affected();
    let failures = sqlx::query("DELETE FROM sign_in_failures WHERE at < now() - interval '1 day'")
        .execute(&mut *connection)
        .await?
        .rows_affected();
    Ok((sessions, failures))
}
