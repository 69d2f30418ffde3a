//! The agent's script trust source (issue 15; AC-49, AG-33, AG-39): `plane:unmanageable`
//! (critical) while the node's last reported `script_trust` says it cannot verify the scripts
//! it would run as root — `untrusted_file` (files differ from the signed release manifest, are
//! missing or unlisted; the incident lists them) or `unusable_manifest` (the manifest is
//! absent, unreadable or signed by a key the agent does not hold: every script refuses). A
//! node in either state cannot be repaired by sending it work, so its failing jobs are
//! symptoms, not problems of their own. `trusted` (with its empty list: "looked, all match")
//! clears it; an absent report leaves the last standing and never reads as healthy.

use chrono::{DateTime, Utc};

use super::record::Severity;
use super::sources::{Condition, NodeFacts, PlaneSource, PlaneSourceName, SourceName};

/// The most files the detail names before it says how many more.
pub const LISTED_FILES: usize = 20;

/// What the node's agent last said about its script tree (`script_trust*` of its claims).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScriptTrustFacts {
    /// `trusted`, `untrusted_file` or `unusable_manifest`; `None` before it has reported one.
    pub state: Option<String>,
    /// The files that differ (empty: looked, all match).
    pub files: Vec<String>,
    /// Why, in the agent's words.
    pub reason: Option<String>,
    /// When the node first reported `state` (since the last different one).
    pub since: Option<DateTime<Utc>>,
}

/// `plane:unmanageable`: the node cannot verify the scripts it would run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Unmanageable;

impl PlaneSource for Unmanageable {
    fn name(&self) -> PlaneSourceName {
        PlaneSourceName::Unmanageable
    }

    fn judge(&self, node: &NodeFacts, now: DateTime<Utc>) -> Option<Condition> {
        let trust = &node.script_trust;
        let detail = match trust.state.as_deref()? {
            "untrusted_file" => {
                let mut listed: Vec<&str> = trust
                    .files
                    .iter()
                    .take(LISTED_FILES)
                    .map(String::as_str)
                    .collect();
                if trust.files.is_empty() {
                    listed.push("(the agent named none)");
                }
                let more = trust.files.len().saturating_sub(LISTED_FILES);
                let tail = if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                };
                format!(
                    "Files differ from the signed release manifest, so the scripts that use them are refused: {}{tail}",
                    listed.join(", ")
                )
            }
            "unusable_manifest" => format!(
                "The signed release manifest cannot be used, so every script is refused: {}",
                trust.reason.as_deref().unwrap_or("no reason given")
            ),
            _ => return None,
        };
        Some(Condition {
            source: SourceName::Plane(PlaneSourceName::Unmanageable),
            severity: Severity::Critical,
            detail,
            since: trust.since.unwrap_or(now).min(now),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;
    use crate::domain::sources::tests::node;
    use crate::domain::sources::{InstallState, Registry};

    fn reporting(state: &str, files: &[&str]) -> NodeFacts {
        let mut facts = node(1);
        facts.script_trust = ScriptTrustFacts {
            state: Some(state.into()),
            files: files.iter().map(|file| file.to_string()).collect(),
            reason: Some("there is no RELEASE_MANIFEST".into()),
            since: Some(at(-60)),
        };
        facts
    }

    #[test]
    fn ac_49_untrusted_files_open_a_critical_unmanageable_listing_every_file() {
        let condition = Unmanageable
            .judge(
                &reporting("untrusted_file", &["bin/host_report.sh", "bin/planted.sh"]),
                at(0),
            )
            .unwrap();
        assert_eq!(condition.severity, Severity::Critical);
        assert_eq!(condition.source.to_string(), "plane:unmanageable");
        assert!(
            condition
                .detail
                .ends_with("bin/host_report.sh, bin/planted.sh"),
            "{}",
            condition.detail
        );
        assert_eq!(condition.since, at(-60));
        let many: Vec<String> = (0..25).map(|n| format!("f{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let condition = Unmanageable
            .judge(&reporting("untrusted_file", &many), at(0))
            .unwrap();
        assert!(
            condition.detail.ends_with("f19 and 5 more"),
            "{}",
            condition.detail
        );
    }

    #[test]
    fn ac_49_an_unusable_manifest_opens_it_with_the_agents_reason() {
        let condition = Unmanageable
            .judge(&reporting("unusable_manifest", &[]), at(0))
            .unwrap();
        assert_eq!(condition.severity, Severity::Critical);
        assert!(condition.detail.contains("there is no RELEASE_MANIFEST"));
    }

    #[test]
    fn ag_39_trusted_or_no_report_opens_nothing_so_trusted_clears_it() {
        assert_eq!(Unmanageable.judge(&reporting("trusted", &[]), at(0)), None);
        assert_eq!(Unmanageable.judge(&reporting("sideways", &[]), at(0)), None);
        assert_eq!(Unmanageable.judge(&node(1), at(0)), None);
    }

    #[test]
    fn in_13_a_node_not_operational_opens_no_unmanageable() {
        let mut registry = Registry::default();
        registry.register(Box::new(Unmanageable)).unwrap();
        let mut facts = reporting("untrusted_file", &["a"]);
        assert_eq!(registry.conditions(&facts, at(0)).len(), 1);
        facts.install_state = InstallState::Retired;
        assert!(registry.conditions(&facts, at(0)).is_empty());
    }
}
