//! The agent channel's public contract: what it tells the world about joins, nodes and jobs,
//! and the commands other services send it to get work done on a node. Other services never
//! talk to agents; they send [`RequestJob`] and read [`JobFinished`].

use crate::NodeId;
use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::Domain;

use crate::words::Word;

/// The class of a primitive, which the node's policy accepts, asks about or refuses.
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
pub enum PrimitiveClass {
    Read,
    Change,
    Destructive,
}

impl PrimitiveClass {
    pub const ALL: [PrimitiveClass; 3] = [
        PrimitiveClass::Read,
        PrimitiveClass::Change,
        PrimitiveClass::Destructive,
    ];

    /// The operator level a word of this class needs (decision 6.2-3, GW-02): read words at
    /// 7, change at 8, destructive at 10. The agent channel enforces it; the UI offers only
    /// what it would allow.
    pub const fn needed_level(self) -> crate::rpc::Level {
        match self {
            PrimitiveClass::Read => crate::rpc::Level::Read,
            PrimitiveClass::Change => crate::rpc::Level::Change,
            PrimitiveClass::Destructive => crate::rpc::Level::Admin,
        }
    }
}

/// How a job ended, in the plane's words.
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
pub enum JobOutcome {
    Completed,
    Failed,
    Refused,
    /// Only ever the plane's word: the node never reported, and what it did is unknown.
    Lost,
    /// Cancelled or removed on the plane before the node finished it.
    Withdrawn,
}

impl JobOutcome {
    pub const ALL: [JobOutcome; 5] = [
        JobOutcome::Completed,
        JobOutcome::Failed,
        JobOutcome::Refused,
        JobOutcome::Lost,
        JobOutcome::Withdrawn,
    ];
}

/// A state or outcome read from a row that is none of the contract's: the row is wrong, and
/// the read fails rather than guess.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownState {
    pub kind: &'static str,
    pub text: String,
}

impl std::fmt::Display for UnknownState {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "{:?} is not a {}", self.text, self.kind)
    }
}

impl std::error::Error for UnknownState {}

impl TryFrom<String> for JobOutcome {
    type Error = UnknownState;

    fn try_from(text: String) -> Result<JobOutcome, UnknownState> {
        JobOutcome::parse(&text).ok_or(UnknownState {
            kind: "job outcome",
            text,
        })
    }
}

/// A machine asked to be admitted, sending only the public half of its key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JoinRequested {
    pub request_id: Uuid,
    pub name: String,
    pub fingerprint: String,
    pub source_address: String,
    pub addresses: Vec<String>,
    pub agent_version: String,
    pub expires_at: DateTime<Utc>,
}
crate::message!(Domain::AgentChannel, Event, JoinRequested, "join_requested");

/// An operator approved a join; the key now belongs to `node_id`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeApproved {
    pub request_id: Uuid,
    pub node_id: NodeId,
    pub name: String,
    pub fingerprint: String,
    pub addresses: Vec<String>,
    pub site_root: Option<String>,
    pub container: Option<String>,
    /// The operator who approved, or the service that approved on an operator's standing rule.
    pub approved_by: String,
}
crate::message!(Domain::AgentChannel, Event, NodeApproved, "node_approved");

/// An operator rejected a join; the key may be reopened for a day.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JoinRejected {
    pub request_id: Uuid,
    pub name: String,
    pub fingerprint: String,
    pub rejected_by: String,
}
crate::message!(Domain::AgentChannel, Event, JoinRejected, "join_rejected");

/// An operator ended a node's pairing; its key is forgotten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeDisconnected {
    pub node_id: NodeId,
    pub fingerprint: String,
    pub disconnected_by: String,
}
crate::message!(
    Domain::AgentChannel,
    Event,
    NodeDisconnected,
    "node_disconnected"
);

/// A node said goodbye with its own signed request; its key is forgotten.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeLeft {
    pub node_id: NodeId,
    pub fingerprint: String,
    pub left_at: DateTime<Utc>,
}
crate::message!(Domain::AgentChannel, Event, NodeLeft, "node_left");

/// A node's claim changed what the plane knows of it (sent only when something changed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeReported {
    pub node_id: NodeId,
    pub agent_version: String,
    pub vocabulary: Vec<String>,
    /// The claim's other facts as the node sent them (recipes, update state, log access, ...).
    pub facts: serde_json::Value,
    /// Where the node's site lives as the plane now knows it: its join's `site_root`, or the
    /// latest root its claims reported from `site.json` (issue 27). Absent for a siteless node,
    /// and in events from before the field: a reader keeps the root it knew.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub site_root: Option<String>,
}
crate::message!(Domain::AgentChannel, Event, NodeReported, "node_reported");

/// Where a node sits changed (PV-15): `host_node_id` is the Docker host whose latest
/// `host_report` lists the node's container and whose kernel boot id the node's own latest
/// `host_report` shares (the node's corroboration, issue 27), or `None` when it sits on no host
/// the plane knows
/// (a machine of its own, or a Docker host itself). Sent in the transaction that changed a fact
/// placement is drawn from (a host report, a node's container, a pairing), once per change.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct PlacementChanged {
    pub node_id: NodeId,
    pub host_node_id: Option<NodeId>,
}
crate::message!(
    Domain::AgentChannel,
    Event,
    PlacementChanged,
    "placement_changed"
);

/// The check-ins the agent channel stamped since its previous report, sent by one replica on a
/// cadence (`NODES_SEEN_INTERVAL`), in chunks. `as_of` is the agent channel's clock when it read
/// them: a node absent from every report since a time was not heard after it, as of `as_of`.
/// A report is sent on every tick, empty or not, so a listener knows how far the record runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodesSeen {
    pub as_of: DateTime<Utc>,
    pub seen: Vec<NodeSeen>,
}
crate::message!(Domain::AgentChannel, Event, NodesSeen, "nodes_seen");

/// One node's latest stamped check-in.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct NodeSeen {
    pub node_id: NodeId,
    pub last_seen_at: DateTime<Utc>,
}

/// A job was queued for a node.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobQueued {
    pub job_id: i64,
    pub node_id: NodeId,
    pub primitive: String,
    pub requested_by: String,
    /// The correlation id the requester gave (as on [`JobFinished`]), so a service that sent
    /// `request_job` learns its job's id.
    #[serde(default)]
    pub correlation_id: Option<Uuid>,
}
crate::message!(Domain::AgentChannel, Event, JobQueued, "job_queued");

/// A node took a job; it is now running there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobClaimed {
    pub job_id: i64,
    pub node_id: NodeId,
    pub primitive: String,
}
crate::message!(Domain::AgentChannel, Event, JobClaimed, "job_claimed");

/// A job reached its end, whoever's word ended it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JobFinished {
    pub job_id: i64,
    pub node_id: NodeId,
    pub primitive: String,
    pub outcome: JobOutcome,
    pub reason: Option<String>,
    /// The structured result the node reported, if any.
    pub result: Option<serde_json::Value>,
    pub requested_by: String,
    /// The correlation id the requester gave, so it can find its answer.
    pub correlation_id: Option<Uuid>,
}
crate::message!(Domain::AgentChannel, Event, JobFinished, "job_finished");

/// Another service asks for a job on a node. The same `idempotency_key` twice makes one job.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct RequestJob {
    pub idempotency_key: String,
    pub node_id: NodeId,
    pub primitive: String,
    pub params: serde_json::Value,
    /// Who asked: `service/backups`, or the operator the service acts for.
    pub requested_by: String,
}
crate::message!(Domain::AgentChannel, Command, RequestJob, "request_job");

/// Another service withdraws a job it asked for, by the same idempotency key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CancelJob {
    pub idempotency_key: String,
    pub requested_by: String,
}
crate::message!(Domain::AgentChannel, Command, CancelJob, "cancel_job");

#[cfg(test)]
mod class_tests {
    use super::PrimitiveClass;
    use crate::rpc::Level;
    use crate::words::Word;

    #[test]
    fn decision_6_2_3_classes_need_7_8_and_10() {
        assert_eq!(PrimitiveClass::Read.needed_level(), Level::Read);
        assert_eq!(PrimitiveClass::Change.needed_level(), Level::Change);
        assert_eq!(PrimitiveClass::Destructive.needed_level(), Level::Admin);
    }

    #[test]
    fn a_class_reads_back_as_it_is_spelled_and_nothing_else_is_one() {
        for class in PrimitiveClass::ALL {
            assert_eq!(PrimitiveClass::parse(class.as_str()), Some(class));
            assert_eq!(
                serde_json::to_value(class).unwrap(),
                serde_json::Value::from(class.as_str())
            );
        }
        assert_eq!(PrimitiveClass::parse("Read"), None);
        assert_eq!(PrimitiveClass::parse(""), None);
    }
}
