//! The operator JSON API: each handler extracts and validates its input, asks the agent channel
//! with the operator as the [`Actor`], and maps the answer. Who may call which route is the
//! route table's business ([`crate::routes`]); what an actor may do to a given node or job is
//! the agent channel's.

use crate::route::schema;
use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
    Json,
};
use capstan_events::agent_channel::primitives::{self, Primitive};
use capstan_events::agent_channel::rpc::{
    check_search, ApproveJoin, Approved, CreateJob, DecideJoin, Done, JobCreated, JobOutput,
    JobOutputRequest, JobRef, JobState, JobView, Jobs, Joins, ListJobs, ListJoins, ListNodes,
    NodeRef, NodeView, Nodes, Page, RefusalCount, RefusalCountRequest, PAGE_LIMIT_DEFAULT,
    PAGE_LIMIT_MAX,
};
use capstan_events::rpc::Actor;
use capstan_events::NodeId;
use schemars::JsonSchema;
use serde::{de::DeserializeOwned, Deserialize, Serialize};
use serde_json::{json, Value};

use crate::{
    ask::ask,
    error::ApiError,
    identity::{AuditDetail, Operator},
    input::{JobId, JoinId, JsonBody, NodePath, QueryParams},
    route::{Method::Get, Route},
    state::AppState,
};
use axum::routing::on;
use capstan_events::rpc::Level::{Admin, Change, Read};

/// The agent channel's operator API: joins, nodes and jobs.
pub const ROUTES: &[Route] = &[
    Route::read(Get, "/api/v1/joins", Read, |filter| on(filter, list_joins))
        .answer(schema::<capstan_events::agent_channel::rpc::Joins>),
    Route::act(
        "/api/v1/joins/{id}/approve",
        Admin,
        |filter| on(filter, approve_join),
        "approve_join",
    )
    .body(schema::<ApproveBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::Approved>),
    Route::act(
        "/api/v1/joins/{id}/reject",
        Admin,
        |filter| on(filter, reject_join),
        "reject_join",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>),
    Route::act(
        "/api/v1/joins/{id}/reopen",
        Admin,
        |filter| on(filter, reopen_join),
        "reopen_join",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>),
    Route::read(Get, "/api/v1/nodes", Read, |filter| on(filter, list_nodes))
        .answer(schema::<capstan_events::agent_channel::rpc::Nodes>),
    Route::read(Get, "/api/v1/nodes/{id}", Read, |filter| {
        on(filter, get_node)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::NodeView>),
    Route::act(
        "/api/v1/nodes/{id}/disconnect",
        Admin,
        |filter| on(filter, disconnect_node),
        "disconnect_node",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>),
    // Level 7 at the route: the agent channel refines it by the primitive's class (change 8,
    // destructive 10), which only it knows.
    Route::act(
        "/api/v1/nodes/{id}/jobs",
        Read,
        |filter| on(filter, create_job),
        "create_job",
    )
    .body(schema::<CreateJobBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::JobCreated>),
    Route::read(Get, "/api/v1/nodes/{id}/refusals", Read, |filter| {
        on(filter, refusal_count)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::RefusalCount>),
    Route::read(Get, "/api/v1/jobs", Read, |filter| on(filter, list_jobs))
        .answer(schema::<capstan_events::agent_channel::rpc::Jobs>),
    Route::read(Get, "/api/v1/jobs/{id}", Read, |filter| on(filter, get_job))
        .answer(schema::<capstan_events::agent_channel::rpc::JobView>),
    Route::read(Get, "/api/v1/jobs/{id}/output", Read, |filter| {
        on(filter, job_output)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::JobOutput>),
    Route::act(
        "/api/v1/jobs/{id}/cancel",
        Change,
        |filter| on(filter, cancel_job),
        "cancel_job",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>),
    Route::act(
        "/api/v1/jobs/{id}/mark-failed",
        Change,
        |filter| on(filter, mark_job_failed),
        "mark_job_failed",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>),
];

/// The body of `POST /api/v1/joins/{id}/approve`: `{}` binds the key to a new node,
/// `{"node_id": N}` to node N.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApproveBody {
    #[serde(default)]
    pub node_id: Option<NodeId>,
}

/// The body of `POST /api/v1/nodes/{id}/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJobBody {
    /// A primitive of the plane's catalog that the node's agent reported.
    pub primitive: String,
    /// The primitive's parameters; the agent validates them against the primitive's shape.
    #[serde(default)]
    pub params: Value,
}

/// The longest window the refusal count looks back over, and the default.
pub const REFUSAL_WINDOW_MAX_SECS: u64 = 366 * 24 * 3600;
pub const REFUSAL_WINDOW_DEFAULT_SECS: u64 = 24 * 3600;
/// The most jobs one listing asks for.
pub const JOB_LIST_LIMIT_MAX: u32 = 1000;

/// An answer to an act, with what the audit record should add to it.
fn acted<T: Serialize>(status: StatusCode, answer: T, detail: Value) -> Response {
    let mut response = (status, Json(answer)).into_response();
    response.extensions_mut().insert(AuditDetail(detail));
    response
}

/// A `snake_case` enum value of the contract from a query parameter.
fn query_enum<T: DeserializeOwned>(
    query: &QueryParams,
    name: &str,
    choices: &str,
) -> Result<Option<T>, ApiError> {
    let Some(raw) = query.get::<String>(name, choices)? else {
        return Ok(None);
    };
    serde_json::from_value(Value::String(raw.clone()))
        .map(Some)
        .map_err(|_| ApiError::invalid(name, format!("{raw:?} is not one of {choices}")))
}

/// The query parameters of `GET /api/v1/joins` (and the UI's joins page).
pub const JOIN_LISTING: &[&str] = &["state", "q", "offset", "limit"];
/// The query parameters of `GET /api/v1/nodes` (and the UI's node list).
pub const NODE_LISTING: &[&str] = &[
    "q",
    "health",
    "online",
    "placement",
    "paired",
    "offset",
    "limit",
];

/// A parameter's value, `None` when absent or blank (a form's "any").
fn given<'q>(query: &'q QueryParams, name: &str) -> Option<&'q str> {
    query.value(name).filter(|value| !value.trim().is_empty())
}

/// `true` or `false`.
fn query_bool(query: &QueryParams, name: &str) -> Result<Option<bool>, ApiError> {
    match given(query, name) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(other) => Err(ApiError::invalid(
            name,
            format!("{other:?} is not true or false"),
        )),
    }
}

/// A `snake_case` enum value of the contract, blank for none.
fn given_enum<T: DeserializeOwned>(
    query: &QueryParams,
    name: &str,
    choices: &str,
) -> Result<Option<T>, ApiError> {
    let Some(raw) = given(query, name) else {
        return Ok(None);
    };
    serde_json::from_value(Value::String(raw.to_string()))
        .map(Some)
        .map_err(|_| ApiError::invalid(name, format!("{raw:?} is not one of {choices}")))
}

/// `offset` and `limit` (defaults 0 and `default_limit`), within bounds.
pub fn page_of(query: &QueryParams, default_limit: u32) -> Result<Page, ApiError> {
    let offset = match given(query, "offset") {
        None => 0,
        Some(raw) => raw
            .parse::<u64>()
            .map_err(|_| ApiError::invalid("offset", format!("{raw:?} is not a whole number")))?,
    };
    let limit = match given(query, "limit") {
        None => default_limit,
        Some(raw) => raw.parse::<u32>().map_err(|_| {
            ApiError::invalid(
                "limit",
                format!("{raw:?} is not a whole number from 1 to {PAGE_LIMIT_MAX}"),
            )
        })?,
    };
    let page = Page { offset, limit };
    page.check()
        .map_err(|(parameter, why)| ApiError::invalid(parameter, why))?;
    Ok(page)
}

/// `q`, trimmed; blank is none.
fn search_of(query: &QueryParams) -> Result<Option<String>, ApiError> {
    let search = given(query, "q").map(|text| text.trim().to_string());
    check_search(&search).map_err(|(parameter, why)| ApiError::invalid(parameter, why))?;
    Ok(search)
}

/// The join listing a query asks for.
pub fn join_listing(
    query: &QueryParams,
    actor: Actor,
    default_limit: u32,
) -> Result<ListJoins, ApiError> {
    Ok(ListJoins {
        actor,
        state: given_enum(query, "state", "pending, rejected, all")?.unwrap_or_default(),
        search: search_of(query)?,
        join_id: None,
        page: page_of(query, default_limit)?,
    })
}

/// The node listing a query asks for.
pub fn node_listing(
    query: &QueryParams,
    actor: Actor,
    default_limit: u32,
) -> Result<ListNodes, ApiError> {
    Ok(ListNodes {
        actor,
        search: search_of(query)?,
        health: given_enum(query, "health", "green, yellow, red, gray")?,
        online: query_bool(query, "online")?,
        placement: given_enum(query, "placement", "machine, host, container")?,
        paired: query_bool(query, "paired")?,
        ids: None,
        page: page_of(query, default_limit)?,
    })
}

pub async fn list_joins(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<Joins>, ApiError> {
    let query = QueryParams::parse(&uri, JOIN_LISTING)?;
    let request = join_listing(&query, actor, PAGE_LIMIT_DEFAULT)?;
    Ok(Json(ask(&state, &request).await?))
}

pub async fn approve_join(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JoinId(join_id): JoinId,
    JsonBody(body): JsonBody<ApproveBody>,
) -> Result<Response, ApiError> {
    if body.node_id.is_some_and(|node_id| node_id.get() <= 0) {
        return Err(ApiError::invalid(
            "node_id",
            "must be a positive whole number",
        ));
    }
    let request = ApproveJoin {
        actor,
        join_id,
        node_id: body.node_id,
    };
    let approved: Approved = ask(&state, &request).await?;
    let detail = json!({"requested_node_id": body.node_id, "node_id": approved.node_id});
    Ok(acted(StatusCode::OK, approved, detail))
}

pub async fn reject_join(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JoinId(join_id): JoinId,
) -> Result<Json<Done>, ApiError> {
    let request = DecideJoin { actor, join_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::RejectJoin(request),
        )
        .await?,
    ))
}

pub async fn reopen_join(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JoinId(join_id): JoinId,
) -> Result<Json<Done>, ApiError> {
    let request = DecideJoin { actor, join_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::ReopenJoin(request),
        )
        .await?,
    ))
}

pub async fn list_nodes(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<Nodes>, ApiError> {
    let query = QueryParams::parse(&uri, NODE_LISTING)?;
    let request = node_listing(&query, actor, PAGE_LIMIT_DEFAULT)?;
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get_node(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<NodeView>, ApiError> {
    let request = NodeRef { actor, node_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::GetNode(request),
        )
        .await?,
    ))
}

pub async fn disconnect_node(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<Done>, ApiError> {
    let request = NodeRef { actor, node_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::DisconnectNode(request),
        )
        .await?,
    ))
}

pub async fn create_job(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<CreateJobBody>,
) -> Result<Response, ApiError> {
    if body.primitive.trim().is_empty() {
        return Err(ApiError::invalid("primitive", "must name a primitive"));
    }
    // Issue 27: a service's word (a backup, a restore, a release's apply) is never made here;
    // the answer names that service's route. The agent channel holds every job to the same
    // declaration, whichever door it came by.
    if let Some(refusal) = primitives::find(&body.primitive).and_then(Primitive::operator_refusal) {
        return Err(ApiError::forbidden(refusal));
    }
    let request = CreateJob {
        actor,
        node_id,
        primitive: body.primitive.clone(),
        params: body.params.clone(),
    };
    let created: JobCreated = ask(&state, &request).await?;
    let detail = json!({"primitive": body.primitive, "params": body.params, "job_id": created.id});
    Ok(acted(StatusCode::CREATED, created, detail))
}

pub async fn list_jobs(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<Jobs>, ApiError> {
    let query = QueryParams::parse(&uri, &["node_id", "state", "limit"])?;
    let node_id = query.get::<NodeId>("node_id", "a positive whole number")?;
    if node_id.is_some_and(|node_id| node_id.get() <= 0) {
        return Err(ApiError::invalid(
            "node_id",
            "must be a positive whole number",
        ));
    }
    let job_state: Option<JobState> = query_enum(
        &query,
        "state",
        "pending, running, completed, failed, refused, lost, withdrawn",
    )?;
    let limit = query.get::<u32>("limit", "a whole number from 1 to 1000")?;
    if limit.is_some_and(|limit| limit == 0 || limit > JOB_LIST_LIMIT_MAX) {
        return Err(ApiError::invalid("limit", "must be from 1 to 1000"));
    }
    let request = ListJobs {
        actor,
        node_id,
        state: job_state,
        limit,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get_job(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JobId(job_id): JobId,
) -> Result<Json<JobView>, ApiError> {
    let request = JobRef { actor, job_id };
    Ok(Json(
        ask(&state, &capstan_events::agent_channel::rpc::GetJob(request)).await?,
    ))
}

pub async fn job_output(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JobId(job_id): JobId,
    uri: Uri,
) -> Result<Json<JobOutput>, ApiError> {
    let query = QueryParams::parse(&uri, &["offset"])?;
    let offset = query
        .get::<u64>("offset", "a whole number of bytes")?
        .unwrap_or(0);
    let request = JobOutputRequest {
        actor,
        job_id,
        offset,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn cancel_job(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JobId(job_id): JobId,
) -> Result<Json<Done>, ApiError> {
    let request = JobRef { actor, job_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::CancelJobRequest(request),
        )
        .await?,
    ))
}

pub async fn mark_job_failed(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JobId(job_id): JobId,
) -> Result<Json<Done>, ApiError> {
    let request = JobRef { actor, job_id };
    Ok(Json(
        ask(
            &state,
            &capstan_events::agent_channel::rpc::MarkJobFailed(request),
        )
        .await?,
    ))
}

pub async fn refusal_count(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    uri: Uri,
) -> Result<Json<RefusalCount>, ApiError> {
    let query = QueryParams::parse(&uri, &["window_secs"])?;
    let window_secs = query
        .get::<u64>("window_secs", "a whole number of seconds")?
        .unwrap_or(REFUSAL_WINDOW_DEFAULT_SECS);
    if window_secs == 0 || window_secs > REFUSAL_WINDOW_MAX_SECS {
        return Err(ApiError::invalid(
            "window_secs",
            format!("must be from 1 to {REFUSAL_WINDOW_MAX_SECS} seconds"),
        ));
    }
    let request = RefusalCountRequest {
        actor,
        node_id,
        window_secs,
    };
    Ok(Json(ask(&state, &request).await?))
}
