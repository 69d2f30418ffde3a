use super::*;
use serde_json::json;

fn claim(body: Value) -> Result<Claim, AgentError> {
    parse_claim(&serde_json::to_vec(&body).unwrap())
}

#[test]
fn ac_17_unknown_fields_are_set_aside_and_named_and_the_rest_is_taken() {
    let claim = claim(json!({
        "agent_version": "1.2.3", "vocabulary": ["check_status"], "teleport": true, "aardvark": 1
    }))
    .unwrap();
    assert_eq!(claim.ignored_fields, vec!["aardvark", "teleport"]);
    assert_eq!(claim.vocabulary, Some(vec!["check_status".to_string()]));
}

#[test]
fn a_known_field_of_the_wrong_shape_is_refused_naming_it() {
    let cases = [
        (json!({}), "agent_version"),
        (json!({"agent_version": "1", "idle": "yes"}), "idle"),
        (
            json!({"agent_version": "1", "vocabulary": "check_status"}),
            "vocabulary",
        ),
        (
            json!({"agent_version": "1", "vocabulary": ["rm -rf"]}),
            "vocabulary",
        ),
        (
            json!({"agent_version": "1", "claim_bytes": 12}),
            "claim_bytes",
        ),
        (
            json!({"agent_version": "1", "update_state": "sideways"}),
            "update_state",
        ),
        (
            json!({"agent_version": "1", "update_reason": "x".repeat(1025)}),
            "update_reason",
        ),
        (
            json!({"agent_version": "1", "update_reason": 7}),
            "update_reason",
        ),
        (
            json!({"agent_version": "1", "log_access": true}),
            "log_access",
        ),
        (
            json!({"agent_version": "1", "recipes": "disk:armed:pass"}),
            "recipes",
        ),
    ];
    for (body, field) in cases {
        let error = claim(body.clone()).unwrap_err();
        assert!(error.to_string().contains(field), "{body}: {error}");
    }
    assert!(parse_claim(b"[1]").is_err());
}

#[test]
fn ac_49_ag_39_script_trust_and_the_bundle_are_read_from_their_closed_sets_and_bounds() {
    let taken = claim(json!({
        "agent_version": "1", "script_trust": "untrusted_file",
        "script_trust_files": ["bin/host_report.sh"], "script_trust_reason": "modified",
        "bundle_state": "verify_failed", "bundle_reason": null
    }))
    .unwrap();
    assert!(
        taken.ignored_fields.is_empty(),
        "{:?}",
        taken.ignored_fields
    );
    assert_eq!(
        taken.facts["script_trust_files"],
        json!(["bin/host_report.sh"])
    );
    assert_eq!(taken.facts["bundle_state"], "verify_failed");
    // an empty list is the agent saying it looked and every file matches
    let looked = claim(json!({"agent_version": "1", "script_trust": "trusted",
        "script_trust_files": []}))
    .unwrap();
    assert_eq!(looked.facts["script_trust_files"], json!([]));
    let too_many: Vec<String> = (0..65).map(|n| format!("f{n}")).collect();
    for (body, field) in [
        (
            json!({"agent_version": "1", "script_trust": "fine"}),
            "script_trust",
        ),
        (
            json!({"agent_version": "1", "script_trust_files": "bin/a.sh"}),
            "script_trust_files",
        ),
        (
            json!({"agent_version": "1", "script_trust_files": too_many}),
            "script_trust_files",
        ),
        (
            json!({"agent_version": "1", "script_trust_files": [""]}),
            "script_trust_files",
        ),
        (
            json!({"agent_version": "1", "bundle_state": "meh"}),
            "bundle_state",
        ),
        (
            json!({"agent_version": "1", "script_trust_reason": "x".repeat(1025)}),
            "script_trust_reason",
        ),
    ] {
        let error = claim(body.clone()).unwrap_err();
        assert!(error.to_string().contains(field), "{body}: {error}");
    }
}

#[test]
fn ac_45_recipes_keep_only_closed_set_entries() {
    let recipes = normalise_recipes(&json!([
        {"name": "disk_headroom", "mode": "armed", "verdict": "pass"},
        {"name": "tls_expiry", "mode": "report-only", "verdict": "maybe"},
        {"name": "swap", "mode": "not-applicable", "verdict": "fail"},
        {"name": "dns", "mode": "sometimes", "verdict": "pass"},
        {"name": "ntp", "mode": "armed", "verdict": null}
    ]))
    .unwrap();
    assert_eq!(
        recipes,
        json!([
            {"name": "disk_headroom", "mode": "armed", "verdict": "pass"},
            {"name": "swap", "mode": "not-applicable", "verdict": null},
            {"name": "ntp", "mode": "armed", "verdict": null}
        ])
    );
}

#[test]
fn a_recipes_hold_is_kept_in_the_agents_words_with_why_an_ignored_one_is_ignored() {
    let long = "x".repeat(600);
    let recipes = normalise_recipes(&json!([
        {"name": "service_health", "mode": "armed", "verdict": "fail", "hold": "held",
         "hold_reason": "not asked"},
        {"name": "fail2ban", "mode": "armed", "verdict": "fail", "hold": "ignored",
         "hold_reason": "the hold directory has mode 770"},
        {"name": "disk_headroom", "mode": "armed", "verdict": "pass", "hold": "none"},
        {"name": "ntp", "mode": "armed", "verdict": "pass", "hold": "paused"},
        {"name": "swap", "mode": "armed", "verdict": "pass", "hold": "ignored",
         "hold_reason": long},
    ]))
    .unwrap();
    assert_eq!(recipes[0]["hold"], "held");
    assert_eq!(
        recipes[0]["hold_reason"],
        Value::Null,
        "only an ignored hold says why"
    );
    assert_eq!(recipes[1]["hold"], "ignored");
    assert_eq!(recipes[1]["hold_reason"], "the hold directory has mode 770");
    assert_eq!(recipes[2]["hold"], "none");
    assert!(
        recipes[3].get("hold").is_none(),
        "a word outside the set is not kept: {}",
        recipes[3]
    );
    assert_eq!(recipes[3]["verdict"], "pass", "the rest of the entry is");
    assert_eq!(
        recipes[4]["hold_reason"].as_str().unwrap().len(),
        MAX_HOLD_REASON_BYTES
    );
}

#[test]
fn a_claim_that_changes_nothing_writes_nothing_and_absent_facts_stand() {
    let first = claim(json!({
        "agent_version": "1.2.3", "vocabulary": ["check_status"], "log_access": "on",
        "claim_bytes": 1048576
    }))
    .unwrap();
    let stored = apply(&NodeFacts::default(), &first, t0()).unwrap();
    assert_eq!(stored.claim_limit(), 1_048_576);
    assert_eq!(
        apply(&stored, &first, t0()),
        None,
        "the same claim again changes nothing"
    );
    let quieter = claim(json!({"agent_version": "1.2.3", "idle": true})).unwrap();
    assert_eq!(
        apply(&stored, &quieter, t0()),
        None,
        "absent vocabulary and log_access keep their values"
    );
    let upgraded = claim(json!({"agent_version": "1.3.0"})).unwrap();
    let next = apply(&stored, &upgraded, t0()).unwrap();
    assert_eq!(next.agent_version.as_deref(), Some("1.3.0"));
    assert_eq!(next.facts["log_access"], "on");
}

#[test]
fn a_claim_naming_its_site_root_moves_the_nodes_root_and_a_claim_without_one_leaves_it() {
    let joined_siteless = NodeFacts::default();
    let from_site_json =
        claim(json!({"agent_version": "1.2.3", "site_root": "/var/www/site"})).unwrap();
    assert!(from_site_json.ignored_fields.is_empty());
    assert!(
        !from_site_json.facts.contains_key("site_root"),
        "the root is the node's, not one of its other facts"
    );
    let rooted = apply(&joined_siteless, &from_site_json, t0()).unwrap();
    assert_eq!(rooted.site_root.as_deref(), Some("/var/www/site"));
    assert_eq!(apply(&rooted, &from_site_json, t0()), None);
    for silent in [
        json!({"agent_version": "1.2.3"}),
        json!({"agent_version": "1.2.3", "site_root": null}),
    ] {
        let silent = claim(silent).unwrap();
        assert_eq!(apply(&rooted, &silent, t0()), None, "the root known stands");
    }
    let moved = claim(json!({"agent_version": "1.2.3", "site_root": "/srv/shop"})).unwrap();
    let moved = apply(&rooted, &moved, t0()).unwrap();
    assert_eq!(moved.site_root.as_deref(), Some("/srv/shop"));
    for bad in [
        json!("var/www"),
        json!(7),
        json!(format!("/{}", "a".repeat(4096))),
    ] {
        let error = claim(json!({"agent_version": "1", "site_root": bad})).unwrap_err();
        assert!(error.to_string().contains("site_root"), "{bad}: {error}");
    }
}

fn t0() -> DateTime<Utc> {
    chrono::TimeZone::timestamp_opt(&Utc, 1_800_000_000, 0).unwrap()
}

#[test]
fn ag_29_update_trial_is_a_version_or_null_and_nothing_else() {
    let on_trial = claim(json!({"agent_version": "1.3.0", "update_trial": "1.3.0"})).unwrap();
    assert_eq!(on_trial.facts["update_trial"], "1.3.0");
    assert!(on_trial.ignored_fields.is_empty());
    let trusted = claim(json!({"agent_version": "1.3.0", "update_trial": null})).unwrap();
    assert_eq!(trusted.facts["update_trial"], Value::Null);
    for bad in [json!(7), json!(""), json!("x".repeat(65))] {
        let error = claim(json!({"agent_version": "1", "update_trial": bad})).unwrap_err();
        assert!(error.to_string().contains("update_trial"), "{error}");
    }
}

#[test]
fn ac_43_a_refused_update_is_kept_with_when_it_was_first_reported_until_another_replaces_it() {
    let refusal = |state: &str, offered: &str, reason: &str| {
        claim(json!({"agent_version": "1.2.0", "update_state": state,
            "update_offered": offered, "update_reason": reason}))
        .unwrap()
    };
    let later = t0() + chrono::Duration::minutes(5);
    let refused = apply(
        &NodeFacts::default(),
        &refusal("verify_failed", "1.3.0", "bad signature"),
        t0(),
    )
    .unwrap();
    assert_eq!(
        refused.facts[LAST_UPDATE_REFUSAL],
        json!({"state": "verify_failed", "offered": "1.3.0", "reason": "bad signature",
            "at": "2027-01-15T08:00:00Z"})
    );
    // The same refusal again changes nothing, its first time stands.
    assert_eq!(
        apply(
            &refused,
            &refusal("verify_failed", "1.3.0", "bad signature"),
            later
        ),
        None
    );
    // Another reason is another refusal, kept with its own time.
    let again = apply(
        &refused,
        &refusal("verify_failed", "1.3.0", "wrong hash"),
        later,
    )
    .unwrap();
    assert_eq!(again.facts[LAST_UPDATE_REFUSAL]["reason"], "wrong hash");
    assert_eq!(
        again.facts[LAST_UPDATE_REFUSAL]["at"],
        "2027-01-15T08:05:00Z"
    );
    // A state that is no refusal leaves the last refusal to read.
    let current = apply(&again, &refusal("current", "1.4.0", ""), later).unwrap();
    assert_eq!(current.facts["update_state"], "current");
    assert_eq!(current.facts[LAST_UPDATE_REFUSAL]["reason"], "wrong hash");
    // A claim cannot write the kept refusal itself.
    let forged = claim(json!({"agent_version": "1", LAST_UPDATE_REFUSAL: {"state": "x"}})).unwrap();
    assert_eq!(forged.ignored_fields, vec![LAST_UPDATE_REFUSAL.to_string()]);
    assert!(!forged.facts.contains_key(LAST_UPDATE_REFUSAL));
}

#[test]
fn ac_16_the_claim_limit_is_64_kib_when_not_reported() {
    assert_eq!(NodeFacts::default().claim_limit(), 64 * 1024);
}

fn quiet_node(claim: &Claim, now: DateTime<Utc>) -> Glimpse {
    Glimpse {
        paired: true,
        facts: apply(&NodeFacts::default(), claim, now).unwrap(),
        last_seen_at: Some(now - chrono::Duration::seconds(5)),
        has_pending: false,
        has_running: false,
        has_stale: false,
    }
}

#[test]
fn a_quiet_claim_with_nothing_waiting_needs_no_write() {
    let now = Utc::now();
    let same = claim(json!({"agent_version": "1.0.0", "vocabulary": ["check_status"]})).unwrap();
    let node = quiet_node(&same, now);
    assert_eq!(needs(&node, Some(&same), now), Needs::Nothing);
    assert_eq!(
        needs(&node, None, now),
        Needs::Nothing,
        "a long poll looking again"
    );
}

#[test]
fn a_quiet_claim_whose_heartbeat_is_due_only_stamps_it() {
    let now = Utc::now();
    let same = claim(json!({"agent_version": "1.0.0"})).unwrap();
    let due = Glimpse {
        last_seen_at: Some(now - chrono::Duration::seconds(30)),
        ..quiet_node(&same, now)
    };
    assert_eq!(needs(&due, Some(&same), now), Needs::Heartbeat);
    let never = Glimpse {
        last_seen_at: None,
        ..due.clone()
    };
    assert_eq!(needs(&never, Some(&same), now), Needs::Heartbeat);
    // A long poll looking again is the same request: its claim stamped it already.
    assert_eq!(needs(&due, None, now), Needs::Nothing);
    // Due, and something else to do: the locked work stamps it too.
    let waiting = Glimpse {
        has_pending: true,
        ..due
    };
    assert_eq!(needs(&waiting, Some(&same), now), Needs::Work);
}

#[test]
fn anything_to_write_hand_out_or_lose_takes_the_locked_path() {
    let now = Utc::now();
    let same = claim(json!({"agent_version": "1.0.0"})).unwrap();
    let quiet = quiet_node(&same, now);
    let newer = claim(json!({"agent_version": "1.1.0"})).unwrap();
    assert_eq!(
        needs(&quiet, Some(&newer), now),
        Needs::Work,
        "facts changed"
    );
    let pending = Glimpse {
        has_pending: true,
        ..quiet.clone()
    };
    assert_eq!(
        needs(&pending, Some(&same), now),
        Needs::Work,
        "a job waits"
    );
    assert_eq!(needs(&pending, None, now), Needs::Work, "woken for a job");
    let stale = Glimpse {
        has_stale: true,
        ..quiet.clone()
    };
    assert_eq!(needs(&stale, Some(&same), now), Needs::Work, "AC-29");
    let idle = claim(json!({"agent_version": "1.0.0", "idle": true})).unwrap();
    let running = Glimpse {
        has_running: true,
        ..quiet.clone()
    };
    assert_eq!(
        needs(&running, Some(&idle), now),
        Needs::Work,
        "AC-28: an idle claim loses what runs"
    );
    assert_eq!(
        needs(&running, Some(&same), now),
        Needs::Nothing,
        "a busy node claiming is told no job"
    );
    let unpaired = Glimpse {
        paired: false,
        ..quiet
    };
    assert_eq!(needs(&unpaired, Some(&same), now), Needs::Work);
}

/// A claim for a node with a job waiting, and a quiet node's renewal.
const WAITING: Asking = Asking::Claim { work_waiting: true };
const QUIET: Asking = Asking::Claim {
    work_waiting: false,
};

// Issue 10, "a restart storm does not bury work": the claims that move a job go ahead of a
// fleet renewing its polls; a request proves its node before it may go ahead.
#[test]
fn work_goes_ahead_of_plain_renewals_and_only_for_a_proven_node() {
    assert_eq!(lane(true, WAITING), Lane::Work, "a job waits for its node");
    assert_eq!(lane(true, Asking::Woken), Lane::Work, "woken for a job");
    assert_eq!(lane(true, Asking::Result), Lane::Work, "a job ends");
    assert_eq!(lane(true, QUIET), Lane::Plain, "a quiet node's renewal");
    assert_eq!(lane(true, Asking::Other), Lane::Plain);
    for asking in [WAITING, Asking::Woken, Asking::Result, QUIET, Asking::Other] {
        assert_eq!(
            lane(false, asking),
            Lane::Plain,
            "{asking:?}: not proven before it waits"
        );
    }
}

// Issue 10's storm, at the intake (before a signature is checked): a renewal waits its turn
// behind the storm, a request that moves a job does not, and a key nobody knows never goes
// ahead.
#[test]
fn a_known_node_moving_a_job_is_taken_in_at_once_and_a_renewal_waits_its_turn_unless_rung() {
    assert_eq!(intake(true, WAITING), Intake::AtOnce, "a job waits for it");
    assert_eq!(intake(true, Asking::Result), Intake::AtOnce, "a job ends");
    assert_eq!(
        intake(true, QUIET),
        Intake::InTurn { unless_rung: true },
        "a quiet node's renewal waits, until a job is queued for it"
    );
    assert_eq!(
        intake(true, Asking::Other),
        Intake::InTurn { unless_rung: false },
        "a status or a leave waits its turn, rung or not"
    );
    for asking in [WAITING, Asking::Result, QUIET, Asking::Other] {
        assert_eq!(
            intake(false, asking),
            Intake::InTurn { unless_rung: false },
            "{asking:?}: a key this replica does not know waits its turn"
        );
    }
}

#[test]
fn plain_requests_never_hold_every_slot_when_there_are_two() {
    assert_eq!(
        plain_slots(13),
        10,
        "the benchmark's pool of 16: 13 agent slots"
    );
    assert_eq!(plain_slots(4), 3);
    assert_eq!(plain_slots(2), 1);
    assert_eq!(plain_slots(1), 1, "one slot is shared: nothing to keep");
    assert_eq!(plain_slots(0), 1);
    for slots in 2..64 {
        let plain = plain_slots(slots);
        assert!(plain >= 1 && plain < slots, "{slots}: {plain}");
    }
}
