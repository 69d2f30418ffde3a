//! `/api/v1/backups/targets`: the backups service's targets (BK-04, level 10). A target's keys
//! go in once, with its POST, and are never shown again; `/api/v1/backups/coverage` says how
//! many nodes back up to each and which are not backed up. `/api/v1/backups/policy` and
//! `/api/v1/nodes/{id}/backups/...`: the fleet policy, a node's position (BK-08), its backups
//! (BK-20, BK-25) and the acts that take its machine's turn (BK-09), each answering
//! `202 {"job_id"}` or `409` naming what holds the turn.

use crate::api_doc::{refusals, Answer, Doc, Parameter};
use crate::route::schema;
use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use capstan_events::backups::rpc::{
    BackupMode, CreateTarget, Dispatched, FleetCoverage, FleetCoverageRequest, FleetPolicy,
    FleetPolicyView, GetNodePolicy, GetPolicy, ListTargets, MoveRequest, NodeBackups,
    NodeBackupsRequest, NodePolicyBody, NodePolicyView, PolicyFields, RestoreRequest, RestoreWhat,
    RunNow, SetDefaultTarget, SetNodePolicy, SetPolicy, TargetView, Targets, VerifyRequest,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, NodePath, PathId},
    route::{Method, Route},
    AppState,
};

use capstan_events::rpc::Level::{Admin, Change, Read};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/backups/targets",
        Admin,
        |filter| on(filter, list_targets),
        None,
    )
    .answer(schema::<capstan_events::backups::rpc::Targets>)
    .doc(Doc {
        operation: "listBackupTargets",
        tag: "backups",
        summary: "Every backup target, without its credentials (BK-04)",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/backups/targets",
        Admin,
        |filter| on(filter, create_target),
        Some("create_backup_target"),
    )
    .body(schema::<TargetBody>)
    .answer(schema::<capstan_events::backups::rpc::TargetView>)
    .doc(Doc {
        operation: "createBackupTarget",
        tag: "backups",
        summary: "Add a backup target (BK-04)",
        description: Some(
            "Audited. The keys are tried (a listing of the folder), sealed at rest \
            and never shown again.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/backups/targets/{id}/default",
        Admin,
        |filter| on(filter, set_default_target),
        Some("set_default_backup_target"),
    )
    .answer(schema::<capstan_events::backups::rpc::TargetView>)
    .doc(Doc {
        operation: "setDefaultBackupTarget",
        tag: "backups",
        summary: "Make a target where new backups go (BK-04)",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The target's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/backups/coverage",
        Admin,
        |filter| on(filter, coverage),
        None,
    )
    .answer(schema::<capstan_events::backups::rpc::FleetCoverage>)
    .doc(Doc {
        operation: "backupCoverage",
        tag: "backups",
        summary: "How many nodes back up to each target, and which are not backed up and why \
            (BK-04, BK-22)",
        description: Some(
            "A node is not backed up when it is switched off (its own decision or \
            the fleet's), holds no proven recovery key of its own, or has no storage space while \
            no target is where new backups go. At most 200 uncovered nodes are listed; \
            uncovered_count is the whole number.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/backups/policy",
        Read,
        |filter| on(filter, get_policy),
        None,
    )
    .answer(schema::<capstan_events::backups::rpc::FleetPolicyView>)
    .doc(Doc {
        operation: "getBackupPolicy",
        tag: "backups",
        summary: "The fleet backup policy (BK-05, BK-08)",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/backups/policy",
        Admin,
        |filter| on(filter, set_policy),
        Some("set_backup_policy"),
    )
    .body(schema::<capstan_events::backups::rpc::FleetPolicy>)
    .answer(schema::<capstan_events::backups::rpc::FleetPolicyView>)
    .doc(Doc {
        operation: "setBackupPolicy",
        tag: "backups",
        summary: "Set the fleet backup policy (BK-08)",
        description: Some("Audited. The whole policy: enabled and the field set."),
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/backups/policy",
        Read,
        |filter| on(filter, get_node_policy),
        None,
    )
    .answer(schema::<capstan_events::backups::rpc::NodePolicyView>)
    .doc(Doc {
        operation: "getNodeBackupPolicy",
        tag: "backups",
        summary: "A node's backup position and the schedule in force (BK-08)",
        description: None,
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/nodes/{id}/backups/policy",
        Admin,
        |filter| on(filter, set_node_policy),
        Some("set_node_backup_policy"),
    )
    .body(schema::<capstan_events::backups::rpc::NodePolicyBody>)
    .answer(schema::<capstan_events::backups::rpc::NodePolicyView>)
    .doc(Doc {
        operation: "setNodeBackupPolicy",
        tag: "backups",
        summary: "Set a node's backup position: fleet, own (the whole field set frozen) or off \
            (BK-08)",
        description: Some(
            "Audited. For own, a field left out is frozen at the fleet's value of \
            the moment.",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/backups",
        Read,
        |filter| on(filter, node_backups),
        None,
    )
    .answer(schema::<capstan_events::backups::rpc::NodeBackups>)
    .doc(Doc {
        operation: "getNodeBackups",
        tag: "backups",
        summary: "A node's chains, last backup, last full, oldest, verify state (BK-20, BK-25)",
        description: None,
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/backups/run",
        Change,
        |filter| on(filter, run_now),
        Some("run_backup"),
    )
    .answer(schema::<capstan_events::backups::rpc::Dispatched>)
    .doc(Doc {
        operation: "runBackup",
        tag: "backups",
        summary: "Take a backup now (BK-09: one at a time per machine)",
        description: Some("Audited. 409 names the job that holds the machine's turn."),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::new(202, "Asked of the agent channel: its job's id."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/backups/verify",
        Change,
        |filter| on(filter, verify),
        Some("verify_backup"),
    )
    .body(schema::<VerifyBody>)
    .answer(schema::<capstan_events::backups::rpc::Dispatched>)
    .doc(Doc {
        operation: "verifyBackup",
        tag: "backups",
        summary: "Verify a run: level 2 opens and reads, level 3 rehearses a restore (BK-26)",
        description: Some("Audited. 409 names the job that holds the machine's turn."),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::new(202, "Asked of the agent channel: its job's id."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/backups/restore",
        Admin,
        |filter| on(filter, restore),
        Some("restore_backup"),
    )
    .body(schema::<RestoreBody>)
    .answer(schema::<capstan_events::backups::rpc::Dispatched>)
    .doc(Doc {
        operation: "restoreBackup",
        tag: "backups",
        summary: "Restore a run's database or project (BK-25, BK-28)",
        description: Some(
            "Audited. The node's own policy for destructive words applies. 409 \
            names the job that holds the machine's turn.",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::new(202, "Asked of the agent channel: its job's id."),
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/backups/move",
        Admin,
        |filter| on(filter, move_node),
        Some("move_backups"),
    )
    .body(schema::<MoveBody>)
    .answer(schema::<capstan_events::backups::rpc::Dispatched>)
    .doc(Doc {
        operation: "moveBackups",
        tag: "backups",
        summary: "Send a node's new backups to another target; the old space drains, nothing is \
            copied (BK-02)",
        description: Some(
            "Audited. A full is dispatched at once in the new space. 409 names the \
            job that holds the machine's turn.",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::new(202, "Asked of the agent channel: its job's id."),
        refusals: refusals::ONE_IN_STATE,
    }),
];

pub async fn list_targets(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Targets>, ApiError> {
    Ok(Json(ask(&state, &ListTargets { actor }).await?))
}

/// `GET /api/v1/backups/coverage`: how many nodes back up to each target, and which nodes are
/// not backed up and why.
pub async fn coverage(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<FleetCoverage>, ApiError> {
    Ok(Json(ask(&state, &FleetCoverageRequest { actor }).await?))
}

/// `POST /api/v1/backups/targets`: a new target. The keys are sealed at rest by the backups
/// service and never returned.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TargetBody {
    pub name: String,
    /// `backblaze`, `amazon_s3`, `linode`, `cloudflare_r2`, `wasabi`, `digitalocean_spaces`,
    /// `hetzner` or `generic_s3`.
    pub provider: String,
    /// `https://host[:port]` (plain `http://` only to a loopback address).
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    /// The prefix the plane's objects go under; may be empty.
    #[serde(default)]
    pub folder: String,
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for TargetBody {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("TargetBody")
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .finish_non_exhaustive()
    }
}

pub async fn create_target(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<TargetBody>,
) -> Result<Response, ApiError> {
    let request = CreateTarget {
        actor,
        name: body.name,
        provider: body.provider,
        endpoint: body.endpoint,
        region: body.region,
        bucket: body.bucket,
        folder: body.folder,
        access_key: body.access_key,
        secret_key: body.secret_key,
    };
    let created: TargetView = ask(&state, &request).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn set_default_target(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(target_id): PathId,
) -> Result<Json<TargetView>, ApiError> {
    Ok(Json(
        ask(&state, &SetDefaultTarget { actor, target_id }).await?,
    ))
}

pub async fn get_policy(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<FleetPolicyView>, ApiError> {
    Ok(Json(ask(&state, &GetPolicy { actor }).await?))
}

/// The body of `PUT /api/v1/backups/policy` ([`FleetPolicy`]'s shape), read flat: serde's
/// `flatten` buffers the fields it passes on and loses their names, so a bad `keep_weekly`
/// would be refused as a bad `body`. Read this way, each bad field is named.
#[derive(Deserialize)]
pub struct FleetPolicyBody {
    enabled: bool,
    every_minutes: u32,
    window_start_hour: u8,
    window_hours: u8,
    mode: BackupMode,
    keep_days: u32,
    full_every_days: u32,
    verify_every_days: u32,
    // The tiers (beyond the spec) may be left out: none.
    #[serde(default)]
    keep_daily: u32,
    #[serde(default)]
    keep_weekly: u32,
    #[serde(default)]
    keep_monthly: u32,
}

impl From<FleetPolicyBody> for FleetPolicy {
    fn from(body: FleetPolicyBody) -> FleetPolicy {
        FleetPolicy {
            enabled: body.enabled,
            fields: PolicyFields {
                every_minutes: body.every_minutes,
                window_start_hour: body.window_start_hour,
                window_hours: body.window_hours,
                mode: body.mode,
                keep_days: body.keep_days,
                full_every_days: body.full_every_days,
                verify_every_days: body.verify_every_days,
                keep_daily: body.keep_daily,
                keep_weekly: body.keep_weekly,
                keep_monthly: body.keep_monthly,
            },
        }
    }
}

/// `PUT /api/v1/backups/policy`: the whole fleet policy.
pub async fn set_policy(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<FleetPolicyBody>,
) -> Result<Json<FleetPolicyView>, ApiError> {
    let policy = FleetPolicy::from(body);
    Ok(Json(ask(&state, &SetPolicy { actor, policy }).await?))
}

pub async fn get_node_policy(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<NodePolicyView>, ApiError> {
    Ok(Json(ask(&state, &GetNodePolicy { actor, node_id }).await?))
}

/// `PUT /api/v1/nodes/{id}/backups/policy`: `{"position": "fleet" | "own" | "off", ...}`.
pub async fn set_node_policy(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<NodePolicyBody>,
) -> Result<Json<NodePolicyView>, ApiError> {
    Ok(Json(
        ask(
            &state,
            &SetNodePolicy {
                actor,
                node_id,
                body,
            },
        )
        .await?,
    ))
}

pub async fn node_backups(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<NodeBackups>, ApiError> {
    Ok(Json(
        ask(&state, &NodeBackupsRequest { actor, node_id }).await?,
    ))
}

fn accepted(dispatched: Dispatched) -> Response {
    (StatusCode::ACCEPTED, Json(dispatched)).into_response()
}

pub async fn run_now(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Response, ApiError> {
    let dispatched = ask(&state, &RunNow { actor, node_id }).await?;
    Ok(accepted(dispatched))
}

/// `POST /api/v1/nodes/{id}/backups/verify`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct VerifyBody {
    /// 2: open and read every artifact; 3: rehearse the restore into scratch.
    pub level: u8,
    /// The run to verify (with the chain it extends).
    pub seq: i64,
}

pub async fn verify(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<VerifyBody>,
) -> Result<Response, ApiError> {
    let request = VerifyRequest {
        actor,
        node_id,
        level: body.level,
        seq: body.seq,
    };
    Ok(accepted(ask(&state, &request).await?))
}

/// `POST /api/v1/nodes/{id}/backups/restore` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreBody {
    /// The run to bring back (the last full and every incremental up to it, BK-25).
    pub seq: i64,
    /// `database` or `project` (database and files).
    pub what: RestoreWhat,
}

pub async fn restore(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<RestoreBody>,
) -> Result<Response, ApiError> {
    let request = RestoreRequest {
        actor,
        node_id,
        seq: body.seq,
        what: body.what,
    };
    Ok(accepted(ask(&state, &request).await?))
}

/// `POST /api/v1/nodes/{id}/backups/move` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct MoveBody {
    /// Where the node's new backups go.
    pub target_id: i64,
}

pub async fn move_node(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<MoveBody>,
) -> Result<Response, ApiError> {
    let request = MoveRequest {
        actor,
        node_id,
        target_id: body.target_id,
    };
    Ok(accepted(ask(&state, &request).await?))
}
