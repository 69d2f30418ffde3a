//! A job's page (`/ui/jobs/{id}`): its state, node, word, who asked, parameters, outcome and
//! reason, structured result, and its output, which `app.js` follows live from
//! `/ui/jobs/{id}/output?offset=N`; Cancel while pending and Mark as failed while running
//! (behind a confirmation), both at level 8.

use askama::Template;
use axum::{
    extract::State,
    http::{HeaderMap, StatusCode, Uri},
    response::{IntoResponse, Response},
    Json,
};
use capstan_events::NodeId;
use capstan_events::{
    agent_channel::rpc::{GetNode, JobOutputRequest, JobRef, JobState, JobView, NodeRef},
    rpc::Level,
};

use super::{dashboard::state_name, nodes::ConfirmPage};
use crate::ui::{
    act_done,
    format::{ago, Ago},
    guard::PathId,
    render, Chrome, UiError, UiSession,
};
use crate::{ask::ask, input::QueryParams, state::AppState};
use capstan_events::Word as _;

#[derive(Template)]
#[template(path = "job.html")]
struct JobPage {
    chrome: Chrome,
    id: i64,
    node_id: NodeId,
    node_name: String,
    primitive: String,
    class: &'static str,
    state: String,
    terminal: bool,
    requested_by: String,
    created: Ago,
    claimed: Option<Ago>,
    finished: Option<Ago>,
    params: String,
    outcome: String,
    reason: String,
    result: Option<String>,
    output: String,
    offset: u64,
    output_problem: Option<String>,
    can_cancel: bool,
    can_mark_failed: bool,
}

async fn job(state: &AppState, session: &UiSession, job_id: i64) -> Result<JobView, UiError> {
    let request = JobRef {
        actor: session.actor(),
        job_id,
    };
    ask(state, &capstan_events::agent_channel::rpc::GetJob(request))
        .await
        .map_err(|refusal| UiError::from_refusal(&refusal, session))
}

fn pretty(value: &serde_json::Value) -> String {
    serde_json::to_string_pretty(value).unwrap_or_default()
}

pub async fn page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(job_id): PathId,
) -> Result<Response, UiError> {
    let job = job(&state, &session, job_id).await?;
    let node_request = GetNode(NodeRef {
        actor: session.actor(),
        node_id: job.node_id,
    });
    let output_request = JobOutputRequest {
        actor: session.actor(),
        job_id,
        offset: 0,
    };
    let (node, output) = tokio::join!(ask(&state, &node_request), ask(&state, &output_request),);
    let (output, offset, output_problem) = match output {
        Ok(output) => (output.new_output, output.offset, None),
        Err(refusal) => (
            String::new(),
            0,
            Some(crate::ui::refusal_sentence(&refusal)),
        ),
    };
    let changer = session.level >= Level::Change;
    let page = JobPage {
        chrome: Chrome::signed_in(&session, &headers, format!("Job {job_id}"), "dashboard"),
        id: job.id,
        node_id: job.node_id,
        node_name: node
            .map(|node| node.name)
            .unwrap_or_else(|_| format!("node {}", job.node_id)),
        primitive: job.primitive.clone(),
        class: job.class.as_str(),
        state: state_name(&job),
        terminal: job.state.is_terminal(),
        requested_by: job.requested_by.clone(),
        created: ago(job.created_at),
        claimed: job.claimed_at.map(ago),
        finished: job.finished_at.map(ago),
        params: pretty(&job.params),
        outcome: job
            .outcome
            .and_then(|outcome| serde_json::to_value(outcome).ok())
            .and_then(|value| value.as_str().map(str::to_string))
            .unwrap_or_default(),
        reason: job.reason.clone().unwrap_or_default(),
        result: job.result.as_ref().map(pretty),
        output,
        offset,
        output_problem,
        can_cancel: changer && job.state == JobState::Pending,
        can_mark_failed: changer && job.state == JobState::Running,
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

/// `GET /ui/jobs/{id}/output?offset=N`: the agent channel's `{state, new_output, offset}`,
/// for `app.js`; a refusal is `{"error": {...}}` with its status.
pub async fn output(
    State(state): State<AppState>,
    session: UiSession,
    PathId(job_id): PathId,
    uri: Uri,
) -> Response {
    let offset = match QueryParams::parse(&uri, &["offset"])
        .and_then(|query| query.get::<u64>("offset", "a whole number of bytes"))
    {
        Ok(offset) => offset.unwrap_or(0),
        Err(refusal) => return refusal.into_response(),
    };
    let request = JobOutputRequest {
        actor: session.actor(),
        job_id,
        offset,
    };
    match ask(&state, &request).await {
        Ok(output) => Json(output).into_response(),
        Err(refusal) => refusal.into_response(),
    }
}

pub async fn cancel(
    State(state): State<AppState>,
    session: UiSession,
    PathId(job_id): PathId,
) -> Response {
    let request = JobRef {
        actor: session.actor(),
        job_id,
    };
    act_done(
        &state,
        &capstan_events::agent_channel::rpc::CancelJobRequest(request),
        &format!("/ui/jobs/{job_id}"),
        "Cancelled: no node will be handed this job.",
    )
    .await
}

pub async fn mark_failed_page(
    State(state): State<AppState>,
    session: UiSession,
    headers: HeaderMap,
    PathId(job_id): PathId,
) -> Result<Response, UiError> {
    let job = job(&state, &session, job_id).await?;
    let page = ConfirmPage {
        chrome: Chrome::signed_in(&session, &headers, "Mark as failed", "dashboard"),
        heading: format!("Mark job {job_id} ({}) as failed?", job.primitive),
        sentence: "The plane stops waiting for this job's result and records it as failed. It \
                   does not stop anything already running on the node."
            .into(),
        action: format!("/ui/jobs/{job_id}/mark-failed"),
        button: "Mark as failed",
        button_test: "confirm-mark-failed",
        back: format!("/ui/jobs/{job_id}"),
    };
    Ok(render(StatusCode::OK, &page.chrome, &page))
}

pub async fn mark_failed(
    State(state): State<AppState>,
    session: UiSession,
    PathId(job_id): PathId,
) -> Response {
    let request = JobRef {
        actor: session.actor(),
        job_id,
    };
    act_done(
        &state,
        &capstan_events::agent_channel::rpc::MarkJobFailed(request),
        &format!("/ui/jobs/{job_id}"),
        "Marked as failed.",
    )
    .await
}
