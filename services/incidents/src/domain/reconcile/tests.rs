//! The pass's tests, driven by an injected clock and a small in-memory store that applies
//! effects the way the store will.

use capstan_events::NodeId;
use chrono::{DateTime, Utc};

use super::*;
use crate::domain::record::tests::at;
use crate::domain::record::View;
use crate::domain::signals::Quiet;
use crate::domain::sources::tests::node;
use crate::domain::sources::{Alerts, InstallState};

pub(crate) fn silent_source() -> SourceName {
    SourceName::agent_silent()
}

pub(crate) fn condition(severity: Severity, since: DateTime<Utc>) -> Condition {
    Condition {
        source: silent_source(),
        title: silent_source().title(),
        severity,
        detail: "Last check-in recorded long ago".into(),
        since,
    }
}

/// Applies `effects` to `held` as the store would.
pub(crate) fn apply(held: &mut Vec<Incident>, effects: &[Effect]) {
    for effect in effects {
        let id = match effect.target {
            Target::Existing(id) => id,
            Target::New => held.iter().map(|i| i.id).max().unwrap_or(0) + 1,
        };
        if let Change::Open(new) = &effect.change {
            held.push(Incident {
                id,
                node_id: new.node_id,
                source: new.source.clone(),
                severity: new.severity,
                status: if new.closed_at.is_some() {
                    Status::Closed
                } else {
                    Status::Open
                },
                triage: Triage::New,
                triage_at: new.opened_at,
                triage_by: Actor::Reconciler,
                snooze_until: None,
                opened_at: new.opened_at,
                closed_at: new.closed_at,
                last_seen_at: new.last_seen_at,
                detail: new.detail.clone(),
                case_id: new.case_id,
                heard_open: new.heard_open,
            });
            continue;
        }
        let incident = held.iter_mut().find(|i| i.id == id).expect("target held");
        match &effect.change {
            Change::Open(_) => unreachable!(),
            Change::Refresh {
                last_seen_at,
                detail,
                severity,
            } => {
                incident.last_seen_at = *last_seen_at;
                incident.detail = detail.clone();
                incident.severity = *severity;
            }
            Change::Clear { at } => {
                incident.status = Status::Closed;
                incident.closed_at = Some(*at);
            }
            Change::Reopen {
                at,
                detail,
                severity,
                case_id,
                ..
            } => {
                incident.status = Status::Open;
                incident.closed_at = None;
                incident.triage = Triage::New;
                incident.triage_at = *at;
                incident.triage_by = Actor::Reconciler;
                incident.last_seen_at = *at;
                incident.detail = detail.clone();
                incident.severity = *severity;
                if case_id.is_some() {
                    incident.case_id = *case_id;
                }
                incident.heard_open = true;
            }
            Change::Settle { at } => {
                incident.triage = Triage::Resolved;
                incident.triage_at = *at;
                incident.triage_by = Actor::Reconciler;
            }
            Change::Unproven { at } => {
                incident.triage = Triage::New;
                incident.triage_at = *at;
                incident.triage_by = Actor::Reconciler;
            }
        }
    }
}

fn signals(effects: &[Effect]) -> usize {
    effects
        .iter()
        .filter(|e| matches!(e.announce, Some(Announce::Signal(_))))
        .count()
}

/// Runs one pass for node 1 with no silences and no host, and applies it.
fn pass(
    held: &mut Vec<Incident>,
    facts: &NodeFacts,
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> Vec<Effect> {
    let context = NodeContext {
        node: facts,
        silences: &[],
        host_critical: &[],
    };
    let effects = reconcile_node(&context, held, conditions, now);
    apply(held, &effects);
    effects
}

#[test]
fn in_14_a_condition_seen_for_the_first_time_opens_an_incident_and_signals_once() {
    let mut held = Vec::new();
    let effects = pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    assert_eq!(effects.len(), 1);
    assert!(matches!(effects[0].change, Change::Open(_)));
    assert_eq!(effects[0].entries[0].kind, EntryKind::Opened);
    assert_eq!(signals(&effects), 1);
    assert_eq!(held[0].title_source(), "plane:agent_silent");
    assert!(held[0].needs_you(at(1)));
}

#[test]
fn in_14_a_condition_that_keeps_holding_signals_once_and_writes_no_timeline_entry_per_tick() {
    let mut held = Vec::new();
    let holds = [condition(Severity::Critical, at(0))];
    let mut all = Vec::new();
    for minute in 1..=180 {
        all.extend(pass(&mut held, &node(NodeId(1)), &holds, at(minute)));
    }
    assert_eq!(signals(&all), 1);
    assert_eq!(
        all.iter().map(|e| e.entries.len()).sum::<usize>(),
        1,
        "only the opening"
    );
    // refreshed (last seen) only every ten minutes, never per tick
    let refreshes = all
        .iter()
        .filter(|e| matches!(e.change, Change::Refresh { .. }))
        .count();
    assert_eq!(refreshes, 17);
    // the same state twice in the same minute writes nothing
    assert!(pass(&mut held, &node(NodeId(1)), &holds, at(180)).is_empty());
}

#[test]
fn a_refresh_takes_the_sources_new_detail_without_a_timeline_entry_or_a_signal() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Warning, at(0))],
        at(1),
    );
    let mut changed = condition(Severity::Critical, at(0));
    changed.detail = "something else".into();
    let effects = pass(&mut held, &node(NodeId(1)), &[changed], at(2));
    assert_eq!(effects.len(), 1);
    assert!(effects[0].entries.is_empty() && effects[0].announce.is_none());
    assert_eq!(held[0].detail, "something else");
    assert_eq!(held[0].severity, Severity::Critical);
}

#[test]
fn in_03_an_incident_that_clears_while_new_is_resolved_with_it_cleared_before_anyone_looked() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    let effects = pass(&mut held, &node(NodeId(1)), &[], at(2));
    let kinds: Vec<_> = effects
        .iter()
        .flat_map(|e| &e.entries)
        .map(|e| e.kind)
        .collect();
    assert_eq!(kinds, [EntryKind::Cleared, EntryKind::Triage]);
    let settled = &effects[1].entries[0];
    assert_eq!(settled.by, Actor::Reconciler);
    assert_eq!(
        settled.note.as_deref(),
        Some("It cleared before anyone looked")
    );
    assert_eq!(held[0].status, Status::Closed);
    assert_eq!(held[0].view(at(2)), View::Resolved);
    assert!(!held[0].needs_you(at(2)));
    assert_eq!(signals(&effects), 0);
    assert!(
        pass(&mut held, &node(NodeId(1)), &[], at(3)).is_empty(),
        "settled once"
    );
}

#[test]
fn in_03_a_snoozed_incident_that_clears_is_settled_too() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    held[0].triage = Triage::Snoozed;
    held[0].snooze_until = Some(at(240));
    let effects = pass(&mut held, &node(NodeId(1)), &[], at(2));
    assert!(effects
        .iter()
        .any(|e| matches!(e.change, Change::Settle { .. })));
    assert_eq!(held[0].triage, Triage::Resolved);
}

#[test]
fn in_03_an_agent_case_the_node_closed_is_settled_on_the_next_pass() {
    let mut case = crate::domain::record::tests::incident(7);
    case.source = SourceName::parse("agent:disk_headroom").unwrap();
    case.status = Status::Closed;
    case.closed_at = Some(at(5));
    case.case_id = Some(3);
    let mut held = vec![case];
    let effects = pass(&mut held, &node(NodeId(1)), &[], at(6));
    assert_eq!(effects.len(), 1);
    assert!(matches!(effects[0].change, Change::Settle { .. }));
}

#[test]
fn in_11_an_agent_case_first_heard_closed_is_never_settled_and_still_needs_a_look() {
    let mut case = crate::domain::record::tests::incident(7);
    case.source = SourceName::parse("agent:disk_headroom").unwrap();
    case.status = Status::Closed;
    case.closed_at = Some(at(5));
    case.heard_open = false;
    let mut held = vec![case];
    assert!(pass(&mut held, &node(NodeId(1)), &[], at(6)).is_empty());
    assert!(held[0].needs_you(at(6)));
}

#[test]
fn an_open_agent_case_is_left_to_its_intake_the_pass_never_clears_it() {
    let mut case = crate::domain::record::tests::incident(7);
    case.source = SourceName::parse("agent:disk_headroom").unwrap();
    let mut held = vec![case];
    assert!(pass(&mut held, &node(NodeId(1)), &[], at(6)).is_empty());
}

#[test]
fn in_04_a_condition_returning_within_the_hour_reopens_the_settled_incident_as_new() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    pass(&mut held, &node(NodeId(1)), &[], at(2));
    let effects = pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(62))],
        at(62),
    );
    assert_eq!(held.len(), 1, "the same incident, not a second one");
    assert!(matches!(effects[0].change, Change::Reopen { .. }));
    assert_eq!(effects[0].entries[0].kind, EntryKind::Reopened);
    assert_eq!(signals(&effects), 1);
    assert_eq!(held[0].status, Status::Open);
    assert!(held[0].needs_you(at(62)));
}

#[test]
fn in_04_a_condition_returning_after_the_hour_opens_a_new_incident() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    pass(&mut held, &node(NodeId(1)), &[], at(2));
    let effects = pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(63))],
        at(63),
    );
    assert!(matches!(effects[0].change, Change::Open(_)));
    assert_eq!(held.len(), 2);
    assert_eq!(signals(&effects), 1);
}

#[test]
fn in_05_an_ignored_incident_covers_that_incident_only_and_the_next_occurrence_is_new() {
    let mut held = Vec::new();
    let holds = [condition(Severity::Critical, at(0))];
    pass(&mut held, &node(NodeId(1)), &holds, at(1));
    held[0].triage = Triage::Ignored;
    // while it holds, nothing new opens and nobody is told
    assert_eq!(
        signals(&pass(&mut held, &node(NodeId(1)), &holds, at(30))),
        0
    );
    // it clears: not settled, it stays ignored
    let cleared = pass(&mut held, &node(NodeId(1)), &[], at(31));
    assert_eq!(cleared.len(), 1);
    assert_eq!(held[0].triage, Triage::Ignored);
    // it returns within the hour: a new incident, which signals
    let effects = pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(40))],
        at(40),
    );
    assert!(matches!(effects[0].change, Change::Open(_)));
    assert_eq!(signals(&effects), 1);
    assert_eq!(held.len(), 2);
}

fn resolved_by_a_person(held: &mut [Incident], when: DateTime<Utc>) {
    held[0].triage = Triage::Resolved;
    held[0].triage_by = Actor::Person("ann".into());
    held[0].triage_at = when;
}

#[test]
fn in_07_a_fix_still_happening_an_hour_after_a_person_resolved_it_goes_back_to_new_and_signals() {
    let mut held = Vec::new();
    let holds = [condition(Severity::Critical, at(0))];
    pass(&mut held, &node(NodeId(1)), &holds, at(1));
    resolved_by_a_person(&mut held, at(5));
    assert_eq!(held[0].view(at(6)), View::Waiting);
    let waiting = pass(&mut held, &node(NodeId(1)), &holds, at(64));
    assert!(
        waiting
            .iter()
            .all(|e| matches!(e.change, Change::Refresh { .. })),
        "still waiting for proof"
    );
    let effects = pass(&mut held, &node(NodeId(1)), &holds, at(65));
    assert!(matches!(effects[0].change, Change::Unproven { .. }));
    let entry = &effects[0].entries[0];
    assert_eq!(
        (entry.kind, entry.triage, &entry.by),
        (EntryKind::Triage, Some(Triage::New), &Actor::Reconciler)
    );
    assert_eq!(signals(&effects), 1);
    assert!(held[0].needs_you(at(65)));
    assert_eq!(
        signals(&pass(&mut held, &node(NodeId(1)), &holds, at(130))),
        0,
        "unproven once"
    );
}

#[test]
fn in_07_a_fix_proven_by_the_condition_clearing_stays_resolved_and_is_not_settled() {
    let mut held = Vec::new();
    pass(
        &mut held,
        &node(NodeId(1)),
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    resolved_by_a_person(&mut held, at(5));
    let effects = pass(&mut held, &node(NodeId(1)), &[], at(10));
    assert_eq!(effects.len(), 1);
    assert!(matches!(effects[0].change, Change::Clear { .. }));
    assert_eq!(held[0].triage_by, Actor::Person("ann".into()));
    assert_eq!(held[0].view(at(10)), View::Resolved);
}

#[test]
fn in_15_a_node_whose_alerts_are_off_opens_reopens_and_clears_silently() {
    let mut facts = node(NodeId(1));
    facts.alerts = Alerts::Off;
    let mut held = Vec::new();
    let opened = pass(
        &mut held,
        &facts,
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    assert_eq!(opened[0].announce, Some(Announce::Held(Quiet::AlertsOff)));
    pass(&mut held, &facts, &[], at(2));
    let reopened = pass(
        &mut held,
        &facts,
        &[condition(Severity::Critical, at(3))],
        at(3),
    );
    assert!(matches!(reopened[0].change, Change::Reopen { .. }));
    assert_eq!(reopened[0].announce, Some(Announce::Held(Quiet::AlertsOff)));
    assert!(held[0].needs_you(at(3)), "it still waits in the inbox");
}

#[test]
fn a_silenced_node_opens_its_incident_but_signals_nobody() {
    let facts = node(NodeId(1));
    let silence = Silence::new(NodeId(1), "ann", "moving racks", at(120), at(0)).unwrap();
    let context = NodeContext {
        node: &facts,
        silences: std::slice::from_ref(&silence),
        host_critical: &[],
    };
    let effects = reconcile_node(
        &context,
        &[],
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    assert!(matches!(effects[0].change, Change::Open(_)));
    assert_eq!(effects[0].announce, Some(Announce::Held(Quiet::Silenced)));
    let after = reconcile_node(
        &context,
        &[],
        &[condition(Severity::Critical, at(0))],
        at(120),
    );
    assert_eq!(signals(&after), 1, "the silence expired by itself");
}

#[test]
fn a_container_whose_host_has_an_open_critical_incident_of_the_same_kind_opens_grouped_and_silent()
{
    let host = node(NodeId(1));
    let container = NodeFacts {
        docker_host: Some(NodeId(1)),
        ..node(NodeId(2))
    };
    let host_conditions = [condition(Severity::Critical, at(0))];
    let host_effects = reconcile_node(
        &NodeContext {
            node: &host,
            silences: &[],
            host_critical: &[],
        },
        &[],
        &host_conditions,
        at(1),
    );
    let kinds = crate::domain::grouping::host_critical_kinds(&[], &host_conditions);
    let container_effects = reconcile_node(
        &NodeContext {
            node: &container,
            silences: &[],
            host_critical: &kinds,
        },
        &[],
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    assert_eq!(
        signals(&host_effects) + signals(&container_effects),
        1,
        "the host and its container signal once"
    );
    let Change::Open(new) = &container_effects[0].change else {
        panic!("opens")
    };
    assert_eq!(new.grouped_under, Some(NodeId(1)));
    assert_eq!(
        container_effects[0].announce,
        Some(Announce::Held(Quiet::Grouped))
    );
}

#[test]
fn in_13_a_node_in_a_non_operational_install_state_neither_opens_nor_clears() {
    let mut facts = node(NodeId(1));
    let mut held = Vec::new();
    pass(
        &mut held,
        &facts,
        &[condition(Severity::Critical, at(0))],
        at(1),
    );
    facts.install_state = InstallState::Retired;
    assert!(pass(&mut held, &facts, &[], at(2)).is_empty());
    assert!(pass(
        &mut held,
        &facts,
        &[condition(Severity::Warning, at(0))],
        at(3)
    )
    .is_empty());
    assert_eq!(held[0].status, Status::Open);
}

impl Incident {
    fn title_source(&self) -> String {
        self.source.to_string()
    }
}
