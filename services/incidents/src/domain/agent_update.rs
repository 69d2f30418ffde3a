//! The agent's self-update source (AC-43, AG-25, AG-27, AG-29; issue 15):
//! `plane:agent_update_refused` (warning) while the node's last reported `update_state` is a
//! refusal — `verify_failed` (AG-25/AG-26: signature, rollback, freeze, size, hash or
//! `--version` failed), `unlogged` (AG-27: not in the public log) or `version_rejected` (AG-29:
//! a version this machine rolled back). The other states are not refusals: `none`, `current` and
//! `update_pending` are an update going as it should, and `fetch_failed`, `unsigned_build` and
//! `no_binary` say the agent could not try, not that it refused what it was offered. It judges
//! only from the facts the agent channel's `node_reported` events left here
//! ([`UpdateFacts`]); it clears once the node reports a state that is not a refusal.

use capstan_events::agent_channel::rpc::UPDATE_REFUSALS;
use chrono::{DateTime, Utc};

use super::record::Severity;
use super::sources::{Condition, NodeFacts, PlaneSource, PlaneSourceName, SourceName};

/// What the node's agent last said about its self-update (`update_*` of its claims).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct UpdateFacts {
    /// AC-43's closed set as the agent reported it; `None` before it has reported one.
    pub state: Option<String>,
    /// The version on offer the verdict is about.
    pub offered: Option<String>,
    /// Why, in the agent's words.
    pub reason: Option<String>,
    /// When the node first reported `state` (since the last different one).
    pub since: Option<DateTime<Utc>>,
}

impl UpdateFacts {
    /// Whether the agent refused the release on offer (the agent's `UpdateState::is_refusal`).
    pub fn is_refusal(&self) -> bool {
        self.state
            .as_deref()
            .is_some_and(|state| UPDATE_REFUSALS.contains(&state))
    }
}

/// `plane:agent_update_refused`: the node's agent refused the release on offer. A warning: the
/// node keeps running the version it has, but it will not take this release by itself. A
/// different reason or version is the same incident with its detail refreshed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AgentUpdateRefused;

impl PlaneSource for AgentUpdateRefused {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::AgentUpdateRefused
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let update = &node.update;
        if !update.is_refusal() {
            return None;
        }
        let state = update.state.as_deref().unwrap_or_default();
        let offered = update.offered.as_deref().unwrap_or("the version on offer");
        let reason = update.reason.as_deref().unwrap_or("no reason given");
        Some(Condition {
            source: SourceName::Plane(PlaneSourceName::AgentUpdateRefused),
            severity: Severity::Warning,
            detail: format!("Refused {offered} ({state}): {reason}"),
            since: update.since.unwrap_or(now).min(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;
    use crate::domain::sources::tests::node;
    use crate::domain::sources::{InstallState, Registry};

    fn reporting(state: &str) -> NodeFacts {
        let mut facts = node(1);
        facts.update = UpdateFacts {
            state: Some(state.into()),
            offered: Some("1.3.0".into()),
            reason: Some("the release's signature does not verify".into()),
            since: Some(at(-60)),
        };
        facts
    }

    #[test]
    fn ac_43_ag_25_ag_27_ag_29_each_refusal_state_opens_a_warning_naming_the_reason_and_version() {
        for state in ["verify_failed", "unlogged", "version_rejected"] {
            let condition = AgentUpdateRefused.judge(&reporting(state), at(0)).unwrap();
            assert_eq!(condition.severity, Severity::Warning, "{state}");
            assert_eq!(condition.source.to_string(), "plane:agent_update_refused");
            assert!(condition.detail.contains("1.3.0"), "{}", condition.detail);
            assert!(condition.detail.contains(state), "{}", condition.detail);
            assert!(
                condition.detail.contains("signature does not verify"),
                "{}",
                condition.detail
            );
            assert_eq!(condition.since, at(-60));
        }
    }

    #[test]
    fn ac_43_states_that_are_not_refusals_open_nothing_and_so_clear_the_refusal() {
        for state in [
            "none",
            "current",
            "update_pending",
            "fetch_failed",
            "unsigned_build",
            "no_binary",
            "something_new",
        ] {
            assert_eq!(
                AgentUpdateRefused.judge(&reporting(state), at(0)),
                None,
                "{state}"
            );
        }
        assert_eq!(
            AgentUpdateRefused.judge(&node(1), at(0)),
            None,
            "a node that has reported no update state"
        );
    }

    #[test]
    fn ag_31_a_refusal_without_a_reason_or_version_still_says_what_was_refused() {
        let mut facts = reporting("version_rejected");
        facts.update.offered = None;
        facts.update.reason = None;
        facts.update.since = None;
        let condition = AgentUpdateRefused.judge(&facts, at(0)).unwrap();
        assert!(condition.detail.contains("version_rejected"));
        assert_eq!(condition.since, at(0));
    }

    #[test]
    fn in_13_a_node_not_operational_opens_no_update_refusal() {
        let mut registry = Registry::default();
        registry.register(Box::new(AgentUpdateRefused)).unwrap();
        let mut facts = reporting("verify_failed");
        assert_eq!(registry.conditions(&facts, at(0)).len(), 1);
        facts.install_state = InstallState::Retired;
        assert!(registry.conditions(&facts, at(0)).is_empty());
    }
}
