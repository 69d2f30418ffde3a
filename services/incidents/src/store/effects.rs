//! Writing what the domain decided: each [`Effect`] of a pass or a claim's cases becomes its
//! row change, its timeline entries, its public event in the outbox, and — for an opening,
//! reopening or unproven fix — its one signal with a delivery per bell, mail and webhook.

use capstan_events::incidents::{
    IncidentCleared, IncidentOpened, IncidentReopened, IncidentTriaged, Severity, Triage,
};
use capstan_events::NodeId;
use capstan_events::{Envelope, Message};
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};

use super::Result;
use crate::domain::reconcile::{Change, Effect, Target};
use crate::domain::record::Actor;
use crate::domain::signals::{
    deliveries, Announce, Delivery, Quiet, Recipient, SignalReason, WebhookTarget,
};
use crate::domain::timeline::{EntryKind, TimelineEntry, SETTLED_NOTE, UNPROVEN_NOTE};
use capstan_events::Word as _;

/// Who a signal written now tells.
#[derive(Debug, Clone, Copy)]
pub struct Audience<'a> {
    pub recipients: &'a [Recipient],
    pub webhooks: &'a [WebhookTarget],
}

async fn emit<M: Message>(connection: &mut PgConnection, data: M, incident: i64) -> Result<()> {
    outbox::push(
        connection,
        Envelope::new(data, Some(format!("incident/{incident}"))),
    )
    .await
}

pub const fn entry_kind_word(kind: EntryKind) -> &'static str {
    match kind {
        EntryKind::Opened => "opened",
        EntryKind::Cleared => "cleared",
        EntryKind::Reopened => "reopened",
        EntryKind::Triage => "triage",
        EntryKind::Note => "note",
    }
}

pub fn person(actor: &Actor) -> Option<&str> {
    match actor {
        Actor::Person(name) => Some(name),
        Actor::Reconciler => None,
    }
}

/// Writes one timeline entry of incident `id`.
pub async fn entry(connection: &mut PgConnection, id: i64, entry: &TimelineEntry) -> Result<()> {
    sqlx::query(
        "INSERT INTO timeline (incident_id, at, kind, by_person, triage, note)
         VALUES ($1, $2, $3, $4, $5, $6)",
    )
    .bind(id)
    .bind(entry.at)
    .bind(entry_kind_word(entry.kind))
    .bind(person(&entry.by))
    .bind(entry.triage.map(Triage::as_str))
    .bind(entry.note.as_deref())
    .execute(&mut *connection)
    .await?;
    Ok(())
}

/// The row an existing incident's change touched: its node and source, for the event.
#[derive(sqlx::FromRow)]
struct Touched {
    node_id: NodeId,
    source: String,
}

async fn touched(
    query: sqlx::query::QueryAs<'_, sqlx::Postgres, Touched, sqlx::postgres::PgArguments>,
    connection: &mut PgConnection,
    id: i64,
) -> Result<Touched> {
    query
        .fetch_optional(&mut *connection)
        .await?
        .ok_or_else(|| StoreError::Database(format!("incident {id} vanished during a change")))
}

/// Writes `effects` at `now`; their signals tell `audience`.
pub async fn apply(
    connection: &mut PgConnection,
    effects: &[Effect],
    audience: Audience<'_>,
    now: DateTime<Utc>,
) -> Result<()> {
    for effect in effects {
        let signalled = matches!(effect.announce, Some(Announce::Signal(_)));
        let id =
            match (&effect.target, &effect.change) {
                (Target::New, Change::Open(new)) => {
                    let id: i64 = sqlx::query_scalar(
                    "INSERT INTO incidents (node_id, source, severity, status, triage, triage_at,
                        triage_by, snooze_until, title, detail, opened_at, closed_at,
                        last_seen_at, case_id, heard_open, grouped_under)
                     VALUES ($1, $2, $3, $4, 'new', $5, NULL, NULL, $6, $7, $8, $9, $10, $11,
                        $12, $13)
                     RETURNING id",
                )
                .bind(new.node_id)
                .bind(new.source.to_string())
                .bind(new.severity.as_str())
                .bind(if new.closed_at.is_some() { "closed" } else { "open" })
                .bind(now)
                .bind(&new.title)
                .bind(&new.detail)
                .bind(new.opened_at)
                .bind(new.closed_at)
                .bind(new.last_seen_at)
                .bind(new.case_id)
                .bind(new.heard_open)
                .bind(new.grouped_under)
                .fetch_one(&mut *connection)
                .await?;
                    emit(
                        connection,
                        IncidentOpened {
                            incident_id: id,
                            node_id: new.node_id,
                            source: new.source.to_string(),
                            severity: new.severity,
                            title: new.title.clone(),
                            detail: new.detail.clone(),
                            opened_at: new.opened_at,
                            signalled,
                        },
                        id,
                    )
                    .await?;
                    if let Some(at) = new.closed_at {
                        let cleared = IncidentCleared {
                            incident_id: id,
                            node_id: new.node_id,
                            source: new.source.to_string(),
                            at,
                        };
                        emit(connection, cleared, id).await?;
                    }
                    id
                }
                (Target::Existing(id), change) => {
                    change_existing(connection, *id, change, signalled).await?;
                    *id
                }
                (Target::New, other) => {
                    return Err(StoreError::Database(format!(
                        "a change other than an opening for a new incident: {other:?}"
                    )))
                }
            };
        for written in &effect.entries {
            entry(connection, id, written).await?;
        }
        if let Some(announce) = effect.announce {
            signal(connection, id, effect, announce, audience, now).await?;
        }
    }
    Ok(())
}

async fn change_existing(
    connection: &mut PgConnection,
    id: i64,
    change: &Change,
    signalled: bool,
) -> Result<()> {
    match change {
        Change::Open(_) => Err(StoreError::Database(format!(
            "an opening aimed at existing incident {id}"
        ))),
        Change::Refresh {
            last_seen_at,
            detail,
            severity,
        } => refresh(connection, id, *last_seen_at, detail, *severity).await,
        Change::Clear { at } => clear(connection, id, *at).await,
        Change::Reopen {
            at,
            detail,
            severity,
            case_id,
            grouped_under,
        } => {
            let row = touched(
                sqlx::query_as(
                    "UPDATE incidents SET status = 'open', closed_at = NULL, triage = 'new',
                        triage_at = $2, triage_by = NULL, snooze_until = NULL, last_seen_at = $2,
                        heard_open = true, detail = $3, severity = $4,
                        case_id = COALESCE($5, case_id), grouped_under = $6
                     WHERE id = $1 RETURNING node_id, source",
                )
                .bind(id)
                .bind(at)
                .bind(detail)
                .bind(severity.as_str())
                .bind(case_id)
                .bind(grouped_under),
                connection,
                id,
            )
            .await?;
            let reopened = IncidentReopened {
                incident_id: id,
                node_id: row.node_id,
                source: row.source,
                severity: *severity,
                detail: detail.clone(),
                at: *at,
                signalled,
            };
            emit(connection, reopened, id).await
        }
        Change::Settle { at } => {
            by_reconciler(connection, id, Triage::Resolved, SETTLED_NOTE, *at).await
        }
        Change::Unproven { at } => {
            by_reconciler(connection, id, Triage::New, UNPROVEN_NOTE, *at).await
        }
    }
}

/// The condition still holds: when it was last seen, its newest detail and severity.
async fn refresh(
    connection: &mut PgConnection,
    id: i64,
    last_seen_at: DateTime<Utc>,
    detail: &str,
    severity: Severity,
) -> Result<()> {
    sqlx::query("UPDATE incidents SET last_seen_at = $2, detail = $3, severity = $4 WHERE id = $1")
        .bind(id)
        .bind(last_seen_at)
        .bind(detail)
        .bind(severity.as_str())
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// The condition no longer holds: the incident closes and `incidents.cleared` is sent.
async fn clear(connection: &mut PgConnection, id: i64, at: DateTime<Utc>) -> Result<()> {
    let row = touched(
        sqlx::query_as(
            "UPDATE incidents SET status = 'closed', closed_at = $2 WHERE id = $1
             RETURNING node_id, source",
        )
        .bind(id)
        .bind(at),
        connection,
        id,
    )
    .await?;
    let cleared = IncidentCleared {
        incident_id: id,
        node_id: row.node_id,
        source: row.source,
        at,
    };
    emit(connection, cleared, id).await
}

/// The reconciler sets the triage (IN-03 settled, IN-07 unproven).
async fn by_reconciler(
    connection: &mut PgConnection,
    id: i64,
    triage: Triage,
    note: &str,
    at: DateTime<Utc>,
) -> Result<()> {
    let row = touched(
        sqlx::query_as(
            "UPDATE incidents SET triage = $2, triage_at = $3, triage_by = NULL,
                snooze_until = NULL
             WHERE id = $1 RETURNING node_id, source",
        )
        .bind(id)
        .bind(triage.as_str())
        .bind(at),
        connection,
        id,
    )
    .await?;
    let triaged = IncidentTriaged {
        incident_id: id,
        node_id: row.node_id,
        triage,
        snooze_until: None,
        by: "reconciler".to_string(),
        note: Some(note.to_string()),
        at,
    };
    emit(connection, triaged, id).await
}

pub const fn reason_word(reason: SignalReason) -> &'static str {
    match reason {
        SignalReason::Opened => "opened",
        SignalReason::Reopened => "reopened",
        SignalReason::Unproven => "unproven",
    }
}

pub const fn quiet_word(quiet: Quiet) -> &'static str {
    match quiet {
        Quiet::AlertsOff => "alerts_off",
        Quiet::Silenced => "silenced",
        Quiet::Grouped => "grouped",
    }
}

/// The one signal of an opening, reopening or unproven fix: told (a delivery per bell, mail
/// and webhook) or held back with the reason.
async fn signal(
    connection: &mut PgConnection,
    incident: i64,
    effect: &Effect,
    announce: Announce,
    audience: Audience<'_>,
    now: DateTime<Utc>,
) -> Result<()> {
    let (reason, severity, held) = match announce {
        Announce::Signal(signal) => (signal.reason, signal.severity, None),
        Announce::Held(quiet) => {
            let severity: String =
                sqlx::query_scalar("SELECT severity FROM incidents WHERE id = $1")
                    .bind(incident)
                    .fetch_one(&mut *connection)
                    .await?;
            let severity = super::severity(&severity)?;
            (reason_of(&effect.change), severity, Some(quiet_word(quiet)))
        }
    };
    let signal_id: i64 = sqlx::query_scalar(
        "INSERT INTO signals (incident_id, reason, severity, at, held)
         VALUES ($1, $2, $3, $4, $5) RETURNING id",
    )
    .bind(incident)
    .bind(reason_word(reason))
    .bind(severity.as_str())
    .bind(now)
    .bind(held)
    .fetch_one(&mut *connection)
    .await?;
    let Announce::Signal(signal) = announce else {
        return Ok(());
    };
    for delivery in deliveries(&signal, audience.recipients, audience.webhooks) {
        let (channel, target, state) = match delivery {
            // The bell is delivered by being written.
            Delivery::Bell(operator) => ("bell", operator, "delivered"),
            Delivery::Mail(operator) => ("mail", operator, "pending"),
            Delivery::Webhook(webhook) => ("webhook", webhook, "pending"),
        };
        sqlx::query(
            "INSERT INTO deliveries (signal_id, channel, target, state, attempts, created_at,
                next_attempt_at, finished_at)
             VALUES ($1, $2, $3, $4, 0, $5, $5, CASE WHEN $4 = 'delivered' THEN $5 END)",
        )
        .bind(signal_id)
        .bind(channel)
        .bind(target)
        .bind(state)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    sqlx::query("SELECT pg_notify('incidents_deliveries', '')")
        .execute(&mut *connection)
        .await?;
    Ok(())
}

/// Why a change announced itself.
fn reason_of(change: &Change) -> SignalReason {
    match change {
        Change::Reopen { .. } => SignalReason::Reopened,
        Change::Unproven { .. } => SignalReason::Unproven,
        _ => SignalReason::Opened,
    }
}
