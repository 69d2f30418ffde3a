//! What the provisioning service tells the world (issue 29's pinned list): a provision was
//! asked for, its instance runs, a node's install state changed (the other services skip a
//! non-operational node from this event, PV-01), an install failed, a join was auto-approved
//! (AC-08) and a cloud server was adopted for a node (PV-52).

use chrono::{DateTime, Utc};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::{CloudProvider, InstallKind, InstallState};
use crate::{Domain, NodeId};

/// An operator asked for a server (PV-03): nothing is made yet.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ProvisionRequested {
    pub provision_id: i64,
    pub account_id: i64,
    pub provider: CloudProvider,
    pub kind: InstallKind,
    /// The node's name (a Docker host's agent joins as `<name>-host`).
    pub name: String,
    pub region: String,
    pub size: String,
    pub image: String,
    /// The operator who asked.
    pub requested_by: String,
    pub requested_at: DateTime<Utc>,
}
crate::message!(
    Domain::Provisioning,
    Event,
    ProvisionRequested,
    "provision_requested"
);

/// The provider reports the provision's instance running, at these addresses.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstanceRunning {
    pub provision_id: i64,
    /// The provider's id of the instance.
    pub instance_id: String,
    pub ipv4: Vec<String>,
    pub ipv6: Vec<String>,
    pub running_at: DateTime<Utc>,
}
crate::message!(
    Domain::Provisioning,
    Event,
    InstanceRunning,
    "instance_running"
);

/// A node's install state changed (PV-01): `state` null is operational. Every service that
/// skips non-operational nodes keeps its projection's `install_state` from this event.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstallStateChanged {
    pub node_id: NodeId,
    pub state: Option<InstallState>,
    /// The state before, as this service knew it.
    pub previous: Option<InstallState>,
    pub changed_at: DateTime<Utc>,
}
crate::message!(
    Domain::Provisioning,
    Event,
    InstallStateChanged,
    "install_state_changed"
);

/// A provision's install failed (PV-02): the reason, with every secret masked; Retry offered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct InstallFailed {
    pub provision_id: i64,
    /// The node, once one was made for the provision.
    pub node_id: Option<NodeId>,
    /// The step that failed.
    pub step: super::ProvisionStep,
    pub reason: String,
    pub failed_at: DateTime<Utc>,
}
crate::message!(Domain::Provisioning, Event, InstallFailed, "install_failed");

/// A pending join was approved because all five of AC-08's conditions held.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct JoinAutoApproved {
    pub provision_id: i64,
    pub join_id: uuid::Uuid,
    /// The node the join was bound to.
    pub node_id: NodeId,
    /// The name the join claimed (the provision's, or `<name>-host`).
    pub name: String,
    /// The address the join came from.
    pub address: String,
    /// The key's fingerprint, the one the install recorded (AC-10).
    pub fingerprint: String,
    pub approved_at: DateTime<Utc>,
}
crate::message!(
    Domain::Provisioning,
    Event,
    JoinAutoApproved,
    "join_auto_approved"
);

/// A server in one of our accounts was adopted for a node (PV-52): its later joins get the
/// provider check.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct MachineAdopted {
    pub node_id: NodeId,
    pub account_id: i64,
    pub provider: CloudProvider,
    pub instance_id: String,
    pub ipv4: Option<String>,
    pub ipv6: Option<String>,
    pub region: String,
    /// The operator who confirmed.
    pub adopted_by: String,
    pub adopted_at: DateTime<Utc>,
}
crate::message!(
    Domain::Provisioning,
    Event,
    MachineAdopted,
    "machine_adopted"
);
