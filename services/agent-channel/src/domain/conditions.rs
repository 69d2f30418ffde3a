//! The agent channel's conditions (issue 28: conditions are judged where the facts live),
//! judged from what a node's claims report, and published when a claim changes the judgement,
//! in the transaction that stores the claim's facts:
//!
//! * `plane:agent_update_refused` (warning; AC-43, AG-25, AG-27, AG-29) while the node's last
//!   reported `update_state` is a refusal — `verify_failed`, `unlogged` or `version_rejected`.
//!   The other states are not refusals: `none`, `current` and `update_pending` are an update
//!   going as it should, and `fetch_failed`, `unsigned_build` and `no_binary` say the agent could
//!   not try, not that it refused what it was offered.
//! * `plane:unmanageable` (critical; AC-49, AG-33, AG-39) while the node's last reported
//!   `script_trust` says it cannot verify the scripts it would run as root — `untrusted_file`
//!   (the evidence lists the files) or `unusable_manifest`. `trusted` clears it.
//!
//! A fact a claim does not mention keeps its last value (`claims::apply`), so an absent report
//! leaves the last judgement standing and never reads as healthy.

use capstan_events::agent_channel::rpc::UPDATE_REFUSALS;
use capstan_events::agent_channel::{AGENT_UPDATE_REFUSED, UNMANAGEABLE};
use capstan_events::conditions::{ConditionChanged, ConditionKind};
use capstan_events::NodeId;
use chrono::{DateTime, Utc};
use serde_json::{Map, Value};

/// The most files `plane:unmanageable`'s evidence names before it says how many more.
pub const LISTED_FILES: usize = 20;

fn text<'a>(facts: &'a Map<String, Value>, field: &str) -> Option<&'a str> {
    facts.get(field)?.as_str()
}

/// AC-43: the refusal the facts report, in words, or `None` when the state is not a refusal.
pub fn update_refused(facts: &Map<String, Value>) -> Option<String> {
    let state = text(facts, "update_state")?;
    if !UPDATE_REFUSALS.contains(&state) {
        return None;
    }
    let offered = text(facts, "update_offered").unwrap_or("the version on offer");
    let reason = text(facts, "update_reason").unwrap_or("no reason given");
    Some(format!("Refused {offered} ({state}): {reason}"))
}

/// AC-49, AG-39: why the node cannot verify its scripts, in words, or `None` when it can (or
/// has not said).
pub fn unmanageable(facts: &Map<String, Value>) -> Option<String> {
    match text(facts, "script_trust")? {
        "untrusted_file" => {
            let files: Vec<&str> = facts
                .get("script_trust_files")
                .and_then(Value::as_array)
                .map(|files| files.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            let mut listed: Vec<&str> = files.iter().take(LISTED_FILES).copied().collect();
            if files.is_empty() {
                listed.push("(the agent named none)");
            }
            let more = files.len().saturating_sub(LISTED_FILES);
            let tail = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            Some(format!(
                "Files differ from the signed release manifest, so the scripts that use them are refused: {}{tail}",
                listed.join(", ")
            ))
        }
        "unusable_manifest" => Some(format!(
            "The signed release manifest cannot be used, so every script is refused: {}",
            text(facts, "script_trust_reason").unwrap_or("no reason given")
        )),
        _ => None,
    }
}

/// A condition's judge: its evidence from the node's facts while it holds.
type Judge = fn(&Map<String, Value>) -> Option<String>;

/// The conditions whose judgement differs between the node's facts `before` and `after` a
/// claim at `at` (nothing when the claim changed neither).
pub fn changed(
    node: NodeId,
    before: &Map<String, Value>,
    after: &Map<String, Value>,
    at: DateTime<Utc>,
) -> Vec<ConditionChanged> {
    let judges: [(&ConditionKind, Judge); 2] = [
        (&AGENT_UPDATE_REFUSED, update_refused),
        (&UNMANAGEABLE, unmanageable),
    ];
    judges
        .into_iter()
        .filter_map(|(kind, judge)| {
            let now = judge(after);
            (judge(before) != now).then(|| match now {
                Some(evidence) => kind.happening(node, evidence, at, at),
                None => kind.not_happening(node, at),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use capstan_events::incidents::Severity;
    use chrono::TimeZone;
    use serde_json::json;

    fn at() -> DateTime<Utc> {
        Utc.timestamp_opt(1_800_000_000, 0).unwrap()
    }

    fn facts(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    fn reporting(state: &str) -> Map<String, Value> {
        facts(json!({
            "update_state": state,
            "update_offered": "1.3.0",
            "update_reason": "the release's signature does not verify",
        }))
    }

    fn trust(state: &str, files: &[&str]) -> Map<String, Value> {
        facts(json!({
            "script_trust": state,
            "script_trust_files": files,
            "script_trust_reason": "there is no RELEASE_MANIFEST",
        }))
    }

    #[test]
    fn ac_43_ag_25_ag_27_ag_29_each_refusal_state_opens_a_warning_naming_the_reason_and_version() {
        for state in ["verify_failed", "unlogged", "version_rejected"] {
            let conditions = changed(NodeId(1), &Map::new(), &reporting(state), at());
            assert_eq!(conditions.len(), 1, "{state}");
            let condition = &conditions[0];
            assert!(condition.happening);
            assert_eq!(condition.severity, Severity::Warning, "{state}");
            assert_eq!(condition.source(), "plane:agent_update_refused");
            assert!(
                condition.evidence.contains("1.3.0"),
                "{}",
                condition.evidence
            );
            assert!(condition.evidence.contains(state), "{}", condition.evidence);
            assert!(
                condition.evidence.contains("signature does not verify"),
                "{}",
                condition.evidence
            );
            assert_eq!(condition.since, Some(at()));
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
            assert_eq!(update_refused(&reporting(state)), None, "{state}");
            let cleared = changed(NodeId(1), &reporting("unlogged"), &reporting(state), at());
            assert_eq!(cleared.len(), 1, "{state}");
            assert!(!cleared[0].happening, "{state}");
        }
        assert_eq!(
            update_refused(&Map::new()),
            None,
            "a node that has reported no update state"
        );
        assert!(changed(NodeId(1), &reporting("current"), &reporting("none"), at()).is_empty());
    }

    #[test]
    fn ag_31_a_refusal_without_a_reason_or_version_still_says_what_was_refused() {
        let evidence = update_refused(&facts(json!({"update_state": "version_rejected"})));
        assert!(evidence.unwrap().contains("version_rejected"));
    }

    #[test]
    fn ac_49_untrusted_files_open_a_critical_unmanageable_listing_every_file() {
        let conditions = changed(
            NodeId(1),
            &Map::new(),
            &trust("untrusted_file", &["bin/host_report.sh", "bin/planted.sh"]),
            at(),
        );
        let condition = &conditions[0];
        assert_eq!(condition.severity, Severity::Critical);
        assert_eq!(condition.source(), "plane:unmanageable");
        assert!(
            condition
                .evidence
                .ends_with("bin/host_report.sh, bin/planted.sh"),
            "{}",
            condition.evidence
        );
        let many: Vec<String> = (0..25).map(|n| format!("f{n}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        let evidence = unmanageable(&trust("untrusted_file", &many)).unwrap();
        assert!(evidence.ends_with("f19 and 5 more"), "{evidence}");
    }

    #[test]
    fn ac_49_an_unusable_manifest_opens_it_with_the_agents_reason() {
        let evidence = unmanageable(&trust("unusable_manifest", &[])).unwrap();
        assert!(evidence.contains("there is no RELEASE_MANIFEST"));
    }

    #[test]
    fn ag_39_trusted_or_no_report_opens_nothing_so_trusted_clears_it() {
        assert_eq!(unmanageable(&trust("trusted", &[])), None);
        assert_eq!(unmanageable(&trust("sideways", &[])), None);
        assert_eq!(unmanageable(&Map::new()), None);
        let cleared = changed(
            NodeId(1),
            &trust("untrusted_file", &["a"]),
            &trust("trusted", &[]),
            at(),
        );
        assert_eq!(cleared.len(), 1);
        assert_eq!(cleared[0].source(), "plane:unmanageable");
        assert!(!cleared[0].happening);
    }

    #[test]
    fn a_new_file_list_is_the_same_condition_with_new_evidence() {
        let conditions = changed(
            NodeId(1),
            &trust("untrusted_file", &["a"]),
            &trust("untrusted_file", &["a", "b"]),
            at(),
        );
        assert_eq!(conditions.len(), 1);
        assert!(conditions[0].happening);
        assert!(conditions[0].evidence.ends_with("a, b"));
    }
}
