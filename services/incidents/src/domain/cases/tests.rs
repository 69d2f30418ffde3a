//! AC-46/AC-47 intake, fed the claim's JSON as PROTOCOL.md pins it.

use serde_json::{json, Value};

use super::*;
use crate::domain::record::tests::at;

pub(crate) fn recipes() -> Vec<String> {
    vec!["disk_headroom".into(), "fail2ban".into()]
}

pub(crate) fn open_case(id: i64) -> Value {
    json!({"id": id, "state": "open", "opened_at": "2026-12-01T08:50:00Z", "closed_at": null,
           "summary": "the site filesystem has 3% free", "notes": 0, "last_note": null})
}

pub(crate) fn closed_case(id: i64) -> Value {
    json!({"id": id, "state": "closed", "opened_at": "2026-12-01T08:50:00Z",
           "closed_at": "2026-12-01T08:55:00Z", "summary": "the site filesystem has 3% free",
           "notes": 1, "last_note": "check passed"})
}

/// Intake of `cases` (the claim's field) against `stored`, applied to it.
pub(crate) fn claim(
    stored: &mut Vec<StoredCase>,
    cases: Value,
    now: DateTime<Utc>,
) -> Vec<CaseOutcome> {
    let outcomes = intake(&recipes(), stored, parse_cases(&cases).unwrap(), now);
    for outcome in &outcomes {
        match outcome {
            CaseOutcome::Stored(case) => stored.push(case.clone()),
            CaseOutcome::Updated {
                source,
                id,
                notes,
                last_note,
                body,
                last_seen_at,
                closed_at,
            } => {
                let case = stored
                    .iter_mut()
                    .find(|c| &c.source == source && c.id == *id)
                    .unwrap();
                case.notes = *notes;
                case.last_note = last_note.clone();
                if body.is_some() {
                    case.body = body.clone();
                }
                case.last_seen_at = *last_seen_at;
                if closed_at.is_some() {
                    case.state = CaseState::Closed;
                    case.closed_at = *closed_at;
                }
            }
            CaseOutcome::CloseNotHeard { source, id, at } => {
                let case = stored
                    .iter_mut()
                    .find(|c| &c.source == source && c.id == *id)
                    .unwrap();
                case.state = CaseState::Closed;
                case.closed_at = Some(*at);
            }
            CaseOutcome::Refused { .. } => {}
        }
    }
    outcomes
}

fn refusal(outcomes: &[CaseOutcome]) -> Option<&CaseRefusal> {
    outcomes.iter().find_map(|outcome| match outcome {
        CaseOutcome::Refused { reason, .. } => Some(reason),
        _ => None,
    })
}

#[test]
fn ac_47_a_new_id_is_stored() {
    let mut stored = Vec::new();
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(1)}),
        at(0),
    );
    assert!(
        matches!(&outcomes[..], [CaseOutcome::Stored(case)] if case.id == 1 && case.state == CaseState::Open)
    );
    assert_eq!(stored[0].source.as_str(), "disk_headroom");
    assert_eq!(stored[0].opened_at, at(-10), "the node's own opening time");
}

#[test]
fn ac_47_a_claim_that_changes_nothing_writes_nothing_and_an_open_case_is_restamped_every_ten_minutes(
) {
    let mut stored = Vec::new();
    let report = json!({"recipe:disk_headroom": open_case(1)});
    claim(&mut stored, report.clone(), at(0));
    assert!(claim(&mut stored, report.clone(), at(1)).is_empty());
    assert!(claim(&mut stored, report.clone(), at(9)).is_empty());
    let restamped = claim(&mut stored, report, at(10));
    assert!(
        matches!(&restamped[..], [CaseOutcome::Updated { last_seen_at, closed_at: None, .. }] if *last_seen_at == at(10))
    );
}

#[test]
fn ac_47_a_known_id_is_appended_to_with_its_note_count_newest_note_and_body() {
    let mut stored = Vec::new();
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(1)}),
        at(0),
    );
    let mut again = open_case(1);
    again["notes"] = json!(2);
    again["last_note"] = json!("still 2% free");
    again["body"] = json!({"mode": "report-only"});
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": again.clone()}),
        at(1),
    );
    assert_eq!(outcomes.len(), 1);
    assert_eq!(stored[0].notes, 2);
    assert_eq!(stored[0].last_note.as_deref(), Some("still 2% free"));
    assert_eq!(stored[0].body.as_deref(), Some(r#"{"mode":"report-only"}"#));
    // the body rides again until the claim succeeded: nothing new
    assert!(claim(&mut stored, json!({"recipe:disk_headroom": again}), at(2)).is_empty());
}

#[test]
fn ac_47_a_trimmed_ledger_with_a_lower_count_still_lands_its_newest_note_and_the_count_never_goes_down(
) {
    let mut stored = Vec::new();
    let mut case = open_case(1);
    case["notes"] = json!(5);
    case["last_note"] = json!("fifth");
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": case.clone()}),
        at(0),
    );
    case["notes"] = json!(1);
    case["last_note"] = json!("after restart");
    claim(&mut stored, json!({"recipe:disk_headroom": case}), at(1));
    assert_eq!(stored[0].notes, 5);
    assert_eq!(stored[0].last_note.as_deref(), Some("after restart"));
}

#[test]
fn ac_47_a_reported_close_is_recorded_and_a_closed_summary_riding_again_writes_nothing() {
    let mut stored = Vec::new();
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(1)}),
        at(0),
    );
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": closed_case(1)}),
        at(6),
    );
    assert!(
        matches!(&outcomes[..], [CaseOutcome::Updated { closed_at: Some(closed), .. }] if *closed == at(-5))
    );
    assert_eq!(stored[0].state, CaseState::Closed);
    assert!(claim(
        &mut stored,
        json!({"recipe:disk_headroom": closed_case(1)}),
        at(30)
    )
    .is_empty());
}

#[test]
fn ac_47_a_closed_id_never_reopens() {
    let mut stored = Vec::new();
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": closed_case(1)}),
        at(0),
    );
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(1)}),
        at(1),
    );
    assert_eq!(refusal(&outcomes), Some(&CaseRefusal::ClosedNeverReopens));
    assert_eq!(stored[0].state, CaseState::Closed);
}

#[test]
fn ac_47_a_higher_id_arriving_open_closes_the_older_with_close_not_heard() {
    let mut stored = Vec::new();
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(1)}),
        at(0),
    );
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(2)}),
        at(5),
    );
    assert!(
        matches!(&outcomes[0], CaseOutcome::CloseNotHeard { id: 1, at: when, .. } if *when == at(5))
    );
    assert!(matches!(&outcomes[1], CaseOutcome::Stored(case) if case.id == 2));
    let open: Vec<i64> = stored
        .iter()
        .filter(|c| c.state == CaseState::Open)
        .map(|c| c.id)
        .collect();
    assert_eq!(open, [2], "one open case per source per node");
}

#[test]
fn ac_47_a_lower_id_is_refused() {
    let mut stored = Vec::new();
    claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(5)}),
        at(0),
    );
    let outcomes = claim(
        &mut stored,
        json!({"recipe:disk_headroom": open_case(4)}),
        at(1),
    );
    assert_eq!(
        refusal(&outcomes),
        Some(&CaseRefusal::LowerId { newest: 5 })
    );
    assert_eq!(stored.len(), 1);
}

#[test]
fn ac_47_the_source_must_be_a_recipe_the_node_reports() {
    let mut stored = Vec::new();
    for key in [
        "recipe:agent_supervision",
        "unexplained_root",
        "recipe:Disk",
    ] {
        let outcomes = claim(&mut stored, json!({ key: open_case(1) }), at(0));
        assert_eq!(
            refusal(&outcomes),
            Some(&CaseRefusal::UnknownSource),
            "{key}"
        );
    }
    assert!(stored.is_empty());
}

#[test]
fn ac_47_at_most_max_open_cases_per_node_are_open() {
    let many: Vec<String> = (0..=MAX_OPEN_CASES_PER_NODE)
        .map(|n| format!("check_{n:02}"))
        .collect();
    let mut stored = Vec::new();
    let mut report = serde_json::Map::new();
    for name in &many {
        report.insert(format!("recipe:{name}"), open_case(1));
    }
    let outcomes = intake(
        &many,
        &stored,
        parse_cases(&Value::Object(report)).unwrap(),
        at(0),
    );
    let kept = outcomes
        .iter()
        .filter(|o| matches!(o, CaseOutcome::Stored(_)))
        .count();
    assert_eq!(kept, MAX_OPEN_CASES_PER_NODE);
    assert_eq!(refusal(&outcomes), Some(&CaseRefusal::TooManyOpen));
    // a closed case, first heard, is still stored: it opens nothing
    for outcome in outcomes {
        if let CaseOutcome::Stored(case) = outcome {
            stored.push(case);
        }
    }
    let last = format!("recipe:{}", many.last().unwrap());
    let closed = intake(
        &many,
        &stored,
        parse_cases(&json!({ last: closed_case(1) })).unwrap(),
        at(1),
    );
    assert!(matches!(&closed[..], [CaseOutcome::Stored(case)] if case.state == CaseState::Closed));
}

#[test]
fn ac_47_a_refused_case_leaves_the_other_sources_taken() {
    let mut stored = Vec::new();
    let outcomes = claim(
        &mut stored,
        json!({"recipe:nope": open_case(1), "recipe:fail2ban": open_case(3)}),
        at(0),
    );
    assert_eq!(outcomes.len(), 2);
    assert_eq!(stored.len(), 1);
    assert_eq!(stored[0].source.as_str(), "fail2ban");
}

#[test]
fn ac_46_a_malformed_case_is_refused_naming_what_was_wrong_and_never_panics() {
    let cases = [
        (json!({"id": 0}), "id"),
        (json!({"opened_at": "2026-12-01T08:50:00+02:00"}), "UTC"),
        (json!({"opened_at": "yesterday"}), "RFC 3339"),
        (
            json!({"closed_at": "2026-12-01T08:55:00Z"}),
            "open case has no closed_at",
        ),
        (json!({"summary": "x".repeat(513)}), "summary"),
        (json!({"last_note": "x".repeat(1025)}), "last_note"),
        (json!({"body": [1, 2]}), "body"),
        (json!({"state": "maybe"}), "state"),
        (json!({"id": "seven"}), "id"),
    ];
    for (overrides, expected) in cases {
        let mut case = open_case(1);
        for (field, value) in overrides.as_object().unwrap() {
            case[field] = value.clone();
        }
        let parsed = parse_cases(&json!({"recipe:disk_headroom": case})).unwrap();
        let Err(CaseRefusal::Malformed(reason)) = &parsed[0].1 else {
            panic!("{overrides} was taken");
        };
        assert!(reason.contains(expected), "{reason} should name {expected}");
    }
    let mut closed = closed_case(1);
    closed["closed_at"] = json!("2026-12-01T08:00:00Z");
    let parsed = parse_cases(&json!({"recipe:disk_headroom": closed})).unwrap();
    assert!(parsed[0].1.is_err(), "closed before it opened");
    assert!(parse_cases(&json!([1])).is_err());
}
