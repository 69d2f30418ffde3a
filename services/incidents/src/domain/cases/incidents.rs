//! A stored case is an incident (IN-11): what each intake outcome (`mod.rs`) does to the
//! node's incidents. The title is the plane's words for the recipe with the node's summary
//! beneath it, the severity warning, the triage new; an `opened` entry at the node's own
//! opening time, and `cleared` when the node reports the close or a newer case shows the close
//! went unheard. A case first heard already closed still opens — closed, with one signal — and
//! still needs a look. Nothing here ever closes a case.

use chrono::{DateTime, Utc};

use super::{CaseOutcome, CaseState, StoredCase};
use crate::domain::reconcile::{
    clear, latest_of, start, Change, Effect, NodeContext, Target, LAST_SEEN_RESTAMP,
};
use crate::domain::record::{Incident, Severity};
use crate::domain::sources::{Condition, SourceName};
use crate::domain::timeline::{EntryKind, TimelineEntry, CLOSE_NOT_HEARD_NOTE};

/// IN-08: an agent case is always a warning.
pub const CASE_SEVERITY: Severity = Severity::Warning;

fn condition(case: &StoredCase) -> Condition {
    let source = SourceName::Agent(case.source.clone());
    Condition {
        title: source.title(),
        source,
        severity: CASE_SEVERITY,
        detail: case.summary.clone(),
        since: case.opened_at,
    }
}

/// The open incident carrying case `id` of `source`.
fn carrying<'a>(held: &'a [Incident], source: &SourceName, id: i64) -> Option<&'a Incident> {
    held.iter().find(|incident| {
        &incident.source == source && incident.case_id == Some(id) && incident.happening()
    })
}

/// The incident effects of one claim's case `outcomes` on a node whose incidents are `held`
/// (at least the latest of each agent source and every open one).
pub fn case_effects(
    context: &NodeContext<'_>,
    outcomes: &[CaseOutcome],
    held: &[Incident],
    now: DateTime<Utc>,
) -> Vec<Effect> {
    // a source whose older case closed unheard in this claim: its new case is a new incident
    let mut unheard: Vec<SourceName> = Vec::new();
    let mut effects = Vec::new();
    for outcome in outcomes {
        match outcome {
            CaseOutcome::Stored(case) => {
                let condition = condition(case);
                let latest = if unheard.contains(&condition.source) {
                    None
                } else {
                    latest_of(held, &condition.source)
                };
                match (case.state, case.closed_at) {
                    (CaseState::Closed, Some(closed_at)) => effects.extend(first_heard_closed(
                        context, &condition, case.id, closed_at, now,
                    )),
                    _ => {
                        effects.extend(start(context, latest, &condition, Some(case.id), true, now))
                    }
                }
            }
            CaseOutcome::Updated {
                source,
                id,
                closed_at,
                ..
            } => {
                let source = SourceName::Agent(source.clone());
                let Some(incident) = carrying(held, &source, *id) else {
                    continue;
                };
                match closed_at {
                    Some(at) => effects.push(clear(Target::Existing(incident.id), *at, None)),
                    None if now - incident.last_seen_at >= LAST_SEEN_RESTAMP => {
                        effects.push(Effect {
                            target: Target::Existing(incident.id),
                            change: Change::Refresh {
                                last_seen_at: now,
                                detail: incident.detail.clone(),
                                severity: incident.severity,
                            },
                            entries: Vec::new(),
                            announce: None,
                        })
                    }
                    None => {}
                }
            }
            CaseOutcome::CloseNotHeard { source, id, at } => {
                let source = SourceName::Agent(source.clone());
                if let Some(incident) = carrying(held, &source, *id) {
                    effects.push(clear(
                        Target::Existing(incident.id),
                        *at,
                        Some(CLOSE_NOT_HEARD_NOTE),
                    ));
                }
                unheard.push(source);
            }
            CaseOutcome::Refused { .. } => {}
        }
    }
    effects
}

/// A case the plane never saw open: a new incident, opened and cleared at the node's times,
/// signalled once, and never settled (it was not seen happening).
fn first_heard_closed(
    context: &NodeContext<'_>,
    condition: &Condition,
    case_id: i64,
    closed_at: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Effect> {
    let mut effect = start(context, None, condition, Some(case_id), false, now)?;
    if let Change::Open(new) = &mut effect.change {
        new.closed_at = Some(closed_at);
    }
    effect.entries.push(TimelineEntry::from_source(
        EntryKind::Cleared,
        closed_at,
        None,
    ));
    Some(effect)
}

#[cfg(test)]
mod tests {
    // IN-11: cases becoming incidents, from the claim's JSON through intake to the incidents held.

    use serde_json::json;

    use super::*;
    use crate::domain::cases::tests::{claim, closed_case, open_case};
    use crate::domain::reconcile::reconcile_node;
    use crate::domain::reconcile::tests::apply;
    use crate::domain::record::tests::at;
    use crate::domain::record::{Actor, Status, Triage, View};
    use crate::domain::signals::Announce;
    use crate::domain::sources::tests::node;
    use crate::domain::sources::NodeFacts;
    use capstan_events::NodeId;

    /// The plane's side of one claim carrying `cases` for node 1: intake, then its incident effects,
    /// both applied.
    struct Plane {
        facts: NodeFacts,
        cases: Vec<StoredCase>,
        incidents: Vec<Incident>,
        signals: usize,
    }

    impl Plane {
        fn new() -> Plane {
            Plane {
                facts: node(NodeId(1)),
                cases: Vec::new(),
                incidents: Vec::new(),
                signals: 0,
            }
        }

        fn context(&self) -> NodeContext<'_> {
            NodeContext {
                node: &self.facts,
                silences: &[],
                host_critical: &[],
            }
        }

        fn claim(&mut self, cases: serde_json::Value, now: DateTime<Utc>) -> Vec<Effect> {
            let outcomes = claim(&mut self.cases, cases, now);
            let effects = case_effects(&self.context(), &outcomes, &self.incidents, now);
            self.record(&effects);
            effects
        }

        fn pass(&mut self, now: DateTime<Utc>) -> Vec<Effect> {
            let effects = reconcile_node(&self.context(), &self.incidents, &[], now);
            self.record(&effects);
            effects
        }

        fn record(&mut self, effects: &[Effect]) {
            self.signals += effects
                .iter()
                .filter(|e| matches!(e.announce, Some(Announce::Signal(_))))
                .count();
            apply(&mut self.incidents, effects);
        }
    }

    fn disk(case: serde_json::Value) -> serde_json::Value {
        json!({ "recipe:disk_headroom": case })
    }

    #[test]
    fn in_11_a_new_open_case_opens_a_warning_incident_at_the_nodes_opening_time_and_signals_once() {
        let mut plane = Plane::new();
        plane.claim(disk(open_case(1)), at(0));
        let incident = &plane.incidents[0];
        assert_eq!(incident.source.to_string(), "agent:disk_headroom");
        assert_eq!(incident.severity, Severity::Warning);
        assert_eq!(incident.triage, Triage::New);
        assert_eq!(incident.opened_at, at(-10));
        assert_eq!(incident.detail, "the site filesystem has 3% free");
        assert_eq!(incident.case_id, Some(1));
        assert_eq!(plane.signals, 1);
    }

    #[test]
    fn in_14_a_case_riding_every_claim_signals_once_and_writes_no_entry_per_claim() {
        let mut plane = Plane::new();
        let mut entries = 0;
        for minute in 0..120 {
            let effects = plane.claim(disk(open_case(1)), at(minute));
            entries += effects.iter().map(|e| e.entries.len()).sum::<usize>();
            plane.pass(at(minute));
        }
        assert_eq!(plane.signals, 1);
        assert_eq!(entries, 1);
        assert_eq!(plane.incidents.len(), 1);
    }

    #[test]
    fn in_03_the_nodes_reported_close_clears_the_incident_and_the_next_pass_settles_it() {
        let mut plane = Plane::new();
        plane.claim(disk(open_case(1)), at(0));
        let effects = plane.claim(disk(closed_case(1)), at(1));
        assert_eq!(effects[0].entries[0].kind, EntryKind::Cleared);
        assert_eq!(effects[0].entries[0].at, at(-5), "at the node's close time");
        assert_eq!(plane.incidents[0].status, Status::Closed);
        plane.pass(at(2));
        assert_eq!(plane.incidents[0].view(at(2)), View::Resolved);
        assert_eq!(plane.incidents[0].triage_by, Actor::Reconciler);
    }

    #[test]
    fn in_04_a_new_case_for_the_same_source_within_the_hour_reopens_the_incident() {
        let mut plane = Plane::new();
        plane.claim(disk(open_case(1)), at(0));
        plane.claim(disk(closed_case(1)), at(1));
        plane.pass(at(2));
        let mut second = open_case(2);
        second["opened_at"] = json!("2026-12-01T09:30:00Z");
        let effects = plane.claim(disk(second), at(31));
        assert!(matches!(
            effects[0].change,
            Change::Reopen {
                case_id: Some(2),
                ..
            }
        ));
        assert_eq!(plane.incidents.len(), 1);
        assert_eq!(plane.incidents[0].case_id, Some(2));
        assert!(plane.incidents[0].needs_you(at(31)));
        assert_eq!(plane.signals, 2, "the opening and the reopening");
    }

    #[test]
    fn in_11_a_newer_case_clears_the_older_incident_with_close_not_heard_and_opens_its_own() {
        let mut plane = Plane::new();
        plane.claim(disk(open_case(1)), at(0));
        let effects = plane.claim(disk(open_case(2)), at(5));
        assert_eq!(effects[0].entries[0].kind, EntryKind::Cleared);
        assert_eq!(
            effects[0].entries[0].note.as_deref(),
            Some(CLOSE_NOT_HEARD_NOTE)
        );
        assert!(matches!(effects[1].change, Change::Open(_)));
        assert_eq!(plane.incidents.len(), 2);
        assert_eq!(plane.incidents[1].case_id, Some(2));
        assert_eq!(plane.incidents[0].status, Status::Closed);
    }

    #[test]
    fn in_11_a_case_first_heard_already_closed_opens_closed_signals_once_and_still_needs_a_look() {
        let mut plane = Plane::new();
        let effects = plane.claim(disk(closed_case(1)), at(0));
        let kinds: Vec<_> = effects[0].entries.iter().map(|e| (e.kind, e.at)).collect();
        assert_eq!(
            kinds,
            [(EntryKind::Opened, at(-10)), (EntryKind::Cleared, at(-5))]
        );
        assert_eq!(plane.signals, 1);
        assert_eq!(plane.incidents[0].status, Status::Closed);
        plane.pass(at(1));
        plane.pass(at(100));
        assert!(plane.incidents[0].needs_you(at(100)));
    }

    #[test]
    fn ac_47_a_refused_case_has_no_incident() {
        let mut plane = Plane::new();
        plane.claim(disk(open_case(5)), at(0));
        let effects = plane.claim(disk(open_case(4)), at(1));
        assert!(effects.is_empty());
        assert_eq!(plane.incidents.len(), 1);
    }
}
