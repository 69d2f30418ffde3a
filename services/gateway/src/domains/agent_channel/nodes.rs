//! A node's page (`/ui/nodes/{id}?tab=overview|jobs|agent|recipes|backups`): Overview (what its
//! latest `check_status` and `host_report` found), Jobs (its history and "Run a job"), Agent (the
//! pairing, with Disconnect behind a confirmation for level 10), Recipes (what the agent does
//! on its own clock: each recipe's mode, verdict and most recent case), Backups (the backups
//! service's tab, [`crate::domains::backups`]: read at 7, its acts at 8 and 10). Below level 8 the page shows
//! its reading tabs only: Overview, Jobs with the read words alone, and Agent without
//! Disconnect (spec, "Admin Pages": "Below 8, node detail shows only its reading tabs").

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::Response,
};
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::rpc::{CreateJob, JobCreated, ListJobs, NodeRef, NodeView},
    rpc::Level,
};
use std::collections::HashMap;

use super::dashboard::{dot_of, job_row, JobRow};
use crate::ui::{
    act_done, acted,
    format::{ago, clip, fingerprint_groups, overview_facts, Ago, Fact},
    forms::{self, WordForm},
    guard::{FormFields, NodePath},
    refusal_sentence, render, Chrome, UiError, UiSession,
};
use crate::{ask::ask, error::ApiError, identity::AuditDetail, state::AppState};

/// The jobs the Jobs tab lists.
const NODE_JOBS: u32 = 50;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tab {
    Overview,
    Jobs,
    Agent,
    Recipes,
    Backups,
}

impl Tab {
    fn parse(uri: &Uri) -> Tab {
        let tab = uri.query().and_then(|query| {
            url::form_urlencoded::parse(query.as_bytes())
                .find(|(key, _)| key == "tab")
                .map(|(_, value)| value.into_owned())
        });
        match tab.as_deref() {
            Some("jobs") => Tab::Jobs,
            Some("agent") => Tab::Agent,
            Some("recipes") => Tab::Recipes,
            Some("backups") => Tab::Backups,
            _ => Tab::Overview,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Tab::Overview => "overview",
            Tab::Jobs => "jobs",
            Tab::Agent => "agent",
            Tab::Recipes => "recipes",
            Tab::Backups => "backups",
        }
    }
}

/// The node as the page header shows it.
struct Header {
    id: NodeId,
    name: String,
    dot: &'static str,
    health: &'static str,
    reasons: String,
    online: bool,
    last_heard: Option<Ago>,
    below_floor: bool,
    version: String,
}

struct Agent {
    fingerprint: Option<String>,
    connected: Option<Ago>,
    version: String,
    vocabulary: Vec<String>,
    last_poll: Option<Ago>,
    left: Option<Ago>,
    addresses: String,
    site_root: String,
    container: String,
    update: SelfUpdate,
}

/// The agent's self-update as its claims reported it (issue 15; AC-43, AG-29): the state of
/// its last check, the version it runs on trial, and the last update it refused.
struct SelfUpdate {
    state: String,
    offered: String,
    reason: String,
    refused: bool,
    trial: Option<String>,
    last_refusal: Option<LastRefusal>,
}

struct LastRefusal {
    state: String,
    offered: String,
    reason: String,
    when: Ago,
}

fn self_update(node: &NodeView) -> SelfUpdate {
    use capstan_events::agent_channel::rpc::{UpdateRefusal, UPDATE_REFUSALS};
    let text = |field: &str, limit: usize| {
        node.facts
            .get(field)
            .and_then(|value| value.as_str())
            .map(|text| clip(text, limit))
    };
    let state = text("update_state", 32);
    let trial = text("update_trial", 64).filter(|trial| Some(trial) == node.agent_version.as_ref());
    let last_refusal = node
        .facts
        .get("last_update_refusal")
        .and_then(|kept| serde_json::from_value::<UpdateRefusal>(kept.clone()).ok())
        .map(|kept| LastRefusal {
            state: clip(&kept.state, 32),
            offered: kept
                .offered
                .as_deref()
                .map(|version| clip(version, 64))
                .unwrap_or_else(|| "—".into()),
            reason: kept
                .reason
                .as_deref()
                .map(|reason| clip(reason, 1024))
                .unwrap_or_else(|| "no reason given".into()),
            when: ago(kept.at),
        });
    SelfUpdate {
        refused: state
            .as_deref()
            .is_some_and(|state| UPDATE_REFUSALS.contains(&state)),
        state: state.unwrap_or_else(|| "not reported".into()),
        offered: text("update_offered", 64).unwrap_or_else(|| "—".into()),
        reason: text("update_reason", 1024).unwrap_or_default(),
        trial,
        last_refusal,
    }
}

struct Finding {
    job_id: i64,
    outcome: String,
    when: Ago,
}

#[derive(Template)]
#[template(path = "node.html")]
struct NodePage {
    chrome: Chrome,
    tab: &'static str,
    node: Header,
    facts: Vec<Fact>,
    last_check: Option<Finding>,
    last_report: Option<Finding>,
    jobs: Vec<JobRow>,
    jobs_problem: Option<String>,
    words: Vec<WordForm>,
    words_above_level: usize,
    agent: Agent,
    can_disconnect: bool,
    recipes: Vec<super::recipes::RecipeRow>,
    incidents: crate::domains::incidents::NodeCard,
    uptime: crate::domains::monitor::UptimeCard,
    /// The Backups tab, asked only when it is the tab shown.
    backups: Option<crate::domains::backups::BackupsTab>,
}

fn finding(found: &Option<capstan_events::agent_channel::rpc::Finding>) -> Option<Finding> {
    found.as_ref().map(|found| Finding {
        job_id: found.job_id,
        outcome: serde_json::to_value(found.outcome)
            .ok()
            .and_then(|value| value.as_str().map(str::to_string))
            .unwrap_or_default(),
        when: ago(found.finished_at),
    })
}

fn header(node: &NodeView) -> Header {
    let (dot, health) = dot_of(node.health.dot);
    Header {
        id: node.id,
        name: node.name.clone(),
        dot,
        health,
        reasons: node.health.reasons.join("; "),
        online: node.online,
        last_heard: node.last_seen_at.map(ago),
        below_floor: node.below_floor,
        version: node
            .agent_version
            .clone()
            .unwrap_or_else(|| "not reported".into()),
    }
}

fn agent(node: &NodeView) -> Agent {
    Agent {
        fingerprint: node.fingerprint.as_deref().map(fingerprint_groups),
        connected: node.connected_at.map(ago),
        version: node
            .agent_version
            .clone()
            .unwrap_or_else(|| "not reported".into()),
        vocabulary: node.vocabulary.iter().map(|word| clip(word, 100)).collect(),
        last_poll: node.last_seen_at.map(ago),
        left: node.left_at.map(ago),
        addresses: clip(&node.addresses.join(", "), 500),
        site_root: node.site_root.clone().unwrap_or_default(),
        container: node.container.clone().unwrap_or_default(),
        update: self_update(node),
    }
}

async fn node(state: &AppState, session: &UiSession, node_id: NodeId) -> Result<NodeView, UiError> {
    let request = NodeRef {
        actor: session.actor(),
        node_id,
    };
    ask(state, &capstan_events::agent_channel::rpc::GetNode(request))
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, session))
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    NodePath(node_id): NodePath,
    uri: Uri,
) -> Result<Response, UiError> {
    let tab = Tab::parse(&uri);
    let node = node(&state, &session, node_id).await?;
    let (jobs, jobs_problem) = if tab == Tab::Jobs {
        let request = ListJobs {
            actor: session.actor(),
            node_id: Some(node_id),
            state: None,
            limit: Some(NODE_JOBS),
        };
        match ask(&state, &request).await {
            Ok(jobs) => {
                let names = HashMap::from([(node.id, node.name.clone())]);
                (
                    jobs.jobs.iter().map(|job| job_row(job, &names)).collect(),
                    None,
                )
            }
            Err(refusal) => (Vec::new(), Some(refusal_sentence(&refusal))),
        }
    } else {
        (Vec::new(), None)
    };
    let facts = overview_facts(
        node.last_check
            .as_ref()
            .and_then(|found| found.result.as_ref()),
        node.last_report
            .as_ref()
            .and_then(|found| found.result.as_ref()),
    );
    let incidents = crate::domains::incidents::node_card(&state, &session, node_id).await;
    let uptime = crate::domains::monitor::uptime_card(&state, &session, node_id).await;
    let backups = if tab == Tab::Backups {
        Some(crate::domains::backups::node_tab(&state, &session, node_id).await)
    } else {
        None
    };
    let page = NodePage {
        backups,
        chrome: Chrome::signed_in(&session, &headers, node.name.clone(), "nodes"),
        incidents,
        uptime,
        tab: tab.name(),
        facts,
        last_check: finding(&node.last_check),
        last_report: finding(&node.last_report),
        jobs,
        jobs_problem,
        words: forms::offered(&node, session.level),
        words_above_level: forms::above_level(session.level),
        agent: agent(&node),
        can_disconnect: session.level >= Level::Admin,
        recipes: super::recipes::recipe_rows(&node.facts),
        node: header(&node),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

#[derive(Template)]
#[template(path = "confirm.html")]
pub struct ConfirmPage {
    pub chrome: Chrome,
    pub heading: String,
    pub sentence: String,
    pub action: String,
    pub button: &'static str,
    pub button_test: &'static str,
    pub back: String,
}

pub async fn disconnect_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    NodePath(node_id): NodePath,
) -> Result<Response, UiError> {
    let node = node(&state, &session, node_id).await?;
    let page = ConfirmPage {
        chrome: Chrome::signed_in(&session, &headers, "Disconnect", "nodes"),
        heading: format!("Disconnect {}?", node.name),
        sentence: "The plane forgets this node's agent key. The node gets no operations until \
                   its agent joins again and an operator approves it; its running job, if any, \
                   is not stopped on the machine."
            .into(),
        action: format!("/ui/nodes/{node_id}/disconnect"),
        button: "Disconnect",
        button_test: "confirm-disconnect",
        back: format!("/ui/nodes/{node_id}?tab=agent"),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

pub async fn disconnect(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
) -> Response {
    let request = NodeRef {
        actor: session.actor(),
        node_id,
    };
    act_done(
        &state,
        &capstan_events::agent_channel::rpc::DisconnectNode(request),
        &format!("/ui/nodes/{node_id}?tab=agent"),
        "Disconnected: the plane has forgotten this node's key.",
    )
    .await
}

pub async fn create_job(
    State(state): State<AppState>,
    session: UiSession,
    NodePath(node_id): NodePath,
    fields: FormFields,
) -> Response {
    let back = format!("/ui/nodes/{node_id}?tab=jobs");
    let (primitive, params) = match forms::read_job_form(&fields.0) {
        Ok(read) => read,
        Err(problem) => return acted(&back, Err(ApiError::invalid("params", problem))),
    };
    let request = CreateJob {
        actor: session.actor(),
        node_id,
        primitive: primitive.name.to_string(),
        params: params.clone(),
    };
    let answer: Result<JobCreated, ApiError> = ask(&state, &request).await;
    match answer {
        Ok(created) => {
            let mut response = acted(
                &format!("/ui/jobs/{}", created.id),
                Ok(format!(
                    "Asked for {} as job {}.",
                    primitive.name, created.id
                )),
            );
            response
                .extensions_mut()
                .insert(AuditDetail(serde_json::json!({
                    "primitive": primitive.name, "params": params, "job_id": created.id
                })));
            response
        }
        Err(refusal) => {
            let mut response = acted(&back, Err(refusal));
            response.extensions_mut().insert(AuditDetail(
                serde_json::json!({"primitive": primitive.name, "params": params}),
            ));
            response
        }
    }
}
