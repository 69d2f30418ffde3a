//! The questions asked of the backups service (`capstan.rpc.backups.*`): the operator's
//! (targets, from the gateway; each carries the [`Actor`], targets are level 10, BK-04) and the
//! broker's (`backup_urls`, asked by the agent channel for a node whose signed request it
//! verified, so it carries the node, not an operator).

use std::collections::BTreeMap;

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::Provider;
use crate::rpc::Actor;

// The rpcs under `capstan.rpc.backups.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::Backups;
    "list_targets": ListTargets => Targets,
    "create_target": CreateTarget => TargetView,
    "set_default_target": SetDefaultTarget => TargetView,
    // The broker: presigned URLs for a node's running backup job (the agent channel asks).
    "backup_urls": BackupUrls => BackupUrlsAnswer,
    // `GET /api/v1/backups/policy` (level 7).
    "get_policy": GetPolicy => FleetPolicyView,
    // `PUT /api/v1/backups/policy` (level 10, audited).
    "set_policy": SetPolicy => FleetPolicyView,
    // `GET /api/v1/nodes/{id}/backups/policy` (level 7).
    "get_node_policy": GetNodePolicy => NodePolicyView,
    // `PUT /api/v1/nodes/{id}/backups/policy` (level 10, audited).
    "set_node_policy": SetNodePolicy => NodePolicyView,
    // `GET /api/v1/nodes/{id}/backups` (level 7).
    "node_backups": NodeBackupsRequest => NodeBackups,
    // `POST /api/v1/nodes/{id}/backups/run` (level 8).
    "run_now": RunNow => Dispatched,
    // `POST /api/v1/nodes/{id}/backups/verify` (level 8).
    "verify": VerifyRequest => Dispatched,
    // `POST /api/v1/nodes/{id}/backups/restore` (level 10).
    "restore": RestoreRequest => Dispatched,
    // `POST /api/v1/nodes/{id}/backups/move` (level 10).
    "move": MoveRequest => Dispatched,
    // `GET /api/v1/backups/coverage` (level 10): how many nodes back up to each target, and
    // which are not backed up and why (the Targets page's fleet coverage, BK-04, BK-22).
    "fleet_coverage": FleetCoverageRequest => FleetCoverage,
}

/// `GET /api/v1/backups/targets` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListTargets {
    pub actor: Actor,
}

/// A target as the API shows it: never its credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TargetView {
    pub id: i64,
    pub name: String,
    pub provider: Provider,
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    pub folder: String,
    /// Whether new backups go here ("Where new backups go").
    pub is_default: bool,
    pub created_at: DateTime<Utc>,
}

/// `GET /api/v1/backups/targets`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Targets {
    pub targets: Vec<TargetView>,
    /// The key the targets' credentials are sealed with (issue 27).
    pub seal_key: SealKeyView,
}

/// Where the backups service's seal key is, never the key: without one no target can be added
/// or used, and without a copy of it a restored plane cannot open its targets' credentials.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SealKeyView {
    /// Whether a seal key is set.
    pub set: bool,
    /// The file it was read from: `CAPSTAN__BACKUPS__SEAL_KEY_FILE`, or the one `capstan all`
    /// made on its first run. `null` when the key was given directly or none is set.
    pub file: Option<String>,
}

/// `POST /api/v1/backups/targets` (level 10, audited). The keys are sealed at rest and never
/// shown again; they are left out of this type's `Debug`.
#[derive(Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateTarget {
    pub actor: Actor,
    pub name: String,
    /// One of [`Provider`]'s spellings.
    pub provider: String,
    /// `https://host[:port]` (plain `http://` only for a loopback address).
    pub endpoint: String,
    pub region: String,
    pub bucket: String,
    /// The prefix every object of this target is under; may be empty.
    pub folder: String,
    pub access_key: String,
    pub secret_key: String,
}

impl std::fmt::Debug for CreateTarget {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("CreateTarget")
            .field("actor", &self.actor)
            .field("name", &self.name)
            .field("provider", &self.provider)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("bucket", &self.bucket)
            .field("folder", &self.folder)
            .field("access_key", &"<redacted>")
            .field("secret_key", &"<redacted>")
            .finish()
    }
}

/// `POST /api/v1/backups/targets/{id}/default` (level 10, audited): new backups go there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetDefaultTarget {
    pub actor: Actor,
    pub target_id: i64,
}

/// rpc `backup_urls`: a node's request to the broker, after the agent channel verified its
/// signature and that `job_id` is this node's and running. The backups service checks the rest
/// (the word allows `op`, the keys are the job's own) and presigns.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupUrls {
    pub node_id: NodeId,
    pub job_id: i64,
    /// The job's word (`backup_run`, `verify_backup`, `restore_database`, `restore_project`).
    pub primitive: String,
    /// The job's params as the plane queued them.
    pub params: serde_json::Value,
    /// `put` or `get`, as the node sent it.
    pub op: String,
    /// `<seq>/<name>`, 1..=64 of them.
    pub keys: Vec<String>,
    /// The job's correlation id, as its requester gave it (`request_job`): the backups
    /// service serves only a job it asked for itself, found by it in its own table (issue
    /// 27). `None` for a job no service asked for (an operator's), which it never serves.
    #[serde(default)]
    pub correlation_id: Option<uuid::Uuid>,
}

/// One presigned URL.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PresignedUrl {
    pub key: String,
    /// `PUT` or `GET`.
    pub method: String,
    pub url: String,
    /// Headers the request must carry (they are signed): `if-none-match: *` on a PUT where the
    /// target supports conditional writes.
    pub headers: BTreeMap<String, String>,
    pub expires_at: DateTime<Utc>,
}

/// The answer to [`BackupUrls`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct BackupUrlsAnswer {
    pub urls: Vec<PresignedUrl>,
}

// ---- policy (BK-05..BK-09) ----------------------------------------------------------------

/// How a node's chain is built.
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
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum BackupMode {
    /// A full, then incrementals of what changed until the full interval has passed.
    Chain,
    /// Every run a full.
    FullOnly,
}

/// The field set a schedule is made of (BK-08: frequency, window, mode, retention, full
/// interval, days between verifications). A node's own schedule freezes all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct PolicyFields {
    /// Frequency: a run is due this many minutes after the last run *started* (BK-07),
    /// 1..=10080.
    pub every_minutes: u32,
    /// Window: the UTC hour (0..=23) from which a run may start...
    pub window_start_hour: u8,
    /// ...and for how many hours (1..=24; 24 is any time).
    pub window_hours: u8,
    pub mode: BackupMode,
    /// Retention: the floor of the days kept (BK-10), 1..=3650.
    pub keep_days: u32,
    /// Full interval: a new chain (a full) starts once the chain's full is this old, 1..=365.
    pub full_every_days: u32,
    /// Days between scheduled level-2 verifications (BK-18); 0 = never, 0..=365.
    pub verify_every_days: u32,
    /// Beyond the spec (restic's `--keep-daily`): the newest chain of each of this many most
    /// recent days that have one stays, on top of the window; 0 = none, 0..=3650. Tiers only
    /// ever keep more: nothing the window or the safety rules keep is deleted because of them.
    #[serde(default)]
    pub keep_daily: u32,
    /// The newest chain of each of this many most recent ISO weeks that have one; 0..=520.
    #[serde(default)]
    pub keep_weekly: u32,
    /// The newest chain of each of this many most recent months that have one; 0..=120.
    #[serde(default)]
    pub keep_monthly: u32,
}

/// The fleet's policy (`GET|PUT /api/v1/backups/policy`). The default is on (BK-05).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct FleetPolicy {
    /// Whether nodes following the fleet default are backed up.
    pub enabled: bool,
    #[serde(flatten)]
    pub fields: PolicyFields,
}

/// `GET /api/v1/backups/policy` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetPolicy {
    pub actor: Actor,
}

/// The fleet's policy with who set it last (`None` while it is the built-in default).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetPolicyView {
    #[serde(flatten)]
    pub policy: FleetPolicy,
    pub changed_by: Option<String>,
    pub changed_at: Option<DateTime<Utc>>,
}

/// `PUT /api/v1/backups/policy` (level 10, audited): the whole policy.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetPolicy {
    pub actor: Actor,
    pub policy: FleetPolicy,
}

/// A node's position (BK-08).
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
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Position {
    /// Stores nothing: follows the fleet policy, including its future changes.
    Fleet,
    /// A schedule of its own: the whole field set, frozen.
    Own,
    /// Off, stored as a decision.
    Off,
}

/// The body of `PUT /api/v1/nodes/{id}/backups/policy`: `{"position", ...the frozen fields}`.
/// For `own`, a field left out is frozen at the fleet's value of the moment; for `fleet` and
/// `off`, fields are refused.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct NodePolicyBody {
    pub position: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub every_minutes: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_start_hour: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window_hours: Option<u8>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mode: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub full_every_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verify_every_days: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_daily: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_weekly: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keep_monthly: Option<u32>,
}

/// `GET /api/v1/nodes/{id}/backups/policy` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GetNodePolicy {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// `PUT /api/v1/nodes/{id}/backups/policy` (level 10, audited).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct SetNodePolicy {
    pub actor: Actor,
    pub node_id: NodeId,
    pub body: NodePolicyBody,
}

/// A node's policy: its position, and the schedule that applies to it (its own frozen set, or
/// the fleet's today). `scheduled` is false when it is off (its own decision, or the fleet's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodePolicyView {
    pub node_id: NodeId,
    pub position: Position,
    pub scheduled: bool,
    /// The schedule in force (for `off`, the fleet's, shown for reference).
    pub fields: PolicyFields,
    /// Who decided the position (`None` for a node nobody decided about: it follows the fleet).
    pub decided_by: Option<String>,
    pub decided_at: Option<DateTime<Utc>>,
}

// ---- a node's backups (BK-20, BK-25) ------------------------------------------------------

/// Whether a run is a full or extends the chain.
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
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum RunKind {
    Full,
    Incremental,
}

/// `GET /api/v1/nodes/{id}/backups` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeBackupsRequest {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// One run that landed (its signed manifest checked against the node's key).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunView {
    pub seq: i64,
    pub kind: RunKind,
    pub started_at: DateTime<Utc>,
    pub finished_at: DateTime<Utc>,
    /// The stored bytes of its artifacts, as its manifest records them.
    pub bytes: i64,
    /// When a verify of this run (any level) last passed.
    pub verified_at: Option<DateTime<Utc>>,
    /// Who asked for it: `service/backups` for the schedule, or the operator.
    pub requested_by: String,
}

/// One chain (a full and the incrementals on it), in the space that holds it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ChainView {
    pub space_id: i64,
    /// The space's state: `active`, `draining` (a target the node was moved from) or `retired`.
    pub space_state: String,
    pub target_id: i64,
    pub target_name: String,
    /// The chain's full.
    pub full_seq: i64,
    /// Newest first.
    pub runs: Vec<RunView>,
}

/// BK-20's verify state.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum VerifyStateKind {
    /// The newest verify passed, within the interval (+ 1 day).
    Verified,
    /// Informational: no verify yet, within the interval after the first backup.
    NotYetVerified,
    /// A problem: never verified, past the interval after the first backup.
    NeverVerified,
    /// A problem: the newest pass is older than the interval + 1 day.
    Stale,
    /// A problem: the newest verify failed; nothing is retried automatically.
    Failed,
    /// A problem: the storage check found a stored backup incomplete.
    ShelfProblem,
    /// No backup yet, so nothing to verify.
    NoBackups,
}

/// The verify state as the node's Backups tab states it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyState {
    pub state: VerifyStateKind,
    /// Whether it is a problem (BK-20).
    pub problem: bool,
    /// The state in words ("Not yet verified restorable", the node's reason and "nothing is
    /// retried automatically", ...).
    pub words: String,
    /// The newest verify's facts.
    pub last: Option<VerifyView>,
}

/// One verify's result (BK-19): the level, when, the node's counts, or its reason.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyView {
    pub job_id: i64,
    pub seq: i64,
    pub level: u8,
    pub ok: bool,
    pub finished_at: DateTime<Utc>,
    /// The node's counts (`artifacts`, `bytes`, `files`, `tables`) when it read the backup.
    pub checked: Option<serde_json::Value>,
    /// What was wrong, in the node's words (or why the job did not run).
    pub problems: Vec<String>,
}

/// The owner's recovery key as the node last reported it (BK-22; never written by the plane).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RecoveryKeyView {
    /// `already`, `none` or `invalid`.
    pub state: String,
    pub fingerprint: Option<String>,
    pub reported_at: DateTime<Utc>,
}

/// A job of this node's backups that holds (or last held) its machine's turn.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TurnView {
    pub job_id: Option<i64>,
    pub node_id: NodeId,
    /// `backup_run`, `verify_backup`, `restore_database` or `restore_project`.
    pub primitive: String,
    pub requested_by: String,
    pub dispatched_at: DateTime<Utc>,
}

/// `GET /api/v1/nodes/{id}/backups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeBackups {
    pub node_id: NodeId,
    /// Newest first.
    pub chains: Vec<ChainView>,
    /// When the newest run that landed started.
    pub last_backup: Option<DateTime<Utc>>,
    /// When the newest full that landed started.
    pub last_full: Option<DateTime<Utc>>,
    /// When the oldest run held started.
    pub oldest: Option<DateTime<Utc>>,
    /// The storage check's one line (BK-15), `None` when every backup is whole or unchecked.
    pub shelf_problem: Option<String>,
    pub verify_state: VerifyState,
    pub recovery_key: Option<RecoveryKeyView>,
    /// The newest backup_run that did not land: its reason (BK-21's `backup_failed`).
    pub last_failure: Option<String>,
    /// What holds the machine's turn now, if this node's backups do.
    pub busy: Option<TurnView>,
    /// Beyond the spec: what the storage pass's orphan sweep found in the node's folders.
    #[serde(default)]
    pub orphans: OrphansView,
}

/// The orphan sweep's counts for one node: objects under a run number no recorded run claims
/// (the parts of a run that died before its manifest).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct OrphansView {
    /// Seen by the last pass and waiting out their day before they are deleted.
    pub waiting: u32,
    /// Deleted since the node was first listed...
    pub deleted: u64,
    /// ...and their bytes.
    pub bytes_deleted: u64,
}

// ---- acts (each takes the machine's turn, BK-09) ------------------------------------------

/// `POST /api/v1/nodes/{id}/backups/run` (level 8): a backup now, the schedule's kind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RunNow {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// `POST /api/v1/nodes/{id}/backups/verify` (level 8): `{"level": 2 | 3, "seq"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VerifyRequest {
    pub actor: Actor,
    pub node_id: NodeId,
    pub level: u8,
    pub seq: i64,
}

/// What a restore brings back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RestoreWhat {
    /// The database only (`restore_database`).
    Database,
    /// The database and the files (`restore_project`).
    Project,
}

/// `POST /api/v1/nodes/{id}/backups/restore` (level 10): `{"seq", "what"}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RestoreRequest {
    pub actor: Actor,
    pub node_id: NodeId,
    pub seq: i64,
    pub what: RestoreWhat,
}

/// `POST /api/v1/nodes/{id}/backups/move` (level 10): `{"target_id"}`. Opens the node's
/// space on the target, sets the old one draining (nothing copied, BK-02) and starts the new
/// chain with a full at once.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MoveRequest {
    pub actor: Actor,
    pub node_id: NodeId,
    pub target_id: i64,
}

/// The answer to an act: `202 {"job_id"}`, the agent channel's job. A machine whose turn is
/// held answers `409 conflict` naming the job that holds it, and nothing changes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Dispatched {
    pub job_id: i64,
}

// ---- fleet coverage (the Targets page, BK-04, BK-08, BK-22) -------------------------------

/// `GET /api/v1/backups/coverage` (level 10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetCoverageRequest {
    pub actor: Actor,
}

/// One target's share of the fleet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct TargetCoverage {
    pub target_id: i64,
    pub name: String,
    /// Whether new backups go here.
    pub is_default: bool,
    /// Nodes backed up here now: scheduled, holding their own recovery key, their active space
    /// on this target.
    pub nodes: u32,
    /// Nodes that will be backed up here by their first backup: scheduled, holding their own
    /// key, with no space yet (only the target where new backups go has them).
    pub waiting: u32,
    /// Nodes moved away from here whose old backups are still held here (draining spaces).
    pub draining: u32,
}

/// Why a node is not backed up.
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
    strum::EnumIter,
    strum::Display,
    strum::EnumString,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum Uncovered {
    /// Switched off: the node's own decision, or the fleet's (BK-08).
    Off,
    /// The node holds no proven recovery key of its own (BK-22): it cannot be backed up.
    NoRecoveryKey,
    /// No target is chosen as where new backups go, and the node has no space yet.
    NoTarget,
}

/// A node that is not backed up.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UncoveredNode {
    pub node_id: NodeId,
    pub name: String,
    pub reason: Uncovered,
    /// The reason in words.
    pub words: String,
}

/// The answer to [`FleetCoverageRequest`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetCoverage {
    /// Every target, in the order of the targets list.
    pub targets: Vec<TargetCoverage>,
    /// Paired nodes in all.
    pub nodes: u32,
    /// Nodes backed up or waiting for their first backup.
    pub covered: u32,
    /// How many nodes are not backed up (all of them, however many are listed).
    pub uncovered_count: u32,
    /// The nodes not backed up, by id, at most [`COVERAGE_UNCOVERED_LISTED`].
    pub uncovered: Vec<UncoveredNode>,
}

/// The most uncovered nodes [`FleetCoverage`] lists (the count says the rest).
pub const COVERAGE_UNCOVERED_LISTED: usize = 200;
