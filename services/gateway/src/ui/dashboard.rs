//! The dashboard (`/ui/`): the plane's status line, the nodes grouped by placement (Docker
//! hosts with their containers under them, every other node flat under Machines), the agents
//! asking to join (with Approve and Reject for level 10), the joins rejected within the day
//! (Reopen), and the latest 20 jobs; and the join acts' forms.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode},
    response::Response,
};
use capstan_events::agent_channel::rpc::{
    ops, ApproveJoin, Approved, DecideJoin, HealthDot, JobView, Jobs, JoinFilter, JoinView, Joins,
    ListJobs, ListJoins, ListNodes, NodeView, Nodes, Placement,
};
use capstan_events::rpc::Level;
use std::collections::HashMap;

use super::{
    act_done, acted,
    format::{ago, fingerprint_groups, Ago},
    guard::{FormFields, PathUuid},
    refusal_sentence, render, Chrome, UiSession,
};
use crate::{ask::ask, error::ApiError, identity::AuditDetail, AppState};

/// The jobs the dashboard lists.
const RECENT_JOBS: u32 = 20;

/// One node's row.
pub struct NodeRow {
    pub id: i64,
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
}

pub fn dot_of(dot: HealthDot) -> (&'static str, &'static str) {
    match dot {
        HealthDot::Green => ("green", "healthy"),
        HealthDot::Yellow => ("yellow", "warning"),
        HealthDot::Red => ("red", "problem"),
        HealthDot::Gray => ("gray", "no data"),
    }
}

fn node_row(node: &NodeView) -> NodeRow {
    let (dot, health) = dot_of(node.health.dot);
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
    }
}

pub struct HostGroup {
    pub host: NodeRow,
    pub containers: Vec<NodeRow>,
}

/// Docker hosts with their containers, and every other node as a machine; a container whose
/// host is not among the nodes is listed as a machine, never dropped.
pub fn group(nodes: &[NodeView]) -> (Vec<HostGroup>, Vec<NodeRow>) {
    let hosts: Vec<&NodeView> = nodes
        .iter()
        .filter(|node| node.placement == Placement::Host)
        .collect();
    let mut under: HashMap<i64, Vec<NodeRow>> = HashMap::new();
    let mut machines = Vec::new();
    for node in nodes {
        match node.placement {
            Placement::Host => {}
            Placement::Container { host_node_id }
                if hosts.iter().any(|host| host.id == host_node_id) =>
            {
                under.entry(host_node_id).or_default().push(node_row(node));
            }
            _ => machines.push(node_row(node)),
        }
    }
    let groups = hosts
        .into_iter()
        .map(|host| HostGroup {
            host: node_row(host),
            containers: under.remove(&host.id).unwrap_or_default(),
        })
        .collect();
    (groups, machines)
}

struct JoinRow {
    id: String,
    name: String,
    source_address: String,
    fingerprint: String,
    version: String,
    age: Ago,
    name_taken_by: Option<i64>,
}

fn join_row(join: &JoinView) -> JoinRow {
    JoinRow {
        id: join.id.to_string(),
        name: join.name.clone(),
        source_address: join.source_address.clone(),
        fingerprint: fingerprint_groups(&join.fingerprint),
        version: join.agent_version.clone(),
        age: ago(join.requested_at),
        name_taken_by: join.name_taken_by,
    }
}

pub struct JobRow {
    pub id: i64,
    pub node_id: i64,
    pub node_name: String,
    pub primitive: String,
    pub state: String,
    pub who: String,
    pub when: Ago,
}

pub fn job_row(job: &JobView, names: &HashMap<i64, String>) -> JobRow {
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
    hosts: Vec<HostGroup>,
    machines: Vec<NodeRow>,
    nodes_problem: Option<String>,
    joins: Vec<JoinRow>,
    rejected: Vec<JoinRow>,
    joins_problem: Option<String>,
    /// (id, name) of every node, for binding a join to an existing node.
    bind_to: Vec<(i64, String)>,
    jobs: Vec<JobRow>,
    jobs_problem: Option<String>,
    can_decide: bool,
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
) -> Response {
    let actor = session.actor();
    let list_nodes = ListNodes {
        actor: actor.clone(),
    };
    let pending = ListJoins {
        actor: actor.clone(),
        state: JoinFilter::Pending,
    };
    let rejected = ListJoins {
        actor: actor.clone(),
        state: JoinFilter::Rejected,
    };
    let recent = ListJobs {
        actor,
        node_id: None,
        state: None,
        limit: Some(RECENT_JOBS),
    };
    let (nodes, pending, rejected, jobs) = tokio::join!(
        ask::<_, Nodes>(&state, ops::LIST_NODES, &list_nodes),
        ask::<_, Joins>(&state, ops::LIST_JOINS, &pending),
        ask::<_, Joins>(&state, ops::LIST_JOINS, &rejected),
        ask::<_, Jobs>(&state, ops::LIST_JOBS, &recent),
    );
    let problem = |refusal: &ApiError| Some(refusal_sentence(refusal));
    let (nodes, nodes_problem) = match nodes {
        Ok(nodes) => (nodes.nodes, None),
        Err(refusal) => (Vec::new(), problem(&refusal)),
    };
    let (pending, joins_problem) = match pending {
        Ok(joins) => (joins.joins, None),
        Err(refusal) => (Vec::new(), problem(&refusal)),
    };
    // The agent channel lists the rejections still reopenable (a day, ARCHITECTURE 6.2-1).
    let rejected = rejected.map(|joins| joins.joins).unwrap_or_default();
    let (jobs, jobs_problem) = match jobs {
        Ok(jobs) => (jobs.jobs, None),
        Err(refusal) => (Vec::new(), problem(&refusal)),
    };
    let names: HashMap<i64, String> = nodes
        .iter()
        .map(|node| (node.id, node.name.clone()))
        .collect();
    let online = nodes.iter().filter(|node| node.online).count();
    let red = nodes
        .iter()
        .filter(|node| node.health.dot == HealthDot::Red)
        .count();
    let status = if nodes_problem.is_some() {
        "The agent channel did not answer: the fleet's state is unknown.".to_string()
    } else {
        let mut status = format!(
            "{online} of {} nodes online · {} asking to join",
            nodes.len(),
            pending.len()
        );
        if red > 0 {
            status.push_str(&format!(" · {red} with a problem"));
        }
        status
    };
    let (hosts, machines) = group(&nodes);
    let mut bind_to: Vec<(i64, String)> =
        names.iter().map(|(id, name)| (*id, name.clone())).collect();
    bind_to.sort();
    let page = Dashboard {
        chrome: Chrome::signed_in(&session, &headers, "Dashboard", "dashboard"),
        status,
        hosts,
        machines,
        nodes_problem,
        joins: pending.iter().map(join_row).collect(),
        rejected: rejected.iter().map(join_row).collect(),
        joins_problem,
        bind_to,
        jobs: jobs.iter().map(|job| job_row(job, &names)).collect(),
        jobs_problem,
        can_decide: session.level >= Level::Admin,
    };
    render(StatusCode::OK, &page.chrome, &page)
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
        match requested.parse::<i64>() {
            Ok(id) if id > 0 => Some(id),
            _ => {
                return acted(
                    "/ui/",
                    Err(ApiError::invalid("node_id", "choose a node from the list")),
                )
            }
        }
    };
    let request = ApproveJoin {
        actor: session.actor(),
        join_id,
        node_id,
    };
    let answer: Result<Approved, ApiError> = ask(&state, ops::APPROVE_JOIN, &request).await;
    let detail = answer.as_ref().ok().map(
        |approved| serde_json::json!({"requested_node_id": node_id, "node_id": approved.node_id}),
    );
    let mut response = acted(
        "/ui/",
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
) -> Response {
    let request = DecideJoin {
        actor: session.actor(),
        join_id,
    };
    act_done(
        &state,
        ops::REJECT_JOIN,
        &request,
        "/ui/",
        "Rejected. It can be reopened for a day.",
    )
    .await
}

pub async fn reopen_join(
    State(state): State<AppState>,
    session: UiSession,
    PathUuid(join_id): PathUuid,
) -> Response {
    let request = DecideJoin {
        actor: session.actor(),
        join_id,
    };
    act_done(
        &state,
        ops::REOPEN_JOIN,
        &request,
        "/ui/",
        "Reopened: it is waiting again; compare the fingerprint before approving.",
    )
    .await
}
