//! Staged rollouts (issue 16): the events a rollout tells the world as it goes, and the
//! questions the gateway asks for operators. Levels (decision 6.2-3): reading 7, starting,
//! stopping, pausing, resuming and retrying 8, starting a rollout of a release to every node 10.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::rpc::Actor;
use crate::Domain;

// The rpcs under `capstan.rpc.rollouts.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::Rollouts;
    "start_rollout": StartRollout => RolloutView,
    "list_rollouts": ListRollouts => Rollouts,
    "get_rollout": GetRollout => RolloutView,
    "act_on_rollout": ActOnRollout => RolloutView,
}

/// A rollout began.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutStarted {
    pub rollout_id: i64,
    pub kind: RolloutKind,
    /// The release applied (empty for a patch run).
    pub version: String,
    /// Each stage's nodes, in order.
    pub stages: Vec<Vec<NodeId>>,
    pub started_by: String,
}
crate::message!(Domain::Rollouts, Event, RolloutStarted, "started");

/// One node's step reached its verdict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutStepFinished {
    pub rollout_id: i64,
    pub step_id: i64,
    pub node_id: NodeId,
    pub stage: u32,
    /// `passed`, `failed` or `skipped`.
    pub verdict: StepVerdict,
    pub reason: Option<String>,
}
crate::message!(
    Domain::Rollouts,
    Event,
    RolloutStepFinished,
    "step_finished"
);

/// A rollout ended halted at a node (RO-14), naming it and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutHalted {
    pub rollout_id: i64,
    pub node_id: NodeId,
    pub reason: String,
}
crate::message!(Domain::Rollouts, Event, RolloutHalted, "halted");

/// A rollout ended: every stage done (`finished`) or ended by an operator (`stopped`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutFinished {
    pub rollout_id: i64,
    /// `finished` or `stopped`.
    pub state: RolloutState,
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
}
crate::message!(Domain::Rollouts, Event, RolloutFinished, "finished");

/// One stage of a rollout an operator starts.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageRequest {
    pub nodes: Vec<NodeId>,
    /// How many of the stage's nodes may miss before the rollout halts (default 0: the first
    /// miss halts, as the spec has it).
    #[serde(default)]
    pub max_failed: Option<u32>,
    /// The same as a share of the stage's nodes, 0 to 100 (instead of `max_failed`).
    #[serde(default)]
    pub max_failed_percent: Option<u8>,
    /// Seconds the stage's nodes are watched after its last step passed; an incident opened
    /// on one meanwhile halts the rollout.
    #[serde(default)]
    pub soak_secs: Option<u32>,
}

/// `POST /api/v1/rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StartRollout {
    pub actor: Actor,
    /// `release` (default) or `patch`.
    #[serde(default)]
    pub kind: Option<String>,
    /// The site release to apply (a `release` rollout).
    #[serde(default)]
    pub version: Option<String>,
    /// The stages in order. Omitted with `all: true`: the plane plans them (deploy to all).
    #[serde(default)]
    pub stages: Vec<StageRequest>,
    /// Every node that hosts a site, in the deploy-to-all plan (RO-24); level 10.
    #[serde(default)]
    pub all: bool,
    /// Up to five pages, one a line, `<viewer> <path>` (RO-21).
    #[serde(default)]
    pub pages: Option<String>,
}

/// `GET /api/v1/rollouts`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListRollouts {
    pub actor: Actor,
}

/// `GET /api/v1/rollouts/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetRollout {
    pub actor: Actor,
    pub rollout_id: i64,
}

/// `POST /api/v1/rollouts/{id}/{act}`: `stop`, `pause`, `resume` or `retry`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ActOnRollout {
    pub actor: Actor,
    pub rollout_id: i64,
    pub act: String,
}

/// A page's answer as a step keeps it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeView {
    pub viewer: String,
    pub path: String,
    /// What it answered before the apply (`null`: no check before).
    pub before: Option<ProbeAnswer>,
    /// What it answered after it (`null`: no check after, yet or at all).
    pub after: Option<ProbeAnswer>,
}

/// What one page_probe answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProbeAnswer {
    pub status: Option<u16>,
    pub errors: u32,
    pub failed_assets: Vec<String>,
}

/// One node's step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StepView {
    pub step_id: i64,
    pub node_id: NodeId,
    pub node_name: String,
    pub machine: String,
    pub stage: u32,
    pub phase: StepPhase,
    pub verdict: StepVerdict,
    pub reason: Option<String>,
    /// Why it waits, when something holds it (RO-17).
    pub waiting_on: Option<String>,
    pub attempt: u32,
    pub probes: Vec<ProbeView>,
    pub updated_at: DateTime<Utc>,
}

/// One stage's rules.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct StageView {
    pub stage: u32,
    pub max_failed: Option<u32>,
    pub max_failed_percent: Option<u8>,
    pub soak_secs: u32,
}

/// What a rollout rolls out.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RolloutKind {
    /// A site release, applied with `apply_update` (staged rollouts and deploy-to-all).
    Release,
    /// A patch run: `install_security_updates` on each machine, one at a time (RO-25).
    Patch,
}

/// Where one node's step is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StepPhase {
    Waiting,
    Preflight,
    ProbesBefore,
    Apply,
    ProbesAfter,
    Done,
}

/// RO-10: a step's verdict.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum StepVerdict {
    Pending,
    Running,
    Passed,
    Failed,
    Skipped,
}

/// Where a rollout is.
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    Serialize,
    Deserialize,
    JsonSchema,
    strum::IntoStaticStr,
    strum::AsRefStr,
    strum::Display,
    strum::EnumString,
    strum::EnumIter,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RolloutState {
    Running,
    /// No step starts; steps already applying are still judged.
    Paused,
    /// RO-14: a node missed past its stage's budget; applies under way are still judged.
    Halting,
    Halted,
    /// RO-15: ended at once by an operator.
    Stopped,
    Finished,
}

impl RolloutState {
    /// RO-16: a rollout in this state holds the one turn a plane has (and its page refreshes
    /// itself: it is still moving).
    pub fn active(self) -> bool {
        matches!(
            self,
            RolloutState::Running | RolloutState::Paused | RolloutState::Halting
        )
    }
}

/// A rollout as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RolloutView {
    pub id: i64,
    pub kind: RolloutKind,
    pub version: String,
    pub state: RolloutState,
    pub stage: u32,
    pub stages: Vec<StageView>,
    pub pages: Vec<String>,
    pub soak_until: Option<DateTime<Utc>>,
    pub halted_at_node: Option<NodeId>,
    pub halt_reason: Option<String>,
    pub started_by: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub passed: u32,
    pub failed: u32,
    pub skipped: u32,
    pub total: u32,
    /// Only in a single rollout's answer.
    #[serde(default)]
    pub steps: Vec<StepView>,
    /// Nodes a deploy to all left out, and why (RO-24).
    #[serde(default)]
    pub left_out: Vec<LeftOutView>,
}

/// A node a plan left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct LeftOutView {
    pub node_id: NodeId,
    pub name: String,
    pub reason: String,
}

/// Every rollout, newest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Rollouts {
    pub rollouts: Vec<RolloutView>,
}
