//! An incident's timeline (IN-09): what changed, when and by whom. It records changes, never
//! ticks: a condition seen again on every pass writes no entry.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::record::{Actor, Triage};

/// IN-03's words on a settled incident's timeline.
pub const SETTLED_NOTE: &str = "It cleared before anyone looked";
/// AC-47: the older case's close, inferred from a newer id arriving.
pub const CLOSE_NOT_HEARD_NOTE: &str =
    "Its close was not heard: a newer case for the same check arrived";
/// IN-07: the reconciler's note when a person's fix was not borne out.
pub const UNPROVEN_NOTE: &str = "Still happening after it was resolved: the fix is not proven";

/// What an entry says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    /// The source says the condition started.
    Opened,
    /// The source says it is over.
    Cleared,
    /// The same condition came back within the reopen window (IN-04).
    Reopened,
    /// A person set the triage (IN-19), or the reconciler did (settled, unproven).
    Triage,
    /// A person's note.
    Note,
}

/// One line of an incident's timeline (`{"at", "kind", "by", "note"}` in the API).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    pub at: DateTime<Utc>,
    pub kind: EntryKind,
    pub by: Actor,
    /// The triage set, for a triage entry.
    pub triage: Option<Triage>,
    pub note: Option<String>,
}

impl TimelineEntry {
    /// An entry of the source's (opened, cleared, reopened), written by the reconciler.
    pub fn from_source(kind: EntryKind, at: DateTime<Utc>, note: Option<&str>) -> Self {
        TimelineEntry {
            at,
            kind,
            by: Actor::Reconciler,
            triage: None,
            note: note.map(str::to_string),
        }
    }

    /// A triage entry.
    pub fn triage(at: DateTime<Utc>, by: Actor, triage: Triage, note: Option<String>) -> Self {
        TimelineEntry {
            at,
            kind: EntryKind::Triage,
            by,
            triage: Some(triage),
            note,
        }
    }
}
