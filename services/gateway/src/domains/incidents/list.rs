//! The Incidents page (IN-17): a view per triage (Needs you, the default, then New, Snoozed,
//! Waiting for proof, Resolved, Ignored, All, each with its count), filters by node, type and
//! still happening, and a dropdown to triage the selected rows at once (level 8).

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
};
use capstan_events::incidents::rpc::{
    IncidentView, Incidents, ListIncidents, TriageIncident, ViewCounts,
};
use capstan_events::NodeId;
use std::collections::BTreeMap;

use super::{act_done_words, ask, can_triage, node_label, severity_word, view_words, ACTS};
use crate::{
    error::ApiError,
    identity::AuditDetail,
    state::AppState,
    ui::{
        acted,
        format::{ago, Ago},
        guard::FormFields,
        render, Chrome, UiError, UiSession,
    },
};

/// The views, in the order the page offers them.
pub const VIEWS: [&str; 7] = [
    "needs_you",
    "new",
    "snoozed",
    "waiting",
    "resolved",
    "ignored",
    "all",
];

/// The most rows one bulk triage may name.
const BULK_LIMIT: usize = 500;

/// What the list shows: a view and the filters, read from the query (empty fields are no
/// filter, as a GET form sends them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Filter {
    pub view: Option<String>,
    pub node_id: Option<NodeId>,
    pub source: Option<String>,
    pub happening: bool,
}

impl Filter {
    pub fn parse(query: Option<&str>) -> Result<Filter, ApiError> {
        let mut filter = Filter::default();
        for (key, value) in url::form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
            let value = value.trim();
            if value.is_empty() {
                continue;
            }
            match key.as_ref() {
                "view" if VIEWS.contains(&value) => filter.view = Some(value.to_string()),
                "view" => {
                    return Err(ApiError::invalid(
                        "view",
                        format!("must be one of {}", VIEWS.join(", ")),
                    ))
                }
                "node_id" => match value.parse::<NodeId>() {
                    Ok(id) if id.get() > 0 => filter.node_id = Some(id),
                    _ => {
                        return Err(ApiError::invalid(
                            "node_id",
                            "must be a positive whole number",
                        ))
                    }
                },
                "source" if value.len() <= 200 => filter.source = Some(value.to_string()),
                "source" => return Err(ApiError::invalid("source", "is too long")),
                "happening" => filter.happening = value == "true",
                other => {
                    return Err(ApiError::invalid(
                        other,
                        "this page takes no such parameter (it takes: view, node_id, source, happening)",
                    ))
                }
            }
        }
        Ok(filter)
    }

    fn view(&self) -> &str {
        self.view.as_deref().unwrap_or("needs_you")
    }

    /// This page's address with `view` and the same filters.
    pub fn link(&self, view: &str) -> String {
        let mut query = url::form_urlencoded::Serializer::new(String::new());
        query.append_pair("view", view);
        if let Some(node_id) = self.node_id {
            query.append_pair("node_id", &node_id.to_string());
        }
        if let Some(source) = &self.source {
            query.append_pair("source", source);
        }
        if self.happening {
            query.append_pair("happening", "true");
        }
        format!("/ui/incidents?{}", query.finish())
    }
}

fn count_of(counts: &ViewCounts, view: &str) -> u64 {
    match view {
        "needs_you" => counts.needs_you,
        "new" => counts.new,
        "snoozed" => counts.snoozed,
        "waiting" => counts.waiting,
        "resolved" => counts.resolved,
        "ignored" => counts.ignored,
        _ => counts.all,
    }
}

struct ViewTab {
    view: &'static str,
    words: &'static str,
    count: u64,
    link: String,
    current: bool,
}

/// One row of the list.
pub struct Row {
    pub id: i64,
    pub severity: &'static str,
    pub title: String,
    pub detail: String,
    pub node_id: NodeId,
    pub node: String,
    pub source: String,
    pub happening: bool,
    pub state: String,
    pub needs_you: bool,
    pub opened: Ago,
    pub last_seen: Ago,
    pub folded_under: Option<i64>,
}

/// What the triage column says: the view's words, with a snooze's end.
fn state_words(incident: &IncidentView) -> String {
    match (incident.view.as_str(), incident.snooze_until) {
        ("snoozed", Some(until)) => format!("Snoozed until {}", until.format("%Y-%m-%d %H:%M UTC")),
        (view, _) => view_words(view).to_string(),
    }
}

pub fn row(incident: &IncidentView) -> Row {
    Row {
        id: incident.id,
        severity: severity_word(incident.severity),
        title: incident.title.clone(),
        detail: crate::ui::format::clip(&incident.detail, 300),
        node_id: incident.node_id,
        node: node_label(incident.node_id, incident.node_name.as_deref()),
        source: incident.source.clone(),
        happening: incident.status == capstan_events::incidents::Status::Open,
        state: state_words(incident),
        needs_you: incident.needs_you,
        opened: ago(incident.opened_at),
        last_seen: ago(incident.last_seen_at),
        folded_under: incident.group_id,
    }
}

#[derive(Template)]
#[template(path = "incidents.html")]
struct ListPage {
    chrome: Chrome,
    views: Vec<ViewTab>,
    view_words: &'static str,
    rows: Vec<Row>,
    /// Node id, name, chosen.
    nodes: Vec<(NodeId, String, bool)>,
    /// Source, chosen.
    sources: Vec<(String, bool)>,
    happening: bool,
    view: String,
    back: String,
    can_triage: bool,
    acts: &'static [(&'static str, &'static str)],
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Response, UiError> {
    let filter =
        Filter::parse(uri.query()).map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let request = ListIncidents {
        actor: session.actor(),
        view: Some(filter.view().to_string()),
        node_id: filter.node_id,
        source: filter.source.clone(),
        happening: filter.happening.then_some(true),
    };
    let listed: Incidents = ask(&state, &request)
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, &session))?;
    let views = VIEWS
        .iter()
        .map(|view| ViewTab {
            view,
            words: view_words(view),
            count: count_of(&listed.counts, view),
            link: filter.link(view),
            current: *view == filter.view(),
        })
        .collect();
    let mut nodes: BTreeMap<NodeId, String> = BTreeMap::new();
    let mut sources: Vec<String> = Vec::new();
    for incident in &listed.incidents {
        nodes.insert(
            incident.node_id,
            node_label(incident.node_id, incident.node_name.as_deref()),
        );
        if !sources.contains(&incident.source) {
            sources.push(incident.source.clone());
        }
    }
    if let Some(node_id) = filter.node_id {
        nodes
            .entry(node_id)
            .or_insert_with(|| format!("node {node_id}"));
    }
    if let Some(source) = &filter.source {
        if !sources.contains(source) {
            sources.push(source.clone());
        }
    }
    sources.sort();
    let page = ListPage {
        chrome: Chrome::signed_in(&session, &headers, "Incidents", "incidents"),
        views,
        view_words: view_words(filter.view()),
        rows: listed.incidents.iter().map(row).collect(),
        nodes: nodes
            .into_iter()
            .map(|(id, name)| (id, name, Some(id) == filter.node_id))
            .collect(),
        sources: sources
            .into_iter()
            .map(|source| {
                let chosen = filter.source.as_deref() == Some(source.as_str());
                (source, chosen)
            })
            .collect(),
        happening: filter.happening,
        view: filter.view().to_string(),
        back: filter.link(filter.view()),
        can_triage: can_triage(&session),
        acts: &ACTS,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// Where a form sends the operator back to: the list it came from, when it names one of ours.
pub fn back_to(fields: &FormFields) -> String {
    let back = fields.get("back").unwrap_or_default();
    match back.strip_prefix("/ui/incidents?") {
        Some(query) => match Filter::parse(Some(query)) {
            Ok(filter) => filter.link(filter.view()),
            Err(_) => "/ui/incidents".to_string(),
        },
        None => "/ui/incidents".to_string(),
    }
}

/// The incidents a bulk form selected (its `id` fields, each once): at least one, at most
/// [`BULK_LIMIT`], each a number.
fn selected_ids(fields: &FormFields) -> Result<Vec<i64>, ApiError> {
    let mut ids = Vec::new();
    for (key, value) in &fields.0 {
        if key != "id" {
            continue;
        }
        match value.parse::<i64>() {
            Ok(id) if id > 0 && !ids.contains(&id) => ids.push(id),
            Ok(id) if id > 0 => {}
            _ => {
                return Err(ApiError::invalid(
                    "id",
                    format!("{value:?} is not an incident number"),
                ))
            }
        }
    }
    if ids.is_empty() {
        return Err(ApiError::invalid("id", "select at least one incident"));
    }
    if ids.len() > BULK_LIMIT {
        return Err(ApiError::invalid(
            "id",
            format!("select at most {BULK_LIMIT} incidents at once"),
        ));
    }
    Ok(ids)
}

/// What a bulk act says: how many were done, and the first refusal with how many more.
fn bulk_outcome(
    act: &str,
    selected: usize,
    recorded: usize,
    unchanged: usize,
    refused: &[(i64, ApiError)],
) -> Result<String, ApiError> {
    if let Some((id, refusal)) = refused.first() {
        let words = format!(
            "{} of {} selected incidents were {}; incident {id} and {} more were not: {}",
            recorded + unchanged,
            selected,
            act_done_words(act),
            refused.len() - 1,
            refusal.message
        );
        return Err(ApiError {
            message: words,
            ..refusal.clone()
        });
    }
    let mut words = format!("{recorded} incidents {}.", act_done_words(act));
    if unchanged > 0 {
        words.push_str(&format!(
            " {unchanged} already were, so nothing was recorded for them."
        ));
    }
    Ok(words)
}

/// The bulk dropdown: one triage act for every selected row, each asked as the operator.
pub async fn bulk_triage(
    State(state): State<AppState>,
    session: UiSession,
    fields: FormFields,
) -> Response {
    let back = back_to(&fields);
    let act = fields.get("do").unwrap_or_default().to_string();
    if !ACTS.iter().any(|(known, _)| *known == act) {
        return acted(
            &back,
            Err(ApiError::invalid(
                "do",
                "choose what to do with the selected incidents",
            )),
        );
    }
    let ids = match selected_ids(&fields) {
        Ok(ids) => ids,
        Err(refusal) => return acted(&back, Err(refusal)),
    };
    let (mut recorded, mut unchanged, mut refused) = (0, 0, Vec::new());
    for id in &ids {
        let request = TriageIncident {
            actor: session.actor(),
            id: *id,
            act: act.clone(),
            note: None,
        };
        match ask(&state, &request).await {
            Ok(triaged) if triaged.recorded => recorded += 1,
            Ok(_) => unchanged += 1,
            Err(refusal) => refused.push((*id, refusal)),
        }
    }
    let detail = serde_json::json!({"do": act, "ids": ids, "recorded": recorded});
    let outcome = bulk_outcome(&act, ids.len(), recorded, unchanged, &refused);
    let mut response = acted(&back, outcome);
    response.extensions_mut().insert(AuditDetail(detail));
    response.into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_17_the_filters_read_from_a_get_form_and_odd_input_is_refused_by_name() {
        assert_eq!(Filter::parse(None).unwrap(), Filter::default());
        let filter = Filter::parse(Some(
            "view=all&node_id=5&source=agent%3Adisk&happening=true",
        ))
        .unwrap();
        assert_eq!(filter.view.as_deref(), Some("all"));
        assert_eq!(filter.node_id, Some(NodeId(5)));
        assert_eq!(filter.source.as_deref(), Some("agent:disk"));
        assert!(filter.happening);
        assert_eq!(
            Filter::parse(Some("node_id=&source=&view=")).unwrap(),
            Filter::default()
        );
        for (query, field) in [
            ("view=later", "view"),
            ("node_id=-1", "node_id"),
            ("node_id=x", "node_id"),
            ("colour=red", "colour"),
        ] {
            let refusal = Filter::parse(Some(query)).unwrap_err();
            assert!(
                refusal.message.starts_with(field),
                "{query}: {}",
                refusal.message
            );
        }
    }

    #[test]
    fn a_link_keeps_the_filters_and_back_accepts_only_the_list() {
        let filter = Filter::parse(Some("node_id=5&source=plane:agent_silent")).unwrap();
        assert_eq!(
            filter.link("all"),
            "/ui/incidents?view=all&node_id=5&source=plane%3Aagent_silent"
        );
        let back = |value: &str| back_to(&FormFields(vec![("back".into(), value.into())]));
        assert_eq!(
            back("/ui/incidents?view=new&node_id=3"),
            "/ui/incidents?view=new&node_id=3"
        );
        assert_eq!(back("https://evil.example/"), "/ui/incidents");
        assert_eq!(back("/ui/incidents?view=\"><x"), "/ui/incidents");
    }
}
