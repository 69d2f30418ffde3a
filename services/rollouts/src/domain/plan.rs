//! Who a rollout covers and in which stage (RO-12, RO-16, RO-18, RO-23..RO-25, RO-29): the
//! up-front refusals of a chosen list, the two stages of deploy-to-all, its window after a
//! publish, and a patch run's machines. Everything here reads the node facts the service
//! keeps as a projection of the agent channel's events.

use capstan_events::NodeId;
use chrono::{DateTime, Duration, Utc};

use super::engine::{Kind, StagePolicy, APPLY_WORD, PATCH_WORD, PREFLIGHT_WORD, PROBE_WORD};
use super::input::StartAsk;

/// RO-23: a completed publish whose rollout has not started within this long is never started.
pub const DEPLOY_ALL_WINDOW: Duration = Duration::hours(24);
pub use super::input::{MAX_NODES, MAX_STAGES};

/// RO-12: a node's machine (shared with the backups service's turns, BK-09).
pub use capstan_events::agent_channel::machine_key;

/// What the service knows of a node when it plans.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Candidate {
    pub node_id: NodeId,
    pub name: String,
    /// RO-12: its machine (container sites on one host are one machine).
    pub machine: String,
    pub hosts_site: bool,
    pub removed: bool,
    /// Switched on: not disabled by an operator, not retired.
    pub enabled: bool,
    /// The words its agent last reported.
    pub vocabulary: Vec<String>,
    /// RO-24: "Test releases here first".
    pub rollout_first: bool,
    /// RO-24: a management node takes its turn after plain sites.
    pub management: bool,
    /// PV-01: provisioning's install state; `None` is operational. Any state (named or not) is
    /// not, and a rollout skips the node.
    pub install_state: Option<String>,
}

impl Candidate {
    fn reports(&self, word: &str) -> bool {
        self.vocabulary.iter().any(|known| known == word)
    }

    /// RO-19: whether the readiness check is asked before its apply.
    pub fn has_preflight(&self) -> bool {
        self.reports(PREFLIGHT_WORD)
    }
}

/// RO-18: why a node cannot be in a rollout of a release, or `None` when it can. A node below
/// the version floor is offered, since `apply_update` is what raises it.
pub fn refusal(node: &Candidate, pages: bool) -> Option<String> {
    if node.removed {
        return Some(format!("{} has been removed", node.name));
    }
    if let Some(reason) = not_operational(node) {
        return Some(reason);
    }
    if !node.hosts_site {
        return Some(format!("{} hosts no site", node.name));
    }
    if !node.reports(APPLY_WORD) {
        return Some(format!(
            "{} needs a newer agent: it does not report {APPLY_WORD}",
            node.name
        ));
    }
    if pages && !node.reports(PROBE_WORD) {
        return Some(format!(
            "{} cannot check pages: its agent does not report {PROBE_WORD}",
            node.name
        ));
    }
    None
}

/// A node left out of a plan, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeftOut {
    pub node_id: NodeId,
    pub name: String,
    pub reason: String,
}

/// A plan: the stages in order, each a list of nodes, and who was left out.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Plan {
    pub stages: Vec<Vec<Candidate>>,
    pub left_out: Vec<LeftOut>,
}

/// RO-12, RO-18: a rollout of the nodes an operator chose, each in the stage given (a list
/// from the page gives each node a stage of its own, in the order given). Any refusal refuses
/// the whole start, naming every node and why, so the operator decides what to leave out.
pub fn chosen(stages: Vec<Vec<Candidate>>, pages: bool) -> Result<Plan, Vec<LeftOut>> {
    let refused: Vec<LeftOut> = stages
        .iter()
        .flatten()
        .filter_map(|node| {
            refusal(node, pages).map(|reason| LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason,
            })
        })
        .collect();
    if !refused.is_empty() {
        return Err(refused);
    }
    Ok(Plan {
        stages,
        left_out: Vec::new(),
    })
}

/// PV-01: why a node in an install state is skipped ("rollouts ... skip non-operational
/// nodes, but they stay listed"), or `None` when it is operational.
fn not_operational(node: &Candidate) -> Option<String> {
    node.install_state
        .as_ref()
        .map(|state| format!("{} is not operational (install state {state})", node.name))
}

/// RO-24: deploy-to-all covers every node hosting a site, in two stages: first the nodes marked
/// "Test releases here first" or, with none marked, the first site by name, so a release never
/// goes everywhere untried; then the rest, plain sites before management nodes, each by name.
/// A disabled node, or one the rollout would refuse, is left out and named. (The plane here is
/// not itself a node, so there is no "this management node" to leave out.)
pub fn deploy_all(nodes: &[Candidate]) -> Plan {
    let mut left_out = Vec::new();
    let mut eligible: Vec<Candidate> = Vec::new();
    for node in nodes {
        if node.removed {
            continue;
        }
        if !node.hosts_site {
            continue;
        }
        if !node.enabled {
            left_out.push(LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason: format!("{} is switched off", node.name),
            });
            continue;
        }
        if let Some(reason) = refusal(node, false) {
            left_out.push(LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason,
            });
            continue;
        }
        eligible.push(node.clone());
    }
    eligible.sort_by(|a, b| a.name.cmp(&b.name).then(a.node_id.cmp(&b.node_id)));
    left_out.sort_by(|a, b| a.name.cmp(&b.name));
    if eligible.is_empty() {
        return Plan {
            stages: Vec::new(),
            left_out,
        };
    }
    let marked: Vec<Candidate> = eligible
        .iter()
        .filter(|node| node.rollout_first)
        .cloned()
        .collect();
    let first = if marked.is_empty() {
        vec![eligible[0].clone()]
    } else {
        marked
    };
    let mut rest: Vec<Candidate> = eligible
        .into_iter()
        .filter(|node| !first.iter().any(|f| f.node_id == node.node_id))
        .collect();
    rest.sort_by(|a, b| {
        a.management
            .cmp(&b.management)
            .then(a.name.cmp(&b.name))
            .then(a.node_id.cmp(&b.node_id))
    });
    let mut stages = vec![first];
    if !rest.is_empty() {
        stages.push(rest);
    }
    Plan { stages, left_out }
}

/// RO-23: what becomes of a publish's "deploy to all".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DeployAll {
    Start,
    /// RO-16: another rollout holds the turn; the deploy waits for it.
    Wait,
    Refuse(String),
}

/// RO-23: a publish's deploy-to-all starts only within [`DEPLOY_ALL_WINDOW`] of the publish,
/// only for the newest published release (what a node's apply would pull), and waits while
/// another rollout runs.
pub fn deploy_all_decision(
    published_at: DateTime<Utc>,
    version: &str,
    newest: &str,
    another_running: bool,
    now: DateTime<Utc>,
) -> DeployAll {
    if version != newest {
        return DeployAll::Refuse(format!(
            "{version} is not the newest published release ({newest} is), so it is not what a node's apply would pull"
        ));
    }
    if now - published_at > DEPLOY_ALL_WINDOW {
        return DeployAll::Refuse(format!(
            "the publish of {version} completed more than 24 hours ago; a deploy to all is never started that late"
        ));
    }
    if another_running {
        return DeployAll::Wait;
    }
    DeployAll::Start
}

/// RO-25, RO-29: a patch run's plan: one step per machine, each a stage of its own so machines
/// go one at a time. A machine with several nodes is patched through the first by name. Nodes
/// switched off or lacking the word are left out by name; removed (moved-away) nodes silently.
pub fn patch_run(nodes: &[Candidate]) -> Plan {
    let mut left_out = Vec::new();
    let mut chosen: Vec<Candidate> = Vec::new();
    let mut sorted: Vec<&Candidate> = nodes.iter().filter(|node| !node.removed).collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name).then(a.node_id.cmp(&b.node_id)));
    for node in sorted {
        if !node.enabled {
            left_out.push(LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason: format!("{} is switched off", node.name),
            });
            continue;
        }
        if let Some(reason) = not_operational(node) {
            left_out.push(LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason,
            });
            continue;
        }
        if !node.reports(PATCH_WORD) {
            left_out.push(LeftOut {
                node_id: node.node_id,
                name: node.name.clone(),
                reason: format!(
                    "{} needs a newer agent: it does not report {PATCH_WORD}",
                    node.name
                ),
            });
            continue;
        }
        if chosen.iter().any(|other| other.machine == node.machine) {
            continue;
        }
        chosen.push(node.clone());
    }
    Plan {
        stages: chosen.into_iter().map(|node| vec![node]).collect(),
        left_out,
    }
}

/// Why a start cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Unplannable {
    /// The operator named a node the plane does not know.
    NoNode(NodeId),
    /// RO-18: nodes refused up front; the whole start is refused.
    Refused(Vec<LeftOut>),
    /// No node can take the rollout (with who was left out and why).
    NoneCan(Vec<LeftOut>),
}

/// The plan of an operator's start, with each stage's rules: the stages named (a patch run's
/// one machine at a time, RO-25) or, with `all`, deploy-to-all's two stages (RO-24). `known`
/// is what the plane knows of the nodes named (of every node with `all`). A plan the plane
/// made gives each of its stages the default rules.
pub fn for_start(
    ask: &StartAsk,
    known: &[Candidate],
) -> Result<(Plan, Vec<StagePolicy>), Unplannable> {
    let planned = |plan: Plan| {
        let policies = vec![StagePolicy::default(); plan.stages.len()];
        (plan, policies)
    };
    let (plan, policies) = if ask.all {
        planned(match ask.kind {
            Kind::Release => deploy_all(known),
            Kind::Patch => patch_run(known),
        })
    } else {
        let stages: Vec<Vec<Candidate>> = ask
            .stages
            .iter()
            .map(|stage| {
                stage
                    .iter()
                    .map(|node| {
                        known
                            .iter()
                            .find(|candidate| candidate.node_id == *node)
                            .cloned()
                            .ok_or(Unplannable::NoNode(*node))
                    })
                    .collect()
            })
            .collect::<Result<_, _>>()?;
        match ask.kind {
            Kind::Release => (
                chosen(stages, !ask.pages.is_empty()).map_err(Unplannable::Refused)?,
                ask.policies.clone(),
            ),
            Kind::Patch => {
                let plan = patch_run(&stages.concat());
                if !plan.left_out.is_empty() {
                    return Err(Unplannable::Refused(plan.left_out));
                }
                planned(plan)
            }
        }
    };
    if plan.stages.is_empty() {
        return Err(Unplannable::NoneCan(plan.left_out));
    }
    Ok((plan, policies))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn node(id: i64, name: &str) -> Candidate {
        Candidate {
            node_id: NodeId(id),
            name: name.into(),
            machine: format!("m{id}"),
            hosts_site: true,
            removed: false,
            enabled: true,
            vocabulary: vec![APPLY_WORD.into(), PROBE_WORD.into(), PATCH_WORD.into()],
            rollout_first: false,
            management: false,
            install_state: None,
        }
    }

    fn ask(kind: Kind, stages: Vec<Vec<i64>>) -> StartAsk {
        let stages: Vec<Vec<NodeId>> = stages
            .into_iter()
            .map(|stage| stage.into_iter().map(NodeId).collect())
            .collect();
        StartAsk {
            kind,
            version: "2.1.0".into(),
            pages: Vec::new(),
            all: false,
            policies: vec![StagePolicy::default(); stages.len()],
            stages,
        }
    }

    #[test]
    fn ro_18_a_start_naming_an_unknown_node_or_one_refused_up_front_is_refused_whole() {
        let known = vec![node(1, "a"), node(2, "b")];
        assert_eq!(
            for_start(&ask(Kind::Release, vec![vec![1], vec![9]]), &known),
            Err(Unplannable::NoNode(NodeId(9)))
        );
        let mut removed = node(2, "b");
        removed.removed = true;
        let Err(Unplannable::Refused(left_out)) = for_start(
            &ask(Kind::Release, vec![vec![1, 2]]),
            &[node(1, "a"), removed],
        ) else {
            panic!("a removed node refuses the start");
        };
        assert_eq!(left_out[0].node_id, NodeId(2));
        let (plan, policies) =
            for_start(&ask(Kind::Release, vec![vec![1], vec![2]]), &known).unwrap();
        assert_eq!(plan.stages.len(), 2);
        assert_eq!(policies.len(), 2);
    }

    #[test]
    fn ro_24_with_all_and_no_node_that_can_take_it_nothing_is_planned() {
        let mut all = ask(Kind::Release, Vec::new());
        all.all = true;
        let mut siteless = node(1, "a");
        siteless.hosts_site = false;
        assert!(matches!(
            for_start(&all, &[siteless]),
            Err(Unplannable::NoneCan(_))
        ));
    }
    #[test]
    fn ro_18_a_node_without_a_site_removed_or_without_apply_update_is_refused_up_front() {
        let mut siteless = node(1, "a");
        siteless.hosts_site = false;
        assert!(refusal(&siteless, false).unwrap().contains("hosts no site"));
        let mut removed = node(2, "b");
        removed.removed = true;
        assert!(refusal(&removed, false).unwrap().contains("removed"));
        let mut old = node(3, "c");
        old.vocabulary = vec!["check_status".into()];
        assert!(refusal(&old, false)
            .unwrap()
            .contains("needs a newer agent"));
        assert_eq!(refusal(&node(4, "d"), false), None);
    }

    #[test]
    fn ro_18_a_node_that_cannot_check_pages_is_refused_only_when_the_rollout_names_pages() {
        let mut blind = node(1, "a");
        blind.vocabulary = vec![APPLY_WORD.into()];
        assert_eq!(refusal(&blind, false), None);
        assert!(refusal(&blind, true).unwrap().contains(PROBE_WORD));
    }

    #[test]
    fn ro_18_a_chosen_list_with_a_refused_node_is_refused_whole_naming_each() {
        let mut siteless = node(2, "b");
        siteless.hosts_site = false;
        let refused = chosen(vec![vec![node(1, "a")], vec![siteless]], false).unwrap_err();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].node_id, NodeId(2));
        assert!(chosen(vec![vec![node(1, "a")], vec![node(2, "b")]], false).is_ok());
    }

    #[test]
    fn ro_24_deploy_all_tests_first_on_marked_nodes_then_the_rest_plain_before_management() {
        let mut first = node(5, "zulu");
        first.rollout_first = true;
        let mut manager = node(2, "alpha-manager");
        manager.management = true;
        let plan = deploy_all(&[node(3, "bravo"), manager, first, node(4, "charlie")]);
        let names =
            |stage: &Vec<Candidate>| stage.iter().map(|n| n.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(&plan.stages[0]), vec!["zulu"]);
        assert_eq!(
            names(&plan.stages[1]),
            vec!["bravo", "charlie", "alpha-manager"]
        );
    }

    #[test]
    fn ro_24_with_none_marked_the_first_site_by_name_goes_first() {
        let plan = deploy_all(&[node(3, "charlie"), node(1, "bravo"), node(2, "delta")]);
        assert_eq!(plan.stages[0].len(), 1);
        assert_eq!(plan.stages[0][0].name, "bravo");
        assert_eq!(plan.stages[1].len(), 2);
    }

    #[test]
    fn pv_01_a_node_in_any_install_state_is_left_out_of_every_plan_by_name() {
        for state in [
            "installing",
            "install_failed",
            "copy",
            "switching",
            "retired",
            "melting",
        ] {
            let mut installing = node(1, "new");
            installing.install_state = Some(state.into());
            assert_eq!(
                refusal(&installing, false),
                Some(format!("new is not operational (install state {state})"))
            );
            let plan = deploy_all(&[installing.clone(), node(2, "ok")]);
            assert_eq!(plan.stages, vec![vec![node(2, "ok")]]);
            assert_eq!(plan.left_out.len(), 1);
            assert_eq!(plan.left_out[0].node_id, NodeId(1));
            let patch = patch_run(&[installing, node(2, "ok")]);
            assert_eq!(patch.stages, vec![vec![node(2, "ok")]]);
            assert!(patch.left_out[0].reason.contains("not operational"));
        }
    }

    #[test]
    fn ro_24_disabled_and_refused_nodes_are_left_out_and_named() {
        let mut off = node(1, "off");
        off.enabled = false;
        let mut old = node(2, "old");
        old.vocabulary.clear();
        let mut siteless = node(3, "bare");
        siteless.hosts_site = false;
        let plan = deploy_all(&[off, old, siteless, node(4, "ok")]);
        assert_eq!(plan.stages, vec![vec![node(4, "ok")]]);
        let named: Vec<&str> = plan.left_out.iter().map(|l| l.name.as_str()).collect();
        assert_eq!(
            named,
            vec!["off", "old"],
            "a siteless node is not a candidate at all"
        );
    }

    fn at(hours: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 0, 0, 0).unwrap() + Duration::hours(hours)
    }

    #[test]
    fn ro_23_deploy_all_starts_within_24_hours_for_the_newest_release_and_waits_for_another() {
        assert_eq!(
            deploy_all_decision(at(0), "2.1", "2.1", false, at(23)),
            DeployAll::Start
        );
        assert_eq!(
            deploy_all_decision(at(0), "2.1", "2.1", true, at(1)),
            DeployAll::Wait
        );
        assert!(matches!(
            deploy_all_decision(at(0), "2.1", "2.1", false, at(25)),
            DeployAll::Refuse(reason) if reason.contains("24 hours")
        ));
        assert!(matches!(
            deploy_all_decision(at(0), "2.0", "2.1", false, at(1)),
            DeployAll::Refuse(reason) if reason.contains("not the newest")
        ));
    }

    #[test]
    fn ro_25_ro_29_a_patch_run_takes_each_machine_once_one_at_a_time_and_names_who_is_left_out() {
        let mut twin = node(2, "b-twin");
        twin.machine = "m1".into();
        let mut off = node(3, "c-off");
        off.enabled = false;
        let mut old = node(4, "d-old");
        old.vocabulary = vec![APPLY_WORD.into()];
        let mut moved = node(5, "e-moved");
        moved.removed = true;
        let plan = patch_run(&[node(1, "a"), twin, off, old, moved, node(6, "f")]);
        let stages: Vec<Vec<i64>> = plan
            .stages
            .iter()
            .map(|stage| stage.iter().map(|n| n.node_id.get()).collect())
            .collect();
        assert_eq!(
            stages,
            vec![vec![1], vec![6]],
            "one machine a stage, m1 once"
        );
        let named: Vec<i64> = plan.left_out.iter().map(|l| l.node_id.get()).collect();
        assert_eq!(
            named,
            vec![3, 4],
            "the moved-away node is left out silently"
        );
    }
}
