//! The questions the gateway asks (`capstan.rpc.incidents.*`). Each checks the actor's level
//! first (ARCHITECTURE.md 6.2-3: reads 7, triage and silences 8, webhooks 10), reads or
//! changes through the store, and answers in the contract's words. What a page shows is
//! derived at the time of the answer; a read never writes (IN-02).

use capstan_events::NodeId;
use std::collections::HashMap;

use capstan_bus::RpcServer;
use capstan_events::incidents::rpc::{
    AddNote, AttemptView, Bell, BellItem, BellRequest, CreateSilence, CreateWebhook, DeleteSilence,
    DeleteWebhook, Done, GetIncident, GetNotifications, Header, HeaderRequest, IncidentDetail,
    IncidentView, Incidents, ListIncidents, ListSilences, ListWebhooks,
    MailPreferences as MailView, SetAlerts, SetNotifications, SignalView, SilenceView, Silences,
    TimelineView, TriageIncident, Triaged, WebhookCreated, WebhookDeliveries,
    WebhookDeliveriesRequest, WebhookDelivery, WebhookView, Webhooks,
};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::Store;
use chrono::{DateTime, Utc};
use sqlx::{pool::PoolConnection, Postgres};

use crate::consumers::share_writes;
use crate::domain::grouping::Silence;
use crate::domain::header::{header_line, Colour};
use crate::domain::record::{view_counts, ViewFilter};
use crate::domain::signals::MailPreferences;
use crate::domain::sources::{Alerts, SourceName};
use crate::domain::triage::{check_note, triage, TriageAct};
use crate::domain::webhooks::WebhookSecret;
use crate::domain::InvalidInput;
use crate::store::{self, acts, signals, StoredIncident};

/// A handler's answer: store failures go up with `?` (answered `unavailable`, logged once).
type Answer<T> = Result<T, ServiceError>;

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
    /// Where webhooks may go (`webhook_outbound`).
    pub outbound: capstan_runtime::outbound::Outbound,
}

/// Adds the incidents service's questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, list)
        .route_with_state(&state, get)
        .route_with_state(&state, triage_incident)
        .route_with_state(&state, note)
        .route_with_state(&state, header)
        .route_with_state(&state, list_silences)
        .route_with_state(&state, create_silence)
        .route_with_state(&state, delete_silence)
        .route_with_state(&state, list_webhooks)
        .route_with_state(&state, create_webhook)
        .route_with_state(&state, delete_webhook)
        .route_with_state(&state, get_notifications)
        .route_with_state(&state, set_notifications)
        .route_with_state(&state, bell)
        .route_with_state(&state, set_alerts)
        .route_with_state(&state, webhook_deliveries)
}

fn not_found(what: String) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, what).into()
}

async fn connection(state: &State) -> Answer<PoolConnection<Postgres>> {
    Ok(state.store.acquire().await?)
}

/// An incident in the API's words at `now`.
fn view(
    stored: &StoredIncident,
    names: &HashMap<NodeId, String>,
    group_id: Option<i64>,
    now: DateTime<Utc>,
) -> IncidentView {
    let incident = &stored.incident;
    IncidentView {
        id: incident.id,
        node_id: incident.node_id,
        node_name: names.get(&incident.node_id).cloned(),
        source: incident.source.to_string(),
        title: stored.title.clone(),
        detail: incident.detail.clone(),
        severity: incident.severity,
        status: incident.status,
        triage: incident.triage_at_read(now),
        view: incident.view(now).as_str().to_string(),
        needs_you: incident.needs_you(now),
        snooze_until: incident.snooze_until.filter(|until| *until > now),
        opened_at: incident.opened_at,
        closed_at: incident.closed_at,
        last_seen_at: incident.last_seen_at,
        group_id,
    }
}

async fn group_id(
    connection: &mut PoolConnection<Postgres>,
    stored: &StoredIncident,
) -> Answer<Option<i64>> {
    let Some(host) = stored.grouped_under else {
        return Ok(None);
    };
    Ok(store::host_incident(connection, host, &stored.incident.source.to_string()).await?)
}

/// The most incidents one list answers with (the counts cover them all).
pub const LIST_LIMIT: usize = 500;

pub async fn list(state: State, request: ListIncidents) -> Answer<Incidents> {
    request.actor.require(Level::Read, "listing incidents")?;
    let filter = ViewFilter::parse(request.view.as_deref()).map_err(RpcError::from)?;
    if let Some(source) = &request.source {
        SourceName::parse(source).map_err(RpcError::from)?;
    }
    let mut connection = connection(&state).await?;
    let now = Utc::now();
    let stored = store::listed(
        &mut connection,
        request.node_id,
        request.source.as_deref(),
        request.happening,
    )
    .await?;
    let names = store::node_names(&mut connection).await?;
    let all_counts = view_counts(stored.iter().map(|stored| &stored.incident), now);
    let mut incidents = Vec::new();
    for one in stored
        .iter()
        .filter(|stored| filter.matches(&stored.incident, now))
        .take(LIST_LIMIT)
    {
        let group = group_id(&mut connection, one).await?;
        incidents.push(view(one, &names, group, now));
    }
    Ok(Incidents {
        incidents,
        counts: all_counts,
    })
}

async fn found(
    connection: &mut PoolConnection<Postgres>,
    id: i64,
    lock: bool,
) -> Answer<StoredIncident> {
    store::incident(connection, id, lock)
        .await?
        .ok_or_else(|| not_found(format!("no incident {id}")))
}

async fn detail(connection: &mut PoolConnection<Postgres>, id: i64) -> Answer<IncidentDetail> {
    let now = Utc::now();
    let stored = found(connection, id, false).await?;
    let names = store::node_names(connection).await?;
    let group = group_id(connection, &stored).await?;
    let timeline = acts::timeline(connection, id)
        .await?
        .into_iter()
        .map(|(at, kind, by, triage, note)| {
            Ok(TimelineView {
                at,
                kind,
                by: by.unwrap_or_else(|| "reconciler".to_string()),
                triage: triage.as_deref().map(store::triage).transpose()?,
                note,
            })
        })
        .collect::<Answer<Vec<_>>>()?;
    let rows = signals::of_incident(connection, id).await?;
    let ids: Vec<i64> = rows.iter().map(|row| row.id).filter(|id| *id > 0).collect();
    let mut log = attempt_log(connection, &ids).await?;
    let signals = rows
        .into_iter()
        .map(|row| match (&row.channel, &row.held) {
            (Some(channel), _) => SignalView {
                at: row.at,
                channel: channel.clone(),
                target: row
                    .target_name
                    .clone()
                    .unwrap_or_else(|| format!("#{}", row.target.unwrap_or_default())),
                state: row.state.clone().unwrap_or_default(),
                attempts: u32::try_from(row.attempts.unwrap_or_default()).unwrap_or_default(),
                log: log.remove(&row.id).unwrap_or_default(),
            },
            (None, held) => SignalView {
                at: row.at,
                channel: "held".to_string(),
                target: held.clone().unwrap_or_else(|| "nobody to tell".to_string()),
                state: "held".to_string(),
                attempts: 0,
                log: Vec::new(),
            },
        })
        .collect();
    let grouped = if stored.incident.node_id.get() > 0 {
        store::grouped_under(
            connection,
            stored.incident.node_id,
            &stored.incident.source.to_string(),
        )
        .await?
        .iter()
        .map(|inner| view(inner, &names, Some(id), now))
        .collect()
    } else {
        Vec::new()
    };
    Ok(IncidentDetail {
        incident: view(&stored, &names, group, now),
        timeline,
        signals,
        grouped,
    })
}

/// The delivery log of `deliveries`, by delivery, each oldest first.
async fn attempt_log(
    connection: &mut PoolConnection<Postgres>,
    deliveries: &[i64],
) -> Answer<HashMap<i64, Vec<AttemptView>>> {
    let mut log: HashMap<i64, Vec<AttemptView>> = HashMap::new();
    for (delivery, at, ok, said) in signals::attempts(connection, deliveries).await? {
        log.entry(delivery).or_default().push(AttemptView {
            at,
            ok,
            detail: said,
        });
    }
    Ok(log)
}

pub async fn get(state: State, request: GetIncident) -> Answer<IncidentDetail> {
    request.actor.require(Level::Read, "reading an incident")?;
    let mut connection = connection(&state).await?;
    detail(&mut connection, request.id).await
}

/// IN-06, IN-19: a person's triage; setting the triage it already reads as records nothing.
pub async fn triage_incident(state: State, request: TriageIncident) -> Answer<Triaged> {
    request
        .actor
        .require(Level::Change, "triaging an incident")?;
    let act = TriageAct::parse(&request.act).map_err(RpcError::from)?;
    let now = Utc::now();
    let id = request.id;
    let by = request.actor.name.clone();
    let note = request.note.clone();
    let change = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                share_writes(transaction).await?;
                let stored = store::incident(transaction, id, true)
                    .await?
                    .ok_or_else(|| not_found(format!("no incident {id}")))?;
                let change = triage(&stored.incident, act, &by, note.as_deref(), now)
                    .map_err(RpcError::from)?;
                if let Some(change) = &change {
                    acts::triage(transaction, id, stored.incident.node_id, change).await?;
                }
                Ok::<_, ServiceError>(change)
            })
        })
        .await?;
    let mut connection = connection(&state).await?;
    let after = found(&mut connection, request.id, false).await?;
    let names = store::node_names(&mut connection).await?;
    let group = group_id(&mut connection, &after).await?;
    Ok(Triaged {
        incident: view(&after, &names, group, Utc::now()),
        recorded: change.is_some(),
    })
}

pub async fn note(state: State, request: AddNote) -> Answer<Done> {
    request
        .actor
        .require(Level::Change, "writing a note on an incident")?;
    let text = check_note("note", &request.note).map_err(RpcError::from)?;
    let id = request.id;
    let by = request.actor.name;
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                share_writes(transaction).await?;
                store::incident(transaction, id, true)
                    .await?
                    .ok_or_else(|| not_found(format!("no incident {id}")))?;
                acts::note(transaction, id, &by, &text, Utc::now()).await?;
                Ok::<_, ServiceError>(())
            })
        })
        .await?;
    Ok(Done {})
}

/// IN-16: the header line, from counts alone.
pub async fn header(state: State, request: HeaderRequest) -> Answer<Header> {
    request
        .actor
        .require(Level::Read, "reading the header line")?;
    let mut connection = connection(&state).await?;
    let stored = store::listed(&mut connection, None, None, None).await?;
    let now = Utc::now();
    let line = header_line(stored.iter().map(|stored| &stored.incident), 0, now);
    Ok(match line {
        Some(line) => Header {
            needs_you: line.needs_you,
            happening: line.happening,
            colour: Some(
                match line.colour {
                    Colour::Red => "red",
                    Colour::Amber => "amber",
                    Colour::Blue => "blue",
                }
                .to_string(),
            ),
            words: line.words(),
        },
        None => Header {
            needs_you: 0,
            happening: 0,
            colour: None,
            words: String::new(),
        },
    })
}

fn silence_view(row: acts::SilenceRow, now: DateTime<Utc>) -> SilenceView {
    SilenceView {
        id: row.id,
        node_id: row.node_id,
        node_name: row.node_name,
        by: row.by_person,
        reason: row.reason,
        created_at: row.created_at,
        active: row.ends_at > now,
        ends_at: row.ends_at,
    }
}

pub async fn list_silences(state: State, ListSilences(request): ListSilences) -> Answer<Silences> {
    request.actor.require(Level::Change, "listing silences")?;
    let mut connection = connection(&state).await?;
    let now = Utc::now();
    let rows = acts::silences(&mut connection).await?;
    Ok(Silences {
        silences: rows.into_iter().map(|row| silence_view(row, now)).collect(),
    })
}

pub async fn create_silence(state: State, request: CreateSilence) -> Answer<SilenceView> {
    request.actor.require(Level::Change, "silencing a node")?;
    let now = Utc::now();
    let silence = Silence::new(
        request.node_id,
        &request.actor.name,
        &request.reason,
        request.ends_at,
        now,
    )
    .map_err(RpcError::from)?;
    let mut connection = connection(&state).await?;
    if store::node(&mut connection, request.node_id)
        .await?
        .is_none()
    {
        return Err(not_found(format!("no node {}", request.node_id)));
    }
    let row = acts::create_silence(&mut connection, &silence, now).await?;
    Ok(silence_view(row, now))
}

pub async fn delete_silence(state: State, DeleteSilence(request): DeleteSilence) -> Answer<Done> {
    request.actor.require(Level::Change, "ending a silence")?;
    let mut connection = connection(&state).await?;
    if !acts::delete_silence(&mut connection, request.id, Utc::now()).await? {
        return Err(not_found(format!("no silence {}", request.id)));
    }
    Ok(Done {})
}

fn webhook_view(row: acts::WebhookRow) -> Answer<WebhookView> {
    Ok(WebhookView {
        id: row.id,
        url: row.url,
        kind: store::webhook_kind(&row.kind)?,
        min_severity: store::severity(&row.min_severity)?,
        created_by: row.created_by,
        created_at: row.created_at,
    })
}

pub async fn list_webhooks(state: State, ListWebhooks(request): ListWebhooks) -> Answer<Webhooks> {
    request.actor.require(Level::Admin, "listing webhooks")?;
    let mut connection = connection(&state).await?;
    let rows = acts::webhooks(&mut connection).await?;
    Ok(Webhooks {
        webhooks: rows.into_iter().map(webhook_view).collect::<Answer<_>>()?,
    })
}

/// The longest webhook URL taken.
pub const MAX_WEBHOOK_URL: usize = 2048;

pub async fn create_webhook(state: State, request: CreateWebhook) -> Answer<WebhookCreated> {
    request.actor.require(Level::Admin, "creating a webhook")?;
    if request.url.len() > MAX_WEBHOOK_URL {
        return Err(ServiceError::from(InvalidInput::new(
            "url",
            "must be at most 2048 characters",
        )));
    }
    let url = crate::drivers::webhook::check_url(&request.url, state.outbound)
        .await
        .map_err(|reason| RpcError::new(ErrorCode::InvalidRequest, reason.to_string()))?;
    let secret = WebhookSecret::from_random(rand::random());
    let mut connection = connection(&state).await?;
    let row = acts::create_webhook(
        &mut connection,
        url.as_str(),
        request.kind,
        request.min_severity,
        &secret.reveal(),
        &request.actor.name,
        Utc::now(),
    )
    .await?;
    Ok(WebhookCreated {
        webhook: webhook_view(row)?,
        secret: secret.reveal(),
    })
}

pub async fn delete_webhook(state: State, DeleteWebhook(request): DeleteWebhook) -> Answer<Done> {
    request.actor.require(Level::Admin, "deleting a webhook")?;
    let mut connection = connection(&state).await?;
    if !acts::delete_webhook(&mut connection, request.id, Utc::now()).await? {
        return Err(not_found(format!("no webhook {}", request.id)));
    }
    Ok(Done {})
}

pub async fn get_notifications(
    state: State,
    GetNotifications(request): GetNotifications,
) -> Answer<MailView> {
    request
        .actor
        .require(Level::Read, "reading mail preferences")?;
    let mut connection = connection(&state).await?;
    let preferences = acts::mail_preferences(&mut connection, request.operator_id).await?;
    Ok(MailView {
        email_warning: preferences.email_warning,
        email_critical: preferences.email_critical,
    })
}

pub async fn set_notifications(state: State, request: SetNotifications) -> Answer<MailView> {
    request
        .actor
        .require(Level::Read, "setting mail preferences")?;
    let mut connection = connection(&state).await?;
    let preferences = MailPreferences {
        email_warning: request.preferences.email_warning,
        email_critical: request.preferences.email_critical,
    };
    acts::set_mail_preferences(&mut connection, request.operator_id, preferences).await?;
    Ok(request.preferences)
}

/// The most bell items one answer holds.
pub const BELL_LIMIT: i64 = 50;

pub async fn bell(state: State, BellRequest(request): BellRequest) -> Answer<Bell> {
    request.actor.require(Level::Read, "reading the bell")?;
    let mut connection = connection(&state).await?;
    let rows = signals::bell(&mut connection, request.operator_id, BELL_LIMIT).await?;
    let items = rows
        .into_iter()
        .map(|row| {
            Ok(BellItem {
                at: row.at,
                incident_id: row.incident_id,
                node_id: row.node_id,
                node_name: row.node_name,
                title: row.title,
                severity: store::severity(&row.severity)?,
                reason: row.reason,
            })
        })
        .collect::<Answer<_>>()?;
    Ok(Bell { items })
}

pub async fn set_alerts(state: State, request: SetAlerts) -> Answer<Done> {
    request
        .actor
        .require(Level::Change, "setting a node's alerts")?;
    let alerts = match request.alerts.as_str() {
        "automatic" => Alerts::Automatic,
        "on" => Alerts::On,
        "off" => Alerts::Off,
        _ => {
            return Err(ServiceError::from(InvalidInput::new(
                "alerts",
                "must be automatic, on or off",
            )))
        }
    };
    let mut connection = connection(&state).await?;
    if !acts::set_alerts(&mut connection, request.node_id, alerts).await? {
        return Err(not_found(format!("no node {}", request.node_id)));
    }
    Ok(Done {})
}

/// The most deliveries one delivery log answers with.
pub const DELIVERY_LOG_LIMIT: u32 = 100;

/// The webhooks' delivery log: the latest deliveries, each with its attempts (level 10).
pub async fn webhook_deliveries(
    state: State,
    request: WebhookDeliveriesRequest,
) -> Answer<WebhookDeliveries> {
    request
        .actor
        .require(Level::Admin, "reading the webhooks' delivery log")?;
    let mut connection = connection(&state).await?;
    let rows = signals::webhook_deliveries(
        &mut connection,
        i64::from(request.limit.clamp(1, DELIVERY_LOG_LIMIT)),
    )
    .await?;
    let ids: Vec<i64> = rows.iter().map(|row| row.id).collect();
    let mut log = attempt_log(&mut connection, &ids).await?;
    Ok(WebhookDeliveries {
        deliveries: rows
            .into_iter()
            .map(|row| WebhookDelivery {
                id: row.id,
                at: row.at,
                incident_id: row.incident_id,
                webhook_id: row.webhook_id,
                url: row.url,
                state: row.state,
                attempts: u32::try_from(row.attempts).unwrap_or_default(),
                log: log.remove(&row.id).unwrap_or_default(),
            })
            .collect(),
    })
}
