//! Deliveries, the durable outbox of signals: taking the ones that are due (several replicas
//! share them: `FOR UPDATE SKIP LOCKED` and a lease), recording each attempt in the delivery
//! log, and reading a signal's deliveries and an operator's bell back.

use capstan_events::NodeId;
use capstan_store::{PgConnection, StoreError};
use chrono::{DateTime, Duration, Utc};

use super::Result;
use crate::domain::delivery::{Backoff, Next};

/// A taken delivery is not taken again for this long: an attempt that never recorded its
/// outcome (the process died) is tried again after it.
pub const LEASE: Duration = Duration::seconds(60);

/// A delivery to attempt, with what it tells.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct Due {
    pub id: i64,
    pub channel: String,
    pub target: i64,
    pub attempts: i32,
    pub first_attempt_at: Option<DateTime<Utc>>,
    pub reason: String,
    pub incident_id: i64,
    pub node_id: NodeId,
    pub node_name: Option<String>,
    pub source: String,
    pub title: String,
    pub detail: String,
    pub severity: String,
    pub signal_at: DateTime<Utc>,
}

/// Takes up to `limit` deliveries due at `now`, leasing them.
pub async fn take_due(
    connection: &mut PgConnection,
    now: DateTime<Utc>,
    limit: i64,
) -> Result<Vec<Due>> {
    let due: Vec<Due> = sqlx::query_as(
        "WITH due AS (
             SELECT id FROM deliveries
             WHERE state = 'pending' AND next_attempt_at <= $1
             ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED
         ), leased AS (
             UPDATE deliveries d SET next_attempt_at = $1 + $3,
                 first_attempt_at = COALESCE(d.first_attempt_at, $1)
             FROM due WHERE d.id = due.id
             RETURNING d.id, d.channel, d.target, d.attempts, d.first_attempt_at, d.signal_id
         )
         SELECT l.id, l.channel, l.target, l.attempts, l.first_attempt_at, s.reason,
                i.id AS incident_id, i.node_id, n.name AS node_name, i.source, i.title,
                i.detail, s.severity, s.at AS signal_at
         FROM leased l JOIN signals s ON s.id = l.signal_id
         JOIN incidents i ON i.id = s.incident_id
         LEFT JOIN nodes n ON n.node_id = i.node_id
         ORDER BY l.id",
    )
    .bind(now)
    .bind(limit)
    .bind(LEASE)
    .fetch_all(&mut *connection)
    .await?;
    Ok(due)
}

/// Where a mail goes: the operator's address now, if they still have one.
pub async fn mail_address(connection: &mut PgConnection, operator: i64) -> Result<Option<String>> {
    Ok(sqlx::query_scalar(
        "SELECT email FROM operators WHERE operator_id = $1 AND active AND email IS NOT NULL",
    )
    .bind(operator)
    .fetch_optional(&mut *connection)
    .await?
    .flatten())
}

/// A webhook's URL, kind and secret, unless it was deleted.
pub async fn webhook(
    connection: &mut PgConnection,
    id: i64,
) -> Result<Option<(String, String, String)>> {
    Ok(sqlx::query_as(
        "SELECT url, kind, secret FROM webhooks WHERE id = $1 AND deleted_at IS NULL",
    )
    .bind(id)
    .fetch_optional(&mut *connection)
    .await?)
}

/// Records attempt `due` at `now`: delivered (`ok`), or failed and tried again on the schedule
/// of `backoff` (given up a day after its first attempt); `detail` is the other end's answer
/// or why it failed.
pub async fn record_attempt(
    connection: &mut PgConnection,
    due: &Due,
    (ok, detail): (bool, &str),
    backoff: &Backoff,
    now: DateTime<Utc>,
) -> Result<()> {
    let attempts = due.attempts + 1;
    sqlx::query(
        "INSERT INTO delivery_attempts (delivery_id, at, ok, detail) VALUES ($1, $2, $3, $4)",
    )
    .bind(due.id)
    .bind(now)
    .bind(ok)
    .bind(truncate(detail, 500))
    .execute(&mut *connection)
    .await?;
    let first = due.first_attempt_at.unwrap_or(now);
    let (state, next, finished) = if ok {
        ("delivered", now, Some(now))
    } else {
        match backoff.after_failure(first, u32::try_from(attempts).unwrap_or(u32::MAX), now) {
            Next::RetryAt(at) => ("pending", at, None),
            Next::GiveUp => ("given_up", now, Some(now)),
        }
    };
    let updated = sqlx::query(
        "UPDATE deliveries SET state = $2, attempts = $3, next_attempt_at = $4, finished_at = $5
         WHERE id = $1 AND state = 'pending'",
    )
    .bind(due.id)
    .bind(state)
    .bind(attempts)
    .bind(next)
    .bind(finished)
    .execute(&mut *connection)
    .await?;
    if updated.rows_affected() == 0 {
        return Err(StoreError::Database(format!(
            "delivery {} was no longer pending when its attempt was recorded",
            due.id
        )));
    }
    Ok(())
}

fn truncate(text: &str, most: usize) -> &str {
    match text.char_indices().nth(most) {
        Some((index, _)) => &text[..index],
        None => text,
    }
}

/// One delivery of an incident's signal, for its page.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct DeliveryRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub channel: Option<String>,
    pub target: Option<i64>,
    pub target_name: Option<String>,
    pub state: Option<String>,
    pub attempts: Option<i32>,
    pub held: Option<String>,
}

/// Every signal of `incident` with its deliveries (a held signal appears once, without any).
pub async fn of_incident(connection: &mut PgConnection, incident: i64) -> Result<Vec<DeliveryRow>> {
    Ok(sqlx::query_as(
        "SELECT COALESCE(d.id, 0) AS id, s.at, d.channel, d.target,
                CASE d.channel WHEN 'webhook' THEN w.url ELSE o.name END AS target_name,
                d.state, d.attempts, s.held
         FROM signals s
         LEFT JOIN deliveries d ON d.signal_id = s.id
         LEFT JOIN operators o ON d.channel IN ('bell', 'mail') AND o.operator_id = d.target
         LEFT JOIN webhooks w ON d.channel = 'webhook' AND w.id = d.target
         WHERE s.incident_id = $1 ORDER BY s.id, d.id",
    )
    .bind(incident)
    .fetch_all(&mut *connection)
    .await?)
}

/// One delivery to a webhook, for the webhooks' delivery log.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookDeliveryRow {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub incident_id: i64,
    pub webhook_id: i64,
    pub url: Option<String>,
    pub state: String,
    pub attempts: i32,
}

/// The latest `limit` deliveries to webhooks, newest first.
pub async fn webhook_deliveries(
    connection: &mut PgConnection,
    limit: i64,
) -> Result<Vec<WebhookDeliveryRow>> {
    Ok(sqlx::query_as(
        "SELECT d.id, s.at, s.incident_id, d.target AS webhook_id, w.url, d.state, d.attempts
         FROM deliveries d
         JOIN signals s ON s.id = d.signal_id
         LEFT JOIN webhooks w ON w.id = d.target
         WHERE d.channel = 'webhook'
         ORDER BY d.id DESC LIMIT $1",
    )
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}

/// The delivery log of `deliveries`: `(delivery, at, ok, detail)`, oldest first.
pub async fn attempts(
    connection: &mut PgConnection,
    deliveries: &[i64],
) -> Result<Vec<(i64, DateTime<Utc>, bool, String)>> {
    Ok(sqlx::query_as(
        "SELECT delivery_id, at, ok, detail FROM delivery_attempts
         WHERE delivery_id = ANY($1) ORDER BY id",
    )
    .bind(deliveries)
    .fetch_all(&mut *connection)
    .await?)
}

/// An operator's bell, newest first.
#[derive(Debug, Clone, sqlx::FromRow)]
pub struct BellRow {
    pub at: DateTime<Utc>,
    pub incident_id: i64,
    pub node_id: NodeId,
    pub node_name: Option<String>,
    pub title: String,
    pub severity: String,
    pub reason: String,
}

pub async fn bell(
    connection: &mut PgConnection,
    operator: i64,
    limit: i64,
) -> Result<Vec<BellRow>> {
    Ok(sqlx::query_as(
        "SELECT s.at, i.id AS incident_id, i.node_id, n.name AS node_name, i.title,
                s.severity, s.reason
         FROM deliveries d JOIN signals s ON s.id = d.signal_id
         JOIN incidents i ON i.id = s.incident_id
         LEFT JOIN nodes n ON n.node_id = i.node_id
         WHERE d.channel = 'bell' AND d.target = $1
         ORDER BY d.id DESC LIMIT $2",
    )
    .bind(operator)
    .bind(limit)
    .fetch_all(&mut *connection)
    .await?)
}
