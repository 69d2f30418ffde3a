//! A Docker host and its containers, and maintenance windows — two reasons an incident opens,
//! clears and counts but tells nobody on its own.
//!
//! * Grouping: while a host's node has an open critical incident, its containers' incidents of
//!   the same kind (source) are folded under the host's and signal nobody; the host's told.
//! * Silences: a window on a node — on a Docker host, on it and its containers — with who, why
//!   and an end time; it expires by itself (nothing needs to delete it).

use chrono::{DateTime, Duration, Utc};

use super::record::{Incident, Severity};
use super::sources::{Condition, NodeFacts, SourceName};
use super::{InvalidInput, NodeId};

/// The longest maintenance window that may be set at once.
pub const MAX_SILENCE: Duration = Duration::days(30);
/// The longest reason a silence may give, in characters.
pub const MAX_SILENCE_REASON_CHARS: usize = 512;

/// The kinds of incident a host has open and critical — held ones, and the critical conditions
/// its sources see this pass (a host opening in the same pass as its container still groups
/// it). Reconcile a host before its containers and pass them this.
pub fn host_critical_kinds(
    host_held: &[Incident],
    host_conditions: &[Condition],
) -> Vec<SourceName> {
    let held = host_held
        .iter()
        .filter(|incident| incident.happening() && incident.severity == Severity::Critical)
        .map(|incident| incident.source.clone());
    let seen = host_conditions
        .iter()
        .filter(|condition| condition.severity == Severity::Critical)
        .map(|condition| condition.source.clone());
    let mut kinds: Vec<SourceName> = held.chain(seen).collect();
    kinds.sort();
    kinds.dedup();
    kinds
}

/// The host node `node`'s incident of kind `source` is folded under, if any.
pub fn grouped_under(
    node: &NodeFacts,
    source: &SourceName,
    host_critical: &[SourceName],
) -> Option<NodeId> {
    let host = node.docker_host?;
    host_critical.contains(source).then_some(host)
}

/// A maintenance window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Silence {
    pub node_id: NodeId,
    pub by: String,
    pub reason: String,
    pub ends_at: DateTime<Utc>,
}

impl Silence {
    /// A window `by` a person on `node_id` until `ends_at`, checked: a reason of 1 to
    /// [`MAX_SILENCE_REASON_CHARS`] characters, an end in the future and at most
    /// [`MAX_SILENCE`] away.
    pub fn new(
        node_id: NodeId,
        by: &str,
        reason: &str,
        ends_at: DateTime<Utc>,
        now: DateTime<Utc>,
    ) -> Result<Silence, InvalidInput> {
        let reason = reason.trim();
        if reason.is_empty() || reason.chars().count() > MAX_SILENCE_REASON_CHARS {
            return Err(InvalidInput::new(
                "reason",
                format!("must say why, in 1 to {MAX_SILENCE_REASON_CHARS} characters"),
            ));
        }
        if ends_at <= now {
            return Err(InvalidInput::new("ends_at", "must be in the future"));
        }
        if ends_at - now > MAX_SILENCE {
            return Err(InvalidInput::new(
                "ends_at",
                format!("must be at most {} days away", MAX_SILENCE.num_days()),
            ));
        }
        Ok(Silence {
            node_id,
            by: by.to_string(),
            reason: reason.to_string(),
            ends_at,
        })
    }

    pub fn active(&self, now: DateTime<Utc>) -> bool {
        now < self.ends_at
    }

    /// Whether this window covers `node` at `now`: the node itself, or a container of it.
    pub fn covers(&self, node: &NodeFacts, now: DateTime<Utc>) -> bool {
        self.active(now) && (node.node_id == self.node_id || node.docker_host == Some(self.node_id))
    }
}

/// Whether any of `silences` covers `node` at `now`.
pub fn silenced(silences: &[Silence], node: &NodeFacts, now: DateTime<Utc>) -> bool {
    silences.iter().any(|silence| silence.covers(node, now))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::{at, incident};
    use crate::domain::sources::tests::node;

    fn silent_kind() -> SourceName {
        SourceName::agent_silent()
    }

    fn container(node_id: impl Into<NodeId>, host: impl Into<NodeId>) -> NodeFacts {
        NodeFacts {
            docker_host: Some(host.into()),
            ..node(node_id)
        }
    }

    #[test]
    fn a_containers_incident_is_grouped_under_its_hosts_open_critical_incident_of_the_same_kind() {
        let mut host_incident = incident(10);
        host_incident.severity = Severity::Critical;
        let kinds = host_critical_kinds(&[host_incident], &[]);
        assert_eq!(
            grouped_under(&container(2, 1), &silent_kind(), &kinds),
            Some(NodeId(1))
        );
        let other = SourceName::parse("agent:fail2ban").unwrap();
        assert_eq!(grouped_under(&container(2, 1), &other, &kinds), None);
        assert_eq!(
            grouped_under(&node(NodeId(2)), &silent_kind(), &kinds),
            None
        );
    }

    #[test]
    fn a_hosts_warning_or_closed_incident_groups_nothing() {
        let warning = incident(10);
        let mut closed = incident(11);
        closed.severity = Severity::Critical;
        closed.status = crate::domain::record::Status::Closed;
        assert!(host_critical_kinds(&[warning, closed], &[]).is_empty());
    }

    #[test]
    fn a_host_opening_in_the_same_pass_as_its_container_still_groups_it() {
        let condition = Condition {
            source: silent_kind(),
            title: silent_kind().title(),
            severity: Severity::Critical,
            detail: String::new(),
            since: at(0),
        };
        assert_eq!(host_critical_kinds(&[], &[condition]), vec![silent_kind()]);
    }

    #[test]
    fn a_silence_covers_its_node_and_a_hosts_silence_covers_its_containers_until_it_ends() {
        let silence = Silence::new(NodeId(1), "ann", "kernel upgrade", at(60), at(0)).unwrap();
        assert!(silence.covers(&node(NodeId(1)), at(59)));
        assert!(silence.covers(&container(2, 1), at(59)));
        assert!(!silence.covers(&node(NodeId(3)), at(59)));
        assert!(
            !silence.covers(&node(NodeId(1)), at(60)),
            "it expires by itself"
        );
        assert!(silenced(&[silence], &node(NodeId(1)), at(1)));
    }

    #[test]
    fn a_silence_without_a_reason_or_ending_in_the_past_or_too_far_ahead_is_refused() {
        assert_eq!(
            Silence::new(NodeId(1), "ann", "  ", at(60), at(0))
                .unwrap_err()
                .field,
            "reason"
        );
        assert_eq!(
            Silence::new(NodeId(1), "ann", "why", at(0), at(0))
                .unwrap_err()
                .field,
            "ends_at"
        );
        let too_far = at(0) + MAX_SILENCE + Duration::minutes(1);
        assert_eq!(
            Silence::new(NodeId(1), "ann", "why", too_far, at(0))
                .unwrap_err()
                .field,
            "ends_at"
        );
    }
}
