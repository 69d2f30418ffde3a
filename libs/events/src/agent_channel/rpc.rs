//! The questions the gateway asks the agent channel over rpc (`capstan.rpc.agent_channel.*`):
//! agent traffic, forwarded whole for the agent channel to verify and answer, and operator acts,
//! each carrying the [`Actor`] so the service decides who may do what.

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{JobOutcome, PrimitiveClass};
use crate::provisioning::InstallState;
use crate::rpc::Actor;

use crate::words::Word;

/// A node's health dot is the monitor's judgement (MO-07); the node views carry it.
pub use crate::monitor::{Health, HealthDot};

/// The agent routes under `/api/v1/agent/`.
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
pub enum AgentEndpoint {
    Join,
    JoinStatus,
    Claim,
    Result,
    JobStatus,
    Leave,
    Artifact,
    /// The backups broker: presigned URLs for a running backup job (BACKUPS-CONTRACT.md).
    BackupUrls,
}

impl AgentEndpoint {
    pub const ALL: [AgentEndpoint; 8] = [
        AgentEndpoint::Join,
        AgentEndpoint::JoinStatus,
        AgentEndpoint::Claim,
        AgentEndpoint::Result,
        AgentEndpoint::JobStatus,
        AgentEndpoint::Leave,
        AgentEndpoint::Artifact,
        AgentEndpoint::BackupUrls,
    ];

    /// The body cap (PROTOCOL.md "Limits"): join and join_status 16 KiB, claim 256 KiB,
    /// result 4 MiB, others 16 KiB. A larger body is `413 too_large` before it is read whole.
    pub const fn body_limit(self) -> usize {
        match self {
            AgentEndpoint::Claim => 256 * 1024,
            AgentEndpoint::Result => 4 * 1024 * 1024,
            _ => 16 * 1024,
        }
    }
}

/// rpc `agent_request`: one agent HTTP request, as received. The body travels beside this
/// (the bus's request-with-body), byte for byte, because the digest covers the exact bytes.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentRequest {
    pub endpoint: AgentEndpoint,
    /// The request path as received, which the signature covers (`@path`).
    pub path: String,
    /// The query string without `?`, if any (`wait=20`).
    pub query: Option<String>,
    pub content_digest: Option<String>,
    pub signature_input: Option<String>,
    pub signature: Option<String>,
    /// The address the gateway can vouch for.
    pub source_address: String,
    /// The gateway process holding the request: when it stops it releases its long polls
    /// together ([`ReleaseClaims`]). Absent from an older gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gateway: Option<Uuid>,
    /// This one claim, as the gateway holding it knows it: when its agent hangs up, or the
    /// gateway gives up waiting for its answer, the gateway releases it alone
    /// ([`ReleasePoll`]). Absent from an older gateway.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub poll: Option<Uuid>,
}

/// rpc `release_poll`, sent by a gateway whose agent hung up while its claim was held, or that
/// gave up waiting for the claim's answer (and answered the agent `503` itself), and answered
/// by every replica: the one holding that claim ends it at once without a job (a claim
/// released before it arrives is not held either), and a job the claim had handed out already
/// goes back to `pending`, since its answer reaches no agent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReleasePoll {
    pub poll: Uuid,
}

/// rpc `hand_back`: a job a claim handed out whose answer the gateway could not write at all
/// (its agent had hung up), so it provably never reached the node: it goes back to `pending`
/// if it is still running and was handed out within [`HAND_BACK_WITHIN_SECONDS`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HandBack {
    pub job_id: i64,
}

/// How recent a hand-out a [`HandBack`] may return.
pub const HAND_BACK_WITHIN_SECONDS: i64 = 120;

/// The answer to [`HandBack`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct HandedBack {
    /// Whether the job is pending again (false: it had already moved on, and stays as it is).
    pub returned: bool,
}

/// rpc `vet_agent_request`: asked by the gateway before it reads a large agent body, with the
/// request's head alone. The answer is the refusal the request would get whatever its body
/// (`401`, `429`), or none: then the gateway reads the body and asks `agent_request`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VetAgentRequest {
    /// The request with its fields as for `agent_request` (its body not yet read).
    pub request: AgentRequest,
}

/// The answer to [`VetAgentRequest`]: the refusal, or `None` to go on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Vetted {
    pub refusal: Option<AgentResponse>,
}

/// rpc `release_claims`, sent by a gateway as it stops and answered by every agent-channel
/// replica (not shared by the queue group): each ends the long polls it holds for `gateway`
/// at once, without handing them a job, since nobody is left to take the answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ReleaseClaims {
    pub gateway: Uuid,
}

/// The answer of one replica to [`ReleaseClaims`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ClaimsReleased {
    /// The long polls that replica ended.
    pub released: u64,
}

/// The agent channel's answer, which the gateway sends back as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct AgentResponse {
    pub status: u16,
    /// The JSON body (for `artifact` with bytes, the bytes travel beside this instead).
    pub body: serde_json::Value,
    /// Seconds, for `429` answers.
    pub retry_after: Option<u64>,
}

// The rpcs under `capstan.rpc.agent_channel.`: each op's name, request and answer, declared once.
crate::rpc! { crate::Domain::AgentChannel;
    "agent_request" [body]: AgentRequest => AgentResponse,
    // Answered by every replica: see [`ReleaseClaims`].
    "release_claims": ReleaseClaims => ClaimsReleased,
    // Answered by every replica: see [`ReleasePoll`].
    "release_poll": ReleasePoll => ClaimsReleased,
    "hand_back": HandBack => HandedBack,
    "vet_agent_request": VetAgentRequest => Vetted,
    "list_joins": ListJoins => Joins,
    "approve_join": ApproveJoin => Approved,
    "reject_join": RejectJoin => Done,
    "reopen_join": ReopenJoin => Done,
    "list_nodes": ListNodes => Nodes,
    // The fleet's spread across agent versions and each node's update verdict (issue 15).
    "fleet_versions": FleetVersionsRequest => FleetVersions,
    "get_node": GetNode => NodeView,
    "disconnect_node": DisconnectNode => Done,
    "create_job": CreateJob => JobCreated,
    "list_jobs": ListJobs => Jobs,
    "get_job": GetJob => JobView,
    "job_output": JobOutputRequest => JobOutput,
    "cancel_job": CancelJobRequest => Done,
    "mark_job_failed": MarkJobFailed => Done,
    "refusal_count": RefusalCountRequest => RefusalCount,
    // Asked only by the provisioning service (its actor, `Actor::service(Domain::Provisioning)`;
    // `access::SERVICE_QUESTIONS` lets its bus user send these three and no other).
    "register_node": RegisterNode => NodeRegistered,
    "approve_provisioned_join": ApproveProvisionedJoin => Approved,
    "refuse_join": RefuseJoin => Done,
}

/// `register_node` (provisioning only): a node for a machine being provisioned, made before its
/// agent exists: no key, no agent, listed like any node (its install state comes from
/// provisioning's `install_state_changed`). Idempotent by `reference`: the same reference
/// answers the same node, whatever the name and addresses say the second time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RegisterNode {
    pub actor: Actor,
    /// The asker's own name for what the node is made for (`provision:42`), unique among
    /// nodes.
    pub reference: String,
    /// The node's name; a name another node still holds (one that has not left) is refused.
    pub name: String,
    /// The addresses the provider gave the machine (its IPv4 first).
    pub addresses: Vec<String>,
}

/// The answer to [`RegisterNode`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeRegistered {
    pub node_id: NodeId,
    /// False when the reference already named this node (nothing was made or changed).
    pub created: bool,
}

/// `approve_provisioned_join` (provisioning only, AC-08): binds a pending join's key to the
/// registered node `node_id`, only while the join is pending, its key's fingerprint is
/// `fingerprint` (the one the install recorded, AC-10) and the node has no agent paired. The
/// `node_approved` it publishes says `approved_by: "provisioning (provision <id>)"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApproveProvisionedJoin {
    pub actor: Actor,
    pub join_id: Uuid,
    pub node_id: NodeId,
    pub fingerprint: String,
    pub provision_id: i64,
}

/// `refuse_join` (provisioning only, AC-11): a second join from a provision's address after
/// its node's agent was admitted is rejected; `join_rejected` says
/// `rejected_by: "provisioning: <reason>"`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RefuseJoin {
    pub actor: Actor,
    pub join_id: Uuid,
    pub reason: String,
}

/// `reject_join`: the join to reject.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct RejectJoin(pub DecideJoin);

/// `reopen_join`: the rejected join to reopen.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct ReopenJoin(pub DecideJoin);

/// `get_node`: the node to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct GetNode(pub NodeRef);

/// `disconnect_node`: the node to disconnect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct DisconnectNode(pub NodeRef);

/// `get_job`: the job to read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct GetJob(pub JobRef);

/// `cancel_job`: the job to cancel.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct CancelJobRequest(pub JobRef);

/// `mark_job_failed`: the job to mark failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(transparent)]
pub struct MarkJobFailed(pub JobRef);

/// Which joins to list.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema, Default)]
#[serde(rename_all = "snake_case")]
pub enum JoinFilter {
    #[default]
    Pending,
    Rejected,
    All,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum JoinState {
    Pending,
    Approved,
    Rejected,
    Expired,
}

/// A join as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JoinView {
    pub id: Uuid,
    pub name: String,
    pub fingerprint: String,
    pub source_address: String,
    pub addresses: Vec<String>,
    pub agent_version: String,
    pub site_root: Option<String>,
    pub container: Option<String>,
    pub state: JoinState,
    pub requested_at: DateTime<Utc>,
    pub expires_at: DateTime<Utc>,
    /// Set when the join claims the name of a node that is connected: shown, never auto-bound.
    pub name_taken_by: Option<NodeId>,
}

/// The most rows one page of a listing holds.
pub const PAGE_LIMIT_MAX: u32 = 500;
/// The rows a page holds when the asker names no limit.
pub const PAGE_LIMIT_DEFAULT: u32 = 100;
/// The furthest a listing may be paged (rows skipped).
pub const PAGE_OFFSET_MAX: u64 = 1_000_000;
/// The longest search text a listing takes (characters).
pub const SEARCH_MAX_CHARS: usize = 200;

/// Which page of a listing: skip `offset` rows (in the listing's order), then at most `limit`
/// (1 to [`PAGE_LIMIT_MAX`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Page {
    #[serde(default)]
    pub offset: u64,
    #[serde(default = "default_limit")]
    pub limit: u32,
}

fn default_limit() -> u32 {
    PAGE_LIMIT_DEFAULT
}

impl Default for Page {
    fn default() -> Page {
        Page {
            offset: 0,
            limit: PAGE_LIMIT_DEFAULT,
        }
    }
}

impl Page {
    /// The page's bounds checked: `Err((parameter, why))` names what is out of range.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if self.limit == 0 || self.limit > PAGE_LIMIT_MAX {
            return Err((
                "limit",
                format!("{} is not between 1 and {PAGE_LIMIT_MAX}", self.limit),
            ));
        }
        if self.offset > PAGE_OFFSET_MAX {
            return Err((
                "offset",
                format!("{} is more than {PAGE_OFFSET_MAX}", self.offset),
            ));
        }
        Ok(())
    }
}

/// A search text checked: `Err((parameter, why))` when it is too long or holds a control
/// character. Blank text searches nothing.
pub fn check_search(search: &Option<String>) -> Result<(), (&'static str, String)> {
    let Some(text) = search else { return Ok(()) };
    if text.chars().count() > SEARCH_MAX_CHARS {
        return Err(("q", format!("is longer than {SEARCH_MAX_CHARS} characters")));
    }
    if text.chars().any(char::is_control) {
        return Err(("q", "holds a control character".to_string()));
    }
    Ok(())
}

/// What page of a listing an answer holds, and how many rows match in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
pub struct PageInfo {
    pub offset: u64,
    pub limit: u32,
    /// Rows matching the listing's search and filters, on every page.
    pub total: u64,
    /// The `offset` of the next page, when there is one.
    pub next_offset: Option<u64>,
}

impl PageInfo {
    pub fn of(page: Page, total: u64) -> PageInfo {
        let next = page.offset + u64::from(page.limit);
        PageInfo {
            offset: page.offset,
            limit: page.limit,
            total,
            next_offset: (next < total).then_some(next),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListJoins {
    pub actor: Actor,
    #[serde(default)]
    pub state: JoinFilter,
    /// Joins whose name, source address, reported addresses or fingerprint hold this text
    /// (case-insensitive; spaces and colons in it are ignored for the fingerprint).
    #[serde(default)]
    pub search: Option<String>,
    /// Only this join (the bind page's).
    #[serde(default)]
    pub join_id: Option<Uuid>,
    /// Newest first.
    #[serde(default)]
    pub page: Page,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Joins {
    pub joins: Vec<JoinView>,
    #[serde(default)]
    pub page: PageInfo,
}

/// Approve a join, binding its key to a new node, or to `node_id` when given.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApproveJoin {
    pub actor: Actor,
    pub join_id: Uuid,
    pub node_id: Option<NodeId>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Approved {
    pub node_id: NodeId,
}

/// Reject or reopen a join.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct DecideJoin {
    pub actor: Actor,
    pub join_id: Uuid,
}

/// Where a node sits, without the host: the placement filter of [`ListNodes`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
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
pub enum PlacementKind {
    Machine,
    Host,
    Container,
}

impl Placement {
    pub const fn kind(self) -> PlacementKind {
        match self {
            Placement::Machine => PlacementKind::Machine,
            Placement::Host => PlacementKind::Host,
            Placement::Container { .. } => PlacementKind::Container,
        }
    }
}

/// One page of the nodes (ordered by name, then id), searched and filtered; every filter left
/// out lets every node through.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListNodes {
    pub actor: Actor,
    /// Nodes whose name, reported addresses or fingerprint hold this text (case-insensitive;
    /// spaces and colons in it are ignored for the fingerprint), or whose id it is.
    #[serde(default)]
    pub search: Option<String>,
    #[serde(default)]
    pub health: Option<HealthDot>,
    #[serde(default)]
    pub online: Option<bool>,
    #[serde(default)]
    pub placement: Option<PlacementKind>,
    /// Only nodes with (true) or without (false) a paired agent key.
    #[serde(default)]
    pub paired: Option<bool>,
    /// Only these nodes (at most a page's worth).
    #[serde(default)]
    pub ids: Option<Vec<NodeId>>,
    #[serde(default)]
    pub page: Page,
}

/// `GET /api/v1/fleet/versions` (level 7).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetVersionsRequest {
    pub actor: Actor,
}

/// How many paired nodes run one version, who among them runs it on trial, and who among them
/// refused the release on offer and why (issue 15's Versions view).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionCount {
    /// `None` for nodes that have not reported one yet.
    pub version: Option<String>,
    pub nodes: i64,
    /// The nodes running this version on trial (AG-29: a fresh swap, not yet trusted).
    #[serde(default)]
    pub on_trial: Vec<NodeName>,
    /// The nodes running this version whose last check refused what was offered.
    #[serde(default)]
    pub refusals: Vec<VersionRefusal>,
}

/// A node, by id and name.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeName {
    pub node_id: NodeId,
    pub name: String,
}

/// A node that refused the release on offer: what and why, in the agent's words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct VersionRefusal {
    pub node_id: NodeId,
    pub name: String,
    /// One of [`UPDATE_REFUSALS`].
    pub update_state: String,
    pub update_offered: Option<String>,
    pub update_reason: Option<String>,
}

/// The last update a node refused, as the plane kept it (facts' `last_update_refusal`): it
/// stays after the node moves on, so the Agent tab can say what was refused last and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateRefusal {
    pub state: String,
    pub offered: Option<String>,
    pub reason: Option<String>,
    /// When the plane first heard this refusal.
    pub at: DateTime<Utc>,
}

/// One paired node's self-update, as its last claim reported it (AC-43).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeUpdate {
    pub node_id: NodeId,
    pub name: String,
    pub agent_version: Option<String>,
    /// The closed set of `update_state`; `None` before the agent has reported one.
    pub update_state: Option<String>,
    pub update_offered: Option<String>,
    /// Why, in the agent's words, when it refused or is waiting.
    pub update_reason: Option<String>,
    /// Whether `update_state` is a refusal (`verify_failed`, `unlogged`, `version_rejected`).
    pub refused: bool,
    /// The version it runs on trial (AG-29), `None` when trusted or not reported.
    #[serde(default)]
    pub update_trial: Option<String>,
    /// The last update it refused, whatever it reports now.
    #[serde(default)]
    pub last_refusal: Option<UpdateRefusal>,
}

/// The fleet's versions: counts, highest count first, and every paired node's update.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct FleetVersions {
    pub versions: Vec<VersionCount>,
    pub nodes: Vec<NodeUpdate>,
}

/// The `update_state` words that are refusals (the plane opens `plane:agent_update_refused`).
pub const UPDATE_REFUSALS: &[&str] = &["verify_failed", "unlogged", "version_rejected"];

/// A node as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeView {
    pub id: NodeId,
    pub name: String,
    pub fingerprint: Option<String>,
    pub agent_version: Option<String>,
    pub vocabulary: Vec<String>,
    pub addresses: Vec<String>,
    pub site_root: Option<String>,
    pub container: Option<String>,
    pub connected_at: Option<DateTime<Utc>>,
    pub last_seen_at: Option<DateTime<Utc>>,
    pub left_at: Option<DateTime<Utc>>,
    /// Paired and heard from within the online window.
    pub online: bool,
    /// The agent is below the version floor: only `apply_update` is offered.
    pub below_floor: bool,
    /// Everything else the last claim reported (recipes, update state, log access, ...):
    /// `recipes` a list of `ReportedRecipe`, `cases` an object of `ReportedCase` keyed by
    /// `recipe:<name>` (docs/recipes.md).
    pub facts: serde_json::Value,
    /// The dashboard's dot for this node: the monitor's judgement of its latest `check_status`
    /// (MO-07), as its `health_changed` events told the agent channel.
    pub health: Health,
    /// The latest finished `check_status` job, with its structured result.
    pub last_check: Option<Finding>,
    /// The latest finished `host_report` job, with its structured result.
    pub last_report: Option<Finding>,
    /// Where the node sits in the fleet: a machine of its own, a Docker host, or a container
    /// placed on a host.
    pub placement: Placement,
    /// Provisioning's install state (PV-01), as its `install_state_changed` told the agent
    /// channel: `None` is operational; `installing`, `install_failed`, ... are not.
    #[serde(default)]
    pub install_state: Option<InstallState>,
}

/// What a finished reading job found.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Finding {
    pub job_id: i64,
    pub outcome: JobOutcome,
    pub finished_at: DateTime<Utc>,
    pub result: Option<serde_json::Value>,
}

/// Where a node sits: the dashboard groups Docker hosts with their containers under them and
/// lists every other node flat under Machines.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Placement {
    /// A machine in its own right (also a container whose host is not known here).
    #[default]
    Machine,
    /// A Docker box: its latest `host_report` says Docker is installed.
    Host,
    /// A container node whose name its host's latest `host_report` lists.
    Container { host_node_id: NodeId },
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Nodes {
    pub nodes: Vec<NodeView>,
    #[serde(default)]
    pub page: PageInfo,
}

/// One node (get) or an act on it (disconnect).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeRef {
    pub actor: Actor,
    pub node_id: NodeId,
}

/// An operator asks for a job on a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CreateJob {
    pub actor: Actor,
    pub node_id: NodeId,
    pub primitive: String,
    #[serde(default)]
    pub params: serde_json::Value,
}

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
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
pub enum JobState {
    Pending,
    Running,
    Completed,
    Failed,
    Refused,
    Lost,
    Withdrawn,
}

impl JobState {
    pub const ALL: [JobState; 7] = [
        JobState::Pending,
        JobState::Running,
        JobState::Completed,
        JobState::Failed,
        JobState::Refused,
        JobState::Lost,
        JobState::Withdrawn,
    ];

    pub fn is_terminal(self) -> bool {
        !matches!(self, JobState::Pending | JobState::Running)
    }

    /// How a job in this state ended, if it has.
    pub const fn outcome(self) -> Option<JobOutcome> {
        match self {
            JobState::Pending | JobState::Running => None,
            JobState::Completed => Some(JobOutcome::Completed),
            JobState::Failed => Some(JobOutcome::Failed),
            JobState::Refused => Some(JobOutcome::Refused),
            JobState::Lost => Some(JobOutcome::Lost),
            JobState::Withdrawn => Some(JobOutcome::Withdrawn),
        }
    }
}

impl From<JobOutcome> for JobState {
    fn from(outcome: JobOutcome) -> JobState {
        match outcome {
            JobOutcome::Completed => JobState::Completed,
            JobOutcome::Failed => JobState::Failed,
            JobOutcome::Refused => JobState::Refused,
            JobOutcome::Lost => JobState::Lost,
            JobOutcome::Withdrawn => JobState::Withdrawn,
        }
    }
}

impl TryFrom<String> for JobState {
    type Error = super::UnknownState;

    fn try_from(text: String) -> Result<JobState, super::UnknownState> {
        JobState::parse(&text).ok_or(super::UnknownState {
            kind: "job state",
            text,
        })
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobCreated {
    pub id: i64,
    pub state: JobState,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ListJobs {
    pub actor: Actor,
    pub node_id: Option<NodeId>,
    pub state: Option<JobState>,
    pub limit: Option<u32>,
}

/// A job as an operator sees it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobView {
    pub id: i64,
    pub node_id: NodeId,
    pub primitive: String,
    pub class: PrimitiveClass,
    pub params: serde_json::Value,
    pub state: JobState,
    /// What the node reported (completed, failed, refused), or lost/withdrawn from the plane.
    pub outcome: Option<JobOutcome>,
    pub reason: Option<String>,
    pub result: Option<serde_json::Value>,
    pub requested_by: String,
    pub created_at: DateTime<Utc>,
    pub claimed_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Jobs {
    pub jobs: Vec<JobView>,
}

/// One job (get, cancel, mark failed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobRef {
    pub actor: Actor,
    pub job_id: i64,
}

/// A job's output from `offset` (bytes) on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobOutputRequest {
    pub actor: Actor,
    pub job_id: i64,
    #[serde(default)]
    pub offset: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobOutput {
    pub state: JobState,
    pub new_output: String,
    pub offset: u64,
}

/// How many jobs a node refused within the last `window_secs` (AC-27).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RefusalCountRequest {
    pub actor: Actor,
    pub node_id: NodeId,
    pub window_secs: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RefusalCount {
    pub node_id: NodeId,
    pub refused: i64,
}

/// An answer with nothing to say but that it was done.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema, Default)]
pub struct Done {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_state_and_outcome_is_spelled_as_the_wire_spells_it_and_nothing_else_parses() {
        for state in JobState::ALL {
            assert_eq!(serde_json::to_value(state).unwrap(), state.as_str());
            assert_eq!(JobState::try_from(state.as_str().to_string()), Ok(state));
            assert_eq!(
                state.outcome().map(JobState::from),
                state.outcome().map(|_| state)
            );
        }
        for outcome in JobOutcome::ALL {
            assert_eq!(serde_json::to_value(outcome).unwrap(), outcome.as_str());
            assert_eq!(JobOutcome::parse(outcome.as_str()), Some(outcome));
        }
        let unknown = JobState::try_from("cancelled".to_string()).unwrap_err();
        assert_eq!(unknown.to_string(), "\"cancelled\" is not a job state");
        assert_eq!(JobOutcome::parse("pending"), None);
    }
}
