//! The incident record (IN-01, IN-02, IN-07, IN-08, IN-10): two answers kept apart — the
//! source's `status` (is the condition still there?) and a person's `triage` (what is being done
//! about it?) — and everything derived from them on read: the five views and "needs you", each
//! with one definition here. A read never writes: an expired snooze *reads* as new.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use super::sources::SourceName;
use super::{IncidentId, InvalidInput, NodeId};

/// The record's words are the contract's: the gateway reads them as the service writes them.
pub use capstan_events::incidents::{Severity, Status, Triage};

/// Who made a change on the timeline: a person (an operator's name) or the reconciler, which
/// is "no person" in the spec's words (IN-09).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "name")]
pub enum Actor {
    Person(String),
    Reconciler,
}

/// One incident as the domain reads it: one condition on one node, from its start to its end.
#[derive(Debug, Clone, PartialEq)]
pub struct Incident {
    pub id: IncidentId,
    pub node_id: NodeId,
    pub source: SourceName,
    pub severity: Severity,
    pub status: Status,
    pub triage: Triage,
    /// When the triage last changed, and by whom (`inc_triage_time`, `inc_triage_usr_user_id`).
    pub triage_at: DateTime<Utc>,
    pub triage_by: Actor,
    pub snooze_until: Option<DateTime<Utc>>,
    /// When the source says the condition started (an agent case: the node's own opening time).
    pub opened_at: DateTime<Utc>,
    pub closed_at: Option<DateTime<Utc>>,
    pub last_seen_at: DateTime<Utc>,
    /// What the source saw, shown beneath the plane's title (`inc_detail`).
    pub detail: String,
    /// The agent case this incident carries, for an `agent:<recipe>` source.
    pub case_id: Option<i64>,
    /// Whether the plane ever saw the condition happening. A case first heard already closed
    /// did not, so the reconciler never settles it: it "still needs a look" (IN-11).
    pub heard_open: bool,
}

/// The five views every incident is in exactly one of (IN-07, IN-17), plus the two views that
/// are unions of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum View {
    New,
    Snoozed,
    /// Resolved by a person while the source still says open (decision 6.2-7).
    Waiting,
    Resolved,
    Ignored,
}

impl View {
    /// The five, in the page's order.
    pub const ALL: [View; 5] = [
        View::New,
        View::Snoozed,
        View::Waiting,
        View::Resolved,
        View::Ignored,
    ];

    /// The view as the API's `view=` spells it.
    pub const fn as_str(self) -> &'static str {
        match self {
            View::New => "new",
            View::Snoozed => "snoozed",
            View::Waiting => "waiting",
            View::Resolved => "resolved",
            View::Ignored => "ignored",
        }
    }
}

/// The triage an incident reads as at `now`: a snooze whose time has come reads as new
/// (IN-02), without anything being written.
pub fn effective_triage(
    triage: Triage,
    snooze_until: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Triage {
    match (triage, snooze_until) {
        (Triage::Snoozed, Some(until)) if until > now => Triage::Snoozed,
        // A snooze without an end cannot be stored by this domain; it reads as new rather
        // than hiding an incident forever.
        (Triage::Snoozed, _) => Triage::New,
        (other, _) => other,
    }
}

impl Incident {
    /// Is the condition still happening (the source's answer)?
    pub fn happening(&self) -> bool {
        self.status == Status::Open
    }

    /// The triage this incident reads as at `now`.
    pub fn triage_at_read(&self, now: DateTime<Utc>) -> Triage {
        effective_triage(self.triage, self.snooze_until, now)
    }

    /// The one view this incident is in at `now` (IN-07).
    pub fn view(&self, now: DateTime<Utc>) -> View {
        match self.triage_at_read(now) {
            Triage::New => View::New,
            Triage::Snoozed => View::Snoozed,
            Triage::Resolved if self.happening() => View::Waiting,
            Triage::Resolved => View::Resolved,
            Triage::Ignored => View::Ignored,
        }
    }

    /// IN-02, the one definition: new, or snoozed and its time has come.
    pub fn needs_you(&self, now: DateTime<Utc>) -> bool {
        self.view(now) == View::New
    }
}

/// The API's `view=` (IN-17): needs you (the default), one of the five, or all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ViewFilter {
    #[default]
    NeedsYou,
    Only(View),
    All,
}

impl ViewFilter {
    /// Reads `view=`; absent is needs you, anything unknown is refused naming the values.
    pub fn parse(text: Option<&str>) -> Result<ViewFilter, InvalidInput> {
        match text {
            None | Some("needs_you") => Ok(ViewFilter::NeedsYou),
            Some("all") => Ok(ViewFilter::All),
            Some(other) => View::ALL
                .into_iter()
                .find(|view| view.as_str() == other)
                .map(ViewFilter::Only)
                .ok_or_else(|| {
                    InvalidInput::new(
                        "view",
                        "must be one of needs_you, new, snoozed, waiting, resolved, ignored, all",
                    )
                }),
        }
    }

    pub fn matches(self, incident: &Incident, now: DateTime<Utc>) -> bool {
        match self {
            ViewFilter::NeedsYou => incident.needs_you(now),
            ViewFilter::Only(view) => incident.view(now) == view,
            ViewFilter::All => true,
        }
    }
}

/// How many incidents are in each view, and how many need you (IN-17's counts): the
/// contract's shape, counted here.
pub use capstan_events::incidents::rpc::ViewCounts;

/// The counts of `incidents` at `now`.
pub fn view_counts<'a>(
    incidents: impl IntoIterator<Item = &'a Incident>,
    now: DateTime<Utc>,
) -> ViewCounts {
    let mut counts = ViewCounts::default();
    for incident in incidents {
        counts.all += 1;
        if incident.needs_you(now) {
            counts.needs_you += 1;
        }
        match incident.view(now) {
            View::New => counts.new += 1,
            View::Snoozed => counts.snoozed += 1,
            View::Waiting => counts.waiting += 1,
            View::Resolved => counts.resolved += 1,
            View::Ignored => counts.ignored += 1,
        }
    }
    counts
}

#[cfg(test)]
pub(crate) mod tests {
    use chrono::{Duration, TimeZone};

    use super::*;
    use crate::domain::sources::SourceName;

    pub(crate) fn at(minutes: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 9, 0, 0).unwrap() + Duration::minutes(minutes)
    }

    /// An open, new, warning incident from `plane:agent_silent` on node 1, opened at minute 0.
    pub(crate) fn incident(id: IncidentId) -> Incident {
        Incident {
            id,
            node_id: NodeId(1),
            source: SourceName::agent_silent(),
            severity: Severity::Warning,
            status: Status::Open,
            triage: Triage::New,
            triage_at: at(0),
            triage_by: Actor::Reconciler,
            snooze_until: None,
            opened_at: at(0),
            closed_at: None,
            last_seen_at: at(0),
            detail: String::new(),
            case_id: None,
            heard_open: true,
        }
    }

    fn with(triage: Triage, status: Status, snooze_until: Option<DateTime<Utc>>) -> Incident {
        Incident {
            triage,
            status,
            snooze_until,
            ..incident(1)
        }
    }

    #[test]
    fn in_01_status_and_triage_are_two_answers_so_a_resolved_incident_can_still_be_happening() {
        let incident = with(Triage::Resolved, Status::Open, None);
        assert!(incident.happening());
        assert_eq!(incident.triage, Triage::Resolved);
    }

    #[test]
    fn in_02_a_new_incident_needs_you() {
        assert!(with(Triage::New, Status::Open, None).needs_you(at(5)));
    }

    #[test]
    fn in_02_a_snooze_whose_time_has_come_reads_as_new_and_needs_you_without_a_write() {
        let incident = with(Triage::Snoozed, Status::Open, Some(at(60)));
        assert!(!incident.needs_you(at(59)));
        assert_eq!(incident.view(at(59)), View::Snoozed);
        assert!(incident.needs_you(at(60)));
        assert_eq!(incident.view(at(60)), View::New);
        // the stored triage is untouched: reading changed nothing
        assert_eq!(incident.triage, Triage::Snoozed);
    }

    #[test]
    fn in_02_resolved_and_ignored_incidents_do_not_need_you() {
        for triage in [Triage::Resolved, Triage::Ignored] {
            for status in [Status::Open, Status::Closed] {
                assert!(!with(triage, status, None).needs_you(at(0)));
            }
        }
    }

    #[test]
    fn in_07_resolved_by_a_person_while_the_source_still_says_open_is_waiting_for_proof() {
        assert_eq!(
            with(Triage::Resolved, Status::Open, None).view(at(0)),
            View::Waiting
        );
        assert_eq!(
            with(Triage::Resolved, Status::Closed, None).view(at(0)),
            View::Resolved
        );
    }

    #[test]
    fn in_07_every_incident_is_in_exactly_one_of_the_five_views() {
        let triages = [
            Triage::New,
            Triage::Snoozed,
            Triage::Resolved,
            Triage::Ignored,
        ];
        let snoozes = [None, Some(at(-10)), Some(at(10))];
        let mut seen = std::collections::HashSet::new();
        for triage in triages {
            for status in [Status::Open, Status::Closed] {
                for snooze in snoozes {
                    let incident = with(triage, status, snooze);
                    let counts = view_counts([&incident], at(0));
                    let in_views = counts.new
                        + counts.snoozed
                        + counts.waiting
                        + counts.resolved
                        + counts.ignored;
                    assert_eq!(in_views, 1, "{triage:?} {status:?} {snooze:?}");
                    seen.insert(incident.view(at(0)));
                }
            }
        }
        assert_eq!(seen.len(), View::ALL.len(), "every view is reachable");
    }

    #[test]
    fn in_17_the_counts_give_each_view_and_needs_you_with_all_as_their_sum() {
        let incidents = [
            with(Triage::New, Status::Open, None),
            with(Triage::Snoozed, Status::Open, Some(at(-1))),
            with(Triage::Snoozed, Status::Open, Some(at(30))),
            with(Triage::Resolved, Status::Open, None),
            with(Triage::Resolved, Status::Closed, None),
            with(Triage::Ignored, Status::Closed, None),
        ];
        let counts = view_counts(&incidents, at(0));
        assert_eq!(
            counts,
            ViewCounts {
                needs_you: 2,
                new: 2,
                snoozed: 1,
                waiting: 1,
                resolved: 1,
                ignored: 1,
                all: 6,
            }
        );
    }

    #[test]
    fn in_17_the_view_filter_defaults_to_needs_you_and_refuses_an_unknown_view() {
        assert_eq!(ViewFilter::parse(None).unwrap(), ViewFilter::NeedsYou);
        assert_eq!(
            ViewFilter::parse(Some("waiting")).unwrap(),
            ViewFilter::Only(View::Waiting)
        );
        assert_eq!(ViewFilter::parse(Some("all")).unwrap(), ViewFilter::All);
        assert_eq!(ViewFilter::parse(Some("open")).unwrap_err().field, "view");
        let expired = with(Triage::Snoozed, Status::Open, Some(at(-1)));
        assert!(ViewFilter::NeedsYou.matches(&expired, at(0)));
        assert!(ViewFilter::Only(View::New).matches(&expired, at(0)));
        assert!(!ViewFilter::Only(View::Snoozed).matches(&expired, at(0)));
    }

    #[test]
    fn in_08_critical_ranks_above_warning() {
        assert!(Severity::Critical > Severity::Warning);
    }
}
