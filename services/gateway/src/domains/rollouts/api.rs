//! `/api/v1/rollouts` (issue 16): staged rollouts of a site release and patch runs. Reading is
//! level 7; starting, stopping, pausing, resuming and retrying 8; a rollout to every node
//! (`"all": true`) 10, which rollouts checks with the actor's level. Rollouts owns every rule.

use crate::api_doc::{refusals, Answer, Doc, Parameter};
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
    .answer(schema::<capstan_events::rollouts::staged::Rollouts>)
    .doc(Doc {
        operation: "listRollouts",
        tag: "rollouts",
        summary: "List rollouts, newest first",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts",
        Change,
        |filter| on(filter, start),
        Some("start_rollout"),
    )
    .body(schema::<RolloutBody>)
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "startRollout",
        tag: "rollouts",
        summary: "Start a staged rollout or a patch run",
        description: Some(
            "Audited. A `release` rollout applies a site release with \
            `apply_update` stage by stage (RO-10..RO-22): within a stage nodes go at once but one \
            at a time per machine; a node reporting `upgrade_preflight` is asked first; named \
            pages are checked with `page_probe` before and after; the first miss past the stage's \
            budget halts. A `patch` rollout runs `install_security_updates` one machine at a time \
            (RO-25..RO-29). `\"all\": true` plans every node hosting a site (deploy to all, \
            RO-24) and needs level 10. Refused with 409 while another rollout is under way, when \
            a `release` rollout names a version that was never published as a site release (`POST \
            /api/v1/site-releases`), naming the version, or when a named node is refused up front \
            (RO-18), naming each.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/rollouts/{id}",
        Read,
        |filter| on(filter, get),
        None,
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "getRollout",
        tag: "rollouts",
        summary: "A rollout with each node's step, verdict, reason and page checks before and \
            after",
        description: None,
        parameters: &[Parameter::Id("The rollout's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/stop",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "stop")),
        Some("stop_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "stopRollout",
        tag: "rollouts",
        summary: "Stop a rollout at once",
        description: Some(
            "Audited. An apply already running finishes on its node; nothing \
            further is queued (RO-15).",
        ),
        parameters: &[Parameter::Id("The rollout's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/pause",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "pause")),
        Some("pause_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "pauseRollout",
        tag: "rollouts",
        summary: "Pause a rollout",
        description: Some(
            "Audited. No step starts and no apply is asked for; applies already \
            asked for are still judged.",
        ),
        parameters: &[Parameter::Id("The rollout's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/resume",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "resume")),
        Some("resume_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "resumeRollout",
        tag: "rollouts",
        summary: "Resume a paused rollout",
        description: Some("Audited."),
        parameters: &[Parameter::Id("The rollout's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/rollouts/{id}/retry",
        Change,
        |filter| on(filter, |s, o, i| act(s, o, i, "retry")),
        Some("retry_rollout"),
    )
    .answer(schema::<capstan_events::rollouts::staged::RolloutView>)
    .doc(Doc {
        operation: "retryRollout",
        tag: "rollouts",
        summary: "Retry a halted or finished rollout's failed and left-out nodes",
        description: Some("Audited. Each retried step is a new try, so its jobs are new jobs."),
        parameters: &[Parameter::Id("The rollout's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE_IN_STATE,
    }),
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
