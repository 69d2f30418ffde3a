use super::*;
use crate::domain::verdict::{Judgement, Outcome, Viewer};
use capstan_events::NodeId;
use capstan_events::Word as _;
use chrono::TimeZone;
use serde_json::json;

fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap()
}

fn rollout(stages: usize, pages: usize) -> Rollout {
    Rollout {
        id: 7,
        kind: Kind::Release,
        version: "2.1.0".into(),
        state: State::Running,
        stage: 0,
        stages: vec![StagePolicy::default(); stages],
        pages: (0..pages)
            .map(|i| ProbePage {
                viewer: Viewer::Anonymous,
                path: format!("/p{i}"),
            })
            .collect(),
        soak_until: None,
        halt: None,
    }
}

/// Nodes `(node, machine, stage)`, none reporting upgrade_preflight.
fn steps(nodes: &[(i64, &str, usize)]) -> Vec<Step> {
    nodes
        .iter()
        .map(|(node, machine, stage)| Step::new(*node * 10, NodeId(*node), machine, *stage, false))
        .collect()
}

fn requested(effects: &[Effect]) -> Vec<(i64, &'static str)> {
    effects
        .iter()
        .filter_map(|effect| match effect {
            Effect::RequestJob { node_id, word, .. } => Some((node_id.get(), *word)),
            _ => None,
        })
        .collect()
}

fn answer(step: &mut Step, outcome: Outcome, result: Value) {
    for slot in step.slots.iter_mut() {
        slot.answer = Some(Finished {
            outcome,
            result: Some(result.clone()),
            reason: None,
        });
    }
}

fn good_apply() -> Value {
    json!({"completed": true, "deploy_tier_passed": true, "version": "2.1.0", "rolled_back": false})
}

fn bad_apply() -> Value {
    json!({"completed": true, "deploy_tier_passed": false, "version": "2.1.0", "rolled_back": true})
}

fn step_of(steps: &mut [Step], node: NodeId) -> &mut Step {
    steps.iter_mut().find(|step| step.node_id == node).unwrap()
}

#[test]
fn ro_12_within_a_stage_nodes_go_at_once_but_one_at_a_time_per_machine() {
    let mut r = rollout(2, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m1", 0), (3, "m2", 0), (4, "m3", 1)]);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(
        requested(&effects),
        vec![(1, APPLY_WORD), (3, APPLY_WORD)],
        "node 2 shares m1 with node 1; node 4 is in the next stage"
    );
    // Nothing new: the same tick again asks for nothing.
    assert!(advance(&mut r, &mut s, &Facts::default(), t0()).is_empty());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
}

#[test]
fn ro_12_a_stage_starts_only_when_every_node_of_the_one_before_has_passed() {
    let mut r = rollout(2, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 1)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty(), "node 2 has not passed yet");
    answer(step_of(&mut s, NodeId(2)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(3, APPLY_WORD)]);
    assert!(effects.contains(&Effect::StageStarted { stage: 1 }));
    answer(step_of(&mut s, NodeId(3)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(effects.contains(&Effect::Finished));
    assert_eq!(r.state, State::Finished);
    assert!(s.iter().all(|step| step.verdict == Verdict::Passed));
}

#[test]
fn ro_14_the_first_miss_halts_in_flight_applies_are_still_judged_and_it_ends_halted_naming_the_node(
) {
    let mut r = rollout(2, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m1", 0), (4, "m4", 1)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, bad_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halting, "node 2's apply is still under way");
    assert!(requested(&effects).is_empty(), "nothing new starts");
    assert_eq!(step_of(&mut s, NodeId(3)).verdict, Verdict::Skipped);
    assert_eq!(step_of(&mut s, NodeId(4)).verdict, Verdict::Skipped);
    answer(step_of(&mut s, NodeId(2)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(
        step_of(&mut s, NodeId(2)).verdict,
        Verdict::Passed,
        "still judged"
    );
    assert_eq!(r.state, State::Halted);
    let halt = r.halt.clone().unwrap();
    assert_eq!(halt.node_id, NodeId(1));
    assert!(halt.reason.contains("deploy tier did not pass"), "{halt:?}");
    assert!(effects.contains(&Effect::Halted(halt)));
}

#[test]
fn budget_a_stage_with_a_budget_of_one_holds_a_miss_and_carries_on_and_halts_past_it() {
    let mut r = rollout(2, 0);
    r.stages[0].budget = Budget::Nodes(1);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 0), (4, "m4", 1)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, bad_apply());
    answer(step_of(&mut s, NodeId(2)), Outcome::Completed, good_apply());
    answer(step_of(&mut s, NodeId(3)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Running);
    assert_eq!(step_of(&mut s, NodeId(1)).verdict, Verdict::Failed);
    assert_eq!(requested(&effects), vec![(4, APPLY_WORD)]);

    let mut r = rollout(1, 0);
    r.stages[0].budget = Budget::Nodes(1);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, bad_apply());
    answer(step_of(&mut s, NodeId(2)), Outcome::Failed, Value::Null);
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(
        r.state,
        State::Halting,
        "two misses are past a budget of one"
    );
}

#[test]
fn budget_percent_counts_against_the_stage_size() {
    assert!(Budget::Percent(10).allows(1, 10));
    assert!(!Budget::Percent(10).allows(2, 10));
    assert!(!Budget::Percent(10).allows(1, 9));
    assert!(Budget::NONE.allows(0, 5));
    assert!(!Budget::NONE.allows(1, 5));
}

#[test]
fn ro_15_stop_ends_at_once_a_running_apply_finishes_and_nothing_further_is_queued() {
    let mut r = rollout(1, 1);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m1", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    // Node 1 reaches its apply; node 2 is still checking its page.
    answer(
        step_of(&mut s, NodeId(1)),
        Outcome::Completed,
        json!({"status": 200, "errors": 0, "failed_assets": []}),
    );
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(step_of(&mut s, NodeId(1)).phase, Phase::Apply);
    let effects = act(&mut r, &mut s, Act::Stop, t0()).unwrap();
    assert_eq!(r.state, State::Stopped);
    assert_eq!(step_of(&mut s, NodeId(2)).verdict, Verdict::Skipped);
    assert_eq!(step_of(&mut s, NodeId(3)).verdict, Verdict::Skipped);
    assert!(
        effects
            .iter()
            .any(|e| matches!(e, Effect::CancelJob { .. })),
        "node 2's page check is withdrawn"
    );
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty(), "no page check after a stop");
    assert_eq!(step_of(&mut s, NodeId(1)).phase, Phase::Done);
    assert!(act(&mut r, &mut s, Act::Stop, t0()).is_err());
}

#[test]
fn pause_starts_nothing_new_judges_applies_under_way_and_resume_goes_on() {
    let mut r = rollout(1, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m1", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    act(&mut r, &mut s, Act::Pause, t0()).unwrap();
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(step_of(&mut s, NodeId(1)).verdict, Verdict::Passed);
    assert!(requested(&effects).is_empty(), "paused: node 2 waits");
    assert!(act(&mut r, &mut s, Act::Pause, t0()).is_err());
    act(&mut r, &mut s, Act::Resume, t0()).unwrap();
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
}

#[test]
fn a_paused_rollout_asks_for_no_apply_it_had_not_asked_for() {
    let mut r = rollout(1, 0);
    let mut s = vec![Step::new(10, NodeId(1), "m1", 0, true)];
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, PREFLIGHT_WORD)]);
    act(&mut r, &mut s, Act::Pause, t0()).unwrap();
    answer(
        &mut s[0],
        Outcome::Completed,
        json!({"checks": [{"name": "lock", "pass": true}]}),
    );
    assert!(requested(&advance(&mut r, &mut s, &Facts::default(), t0())).is_empty());
    act(&mut r, &mut s, Act::Resume, t0()).unwrap();
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, APPLY_WORD)]);
}

#[test]
fn retry_sends_failed_and_left_out_nodes_again_under_new_keys() {
    let mut r = rollout(1, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m1", 0)]);
    let first = advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, bad_apply());
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halted);
    act(&mut r, &mut s, Act::Retry, t0()).unwrap();
    assert_eq!(r.state, State::Running);
    assert_eq!(r.halt, None);
    let again = advance(&mut r, &mut s, &Facts::default(), t0());
    let key = |effects: &[Effect]| match &effects[0] {
        Effect::RequestJob { key, .. } => key.clone(),
        other => panic!("{other:?}"),
    };
    assert_ne!(
        key(&first),
        key(&again),
        "a retry is a new try with a new key"
    );
    assert!(key(&again).contains("try-1"));
    let mut r2 = rollout(1, 0);
    r2.state = State::Running;
    assert!(act(&mut r2, &mut s, Act::Retry, t0()).is_err());
}

#[test]
fn ro_19_preflight_first_a_fail_halts_with_its_reason_and_no_apply_is_asked_for() {
    let mut r = rollout(1, 0);
    let mut s = vec![
        Step::new(10, NodeId(1), "m1", 0, true),
        Step::new(20, NodeId(2), "m2", 0, false),
    ];
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(
        requested(&effects),
        vec![(1, PREFLIGHT_WORD), (2, APPLY_WORD)],
        "a node without the word is applied directly"
    );
    answer(
        &mut s[0],
        Outcome::Completed,
        json!({"checks": [{"name": "lock", "pass": false, "reason": "the site lock is held"}]}),
    );
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty());
    assert_eq!(r.state, State::Halting);
    assert!(r
        .halt
        .as_ref()
        .unwrap()
        .reason
        .contains("the site lock is held"));
}

#[test]
fn ro_19_a_readiness_check_unanswered_for_15_minutes_halts_and_is_withdrawn() {
    let mut r = rollout(1, 0);
    let mut s = vec![Step::new(10, NodeId(1), "m1", 0, true)];
    advance(&mut r, &mut s, &Facts::default(), t0());
    let effects = advance(
        &mut r,
        &mut s,
        &Facts::default(),
        t0() + Duration::minutes(14),
    );
    assert!(effects.is_empty());
    let effects = advance(
        &mut r,
        &mut s,
        &Facts::default(),
        t0() + Duration::minutes(15),
    );
    assert!(effects
        .iter()
        .any(|e| matches!(e, Effect::CancelJob { .. })));
    assert_eq!(r.state, State::Halted);
    assert!(r.halt.unwrap().reason.contains("15 minutes"));
}

#[test]
fn ro_21_ro_22_pages_are_checked_before_and_after_and_a_page_that_got_worse_halts() {
    let mut r = rollout(1, 2);
    let mut s = steps(&[(1, "m1", 0)]);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, PROBE_WORD), (1, PROBE_WORD)]);
    let clean = json!({"status": 200, "errors": 0, "failed_assets": []});
    answer(&mut s[0], Outcome::Completed, clean.clone());
    assert_eq!(
        requested(&advance(&mut r, &mut s, &Facts::default(), t0())),
        vec![(1, APPLY_WORD)]
    );
    answer(&mut s[0], Outcome::Completed, good_apply());
    assert_eq!(
        requested(&advance(&mut r, &mut s, &Facts::default(), t0())),
        vec![(1, PROBE_WORD), (1, PROBE_WORD)],
        "after the apply passed its gate"
    );
    s[0].slots[0].answer = Some(Finished {
        outcome: Outcome::Completed,
        result: Some(clean),
        reason: None,
    });
    s[0].slots[1].answer = Some(Finished {
        outcome: Outcome::Completed,
        result: Some(json!({"status": 500, "errors": 0, "failed_assets": []})),
        reason: None,
    });
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halted);
    assert!(r.halt.unwrap().reason.contains("/p1 answered 500"));
}

#[test]
fn ro_21_a_round_of_page_checks_longer_than_15_minutes_halts() {
    let mut r = rollout(1, 1);
    let mut s = steps(&[(1, "m1", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    advance(
        &mut r,
        &mut s,
        &Facts::default(),
        t0() + Duration::minutes(16),
    );
    assert_eq!(r.state, State::Halted);
    assert!(r
        .halt
        .unwrap()
        .reason
        .contains("before the apply did not finish"));
}

#[test]
fn ro_17_a_node_whose_site_copy_holds_it_waits_saying_why() {
    let mut r = rollout(1, 0);
    let mut s = steps(&[(1, "m1", 0)]);
    let facts = Facts {
        holds: vec![(NodeId(1), "its site copy is switching over".into())],
        ..Facts::default()
    };
    assert!(advance(&mut r, &mut s, &facts, t0()).is_empty());
    assert_eq!(
        s[0].waiting_on.as_deref(),
        Some("its site copy is switching over")
    );
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, APPLY_WORD)]);
    assert_eq!(s[0].waiting_on, None);
}

#[test]
fn soak_the_next_stage_waits_for_the_soak_and_an_incident_during_it_halts() {
    let mut r = rollout(2, 0);
    r.stages[0].soak = Duration::minutes(10);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty(), "soaking");
    assert_eq!(r.soak_until, Some(t0() + Duration::minutes(10)));
    let effects = advance(
        &mut r,
        &mut s,
        &Facts::default(),
        t0() + Duration::minutes(10),
    );
    assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);

    let mut r = rollout(2, 0);
    r.stages[0].soak = Duration::minutes(10);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    advance(&mut r, &mut s, &Facts::default(), t0());
    let facts = Facts {
        incidents: vec![(NodeId(1), "plane:site_down".into())],
        ..Facts::default()
    };
    let effects = advance(&mut r, &mut s, &facts, t0() + Duration::minutes(3));
    assert_eq!(r.state, State::Halted);
    assert!(requested(&effects).is_empty());
    assert_eq!(step_of(&mut s, NodeId(2)).verdict, Verdict::Skipped);
    assert!(r.halt.unwrap().reason.contains("plane:site_down"));
}

#[test]
fn durable_a_decision_repeated_from_the_stored_rows_asks_under_the_same_keys() {
    // A crash after the decision but before its commit: the service decides again from
    // the rows it had, and the keys are the same, so the agent channel takes it once.
    let r0 = rollout(1, 0);
    let s0 = steps(&[(1, "m1", 0)]);
    let (mut r1, mut s1) = (r0.clone(), s0.clone());
    let (mut r2, mut s2) = (r0, s0);
    assert_eq!(
        advance(&mut r1, &mut s1, &Facts::default(), t0()),
        advance(&mut r2, &mut s2, &Facts::default(), t0())
    );
}

#[test]
fn durable_an_apply_whose_job_was_lost_is_a_miss_and_never_asked_again() {
    let mut r = rollout(1, 0);
    let mut s = steps(&[(1, "m1", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(&mut s[0], Outcome::Lost, Value::Null);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty());
    assert_eq!(s[0].verdict, Verdict::Failed);
    assert!(s[0].reason.as_deref().unwrap().contains("lost"));
}

#[test]
fn ro_25_ro_29_a_patch_run_installs_per_machine_and_an_updater_failure_stops_it_naming_the_node() {
    let mut r = rollout(2, 0);
    r.kind = Kind::Patch;
    r.version = String::new();
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, PATCH_WORD)]);
    answer(&mut s[0], Outcome::Completed, json!({"outcome": "busy"}));
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(s[0].verdict, Verdict::Passed);
    assert_eq!(
        s[0].reason.as_deref(),
        Some("another package run was in the way")
    );
    assert_eq!(requested(&effects), vec![(2, PATCH_WORD)]);
    answer(
        &mut s[1],
        Outcome::Completed,
        json!({"outcome": "failed", "detail": "dpkg was interrupted"}),
    );
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halted);
    let halt = r.halt.unwrap();
    assert_eq!(halt.node_id, NodeId(2));
    assert!(halt.reason.contains("dpkg was interrupted"));
}

#[test]
fn ro_29_nothing_to_install_is_recorded_and_passes() {
    let finished = Finished {
        outcome: Outcome::Completed,
        result: Some(json!({"outcome": "nothing_to_install"})),
        reason: None,
    };
    assert_eq!(
        patch_verdict(&finished),
        (Judgement::Pass, Some("nothing to install".into()))
    );
}

/// RO-29 on the agent's own answers (`words::patching` in capstan-agent): each outcome is
/// read as the spec words it.
#[test]
fn ro_29_the_agents_answers_are_judged_as_the_spec_words_them() {
    let completed = |result: Value| Finished {
        outcome: Outcome::Completed,
        result: Some(result),
        reason: None,
    };
    assert_eq!(
        patch_verdict(&completed(json!({"outcome": "installed",
            "installed": ["libssl3", "openssl"], "held_back": 0,
            "sources": ["deb http://deb.debian.org/debian-security bookworm-security main"]}))),
        (
            Judgement::Pass,
            Some("installed 2 packages: libssl3, openssl".into())
        )
    );
    assert_eq!(
        patch_verdict(&completed(json!({"outcome": "nothing_to_install",
            "installed": [], "held_back": 2}))),
        (
            Judgement::Pass,
            Some("nothing to install (2 held back: they need packages from outside the security origin)".into())
        )
    );
    assert_eq!(
        patch_verdict(&completed(json!({"outcome": "busy",
            "lock": "/var/lib/dpkg/lock-frontend", "held_back": 0}))),
        (
            Judgement::Pass,
            Some(
                "another package run was in the way (it holds /var/lib/dpkg/lock-frontend)".into()
            )
        )
    );
    // An updater failure: the job ends failed, with the agent's reason and apt's detail.
    let failed = Finished {
        outcome: Outcome::Failed,
        result: Some(json!({"outcome": "failed",
            "detail": "apt-get update: The repository 'file:/x bookworm-security Release' does not exist."})),
        reason: Some("the updater failed: apt-get update: The repository 'file:/x bookworm-security Release' does not exist.".into()),
    };
    let (judgement, note) = patch_verdict(&failed);
    assert_eq!(note, None);
    let Judgement::Miss(reason) = judgement else {
        panic!("an updater failure stops the run")
    };
    assert!(
        reason.starts_with("install_security_updates failed: the updater failed: apt-get update"),
        "{reason}"
    );
    // The same without a reason still says what apt said.
    let quiet = Finished {
        reason: None,
        ..failed
    };
    let Judgement::Miss(reason) = patch_verdict(&quiet).0 else {
        panic!()
    };
    assert!(reason.contains("does not exist"), "{reason}");
    assert!(!patch_verdict(&completed(json!({"installed": []})))
        .0
        .passed());
}

#[test]
fn ro_10_a_steps_verdict_is_one_of_five_and_reads_back_as_stored() {
    let all = [
        Verdict::Pending,
        Verdict::Running,
        Verdict::Passed,
        Verdict::Failed,
        Verdict::Skipped,
    ];
    let words: Vec<&str> = all.iter().map(|verdict| verdict.as_str()).collect();
    assert_eq!(words, ["pending", "running", "passed", "failed", "skipped"]);
    for verdict in all {
        assert_eq!(Verdict::parse(verdict.as_str()), Some(verdict));
    }
    assert_eq!(Verdict::parse("halted"), None);
    // A new step is pending, with its node, stage and machine.
    let step = Step::new(5, NodeId(50), "node-50", 2, true);
    assert_eq!(
        (
            step.verdict,
            step.node_id,
            step.stage,
            step.machine.as_str()
        ),
        (Verdict::Pending, NodeId(50), 2, "node-50")
    );
}

#[test]
fn ro_13_each_advance_judges_running_steps_starts_a_waiting_one_per_free_machine_and_moves_the_stage_on(
) {
    let mut r = rollout(2, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m1", 0), (3, "m2", 0), (4, "m3", 1)]);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, APPLY_WORD), (3, APPLY_WORD)]);
    assert_eq!(step_of(&mut s, NodeId(1)).verdict, Verdict::Running);
    // One advance judges both answers and starts node 2 on the machine node 1 freed.
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, good_apply());
    answer(step_of(&mut s, NodeId(3)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(step_of(&mut s, NodeId(1)).verdict, Verdict::Passed);
    assert_eq!(step_of(&mut s, NodeId(3)).verdict, Verdict::Passed);
    assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
    assert_eq!(r.stage, 0);
    // When every step of the stage has passed, the same advance starts the next stage.
    answer(step_of(&mut s, NodeId(2)), Outcome::Completed, good_apply());
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.stage, 1);
    assert_eq!(requested(&effects), vec![(4, APPLY_WORD)]);
    answer(step_of(&mut s, NodeId(4)), Outcome::Completed, good_apply());
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Finished);
}

#[test]
fn ro_29_stop_takes_effect_between_nodes_of_a_patch_run() {
    let mut r = rollout(3, 0);
    r.kind = Kind::Patch;
    r.version = String::new();
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 1), (3, "m3", 2)]);
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(requested(&effects), vec![(1, PATCH_WORD)]);
    // Stopped while machine 1 installs: its run goes on and is recorded; no other starts.
    act(&mut r, &mut s, Act::Stop, t0()).unwrap();
    assert_eq!(r.state, State::Stopped);
    answer(
        step_of(&mut s, NodeId(1)),
        Outcome::Completed,
        json!({"outcome": "installed", "installed": ["libssl3"]}),
    );
    let effects = advance(&mut r, &mut s, &Facts::default(), t0());
    assert!(requested(&effects).is_empty(), "nothing after the stop");
    assert_eq!(step_of(&mut s, NodeId(1)).verdict, Verdict::Passed);
    assert_eq!(
        step_of(&mut s, NodeId(1)).reason.as_deref(),
        Some("installed 1 packages: libssl3")
    );
    assert_eq!(step_of(&mut s, NodeId(2)).verdict, Verdict::Skipped);
    assert_eq!(step_of(&mut s, NodeId(3)).verdict, Verdict::Skipped);
}

#[test]
fn ro_16_a_running_paused_or_halting_rollout_holds_the_one_turn_and_an_ended_one_does_not() {
    for state in [State::Running, State::Paused, State::Halting] {
        assert!(state.active(), "{}", state.as_str());
    }
    for state in [State::Halted, State::Stopped, State::Finished] {
        assert!(!state.active(), "{}", state.as_str());
    }
    // A halt with applies under way still holds the turn until they are judged.
    let mut r = rollout(1, 0);
    let mut s = steps(&[(1, "m1", 0), (2, "m2", 0)]);
    advance(&mut r, &mut s, &Facts::default(), t0());
    answer(step_of(&mut s, NodeId(1)), Outcome::Completed, bad_apply());
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halting);
    assert!(r.state.active());
    answer(step_of(&mut s, NodeId(2)), Outcome::Completed, good_apply());
    advance(&mut r, &mut s, &Facts::default(), t0());
    assert_eq!(r.state, State::Halted);
    assert!(!r.state.active());
}
