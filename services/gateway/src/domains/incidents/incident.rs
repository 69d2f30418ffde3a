//! An incident's page (IN-18): its state, its timeline oldest first, its evidence (what the
//! source saw, in the node's own words, escaped), the triage buttons and the snooze (4 hours,
//! 1 day, 3 days, 1 week) and a note box at level 8, and the signals sent with each delivery's
//! attempts. Setting the triage it already has records nothing (IN-19), and the page says so.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::incidents::rpc::{
    AddNote, Done, GetIncident, IncidentDetail, SignalView, TimelineView, TriageIncident, Triaged,
};
use capstan_events::NodeId;

use super::{
    act_done_words, ask, attempts, can_triage,
    list::{row, Row},
    node_label, severity_word, view_words, ACTS,
};
use crate::{
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, Ago},
        guard::{FormFields, PathId},
        render, Chrome, UiError, UiSession,
    },
};
use capstan_events::Word as _;

/// The longest note a person may write (the incidents service checks it again).
const MAX_NOTE: usize = 4000;

struct Line {
    when: Ago,
    kind: String,
    words: &'static str,
    by: String,
    triage: String,
    note: String,
}

fn line(entry: &TimelineView) -> Line {
    Line {
        when: ago(entry.at),
        words: match entry.kind.as_str() {
            "opened" => "Opened",
            "cleared" => "Cleared",
            "reopened" => "Reopened",
            "triage" => "Triage",
            "note" => "Note",
            "analysis" => "Analysis",
            _ => "Event",
        },
        kind: entry.kind.clone(),
        by: entry.by.clone(),
        triage: entry
            .triage
            .map(|triage| triage.as_str().to_string())
            .unwrap_or_default(),
        note: entry.note.clone().unwrap_or_default(),
    }
}

struct Signal {
    when: Ago,
    channel: String,
    target: String,
    state: String,
    attempts: u32,
    log: Vec<super::Attempt>,
}

fn signal(view: &SignalView) -> Signal {
    Signal {
        when: ago(view.at),
        channel: view.channel.clone(),
        target: view.target.clone(),
        state: view.state.clone(),
        attempts: view.attempts,
        log: attempts(&view.log),
    }
}

#[derive(Template)]
#[template(path = "incident.html")]
struct IncidentPage {
    chrome: Chrome,
    id: i64,
    title: String,
    detail: String,
    severity: &'static str,
    happening: bool,
    triage: String,
    view: String,
    needs_you: bool,
    snooze_until: Option<Ago>,
    node_id: NodeId,
    node: String,
    source: String,
    opened: Ago,
    closed: Option<Ago>,
    last_seen: Ago,
    folded_under: Option<i64>,
    timeline: Vec<Line>,
    signals: Vec<Signal>,
    grouped: Vec<Row>,
    can_triage: bool,
    acts: &'static [(&'static str, &'static str)],
    max_note: usize,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(id): PathId,
) -> Result<Response, UiError> {
    let request = GetIncident {
        actor: session.actor(),
        id,
    };
    let detail: IncidentDetail = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let incident = &detail.incident;
    let page = IncidentPage {
        chrome: Chrome::signed_in(
            &session,
            &headers,
            format!("Incident {}", incident.id),
            "incidents",
        ),
        id: incident.id,
        title: incident.title.clone(),
        detail: incident.detail.clone(),
        severity: severity_word(incident.severity),
        happening: incident.status == capstan_events::incidents::Status::Open,
        triage: incident.triage.as_str().to_string(),
        view: view_words(&incident.view).to_string(),
        needs_you: incident.needs_you,
        snooze_until: incident.snooze_until.map(ago),
        node_id: incident.node_id,
        node: node_label(incident.node_id, incident.node_name.as_deref()),
        source: incident.source.clone(),
        opened: ago(incident.opened_at),
        closed: incident.closed_at.map(ago),
        last_seen: ago(incident.last_seen_at),
        folded_under: incident.group_id,
        timeline: detail.timeline.iter().map(line).collect(),
        signals: detail.signals.iter().map(signal).collect(),
        grouped: detail.grouped.iter().map(row).collect(),
        can_triage: can_triage(&session),
        acts: &ACTS,
        max_note: MAX_NOTE,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// The note a form sent, trimmed; `None` when empty.
fn note_of(fields: &FormFields) -> Result<Option<String>, ApiError> {
    let note = fields.get("note").unwrap_or_default().trim();
    if note.is_empty() {
        return Ok(None);
    }
    if note.chars().count() > MAX_NOTE {
        return Err(ApiError::invalid(
            "note",
            format!("is longer than {MAX_NOTE} characters"),
        ));
    }
    Ok(Some(note.to_string()))
}

/// A triage button (IN-19): `do` with an optional note.
pub async fn triage(
    State(state): State<AppState>,
    session: UiSession,
    PathId(id): PathId,
    fields: FormFields,
) -> Response {
    let back = format!("/ui/incidents/{id}");
    let act = fields.get("do").unwrap_or_default().to_string();
    let note = match note_of(&fields) {
        Ok(note) => note,
        Err(refusal) => return acted(&back, Err(refusal)),
    };
    let request = TriageIncident {
        actor: session.actor(),
        id,
        act: act.clone(),
        note,
    };
    let answer: Result<Triaged, ApiError> = ask(&state, &request).await;
    let recorded = answer.as_ref().is_ok_and(|triaged| triaged.recorded);
    let outcome = answer.map(|triaged| {
        if triaged.recorded {
            format!("Incident {id} is {}.", act_done_words(&act))
        } else {
            format!(
                "Incident {id} already was {}; nothing was recorded.",
                act_done_words(&act)
            )
        }
    });
    let mut response = acted(&back, outcome);
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"do": act, "recorded": recorded}),
    ));
    response
}

/// The note box.
pub async fn note(
    State(state): State<AppState>,
    session: UiSession,
    PathId(id): PathId,
    fields: FormFields,
) -> Response {
    let back = format!("/ui/incidents/{id}");
    let note = match note_of(&fields) {
        Ok(Some(note)) => note,
        Ok(None) => {
            return acted(
                &back,
                Err(ApiError::invalid("note", "write something first")),
            )
        }
        Err(refusal) => return acted(&back, Err(refusal)),
    };
    let request = AddNote {
        actor: session.actor(),
        id,
        note,
    };
    let answer: Result<Done, ApiError> = ask(&state, &request).await;
    acted(
        &back,
        answer.map(|_| "Your note is on the timeline.".to_string()),
    )
}
