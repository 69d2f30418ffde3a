//! The fleet's spread across agent versions (issue 15's Versions view; AC-43, AG-29): how many
//! nodes run each version, who among them runs it on trial, and who refused what was offered
//! and why. Without I/O: the rows are what each node's last claims left in its facts.

use capstan_events::NodeId;
use std::collections::BTreeMap;

use capstan_events::agent_channel::rpc::{
    FleetVersions, NodeName, NodeUpdate, UpdateRefusal, VersionCount, VersionRefusal,
    UPDATE_REFUSALS,
};
use serde_json::Value;

/// One paired node as stored: its version and the update facts its claims reported.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeUpdateRow {
    pub node_id: NodeId,
    pub name: String,
    pub agent_version: Option<String>,
    pub update_state: Option<String>,
    pub update_offered: Option<String>,
    pub update_reason: Option<String>,
    pub update_trial: Option<String>,
    /// The plane's `last_update_refusal` fact, as stored.
    pub last_refusal: Option<Value>,
}

/// The kept refusal, when it reads (one the plane wrote; anything else is left out).
pub fn last_refusal(kept: Option<&Value>) -> Option<UpdateRefusal> {
    serde_json::from_value(kept?.clone()).ok()
}

/// Each node's update, and per version the count (highest first), the nodes on trial and the
/// nodes refusing. A node is on trial when it reports running its own version on trial.
pub fn fleet_versions(rows: Vec<NodeUpdateRow>) -> FleetVersions {
    let mut versions: BTreeMap<Option<String>, VersionCount> = BTreeMap::new();
    let mut nodes = Vec::with_capacity(rows.len());
    for row in rows {
        let refused = row
            .update_state
            .as_deref()
            .is_some_and(|state| UPDATE_REFUSALS.contains(&state));
        let entry = versions
            .entry(row.agent_version.clone())
            .or_insert_with(|| VersionCount {
                version: row.agent_version.clone(),
                nodes: 0,
                on_trial: Vec::new(),
                refusals: Vec::new(),
            });
        entry.nodes += 1;
        let on_trial = row
            .update_trial
            .as_ref()
            .filter(|trial| Some(*trial) == row.agent_version.as_ref());
        if on_trial.is_some() {
            entry.on_trial.push(NodeName {
                node_id: row.node_id,
                name: row.name.clone(),
            });
        }
        if refused {
            entry.refusals.push(VersionRefusal {
                node_id: row.node_id,
                name: row.name.clone(),
                update_state: row.update_state.clone().unwrap_or_default(),
                update_offered: row.update_offered.clone(),
                update_reason: row.update_reason.clone(),
            });
        }
        nodes.push(NodeUpdate {
            refused,
            update_trial: on_trial.cloned(),
            last_refusal: last_refusal(row.last_refusal.as_ref()),
            node_id: row.node_id,
            name: row.name,
            agent_version: row.agent_version,
            update_state: row.update_state,
            update_offered: row.update_offered,
            update_reason: row.update_reason,
        });
    }
    let mut versions: Vec<VersionCount> = versions.into_values().collect();
    versions.sort_by(|a, b| {
        b.nodes
            .cmp(&a.nodes)
            .then_with(|| a.version.cmp(&b.version))
    });
    FleetVersions { versions, nodes }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A node that has reported nothing yet.
    fn silent(id: i64) -> NodeUpdateRow {
        NodeUpdateRow {
            node_id: NodeId(id),
            name: format!("node-{id}"),
            agent_version: None,
            update_state: None,
            update_offered: None,
            update_reason: None,
            update_trial: None,
            last_refusal: None,
        }
    }

    fn row(id: i64, version: &str) -> NodeUpdateRow {
        NodeUpdateRow {
            agent_version: Some(version.into()),
            update_state: Some("current".into()),
            ..silent(id)
        }
    }

    #[test]
    fn versions_are_counted_most_nodes_first_with_who_is_on_trial_and_who_refused_what_and_why() {
        let mut trial = row(2, "1.3.0");
        trial.update_trial = Some("1.3.0".into());
        let mut refusing = row(3, "1.2.0");
        refusing.update_state = Some("verify_failed".into());
        refusing.update_offered = Some("1.3.0".into());
        refusing.update_reason = Some("bad signature".into());
        let mut waiting = row(4, "1.2.0");
        waiting.update_state = Some("update_pending".into());
        let silent = silent(5);
        let view = fleet_versions(vec![
            row(1, "1.3.0"),
            trial,
            refusing,
            waiting,
            row(6, "1.2.0"),
            silent,
        ]);
        let counts: Vec<(Option<&str>, i64)> = view
            .versions
            .iter()
            .map(|count| (count.version.as_deref(), count.nodes))
            .collect();
        assert_eq!(counts, [(Some("1.2.0"), 3), (Some("1.3.0"), 2), (None, 1)]);
        let newer = &view.versions[1];
        assert_eq!(
            newer.on_trial,
            [NodeName {
                node_id: NodeId(2),
                name: "node-2".into()
            }]
        );
        assert!(newer.refusals.is_empty());
        let older = &view.versions[0];
        assert!(older.on_trial.is_empty());
        assert_eq!(
            older.refusals,
            [VersionRefusal {
                node_id: NodeId(3),
                name: "node-3".into(),
                update_state: "verify_failed".into(),
                update_offered: Some("1.3.0".into()),
                update_reason: Some("bad signature".into()),
            }],
            "a node waiting (update_pending) is no refusal"
        );
        assert!(view.nodes[2].refused && !view.nodes[3].refused);
        assert_eq!(view.nodes[1].update_trial.as_deref(), Some("1.3.0"));
    }

    #[test]
    fn ag_29_a_trial_of_another_version_than_the_one_running_is_not_shown_as_on_trial() {
        // A stale report (the agent rolled back, the plane still holds the old trial) never
        // names a node on trial of a version it does not run.
        let mut rolled_back = row(1, "1.2.0");
        rolled_back.update_trial = Some("1.3.0".into());
        let view = fleet_versions(vec![rolled_back]);
        assert!(view.versions[0].on_trial.is_empty());
        assert_eq!(view.nodes[0].update_trial, None);
    }

    #[test]
    fn the_last_refusal_the_plane_kept_is_shown_and_anything_else_is_left_out() {
        let mut moved_on = row(1, "1.4.0");
        moved_on.last_refusal = Some(json!({"state": "version_rejected", "offered": "1.3.0",
            "reason": "1.3.0 was rolled back here", "at": "2027-01-15T08:00:00Z"}));
        let mut garbled = row(2, "1.4.0");
        garbled.last_refusal = Some(json!({"state": 7}));
        let view = fleet_versions(vec![moved_on, garbled]);
        let kept = view.nodes[0].last_refusal.as_ref().unwrap();
        assert_eq!(kept.state, "version_rejected");
        assert_eq!(kept.offered.as_deref(), Some("1.3.0"));
        assert_eq!(kept.at.to_rfc3339(), "2027-01-15T08:00:00+00:00");
        assert!(!view.nodes[0].refused, "it refuses nothing now");
        assert_eq!(view.nodes[1].last_refusal, None);
    }
}
