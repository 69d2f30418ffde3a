//! `/api/v1/backups/targets`: the backups service's targets (BK-04, level 10). A target's keys
//! go in once, with its POST, and are never shown again.

use axum::{
    extract::State,
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::{on, MethodFilter, MethodRouter},
    Json,
};
use capstan_events::backups::rpc::{
    ops, CreateTarget, ListTargets, SetDefaultTarget, TargetView, Targets,
};
use capstan_events::Domain;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask_of,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, PathId},
    route::{Access, Method, Op, Route},
    AppState,
};

/// What each backups route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BackupsOp {
    ListTargets,
    CreateTarget,
    SetDefaultTarget,
}

use capstan_events::rpc::Level::Admin;

const fn row(
    method: Method,
    path: &'static str,
    level: capstan_events::rpc::Level,
    op: BackupsOp,
    action: Option<&'static str>,
) -> Route {
    Route {
        method,
        path,
        access: Access::Operator(level),
        op: Op::Backups(op),
        action,
    }
}

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    row(
        Method::Get,
        "/api/v1/backups/targets",
        Admin,
        BackupsOp::ListTargets,
        None,
    ),
    row(
        Method::Post,
        "/api/v1/backups/targets",
        Admin,
        BackupsOp::CreateTarget,
        Some("create_backup_target"),
    ),
    row(
        Method::Post,
        "/api/v1/backups/targets/{id}/default",
        Admin,
        BackupsOp::SetDefaultTarget,
        Some("set_default_backup_target"),
    ),
];

/// The handler of `op`.
pub fn handler(filter: MethodFilter, op: BackupsOp) -> MethodRouter<AppState> {
    match op {
        BackupsOp::ListTargets => on(filter, list_targets),
        BackupsOp::CreateTarget => on(filter, create_target),
        BackupsOp::SetDefaultTarget => on(filter, set_default_target),
    }
}

async fn ask<Req: Serialize, Resp: serde::de::DeserializeOwned>(
    state: &AppState,
    op: &str,
    request: &Req,
) -> Result<Resp, ApiError> {
    ask_of(state, Domain::Backups, op, request).await
}

pub async fn list_targets(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Targets>, ApiError> {
    Ok(Json(
        ask(&state, ops::LIST_TARGETS, &ListTargets { actor }).await?,
    ))
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
    let created: TargetView = ask(&state, ops::CREATE_TARGET, &request).await?;
    Ok((StatusCode::CREATED, Json(created)).into_response())
}

pub async fn set_default_target(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(target_id): PathId,
) -> Result<Json<TargetView>, ApiError> {
    Ok(Json(
        ask(
            &state,
            ops::SET_DEFAULT_TARGET,
            &SetDefaultTarget { actor, target_id },
        )
        .await?,
    ))
}
