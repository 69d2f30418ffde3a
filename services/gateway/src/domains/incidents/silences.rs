//! Silences (level 8): a maintenance window on a node (and, on a Docker host, its containers),
//! with who, why and an end time, during which its incidents open and clear but tell nobody.
//! Created with the node, the end time (UTC) and the reason; ended early with a button.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
};
use capstan_events::incidents::rpc::{
    CreateSilence, DeleteRequest, Done, ListRequest, SilenceView,
};
use capstan_events::NodeId;
use chrono::{DateTime, Duration, NaiveDateTime, Utc};

use super::{ask, node_label};
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

/// The longest reason a silence carries.
const MAX_REASON: usize = 500;

/// The format of `<input type="datetime-local">`, read as UTC.
const LOCAL_FORMAT: &str = "%Y-%m-%dT%H:%M";

struct Line {
    id: i64,
    node_id: NodeId,
    node: String,
    by: String,
    reason: String,
    created: Ago,
    ends: String,
    active: bool,
}

fn line(silence: &SilenceView) -> Line {
    Line {
        id: silence.id,
        node_id: silence.node_id,
        node: node_label(silence.node_id, silence.node_name.as_deref()),
        by: silence.by.clone(),
        reason: silence.reason.clone(),
        created: ago(silence.created_at),
        ends: silence.ends_at.format("%Y-%m-%d %H:%M UTC").to_string(),
        active: silence.active,
    }
}

#[derive(Template)]
#[template(path = "incidents_silences.html")]
struct SilencesPage {
    chrome: Chrome,
    silences: Vec<Line>,
    problem: Option<String>,
    node_id: String,
    ends_at: String,
    max_reason: usize,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let node_id = url::form_urlencoded::parse(uri.query().unwrap_or_default().as_bytes())
        .find(|(key, _)| key == "node_id")
        .and_then(|(_, value)| value.parse::<NodeId>().ok())
        .filter(|id| id.get() > 0)
        .map(|id| id.to_string())
        .unwrap_or_default();
    let (silences, problem) = match ask(
        &state,
        &capstan_events::incidents::rpc::ListSilences(ListRequest {
            actor: session.actor(),
        }),
    )
    .await
    {
        Ok(listed) => (listed.silences.iter().map(line).collect(), None),
        Err(refusal) => (Vec::new(), Some(crate::ui::refusal_sentence(&refusal))),
    };
    let page = SilencesPage {
        chrome: Chrome::signed_in(&session, &headers, "Silences", "silences"),
        silences,
        problem,
        node_id,
        ends_at: (Utc::now() + Duration::hours(4))
            .format(LOCAL_FORMAT)
            .to_string(),
        max_reason: MAX_REASON,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// `ends_at` as the form sends it (`2026-12-02T14:30`, or with seconds), read as UTC.
fn ends_at(raw: &str) -> Result<DateTime<Utc>, ApiError> {
    let raw = raw.trim();
    NaiveDateTime::parse_from_str(raw, LOCAL_FORMAT)
        .or_else(|_| NaiveDateTime::parse_from_str(raw, "%Y-%m-%dT%H:%M:%S"))
        .map(|naive| naive.and_utc())
        .map_err(|_| ApiError::invalid("ends_at", "give the end as a date and time (UTC)"))
}

/// The silence a form asks for, checked before anything is asked.
fn read(fields: &FormFields) -> Result<(NodeId, DateTime<Utc>, String), ApiError> {
    let node_id = match fields
        .get("node_id")
        .unwrap_or_default()
        .trim()
        .parse::<NodeId>()
    {
        Ok(id) if id.get() > 0 => id,
        _ => {
            return Err(ApiError::invalid(
                "node_id",
                "give the node's number (it is on the node's page)",
            ))
        }
    };
    let ends = ends_at(fields.get("ends_at").unwrap_or_default())?;
    let reason = fields.get("reason").unwrap_or_default().trim().to_string();
    if reason.is_empty() || reason.chars().count() > MAX_REASON {
        return Err(ApiError::invalid(
            "reason",
            format!("say why in 1 to {MAX_REASON} characters"),
        ));
    }
    Ok((node_id, ends, reason))
}

pub async fn create(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let (node_id, ends_at, reason) = match read(&fields) {
        Ok(read) => read,
        Err(refusal) => return acted("/ui/silences", Err(refusal)),
    };
    let request = CreateSilence {
        actor: session.actor(),
        node_id,
        ends_at,
        reason,
    };
    let answer: Result<SilenceView, ApiError> = ask(&state, &request).await;
    let detail = answer.as_ref().ok().map(|silence| silence.id);
    let mut response = acted(
        "/ui/silences",
        answer.map(|silence| {
            format!(
                "{} is silenced until {}.",
                node_label(silence.node_id, silence.node_name.as_deref()),
                silence.ends_at.format("%Y-%m-%d %H:%M UTC")
            )
        }),
    );
    response.extensions_mut().insert(AuditDetail(
        serde_json::json!({"node_id": node_id, "ends_at": ends_at, "silence_id": detail}),
    ));
    response
}

pub async fn end(
    State(state): State<AppState>,
    session: UiSession,
    PathId(id): PathId,
) -> Response {
    let request = DeleteRequest {
        actor: session.actor(),
        id,
    };
    let answer: Result<Done, ApiError> = ask(
        &state,
        &capstan_events::incidents::rpc::DeleteSilence(request),
    )
    .await;
    acted(
        "/ui/silences",
        answer.map(|_| format!("Silence {id} has ended.")),
    )
}

#[cfg(test)]
mod tests {
    use super::super::fields;
    use super::*;

    #[test]
    fn a_silence_form_is_read_as_utc_and_bad_input_names_its_field() {
        let (node, ends, reason) = read(&fields(&[
            ("node_id", "7"),
            ("ends_at", "2026-12-02T14:30"),
            ("reason", " kernel update "),
        ]))
        .unwrap();
        assert_eq!(node, NodeId(7));
        assert_eq!(ends.to_rfc3339(), "2026-12-02T14:30:00+00:00");
        assert_eq!(reason, "kernel update");
        for (list, field) in [
            (
                vec![
                    ("node_id", "x"),
                    ("ends_at", "2026-12-02T14:30"),
                    ("reason", "r"),
                ],
                "node_id",
            ),
            (
                vec![("node_id", "7"), ("ends_at", "tomorrow"), ("reason", "r")],
                "ends_at",
            ),
            (
                vec![
                    ("node_id", "7"),
                    ("ends_at", "2026-12-02T14:30"),
                    ("reason", " "),
                ],
                "reason",
            ),
        ] {
            let refusal = read(&fields(&list)).unwrap_err();
            assert!(refusal.message.starts_with(field), "{}", refusal.message);
        }
    }
}
