//! The reconciler's pass as a function (IN-03..IN-07, IN-14): given the incidents this service
//! holds for one node and the conditions the plane's sources say hold there now, it returns the
//! effects to write — open, refresh, clear, settle, reopen, unproven — each with its timeline
//! entry and, for an opening, a reopening or an unproven fix, its one announcement. The same
//! state passed twice yields nothing the second time: a tick is not a change.
//!
//! Agent cases are opened and cleared by their intake (`cases/`), which uses [`start`] and
//! [`clear`] from here; the pass settles and proves them like any other incident.

use chrono::{DateTime, Duration, Utc};

use super::grouping::{grouped_under, silenced, Silence};
use super::record::{Actor, Incident, Severity, Status, Triage};
use super::signals::{announce, Announce, Hush, SignalReason};
use super::sources::{Condition, NodeFacts, SourceName};
use super::timeline::{EntryKind, TimelineEntry, SETTLED_NOTE, UNPROVEN_NOTE};
use super::{IncidentId, NodeId};

/// IN-04: a condition that returns within this long of its incident clearing reopens it.
pub const REOPEN_WINDOW: Duration = Duration::hours(1);
/// IN-07: a fix a person marked resolved is unproven when the source still says open this long
/// after (the spec leaves the wait unvalued; until then the incident is "Waiting for proof").
pub const PROOF_WINDOW: Duration = Duration::hours(1);
/// A condition still holding re-stamps its incident's last-seen time at most this often
/// (the spec's ten minutes for an open case, `inc_last_seen_time`), so a pass writes nothing
/// for an incident that did not change.
pub const LAST_SEEN_RESTAMP: Duration = Duration::minutes(10);

/// `CAPSTAN__INCIDENTS__PASS_SECS` when not set.
pub const DEFAULT_PASS_SECS: u64 = 60;

/// What the pass knows about a node besides its incidents.
#[derive(Debug, Clone, Copy)]
pub struct NodeContext<'a> {
    pub node: &'a NodeFacts,
    /// Silences on this node or on its Docker host (expired ones may be included).
    pub silences: &'a [Silence],
    /// For a container: the kinds its host has open and critical
    /// ([`super::grouping::host_critical_kinds`]); empty otherwise.
    pub host_critical: &'a [SourceName],
}

impl NodeContext<'_> {
    fn grouped_under(&self, source: &SourceName) -> Option<NodeId> {
        grouped_under(self.node, source, self.host_critical)
    }

    fn hush(&self, source: &SourceName, now: DateTime<Utc>) -> Hush {
        Hush {
            alerts_off: !self.node.alerts.sends(self.node.in_test_account),
            silenced: silenced(self.silences, self.node, now),
            grouped: self.grouped_under(source).is_some(),
        }
    }
}

/// An incident to create.
#[derive(Debug, Clone, PartialEq)]
pub struct NewIncident {
    pub node_id: NodeId,
    pub source: SourceName,
    pub severity: Severity,
    /// The plane's words (`SourceName::title`); the detail is the source's.
    pub title: String,
    pub detail: String,
    pub opened_at: DateTime<Utc>,
    /// When the plane saw it (the pass's or the claim's time).
    pub last_seen_at: DateTime<Utc>,
    /// Set for an agent case first heard already closed: it opens closed.
    pub closed_at: Option<DateTime<Utc>>,
    pub case_id: Option<i64>,
    /// False for an agent case first heard already closed.
    pub heard_open: bool,
    /// The Docker host's node whose incident of the same kind this one is folded under.
    pub grouped_under: Option<NodeId>,
}

/// What to write on an incident.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// Create it (status open — closed when `closed_at` is set — and triage new).
    Open(NewIncident),
    /// Still happening: stamp last seen, and take the source's newer detail or severity.
    Refresh {
        last_seen_at: DateTime<Utc>,
        detail: String,
        severity: Severity,
    },
    /// The source says it is over (status closed).
    Clear { at: DateTime<Utc> },
    /// IN-04: the condition came back within the window: status open, closed time cleared,
    /// triage new by the reconciler, last seen `at`, `heard_open` true, and the case it now
    /// carries when `case_id` is set.
    Reopen {
        at: DateTime<Utc>,
        detail: String,
        severity: Severity,
        case_id: Option<i64>,
        grouped_under: Option<NodeId>,
    },
    /// IN-03: triage resolved by the reconciler, "It cleared before anyone looked".
    Settle { at: DateTime<Utc> },
    /// IN-07: a person's fix not borne out; triage back to new by the reconciler.
    Unproven { at: DateTime<Utc> },
}

/// Which incident a change is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The one [`Change::Open`] creates.
    New,
    Existing(IncidentId),
}

/// One thing to write: a change, the timeline entries it makes (none for a refresh) and, for
/// an opening, reopening or unproven fix, its announcement.
#[derive(Debug, Clone, PartialEq)]
pub struct Effect {
    pub target: Target,
    pub change: Change,
    pub entries: Vec<TimelineEntry>,
    pub announce: Option<Announce>,
}

/// What a condition seen now does to the latest incident of its node and source.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Begin {
    /// It is that incident, still happening.
    Continue(IncidentId),
    /// It came back within [`REOPEN_WINDOW`] of that incident clearing (IN-04).
    Reopen(IncidentId),
    /// A new incident: none before, the last one ignored (IN-05), or it cleared too long ago.
    Open,
}

/// IN-04, IN-05: the latest incident of a (node, source) and when the condition (re)started.
pub fn begin(latest: Option<&Incident>, since: DateTime<Utc>) -> Begin {
    let Some(latest) = latest else {
        return Begin::Open;
    };
    if latest.happening() {
        return Begin::Continue(latest.id);
    }
    if latest.triage == Triage::Ignored {
        return Begin::Open;
    }
    match latest.closed_at {
        Some(closed_at) if since - closed_at <= REOPEN_WINDOW => Begin::Reopen(latest.id),
        _ => Begin::Open,
    }
}

/// The effects of `condition` being seen at `now`, given the latest incident of its source on
/// the node. `case_id` and `heard_open` are an agent case's (None and true for plane sources).
pub fn start(
    context: &NodeContext<'_>,
    latest: Option<&Incident>,
    condition: &Condition,
    case_id: Option<i64>,
    heard_open: bool,
    now: DateTime<Utc>,
) -> Option<Effect> {
    let grouped_under = context.grouped_under(&condition.source);
    match begin(latest, condition.since) {
        Begin::Continue(id) => {
            let incident = latest?;
            let changed = incident.detail != condition.detail
                || incident.severity != condition.severity
                || now - incident.last_seen_at >= LAST_SEEN_RESTAMP;
            changed.then(|| Effect {
                target: Target::Existing(id),
                change: Change::Refresh {
                    last_seen_at: now,
                    detail: condition.detail.clone(),
                    severity: condition.severity,
                },
                entries: Vec::new(),
                announce: None,
            })
        }
        Begin::Reopen(id) => Some(Effect {
            target: Target::Existing(id),
            change: Change::Reopen {
                at: now,
                detail: condition.detail.clone(),
                severity: condition.severity,
                case_id,
                grouped_under,
            },
            entries: vec![TimelineEntry::from_source(
                EntryKind::Reopened,
                condition.since,
                None,
            )],
            announce: Some(announce(
                SignalReason::Reopened,
                condition.severity,
                context.hush(&condition.source, now),
            )),
        }),
        Begin::Open => Some(Effect {
            target: Target::New,
            change: Change::Open(NewIncident {
                node_id: context.node.node_id,
                source: condition.source.clone(),
                severity: condition.severity,
                title: condition.title.clone(),
                detail: condition.detail.clone(),
                opened_at: condition.since,
                last_seen_at: now,
                closed_at: None,
                case_id,
                heard_open,
                grouped_under,
            }),
            entries: vec![TimelineEntry::from_source(
                EntryKind::Opened,
                condition.since,
                None,
            )],
            announce: Some(announce(
                SignalReason::Opened,
                condition.severity,
                context.hush(&condition.source, now),
            )),
        }),
    }
}

/// The source says `target` is over, at `at`.
pub fn clear(target: Target, at: DateTime<Utc>, note: Option<&str>) -> Effect {
    Effect {
        target,
        change: Change::Clear { at },
        entries: vec![TimelineEntry::from_source(EntryKind::Cleared, at, note)],
        announce: None,
    }
}

/// IN-03: an incident that cleared while new or snoozed (its snooze over or not) is resolved by
/// no person. One first heard already closed was never seen happening and still needs a look.
fn settle(incident: &Incident, now: DateTime<Utc>) -> Option<Effect> {
    let untouched = matches!(incident.triage, Triage::New | Triage::Snoozed);
    (incident.status == Status::Closed && untouched && incident.heard_open).then(|| Effect {
        target: Target::Existing(incident.id),
        change: Change::Settle { at: now },
        entries: vec![TimelineEntry::triage(
            now,
            Actor::Reconciler,
            Triage::Resolved,
            Some(SETTLED_NOTE.to_string()),
        )],
        announce: None,
    })
}

/// IN-07: resolved by a person, and the source still says open [`PROOF_WINDOW`] later.
fn unproven(context: &NodeContext<'_>, incident: &Incident, now: DateTime<Utc>) -> Option<Effect> {
    let by_person = matches!(incident.triage_by, Actor::Person(_));
    let waited = now - incident.triage_at >= PROOF_WINDOW;
    (incident.happening() && incident.triage == Triage::Resolved && by_person && waited).then(
        || Effect {
            target: Target::Existing(incident.id),
            change: Change::Unproven { at: now },
            entries: vec![TimelineEntry::triage(
                now,
                Actor::Reconciler,
                Triage::New,
                Some(UNPROVEN_NOTE.to_string()),
            )],
            announce: Some(announce(
                SignalReason::Unproven,
                incident.severity,
                context.hush(&incident.source, now),
            )),
        },
    )
}

/// The latest incident (the highest id) of `source` among `held`.
pub fn latest_of<'a>(held: &'a [Incident], source: &SourceName) -> Option<&'a Incident> {
    held.iter()
        .filter(|incident| &incident.source == source)
        .max_by_key(|incident| incident.id)
}

/// The latest incident of each source among `held`.
fn latest_per_source(held: &[Incident]) -> Vec<&Incident> {
    let mut sources: Vec<&SourceName> = held.iter().map(|incident| &incident.source).collect();
    sources.sort();
    sources.dedup();
    sources
        .into_iter()
        .filter_map(|source| latest_of(held, source))
        .collect()
}

/// One node's pass. `held` holds at least the latest incident of each source on the node;
/// `conditions` are what hold now (`Registry::conditions`: the registry's sources and the conditions other services reported). A node that
/// is not operational is skipped by the sources (IN-13): its incidents are neither opened nor
/// cleared, only settled.
pub fn reconcile_node(
    context: &NodeContext<'_>,
    held: &[Incident],
    conditions: &[Condition],
    now: DateTime<Utc>,
) -> Vec<Effect> {
    let operational = context.node.install_state.is_operational();
    let latest = latest_per_source(held);
    let mut effects = Vec::new();
    for incident in &latest {
        let agent_case = matches!(incident.source, SourceName::Agent(_));
        let holds = conditions.iter().any(|c| c.source == incident.source);
        if operational && !agent_case && incident.happening() && !holds {
            effects.push(clear(Target::Existing(incident.id), now, None));
            let cleared = Incident {
                status: Status::Closed,
                closed_at: Some(now),
                ..(*incident).clone()
            };
            effects.extend(settle(&cleared, now));
            continue;
        }
        effects.extend(settle(incident, now));
        if operational && (agent_case || holds) {
            effects.extend(unproven(context, incident, now));
        }
    }
    if !operational {
        return effects;
    }
    for condition in conditions {
        let previous = latest
            .iter()
            .copied()
            .find(|i| i.source == condition.source);
        effects.extend(start(context, previous, condition, None, true, now));
    }
    effects
}

#[cfg(test)]
pub(crate) mod tests;
