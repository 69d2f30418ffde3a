//! What a person's acts write: a triage change and its note, a note alone, silences, webhooks,
//! mail preferences and a node's alerts setting. The checks are the domain's and the rpc's.

use capstan_events::incidents::{rpc::WebhookKind, IncidentTriaged, Severity};
use capstan_events::NodeId;
use capstan_events::{Envelope, Message};
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};

use super::effects::{entry, person};
use super::Result;
use crate::domain::grouping::Silence;
use crate::domain::record::Actor;
use crate::domain::signals::MailPreferences;
use crate::domain::sources::Alerts;
use crate::domain::timeline::{EntryKind, TimelineEntry};
use crate::domain::triage::TriageChange;
use capstan_events::Word as _;

async fn emit<M: Message>(connection: &mut PgConnection, data: M, incident: i64) -> Result<()> {
    outbox::push(
        connection,
        Envelope::new(data, Some(format!("incident/{incident}"))),
    )
    .await
}

/// Writes a person's triage change on incident `id` of `node`.
pub async fn triage(
    connection: &mut PgConnection,
    id: i64,
    node: NodeId,
    change: &TriageChange,
) -> Result<()> {
    sqlx::query(
        "UPDATE incidents SET triage = $2, snooze_until = $3, triage_at = $4, triage_by = $5
         WHERE id = $1",
    )
    .bind(id)
    .bind(change.triage.as_str())
    .bind(change.snooze_until)
    .bind(change.at)
    .bind(person(&change.by))
    .execute(&mut *connection)
    .await?;
    entry(connection, id, &change.entry).await?;
    let triaged = IncidentTriaged {
        incident_id: id,
        node_id: node,
        triage: change.triage,
        snooze_until: change.snooze_until,
        by: person(&change.by).unwrap_or("reconciler").to_string(),
        note: change.entry.note.clone(),
        at: change.at,
    };
    emit(connection, triaged, id).await
}

/// A person's note on incident `id`.
pub async fn note(
    connection: &mut PgConnection,
    id: i64,
    by: &str,
    note: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    let written = TimelineEntry {
        at,
        kind: EntryKind::Note,
        by: Actor::Person(by.to_string()),
        triage: None,
        note: Some(note.to_string()),
    };
    entry(connection, id, &written).await
}

/// The timeline of incident `id`, oldest first: `(at, kind, by, triage, note)`.
pub async fn timeline(
    connection: &mut PgConnection,
    id: i64,
) -> Result<
    Vec<(
        DateTime<Utc>,
        String,
        Option<String>,
        Option<String>,
        Option<String>,
    )>,
> {
    Ok(sqlx::query_as(
        "SELECT at, kind, by_person, triage, note FROM timeline
         WHERE incident_id = $1 ORDER BY at, id",
    )
    .bind(id)
    .fetch_all(&mut *connection)
    .await?)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct SilenceRow {
    pub id: i64,
    pub node_id: NodeId,
    pub node_name: Option<String>,
    pub by_person: String,
    pub reason: String,
    pub created_at: DateTime<Utc>,
    pub ends_at: DateTime<Utc>,
}

const SILENCE_COLUMNS: &str =
    "s.id, s.node_id, n.name AS node_name, s.by_person, s.reason, s.created_at, s.ends_at";

pub async fn create_silence(
    connection: &mut PgConnection,
    silence: &Silence,
    now: DateTime<Utc>,
) -> Result<SilenceRow> {
    let id: i64 = sqlx::query_scalar(
        "INSERT INTO silences (node_id, by_person, reason, created_at, ends_at)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(silence.node_id)
    .bind(&silence.by)
    .bind(&silence.reason)
    .bind(now)
    .bind(silence.ends_at)
    .fetch_one(&mut *connection)
    .await?;
    Ok(sqlx::query_as(&format!(
        "SELECT {SILENCE_COLUMNS} FROM silences s LEFT JOIN nodes n USING (node_id) WHERE s.id = $1"
    ))
    .bind(id)
    .fetch_one(&mut *connection)
    .await?)
}

/// Silences not deleted, the latest first (expired ones included, for the record).
pub async fn silences(connection: &mut PgConnection) -> Result<Vec<SilenceRow>> {
    Ok(sqlx::query_as(&format!(
        "SELECT {SILENCE_COLUMNS} FROM silences s LEFT JOIN nodes n USING (node_id)
         WHERE s.deleted_at IS NULL ORDER BY s.id DESC LIMIT 500"
    ))
    .fetch_all(&mut *connection)
    .await?)
}

/// Ends a silence; false when there is none by that id.
pub async fn delete_silence(
    connection: &mut PgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> Result<bool> {
    let deleted =
        sqlx::query("UPDATE silences SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL")
            .bind(id)
            .bind(now)
            .execute(&mut *connection)
            .await?;
    Ok(deleted.rows_affected() == 1)
}

#[derive(Debug, Clone, sqlx::FromRow)]
pub struct WebhookRow {
    pub id: i64,
    pub url: String,
    pub kind: String,
    pub min_severity: String,
    pub created_by: String,
    pub created_at: DateTime<Utc>,
}

pub async fn create_webhook(
    connection: &mut PgConnection,
    url: &str,
    kind: WebhookKind,
    min_severity: Severity,
    secret: &str,
    by: &str,
    now: DateTime<Utc>,
) -> Result<WebhookRow> {
    Ok(sqlx::query_as(
        "INSERT INTO webhooks (url, kind, min_severity, secret, created_by, created_at)
         VALUES ($1, $2, $3, $4, $5, $6)
         RETURNING id, url, kind, min_severity, created_by, created_at",
    )
    .bind(url)
    .bind(kind.as_str())
    .bind(min_severity.as_str())
    .bind(secret)
    .bind(by)
    .bind(now)
    .fetch_one(&mut *connection)
    .await?)
}

pub async fn webhooks(connection: &mut PgConnection) -> Result<Vec<WebhookRow>> {
    Ok(sqlx::query_as(
        "SELECT id, url, kind, min_severity, created_by, created_at FROM webhooks
         WHERE deleted_at IS NULL ORDER BY id",
    )
    .fetch_all(&mut *connection)
    .await?)
}

pub async fn delete_webhook(
    connection: &mut PgConnection,
    id: i64,
    now: DateTime<Utc>,
) -> Result<bool> {
    let deleted =
        sqlx::query("UPDATE webhooks SET deleted_at = $2 WHERE id = $1 AND deleted_at IS NULL")
            .bind(id)
            .bind(now)
            .execute(&mut *connection)
            .await?;
    Ok(deleted.rows_affected() == 1)
}

pub async fn mail_preferences(
    connection: &mut PgConnection,
    operator: i64,
) -> Result<MailPreferences> {
    let row: Option<(bool, bool)> = sqlx::query_as(
        "SELECT email_warning, email_critical FROM mail_preferences WHERE operator_id = $1",
    )
    .bind(operator)
    .fetch_optional(&mut *connection)
    .await?;
    Ok(row.map_or_else(
        MailPreferences::default,
        |(email_warning, email_critical)| MailPreferences {
            email_warning,
            email_critical,
        },
    ))
}

pub async fn set_mail_preferences(
    connection: &mut PgConnection,
    operator: i64,
    preferences: MailPreferences,
) -> Result<()> {
    sqlx::query(
        "INSERT INTO mail_preferences (operator_id, email_warning, email_critical)
         VALUES ($1, $2, $3)
         ON CONFLICT (operator_id) DO UPDATE
         SET email_warning = EXCLUDED.email_warning, email_critical = EXCLUDED.email_critical",
    )
    .bind(operator)
    .bind(preferences.email_warning)
    .bind(preferences.email_critical)
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// Sets a node's alerts; false when this service does not know the node.
pub async fn set_alerts(
    connection: &mut PgConnection,
    node: NodeId,
    alerts: Alerts,
) -> Result<bool> {
    let updated = sqlx::query("UPDATE nodes SET alerts = $2 WHERE node_id = $1")
        .bind(node)
        .bind(super::alerts_word(alerts))
        .execute(&mut *connection)
        .await?;
    Ok(updated.rows_affected() == 1)
}
