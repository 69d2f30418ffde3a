//! The Targets page's fleet coverage (BK-04, BK-08, BK-22): how many nodes back up to each
//! target, how many wait for their first backup on the target where new backups go, and which
//! nodes are not backed up and why. A node switched off (its own decision or the fleet's) is
//! not backed up by somebody's choice; a node without a proven recovery key of its own cannot
//! be backed up by anyone (`has_own_key` is the one predicate); a node with no space yet and no
//! target chosen as where new backups go has nowhere to go. Pure: the facts are passed in.

use capstan_events::backups::rpc::{
    FleetCoverage, Position, TargetCoverage, Uncovered, UncoveredNode,
};
use capstan_events::NodeId;

use super::health::RecoveryKey;

/// A target as coverage needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetFacts {
    pub id: i64,
    pub name: String,
    pub is_default: bool,
}

/// A paired node as coverage needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub node_id: NodeId,
    pub name: String,
    /// Its stored position (`Fleet` when nobody decided).
    pub position: Position,
    pub recovery_key: RecoveryKey,
    /// The target of its active space, if it has one.
    pub active_target: Option<i64>,
    /// The targets of its draining spaces.
    pub draining_targets: Vec<i64>,
}

/// Why `node` is not backed up, if it is not: off first (a decision), then no key of its own,
/// then nowhere to go.
pub fn uncovered(
    node: &NodeFacts,
    fleet_enabled: bool,
    default_target: Option<i64>,
) -> Option<Uncovered> {
    let scheduled = match node.position {
        Position::Fleet => fleet_enabled,
        Position::Own => true,
        Position::Off => false,
    };
    if !scheduled {
        return Some(Uncovered::Off);
    }
    if !node.recovery_key.has_own_key() {
        return Some(Uncovered::NoRecoveryKey);
    }
    if node.active_target.is_none() && default_target.is_none() {
        return Some(Uncovered::NoTarget);
    }
    None
}

/// The reason in words, for the page and the API.
pub fn words(reason: Uncovered, node: &NodeFacts) -> String {
    match reason {
        Uncovered::Off => match node.position {
            Position::Off => "Backups switched off for this node (a decision).".into(),
            _ => "Fleet backups are switched off and this node follows the fleet.".into(),
        },
        Uncovered::NoRecoveryKey => match &node.recovery_key {
            RecoveryKey::Unreported => {
                "No recovery key reported yet: it cannot be backed up until its owner sets one."
                    .into()
            }
            RecoveryKey::None => {
                "No recovery key: it cannot be backed up until its owner sets one.".into()
            }
            RecoveryKey::Invalid | RecoveryKey::Already { .. } => {
                "Its recovery key is not valid: it cannot be backed up until its owner sets one."
                    .into()
            }
        },
        Uncovered::NoTarget => {
            "No target is chosen as where new backups go, and it has no storage space yet.".into()
        }
    }
}

/// The fleet's coverage: every target with its counts, the totals, and the first `listed`
/// uncovered nodes by id.
pub fn coverage(
    targets: &[TargetFacts],
    nodes: &[NodeFacts],
    fleet_enabled: bool,
    listed: usize,
) -> FleetCoverage {
    let default_target = targets
        .iter()
        .find(|target| target.is_default)
        .map(|t| t.id);
    let mut rows: Vec<TargetCoverage> = targets
        .iter()
        .map(|target| TargetCoverage {
            target_id: target.id,
            name: target.name.clone(),
            is_default: target.is_default,
            nodes: 0,
            waiting: 0,
            draining: 0,
        })
        .collect();
    let mut sorted: Vec<&NodeFacts> = nodes.iter().collect();
    sorted.sort_by_key(|node| node.node_id);
    let mut covered = 0u32;
    let mut uncovered_count = 0u32;
    let mut uncovered_rows = Vec::new();
    for node in sorted {
        for target in &node.draining_targets {
            if let Some(row) = rows.iter_mut().find(|row| row.target_id == *target) {
                row.draining += 1;
            }
        }
        match uncovered(node, fleet_enabled, default_target) {
            Some(reason) => {
                uncovered_count += 1;
                if uncovered_rows.len() < listed {
                    uncovered_rows.push(UncoveredNode {
                        node_id: node.node_id,
                        name: node.name.clone(),
                        reason,
                        words: words(reason, node),
                    });
                }
            }
            None => {
                covered += 1;
                let (target, waiting) = match node.active_target {
                    Some(target) => (Some(target), false),
                    None => (default_target, true),
                };
                if let Some(row) = rows.iter_mut().find(|row| Some(row.target_id) == target) {
                    if waiting {
                        row.waiting += 1;
                    } else {
                        row.nodes += 1;
                    }
                }
            }
        }
    }
    FleetCoverage {
        targets: rows,
        nodes: u32::try_from(nodes.len()).unwrap_or(u32::MAX),
        covered,
        uncovered_count,
        uncovered: uncovered_rows,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> RecoveryKey {
        RecoveryKey::Already {
            fingerprint: "age1fpr".into(),
        }
    }

    fn node(id: i64, position: Position, active: Option<i64>) -> NodeFacts {
        NodeFacts {
            node_id: NodeId(id),
            name: format!("web-{id}"),
            position,
            recovery_key: key(),
            active_target: active,
            draining_targets: vec![],
        }
    }

    fn targets() -> Vec<TargetFacts> {
        vec![
            TargetFacts {
                id: 1,
                name: "old".into(),
                is_default: false,
            },
            TargetFacts {
                id: 2,
                name: "new".into(),
                is_default: true,
            },
        ]
    }

    #[test]
    fn bk_04_nodes_count_under_their_active_spaces_target_and_new_ones_wait_on_the_default() {
        let mut moved = node(3, Position::Own, Some(2));
        moved.draining_targets = vec![1];
        let nodes = vec![
            node(1, Position::Fleet, Some(1)),
            node(2, Position::Fleet, None),
            moved,
        ];
        let found = coverage(&targets(), &nodes, true, 10);
        assert_eq!(found.nodes, 3);
        assert_eq!(found.covered, 3);
        assert_eq!(found.uncovered_count, 0);
        let old = &found.targets[0];
        assert_eq!((old.nodes, old.waiting, old.draining), (1, 0, 1));
        let new = &found.targets[1];
        assert_eq!((new.nodes, new.waiting, new.draining), (1, 1, 0));
    }

    #[test]
    fn bk_08_an_off_node_and_a_fleet_node_of_a_switched_off_fleet_are_uncovered_as_decisions() {
        let nodes = vec![
            node(1, Position::Off, Some(1)),
            node(2, Position::Fleet, Some(1)),
            node(3, Position::Own, Some(1)),
        ];
        let found = coverage(&targets(), &nodes, false, 10);
        assert_eq!(found.covered, 1);
        assert_eq!(found.uncovered_count, 2);
        assert_eq!(found.targets[0].nodes, 1);
        assert!(found
            .uncovered
            .iter()
            .all(|row| row.reason == Uncovered::Off));
        assert!(found.uncovered[0]
            .words
            .contains("switched off for this node"));
        assert!(found.uncovered[1]
            .words
            .contains("Fleet backups are switched off"));
    }

    #[test]
    fn bk_22_a_node_without_its_own_proven_key_cannot_be_backed_up() {
        let mut none = node(1, Position::Fleet, Some(1));
        none.recovery_key = RecoveryKey::None;
        let mut invalid = node(2, Position::Fleet, None);
        invalid.recovery_key = RecoveryKey::Invalid;
        let mut unreported = node(3, Position::Fleet, None);
        unreported.recovery_key = RecoveryKey::Unreported;
        let found = coverage(&targets(), &[none, invalid, unreported], true, 10);
        assert_eq!(found.covered, 0);
        assert_eq!(found.targets[0].nodes, 0);
        assert_eq!(found.targets[1].waiting, 0);
        assert!(found
            .uncovered
            .iter()
            .all(|row| row.reason == Uncovered::NoRecoveryKey));
        assert!(found.uncovered[1].words.contains("not valid"));
    }

    #[test]
    fn bk_04_without_a_default_target_a_node_with_no_space_has_nowhere_to_go() {
        let mut targets = targets();
        targets[1].is_default = false;
        let nodes = vec![
            node(1, Position::Fleet, None),
            node(2, Position::Fleet, Some(2)),
        ];
        let found = coverage(&targets, &nodes, true, 10);
        assert_eq!(found.covered, 1);
        assert_eq!(found.uncovered[0].node_id, NodeId(1));
        assert_eq!(found.uncovered[0].reason, Uncovered::NoTarget);
        assert_eq!(found.targets[1].nodes, 1);
    }

    #[test]
    fn the_uncovered_list_is_bounded_but_the_count_is_whole() {
        let nodes: Vec<NodeFacts> = (1..=5).map(|id| node(id, Position::Off, None)).collect();
        let found = coverage(&targets(), &nodes, true, 2);
        assert_eq!(found.uncovered_count, 5);
        assert_eq!(
            found
                .uncovered
                .iter()
                .map(|row| row.node_id)
                .collect::<Vec<_>>(),
            vec![NodeId(1), NodeId(2)]
        );
    }
}
