//! `/api/v1/rollouts` (issue 16): staged rollouts of a site release and patch runs. Reading is
//! level 7; starting, stopping, pausing, resuming and retrying 8; a rollout to every node
//! (`"all": true`) 10, which rollouts checks with the actor's level. Rollouts owns every rule.

use crate::route::schema;
use axum::{extract::State, routing::on, Json};
use capstan_events::rollouts::staged::{
    ActOnRollout, GetRollout, ListRollouts, RolloutView, Rollouts, StageRequest, StartRollout,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, PathId},
    route::{Method, Route},
    AppState,
};

use capstan_events::rpc::Level::{Change, Read};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/rollouts",
        Read,
        |filter| on(filter, list),
        None,
    )
    .answer(schema::<capstan_events::rollouts::staged::Rollouts>),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts",
        Change,
        |filter| on(filter, start),
        Some("start_rollout"),
    )
    .body(schema::<RolloutBody>)
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
    Route::operator(
        Method::Get,
        "/api/v1/rollouts/{id}",
        Read,
        |filter| on(filter, get),
        None,
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/stop",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "stop")),
        Some("stop_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/pause",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "pause")),
        Some("pause_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/resume",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "resume")),
        Some("resume_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/retry",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "retry")),
        Some("retry_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>),
];

/// `POST /api/v1/rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RolloutBody {
    /// `release` (the default) or `patch`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The site release to apply (a `release` rollout).
    #[serde(default)]
    pub version: Option<String>,
    /// The stages in order: each its nodes, and optionally its error budget and soak.
    #[serde(default)]
    pub stages: Vec<StageRequest>,
    /// Every node that hosts a site, in the deploy-to-all plan (level 10).
    #[serde(default)]
    pub all: bool,
    /// Up to five pages, one a line, `<viewer> <path>` (`admin` or `anonymous`).
    #[serde(default)]
    pub pages: Option<String>,
}

pub async fn list(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Rollouts>, ApiError> {
    Ok(Json(ask(&state, &ListRollouts { actor }).await?))
}

pub async fn start(
    State(state): State<AppState>,
    Operator(actor): Operator,
    JsonBody(body): JsonBody<RolloutBody>,
) -> Result<Json<RolloutView>, ApiError> {
    let request = StartRollout {
        actor,
        kind: body.kind,
        version: body.version,
        stages: body.stages,
        all: body.all,
        pages: body.pages,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(rollout_id): PathId,
) -> Result<Json<RolloutView>, ApiError> {
    Ok(Json(ask(&state, &GetRollout { actor, rollout_id }).await?))
}

async fn act(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(rollout_id): PathId,
    act: &'static str,
) -> Result<Json<RolloutView>, ApiError> {
    let request = ActOnRollout {
        actor,
        rollout_id,
        act: act.to_string(),
    };
    Ok(Json(ask(&state, &request).await?))
}
