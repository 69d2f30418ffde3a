//! What an operator's start of a rollout may ask, read into the engine's types: the release's
//! version as releases spell it, and each stage's error budget and soak (beyond the spec:
//! hawkBit's error threshold, Argo's pause between steps). Each refusal says what was wrong;
//! the rpc names the field.

use capstan_events::NodeId;
use capstan_events::Word as _;
use std::collections::HashSet;

use capstan_events::rollouts::staged::{StageRequest, StartRollout};
use capstan_events::rpc::InvalidInput;
use chrono::Duration;

use super::engine::{Budget, Kind, StagePolicy};
use super::verdict::{self, ProbePage};

/// The most nodes one rollout may name.
pub const MAX_NODES: usize = 5_000;
/// The most stages one rollout may have.
pub const MAX_STAGES: usize = 20;
/// The longest soak a stage may ask for.
pub const MAX_SOAK_SECS: u32 = 7 * 24 * 3600;
/// The longest version a release may have.
pub const MAX_VERSION_CHARS: usize = 64;

/// A version as releases spell it: a digit first, then at most [`MAX_VERSION_CHARS`] of
/// letters, digits, `.`, `+` and `-` (so it is never a path or an option).
pub fn version_ok(version: &str) -> bool {
    let mut chars = version.chars();
    chars.next().is_some_and(|c| c.is_ascii_digit())
        && version.len() <= MAX_VERSION_CHARS
        && chars.all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '+' | '-'))
}

/// A stage's rules from what the operator asked: a budget of `max_failed` nodes or
/// `max_failed_percent` of the stage (not both; by default none, so the first miss halts as
/// RO-14 has it), and a soak of at most [`MAX_SOAK_SECS`]. A refusal names `stages`.
pub fn stage_policy(
    max_failed: Option<u32>,
    max_failed_percent: Option<u8>,
    soak_secs: Option<u32>,
) -> Result<StagePolicy, InvalidInput> {
    let refused = |reason: String| InvalidInput::new("stages", reason);
    let budget = match (max_failed, max_failed_percent) {
        (Some(_), Some(_)) => {
            return Err(refused(
                "a stage takes max_failed or max_failed_percent, not both".into(),
            ))
        }
        (Some(nodes), None) => Budget::Nodes(nodes),
        (None, Some(percent)) if percent <= 100 => Budget::Percent(percent),
        (None, Some(percent)) => {
            return Err(refused(format!(
                "max_failed_percent is 0 to 100, not {percent}"
            )))
        }
        (None, None) => Budget::NONE,
    };
    let soak = soak_secs.unwrap_or(0);
    if soak > MAX_SOAK_SECS {
        return Err(refused(format!(
            "soak_secs is at most {MAX_SOAK_SECS}, not {soak}"
        )));
    }
    Ok(StagePolicy {
        budget,
        soak: Duration::seconds(i64::from(soak)),
    })
}

/// An operator's start of a rollout, read and checked: what it rolls out, the pages it checks,
/// and the nodes of each stage with the stage's rules (none with `all`: the plane plans them).
#[derive(Debug, Clone, PartialEq)]
pub struct StartAsk {
    pub kind: Kind,
    /// The release a `Release` rollout applies (empty for a patch run).
    pub version: String,
    pub pages: Vec<ProbePage>,
    /// RO-24: every node that hosts a site, in the deploy-to-all plan.
    pub all: bool,
    pub stages: Vec<Vec<NodeId>>,
    pub policies: Vec<StagePolicy>,
}

impl StartAsk {
    /// Every node the operator named, in order.
    pub fn chosen(&self) -> Vec<NodeId> {
        self.stages.concat()
    }
}

/// Reads a start into a [`StartAsk`]; a refusal names the field that was wrong.
pub fn start_ask(request: &StartRollout) -> Result<StartAsk, InvalidInput> {
    let kind = match request.kind.as_deref() {
        None | Some("") => Kind::Release,
        Some(word) => Kind::parse(word)
            .ok_or_else(|| InvalidInput::new("kind", "must be release or patch"))?,
    };
    let version = start_version(kind, request.version.as_deref())?;
    let pages = verdict::probe_pages(request.pages.as_deref().unwrap_or(""))?;
    if kind == Kind::Patch && !pages.is_empty() {
        return Err(InvalidInput::new("pages", "a patch run checks no pages"));
    }
    start_stages(request.all, &request.stages)?;
    let policies = request
        .stages
        .iter()
        .map(stage_request_policy)
        .collect::<Result<_, _>>()?;
    Ok(StartAsk {
        kind,
        version,
        pages,
        all: request.all,
        stages: request
            .stages
            .iter()
            .map(|stage| stage.nodes.clone())
            .collect(),
        policies,
    })
}

/// A stage's rules from what the operator asked of it; a bad one names `stages`.
pub fn stage_request_policy(stage: &StageRequest) -> Result<StagePolicy, InvalidInput> {
    stage_policy(stage.max_failed, stage.max_failed_percent, stage.soak_secs)
}

/// A release rollout names its release's version; a patch run names none.
fn start_version(kind: Kind, version: Option<&str>) -> Result<String, InvalidInput> {
    match kind {
        Kind::Release => {
            let version = version.unwrap_or_default();
            if !version_ok(version) {
                return Err(InvalidInput::new(
                    "version",
                    "a release rollout names the release's version (digits first, at most 64 of letters, digits, . + -)",
                ));
            }
            Ok(version.to_string())
        }
        Kind::Patch if version.is_some_and(|v| !v.is_empty()) => Err(InvalidInput::new(
            "version",
            "a patch run applies no release",
        )),
        Kind::Patch => Ok(String::new()),
    }
}

/// The stages an operator named: none with `all`; otherwise at least one, each with a node,
/// at most [`MAX_STAGES`] of them and [`MAX_NODES`] nodes, no node twice.
fn start_stages(all: bool, stages: &[StageRequest]) -> Result<(), InvalidInput> {
    if all && !stages.is_empty() {
        return Err(InvalidInput::new(
            "stages",
            "with all, the plane plans the stages",
        ));
    }
    if !all {
        if stages.is_empty() || stages.iter().any(|stage| stage.nodes.is_empty()) {
            return Err(InvalidInput::new(
                "stages",
                "name at least one stage, each with at least one node (or all: true)",
            ));
        }
        if stages.len() > MAX_STAGES {
            return Err(InvalidInput::new(
                "stages",
                format!("at most {MAX_STAGES} stages"),
            ));
        }
    }
    let chosen: Vec<NodeId> = stages.iter().flat_map(|s| s.nodes.clone()).collect();
    if chosen.len() > MAX_NODES {
        return Err(InvalidInput::new(
            "stages",
            format!("at most {MAX_NODES} nodes in a rollout"),
        ));
    }
    let mut seen = HashSet::new();
    if let Some(twice) = chosen.iter().find(|node| !seen.insert(**node)) {
        return Err(InvalidInput::new(
            "stages",
            format!("node {twice} is named twice"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ro_14_a_stage_that_asks_for_no_budget_halts_on_the_first_miss() {
        let policy = stage_policy(None, None, None).unwrap();
        assert_eq!(policy, StagePolicy::default());
        assert_eq!(policy.budget, Budget::NONE);
        assert!(!policy.budget.allows(1, 10));
        assert_eq!(policy.soak, Duration::zero());
    }

    #[test]
    fn a_stage_takes_a_budget_in_nodes_or_in_percent_but_not_both() {
        assert_eq!(
            stage_policy(Some(2), None, Some(60)).unwrap(),
            StagePolicy {
                budget: Budget::Nodes(2),
                soak: Duration::seconds(60)
            }
        );
        assert_eq!(
            stage_policy(None, Some(10), None).unwrap().budget,
            Budget::Percent(10)
        );
        assert_eq!(
            stage_policy(None, Some(100), None).unwrap().budget,
            Budget::Percent(100)
        );
        let both = stage_policy(Some(1), Some(10), None).unwrap_err();
        assert!(both.reason.contains("not both"), "{both}");
        let over = stage_policy(None, Some(101), None).unwrap_err();
        assert!(over.reason.contains("0 to 100, not 101"), "{over}");
    }

    #[test]
    fn a_soak_is_at_most_a_week() {
        assert_eq!(
            stage_policy(None, None, Some(MAX_SOAK_SECS)).unwrap().soak,
            Duration::days(7)
        );
        let long = stage_policy(None, None, Some(MAX_SOAK_SECS + 1)).unwrap_err();
        assert!(long.reason.contains("at most 604800"), "{long}");
    }

    #[test]
    fn a_version_is_spelled_as_releases_spell_it() {
        assert!(version_ok("2.1.0"));
        assert!(version_ok("2.1.0-rc.1+build5"));
        assert!(version_ok(&"9".repeat(MAX_VERSION_CHARS)));
        assert!(!version_ok(&"9".repeat(MAX_VERSION_CHARS + 1)));
        assert!(!version_ok(""));
        assert!(!version_ok("v2"));
        assert!(!version_ok("-2"));
        assert!(!version_ok("2.1/../x"));
        assert!(!version_ok("2.1 --force"));
        assert!(!version_ok("2.1é"));
    }
    fn start(json: serde_json::Value) -> Result<StartAsk, InvalidInput> {
        let mut request = serde_json::json!({"actor": {"name": "ops", "level": 10}});
        request
            .as_object_mut()
            .unwrap()
            .extend(json.as_object().unwrap().clone());
        start_ask(&serde_json::from_value(request).unwrap())
    }

    #[test]
    fn ro_12_a_start_names_each_stage_with_its_nodes_and_no_node_twice() {
        let ask = start(
            serde_json::json!({"version": "2.1.0", "stages": [{"nodes": [1, 2]}, {"nodes": [3]}]}),
        )
        .unwrap();
        assert_eq!(ask.kind, Kind::Release);
        assert_eq!(
            ask.stages,
            vec![vec![NodeId(1), NodeId(2)], vec![NodeId(3)]]
        );
        assert_eq!(ask.chosen(), vec![NodeId(1), NodeId(2), NodeId(3)]);
        assert_eq!(ask.policies, vec![StagePolicy::default(); 2]);
        let twice = start(
            serde_json::json!({"version": "2.1.0", "stages": [{"nodes": [1]}, {"nodes": [1]}]}),
        )
        .unwrap_err();
        assert_eq!(twice.field, "stages");
        assert!(
            twice.reason.contains("node 1 is named twice"),
            "{}",
            twice.reason
        );
        let empty =
            start(serde_json::json!({"version": "2.1.0", "stages": [{"nodes": []}]})).unwrap_err();
        assert_eq!(empty.field, "stages");
    }

    #[test]
    fn ro_24_with_all_the_plane_plans_the_stages_and_the_operator_names_none() {
        let ask = start(serde_json::json!({"version": "2.1.0", "all": true})).unwrap();
        assert!(ask.all && ask.stages.is_empty());
        let both =
            start(serde_json::json!({"version": "2.1.0", "all": true, "stages": [{"nodes": [1]}]}))
                .unwrap_err();
        assert_eq!(both.field, "stages");
    }

    #[test]
    fn ro_25_a_patch_run_applies_no_release_and_checks_no_pages() {
        let ask = start(serde_json::json!({"kind": "patch", "stages": [{"nodes": [1]}]})).unwrap();
        assert_eq!((ask.kind, ask.version.as_str()), (Kind::Patch, ""));
        let versioned = start(
            serde_json::json!({"kind": "patch", "version": "2.1.0", "stages": [{"nodes": [1]}]}),
        )
        .unwrap_err();
        assert_eq!(versioned.field, "version");
        let unknown =
            start(serde_json::json!({"kind": "upgrade", "stages": [{"nodes": [1]}]})).unwrap_err();
        assert_eq!(unknown.field, "kind");
    }

    #[test]
    fn a_release_rollout_without_a_version_is_refused_naming_the_version() {
        let missing = start(serde_json::json!({"stages": [{"nodes": [1]}]})).unwrap_err();
        assert_eq!(missing.field, "version");
    }
    #[test]
    fn a_bad_stage_is_invalid_input_naming_stages() {
        use capstan_events::rpc::{ErrorCode, RpcError};
        let stage = |max_failed, max_failed_percent, soak_secs| StageRequest {
            nodes: vec![NodeId(1)],
            max_failed,
            max_failed_percent,
            soak_secs,
        };
        assert_eq!(
            stage_request_policy(&stage(Some(2), None, None))
                .unwrap()
                .budget,
            Budget::Nodes(2)
        );
        let error =
            RpcError::from(stage_request_policy(&stage(Some(1), Some(10), None)).unwrap_err());
        assert_eq!(error.code, ErrorCode::InvalidRequest);
        assert!(error.message.contains("stages"), "{}", error.message);
        assert!(error.message.contains("not both"), "{}", error.message);
    }
}
