//! The agent channel's contract: its public events and commands, the catalog of primitives the
//! plane knows, and the rpc questions the gateway asks it (agent traffic and operator acts).

mod events;
pub mod primitives;
pub mod recipes;
pub mod rpc;
pub mod wait;

pub use events::*;

use crate::conditions::ConditionKind;
use crate::incidents::Severity;
use crate::{Domain, NodeId};

/// `plane:agent_update_refused` (AC-43): the node's agent refused the release on offer.
pub const AGENT_UPDATE_REFUSED: ConditionKind = ConditionKind {
    domain: Domain::AgentChannel,
    name: "agent_update_refused",
    severity: Severity::Warning,
    title: "The agent refused to update itself",
};
/// `plane:unmanageable` (AC-49, AG-39): the node cannot verify the scripts it would run.
pub const UNMANAGEABLE: ConditionKind = ConditionKind {
    domain: Domain::AgentChannel,
    name: "unmanageable",
    severity: Severity::Critical,
    title: "The node cannot verify its own scripts",
};

/// RO-12, BK-09: a node's machine — the Docker host its container sits on (container sites on
/// one host are one machine), else the node itself. Rollouts take turns by it, and so do
/// backups, verifies and restores.
pub fn machine_key(node: NodeId, docker_host: Option<NodeId>) -> String {
    format!("node-{}", docker_host.unwrap_or(node))
}

#[cfg(test)]
mod machine_tests {
    use super::machine_key;
    use crate::NodeId;

    #[test]
    fn ro_12_bk_09_containers_on_one_host_are_one_machine() {
        assert_eq!(
            machine_key(NodeId(7), Some(NodeId(3))),
            machine_key(NodeId(9), Some(NodeId(3)))
        );
        assert_eq!(
            machine_key(NodeId(3), None),
            machine_key(NodeId(7), Some(NodeId(3)))
        );
        assert_ne!(machine_key(NodeId(7), None), machine_key(NodeId(9), None));
    }
}
