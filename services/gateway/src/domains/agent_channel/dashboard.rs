//! The dashboard (`/ui/`): the plane's status line (counted by the agent channel), the first
//! page of nodes with a search box and links to the whole list (`/ui/nodes`), the newest agents
//! asking to join (with Approve, Reject and "Bind to" for level 10) and a link to all of them
//! (`/ui/joins`), and the latest 20 jobs; and the join acts' forms. With no nodes it says how
//! to add the first server (`first_server.rs`). However large the fleet or
//! the join flood, the page holds a bounded number of rows.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::agent_channel::rpc::{
    ApproveJoin, Approved, DecideJoin, HealthDot, JobView, JoinFilter, JoinView, Joins, ListJobs,
    ListJoins, ListNodes, NodeView, Nodes, Page, Placement,
};
use capstan_events::rpc::{Actor, Level};
use capstan_events::NodeId;
use std::collections::HashMap;

use super::first_server::{plane_url, PlaneUrl};
use crate::ui::{
    act_done, acted,
    format::{ago, fingerprint_groups, Ago},
    guard::{FormFields, PathUuid},
    refusal_sentence, render, Chrome, UiSession,
};
use crate::{ask::ask, error::ApiError, identity::AuditDetail, AppState};

/// The jobs the dashboard lists.
const RECENT_JOBS: u32 = 20;
/// The nodes the dashboard lists (the rest are a search or a page away).
const DASHBOARD_NODES: u32 = 25;
/// The newest joins the dashboard lists (the rest are on the joins page).
const DASHBOARD_JOINS: u32 = 5;

/// One node's row.
pub struct NodeRow {
    pub id: NodeId,
    pub name: String,
    /// `green`, `yellow`, `red`, `gray`.
    pub dot: &'static str,
    /// The dot in words (never colour alone).
    pub health: &'static str,
    pub reasons: String,
    pub version: String,
    pub online: bool,
    pub last_heard: Option<Ago>,
    pub below_floor: bool,
    /// `Docker host`, `container`, `machine`.
    pub placement: &'static str,
    /// The host of a container.
    pub host_id: Option<NodeId>,
}

pub fn dot_of(dot: HealthDot) -> (&'static str, &'static str) {
    match dot {
        HealthDot::Green => ("green", "healthy"),
        HealthDot::Yellow => ("yellow", "warning"),
        HealthDot::Red => ("red", "problem"),
        HealthDot::Gray => ("gray", "no data"),
    }
}

pub fn node_row(node: &NodeView) -> NodeRow {
    let (dot, health) = dot_of(node.health.dot);
    let (placement, host_id) = match node.placement {
        Placement::Machine => ("machine", None),
        Placement::Host => ("Docker host", None),
        Placement::Container { host_node_id } => ("container", Some(host_node_id)),
    };
    NodeRow {
        id: node.id,
        name: node.name.clone(),
        dot,
        health,
        reasons: node.health.reasons.join("; "),
        version: node
            .agent_version
            .clone()
            .unwrap_or_else(|| "not reported".into()),
        online: node.online,
        last_heard: node.last_seen_at.map(ago),
        below_floor: node.below_floor,
        placement,
        host_id,
    }
}

pub struct JoinRow {
    pub id: String,
    pub name: String,
    pub source_address: String,
    pub fingerprint: String,
    pub version: String,
    pub age: Ago,
    pub name_taken_by: Option<NodeId>,
    /// The provision the join matches, with why it is still pending (AC-09, AC-11).
    pub provision: Option<crate::domains::provisioning::JoinProvision>,
}

pub fn join_row(join: &JoinView) -> JoinRow {
    JoinRow {
        id: join.id.to_string(),
        name: join.name.clone(),
        source_address: join.source_address.clone(),
        fingerprint: fingerprint_groups(&join.fingerprint),
        version: join.agent_version.clone(),
        age: ago(join.requested_at),
        name_taken_by: join.name_taken_by,
        provision: None,
    }
}

/// The rows of `joins`, each with its provision's card when it matches one (AC-09, AC-11).
pub async fn join_rows(state: &AppState, actor: &Actor, joins: &[JoinView]) -> Vec<JoinRow> {
    let mut cards = crate::domains::provisioning::join_cards(state, actor, joins).await;
    joins
        .iter()
        .map(|join| JoinRow {
            provision: cards.remove(&join.id),
            ..join_row(join)
        })
        .collect()
}

/// A listing of nodes asking only for how many match (the status line's counts).
pub fn counting(actor: &Actor) -> ListNodes {
    ListNodes {
        actor: actor.clone(),
        search: None,
        health: None,
        online: None,
        placement: None,
        paired: None,
        ids: None,
        page: Page {
            offset: 0,
            limit: 1,
        },
    }
}

/// The names of the nodes `jobs` ran on (one question for the page's jobs).
pub async fn names_of(
    state: &AppState,
    actor: &Actor,
    jobs: &[JobView],
) -> HashMap<NodeId, String> {
    let mut ids: Vec<NodeId> = jobs.iter().map(|job| job.node_id).collect();
    ids.sort_unstable();
    ids.dedup();
    if ids.is_empty() {
        return HashMap::new();
    }
    let request = ListNodes {
        ids: Some(ids),
        page: Page {
            offset: 0,
            limit: RECENT_JOBS.max(50),
        },
        ..counting(actor)
    };
    match ask(state, &request).await {
        Ok(nodes) => nodes
            .nodes
            .into_iter()
            .map(|node| (node.id, node.name))
            .collect(),
        Err(_) => HashMap::new(),
    }
}

pub struct JobRow {
    pub id: i64,
    pub node_id: NodeId,
    pub node_name: String,
    pub primitive: String,
    pub state: String,
    pub who: String,
    pub when: Ago,
}

pub fn job_row(job: &JobView, names: &HashMap<NodeId, String>) -> JobRow {
    JobRow {
        id: job.id,
        node_id: job.node_id,
        node_name: names
            .get(&job.node_id)
            .cloned()
            .unwrap_or_else(|| format!("node {}", job.node_id)),
        primitive: job.primitive.clone(),
        state: state_name(job),
        who: job.requested_by.clone(),
        when: ago(job.created_at),
    }
}

pub fn state_name(job: &JobView) -> String {
    serde_json::to_value(job.state)
        .ok()
        .and_then(|value| value.as_str().map(str::to_string))
        .unwrap_or_default()
}

#[derive(Template)]
#[template(path = "dashboard.html")]
struct Dashboard {
    chrome: Chrome,
    status: String,
    nodes: Vec<NodeRow>,
    nodes_total: u64,
    red: u64,
    nodes_problem: Option<String>,
    joins: Vec<JoinRow>,
    joins_total: u64,
    joins_problem: Option<String>,
    /// Where a join act sends the browser back to (`dashboard` or `joins`).
    back: &'static str,
    jobs: Vec<JobRow>,
    jobs_problem: Option<String>,
    can_decide: bool,
    sites: crate::domains::monitor::SitesCard,
    /// Provisions in flight (PV-03), when any are.
    provisions: crate::domains::provisioning::Banner,
    /// With no nodes: how to add the first server, with this plane's URL (issue 27).
    first_server: Option<PlaneUrl>,
}

/// What the dashboard asks the agent channel: its first nodes, how many are online, how many
/// red, the pending joins, the recent jobs.
fn questions(actor: &Actor) -> (ListNodes, ListNodes, ListNodes, ListJoins, ListJobs) {
    let first = ListNodes {
        page: Page {
            offset: 0,
            limit: DASHBOARD_NODES,
        },
        ..counting(actor)
    };
    let online = ListNodes {
        online: Some(true),
        ..counting(actor)
    };
    let red = ListNodes {
        health: Some(HealthDot::Red),
        ..counting(actor)
    };
    let pending = ListJoins {
        actor: actor.clone(),
        state: JoinFilter::Pending,
        search: None,
        join_id: None,
        page: Page {
            offset: 0,
            limit: DASHBOARD_JOINS,
        },
    };
    let recent = ListJobs {
        actor: actor.clone(),
        node_id: None,
        state: None,
        limit: Some(RECENT_JOBS),
    };
    (first, online, red, pending, recent)
}

/// The plane's status line: nodes online, joins waiting, nodes with a problem.
fn fleet_status(online: u64, total: u64, pending: u64, red: u64) -> String {
    let mut status = format!("{online} of {total} nodes online · {pending} asking to join");
    if red > 0 {
        status.push_str(&format!(" · {red} with a problem"));
    }
    status
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Response {
    let actor = session.actor();
    let (first, online, red, pending, recent) = questions(&actor);
    let (nodes, online, red, pending, jobs) = tokio::join!(
        ask(&state, &first),
        ask(&state, &online),
        ask(&state, &red),
        ask(&state, &pending),
        ask(&state, &recent),
    );
    let problem = |refusal: &ApiError| Some(refusal_sentence(refusal));
    let (nodes, nodes_problem) = match nodes {
        Ok(nodes) => (nodes, None),
        Err(refusal) => (
            Nodes {
                nodes: Vec::new(),
                page: Default::default(),
            },
            problem(&refusal),
        ),
    };
    let (pending, joins_problem) = match pending {
        Ok(joins) => (joins, None),
        Err(refusal) => (
            Joins {
                joins: Vec::new(),
                page: Default::default(),
            },
            problem(&refusal),
        ),
    };
    let (jobs, jobs_problem) = match jobs {
        Ok(jobs) => (jobs.jobs, None),
        Err(refusal) => (Vec::new(), problem(&refusal)),
    };
    let names = names_of(&state, &actor, &jobs).await;
    let (joins, provisions) = tokio::join!(
        join_rows(&state, &actor, &pending.joins),
        crate::domains::provisioning::banner(&state, &session, &headers)
    );
    let online = online.map(|nodes| nodes.page.total);
    let red = red.map(|nodes| nodes.page.total).unwrap_or_default();
    let status = match (&nodes_problem, online) {
        (None, Ok(online)) => fleet_status(online, nodes.page.total, pending.page.total, red),
        _ => "The agent channel did not answer: the fleet's state is unknown.".to_string(),
    };
    let nodes_problem_shown = nodes_problem.clone();
    let page = Dashboard {
        chrome: Chrome::signed_in(&session, &headers, "Dashboard", "dashboard"),
        status,
        nodes: nodes.nodes.iter().map(node_row).collect(),
        nodes_total: nodes.page.total,
        red,
        nodes_problem,
        joins,
        joins_total: pending.page.total,
        joins_problem,
        back: "dashboard",
        jobs: jobs.iter().map(|job| job_row(job, &names)).collect(),
        jobs_problem,
        can_decide: session.level >= Level::Admin,
        sites: crate::domains::monitor::sites_card(&state, &session).await,
        provisions,
        first_server: (nodes.page.total == 0 && nodes_problem_shown.is_none())
            .then(|| plane_url(&headers)),
    };
    render(StatusCode::OK, &page.chrome, &page)
}

/// Where a join act sends the browser back to: the joins page when its form says so, else the
/// dashboard (a fixed choice, never a path from the form).
fn back_of(fields: &FormFields) -> &'static str {
    match fields.get("back") {
        Some("joins") => "/ui/joins",
        _ => "/ui/",
    }
}

pub async fn approve_join(
    State(state): State<AppState>,
    session: UiSession,
    PathUuid(join_id): PathUuid,
    fields: FormFields,
) -> Response {
    let requested = fields.get("node_id").unwrap_or_default().trim();
    let node_id = if requested.is_empty() {
        None
    } else {
        match requested.parse::<NodeId>() {
            Ok(id) if id.get() > 0 => Some(id),
            _ => {
                return acted(
                    back_of(&fields),
                    Err(ApiError::invalid(
                        "node_id",
                        "name a node by its number (search for it with Bind to)",
                    )),
                )
            }
        }
    };
    let request = ApproveJoin {
        actor: session.actor(),
        join_id,
        node_id,
    };
    let answer: Result<Approved, ApiError> = ask(&state, &request).await;
    let detail = answer.as_ref().ok().map(
        |approved| serde_json::json!({"requested_node_id": node_id, "node_id": approved.node_id}),
    );
    let mut response = acted(
        back_of(&fields),
        answer.map(|approved| {
            format!(
                "Approved: the key is bound to node {}; its agent connects on its next ask.",
                approved.node_id
            )
        }),
    );
    if let Some(detail) = detail {
        response.extensions_mut().insert(AuditDetail(detail));
    }
    response
}

pub async fn reject_join(
    State(state): State<AppState>,
    session: UiSession,
    PathUuid(join_id): PathUuid,
    fields: FormFields,
) -> Response {
    let request = DecideJoin {
        actor: session.actor(),
        join_id,
    };
    act_done(
        &state,
        &capstan_events::agent_channel::rpc::RejectJoin(request),
        back_of(&fields),
        "Rejected. It can be reopened for a day.",
    )
    .await
}

pub async fn reopen_join(
    State(state): State<AppState>,
    session: UiSession,
    PathUuid(join_id): PathUuid,
    fields: FormFields,
) -> Response {
    let request = DecideJoin {
        actor: session.actor(),
        join_id,
    };
    act_done(
        &state,
        &capstan_events::agent_channel::rpc::ReopenJoin(request),
        back_of(&fields),
        "Reopened: it is waiting again; compare the fingerprint before approving.",
    )
    .await
}
