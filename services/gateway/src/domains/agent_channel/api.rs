//! The operator JSON API: each handler extracts and validates its input, asks the agent channel
//! with the operator as the [`Actor`], and maps the answer. Who may call which route is the
//! route table's business ([`crate::routes`]); what an actor may do to a given node or job is
//! the agent channel's.

use crate::api_doc::{refusals, Answer, Body, Doc, Parameter};
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
        .answer(schema::<capstan_events::agent_channel::rpc::Joins>)
    .doc(Doc {
        operation: "listJoins",
        tag: "joins",
        summary: "List join requests",
        description: Some("One page of the join requests, newest first; `page` says which rows \
            these are, how many match in all and where the next page starts. A bad parameter is \
            `400 invalid_request` naming it."),
        parameters: &[
            Parameter::Query {
                name: "state",
                description: "Which joins: `pending` (default), `rejected` (reopenable for a day) \
                    or `all`.",
                schema: r##"{"default": "pending", "enum": ["pending", "rejected", "all"], "type": "string"}"##,
            },
            Parameter::Query {
                name: "q",
                description: "Joins whose name, source address, a reported address or fingerprint \
                    holds this text (case-insensitive; spaces and colons are ignored for the \
                    fingerprint). At most 200 characters.",
                schema: r##"{"maxLength": 200, "type": "string"}"##,
            },
            Parameter::Query {
                name: "offset",
                description: "Skip this many matching rows (0 by default, at most 1000000): the \
                    `next_offset` of the answer's `page` asks for the next page.",
                schema: r##"{"default": 0, "maximum": 1000000, "minimum": 0, "type": "integer"}"##,
            },
            Parameter::Query {
                name: "limit",
                description: "At most this many rows (1 to 500, 100 by default).",
                schema: r##"{"default": 100, "maximum": 500, "minimum": 1, "type": "integer"}"##,
            },
        ],
        body: None,
        answer: Answer::new(200, "The page of joins."),
        refusals: refusals::LISTING,
    }),
    Route::act(
        "/api/v1/joins/{id}/approve",
        Admin,
        |filter| on(filter, approve_join),
        "approve_join",
    )
    .body(schema::<ApproveBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::Approved>)
    .doc(Doc {
        operation: "approveJoin",
        tag: "joins",
        summary: "Approve a join",
        description: Some("Compare the fingerprint with the one the node shows before approving. \
            Audited."),
        parameters: &[
            Parameter::Shared("JoinId"),
        ],
        body: Some(Body {
            description: Some("`{}` binds the key to a new node; `{\"node_id\": N}` to node N."),
            required: false,
            schema: None,
        }),
        answer: Answer::new(200, "The node the key now belongs to."),
        refusals: &[
            refusals::BAD_REQUEST,
            refusals::UNAUTHORIZED,
            refusals::FORBIDDEN,
            refusals::NOT_FOUND,
            refusals::CONFLICT,
            refusals::UNPROCESSABLE,
            refusals::INTERNAL,
            refusals::UNAVAILABLE,
        ],
    }),
    Route::act(
        "/api/v1/joins/{id}/reject",
        Admin,
        |filter| on(filter, reject_join),
        "reject_join",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "rejectJoin",
        tag: "joins",
        summary: "Reject a join",
        description: Some("Audited."),
        parameters: &[
            Parameter::Shared("JoinId"),
        ],
        body: Some(Body::IGNORED),
        answer: Answer::new(200, "Rejected; the key may be reopened for a day."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::act(
        "/api/v1/joins/{id}/reopen",
        Admin,
        |filter| on(filter, reopen_join),
        "reopen_join",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "reopenJoin",
        tag: "joins",
        summary: "Reopen a rejected join",
        description: Some("Audited."),
        parameters: &[
            Parameter::Shared("JoinId"),
        ],
        body: Some(Body::IGNORED),
        answer: Answer::new(200, "Pending again."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::read(Get, "/api/v1/nodes", Read, |filter| on(filter, list_nodes))
        .answer(schema::<capstan_events::agent_channel::rpc::Nodes>)
    .doc(Doc {
        operation: "listNodes",
        tag: "nodes",
        summary: "List nodes",
        description: Some("One page of the nodes, ordered by name then id, searched and filtered; \
            `page` says which rows these are, how many match in all and where the next page \
            starts. A bad parameter is `400 invalid_request` naming it."),
        parameters: &[
            Parameter::Query {
                name: "q",
                description: "Nodes whose name, a reported address or fingerprint holds this text \
                    (case-insensitive; spaces and colons are ignored for the fingerprint, so it \
                    may be pasted as shown), or whose number it is. At most 200 characters.",
                schema: r##"{"maxLength": 200, "type": "string"}"##,
            },
            Parameter::Query {
                name: "health",
                description: "Only nodes with this health dot (MO-07).",
                schema: r##"{"enum": ["green", "yellow", "red", "gray"], "type": "string"}"##,
            },
            Parameter::Query {
                name: "online",
                description: "Only nodes online (`true`) or not (`false`).",
                schema: r##"{"type": "boolean"}"##,
            },
            Parameter::Query {
                name: "placement",
                description: "Only machines, Docker hosts or containers (PV-15).",
                schema: r##"{"enum": ["machine", "host", "container"], "type": "string"}"##,
            },
            Parameter::Query {
                name: "paired",
                description: "Only nodes with (`true`) or without (`false`) a paired agent key.",
                schema: r##"{"type": "boolean"}"##,
            },
            Parameter::Query {
                name: "offset",
                description: "Skip this many matching rows (0 by default, at most 1000000): the \
                    `next_offset` of the answer's `page` asks for the next page.",
                schema: r##"{"default": 0, "maximum": 1000000, "minimum": 0, "type": "integer"}"##,
            },
            Parameter::Query {
                name: "limit",
                description: "At most this many rows (1 to 500, 100 by default).",
                schema: r##"{"default": 100, "maximum": 500, "minimum": 1, "type": "integer"}"##,
            },
        ],
        body: None,
        answer: Answer::new(200, "The page of nodes."),
        refusals: refusals::LISTING,
    }),
    Route::read(Get, "/api/v1/nodes/{id}", Read, |filter| {
        on(filter, get_node)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::NodeView>)
    .doc(Doc {
        operation: "getNode",
        tag: "nodes",
        summary: "One node",
        description: None,
        parameters: &[
            Parameter::Shared("NodeId"),
        ],
        body: None,
        answer: Answer::new(200, "The node."),
        refusals: refusals::ONE,
    }),
    Route::act(
        "/api/v1/nodes/{id}/disconnect",
        Admin,
        |filter| on(filter, disconnect_node),
        "disconnect_node",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "disconnectNode",
        tag: "nodes",
        summary: "Disconnect a node's agent",
        description: Some("Audited."),
        parameters: &[
            Parameter::Shared("NodeId"),
        ],
        body: Some(Body::IGNORED),
        answer: Answer::new(200, "Disconnected: the node has no operations until it pairs again."),
        refusals: refusals::ONE_IN_STATE,
    }),
    // Level 7 at the route: the agent channel refines it by the primitive's class (change 8,
    // destructive 10), which only it knows.
    Route::act(
        "/api/v1/nodes/{id}/jobs",
        Read,
        |filter| on(filter, create_job),
        "create_job",
    )
    .body(schema::<CreateJobBody>)
    .answer(schema::<capstan_events::agent_channel::rpc::JobCreated>)
    .doc(Doc {
        operation: "createJob",
        tag: "jobs",
        summary: "Ask for a job on a node",
        description: Some("Level 7 at the route; the agent channel then requires the primitive's \
            class: read 7, change 8, destructive 10 (`403 forbidden` below it). A primitive the \
            node's agent did not report is `422 needs_newer_agent`; a node without a paired agent \
            `422 not_paired`. Audited."),
        parameters: &[
            Parameter::Shared("NodeId"),
        ],
        body: None,
        answer: Answer::new(201, "The job, queued."),
        refusals: &[
            refusals::BAD_REQUEST,
            refusals::UNAUTHORIZED,
            refusals::FORBIDDEN,
            refusals::NOT_FOUND,
            refusals::CONFLICT,
            refusals::TOO_LARGE,
            refusals::UNPROCESSABLE,
            refusals::INTERNAL,
            refusals::UNAVAILABLE,
        ],
    }),
    Route::read(Get, "/api/v1/nodes/{id}/refusals", Read, |filter| {
        on(filter, refusal_count)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::RefusalCount>)
    .doc(Doc {
        operation: "refusalCount",
        tag: "nodes",
        summary: "How many jobs a node refused lately",
        description: None,
        parameters: &[
            Parameter::Shared("NodeId"),
            Parameter::Query {
                name: "window_secs",
                description: "How far back to count, in seconds (1 to 31622400; default 86400).",
                schema: r##"{"default": 86400, "maximum": 31622400, "minimum": 1, "type": "integer"}"##,
            },
        ],
        body: None,
        answer: Answer::new(200, "The count."),
        refusals: refusals::ONE,
    }),
    Route::read(Get, "/api/v1/jobs", Read, |filter| on(filter, list_jobs))
        .answer(schema::<capstan_events::agent_channel::rpc::Jobs>)
    .doc(Doc {
        operation: "listJobs",
        tag: "jobs",
        summary: "List jobs",
        description: None,
        parameters: &[
            Parameter::Query {
                name: "node_id",
                description: "Only this node's jobs.",
                schema: r##"{"format": "int64", "minimum": 1, "type": "integer"}"##,
            },
            Parameter::Query {
                name: "state",
                description: "Only jobs in this state.",
                schema: r##"{"enum": ["pending", "running", "completed", "failed", "refused", "lost", "withdrawn"], "type": "string"}"##,
            },
            Parameter::Query {
                name: "limit",
                description: "At most this many (1 to 1000).",
                schema: r##"{"maximum": 1000, "minimum": 1, "type": "integer"}"##,
            },
        ],
        body: None,
        answer: Answer::new(200, "The jobs."),
        refusals: refusals::LISTING,
    }),
    Route::read(Get, "/api/v1/jobs/{id}", Read, |filter| on(filter, get_job))
        .answer(schema::<capstan_events::agent_channel::rpc::JobView>)
    .doc(Doc {
        operation: "getJob",
        tag: "jobs",
        summary: "One job",
        description: None,
        parameters: &[
            Parameter::Shared("JobId"),
        ],
        body: None,
        answer: Answer::new(200, "The job."),
        refusals: refusals::ONE,
    }),
    Route::read(Get, "/api/v1/jobs/{id}/output", Read, |filter| {
        on(filter, job_output)
    })
    .answer(schema::<capstan_events::agent_channel::rpc::JobOutput>)
    .doc(Doc {
        operation: "jobOutput",
        tag: "jobs",
        summary: "A job's output from an offset",
        description: None,
        parameters: &[
            Parameter::Shared("JobId"),
            Parameter::Query {
                name: "offset",
                description: "Bytes of output already read (default 0).",
                schema: r##"{"default": 0, "minimum": 0, "type": "integer"}"##,
            },
        ],
        body: None,
        answer: Answer::new(200, "The output after `offset`, and the offset to ask from next."),
        refusals: refusals::ONE,
    }),
    Route::act(
        "/api/v1/jobs/{id}/cancel",
        Change,
        |filter| on(filter, cancel_job),
        "cancel_job",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "cancelJob",
        tag: "jobs",
        summary: "Cancel a job",
        description: Some("Audited."),
        parameters: &[
            Parameter::Shared("JobId"),
        ],
        body: Some(Body::IGNORED),
        answer: Answer::new(200, "Withdrawn."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::act(
        "/api/v1/jobs/{id}/mark-failed",
        Change,
        |filter| on(filter, mark_job_failed),
        "mark_job_failed",
    )
    .answer(schema::<capstan_events::agent_channel::rpc::Done>)
    .doc(Doc {
        operation: "markJobFailed",
        tag: "jobs",
        summary: "Mark a job failed",
        description: Some("Audited."),
        parameters: &[
            Parameter::Shared("JobId"),
        ],
        body: Some(Body::IGNORED),
        answer: Answer::new(200, "Failed."),
        refusals: refusals::ONE_IN_STATE,
    }),
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
