//! A person's acts on an incident (IN-06, IN-18, IN-19): the `do` values, the snooze choices,
//! what a triage change records — and that setting the triage an incident already has records
//! nothing. A person's act never signals anyone (an ignored incident a person reopens tells
//! nobody, IN-05); the level (8) and CSRF are the gateway's.

use chrono::{DateTime, Duration, Utc};

use super::record::{Actor, Incident, Triage};
use super::timeline::TimelineEntry;
use super::InvalidInput;

/// The longest note a person may leave, in characters.
pub const MAX_NOTE_CHARS: usize = 4000;

/// IN-18: snooze 4 hours, 1 day, 3 days, 1 week.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SnoozeChoice {
    Hours4,
    Hours24,
    Hours72,
    Hours168,
}

impl SnoozeChoice {
    pub const ALL: [SnoozeChoice; 4] = [
        SnoozeChoice::Hours4,
        SnoozeChoice::Hours24,
        SnoozeChoice::Hours72,
        SnoozeChoice::Hours168,
    ];

    pub const fn hours(self) -> i64 {
        match self {
            SnoozeChoice::Hours4 => 4,
            SnoozeChoice::Hours24 => 24,
            SnoozeChoice::Hours72 => 72,
            SnoozeChoice::Hours168 => 168,
        }
    }

    pub fn duration(self) -> Duration {
        Duration::hours(self.hours())
    }
}

/// IN-19's `do` values. `New` is also the Reopen button (IN-06).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TriageAct {
    Resolve,
    Ignore,
    New,
    Snooze(SnoozeChoice),
}

impl TriageAct {
    /// Reads a `do` value; anything else is refused naming the values that are allowed.
    pub fn parse(text: &str) -> Result<TriageAct, InvalidInput> {
        let act = match text {
            "resolved" => TriageAct::Resolve,
            "ignored" => TriageAct::Ignore,
            "new" => TriageAct::New,
            "snooze_4" => TriageAct::Snooze(SnoozeChoice::Hours4),
            "snooze_24" => TriageAct::Snooze(SnoozeChoice::Hours24),
            "snooze_72" => TriageAct::Snooze(SnoozeChoice::Hours72),
            "snooze_168" => TriageAct::Snooze(SnoozeChoice::Hours168),
            _ => return Err(InvalidInput::new(
                "do",
                "must be one of resolved, ignored, new, snooze_4, snooze_24, snooze_72, snooze_168",
            )),
        };
        Ok(act)
    }

    pub const fn as_str(self) -> &'static str {
        match self {
            TriageAct::Resolve => "resolved",
            TriageAct::Ignore => "ignored",
            TriageAct::New => "new",
            TriageAct::Snooze(SnoozeChoice::Hours4) => "snooze_4",
            TriageAct::Snooze(SnoozeChoice::Hours24) => "snooze_24",
            TriageAct::Snooze(SnoozeChoice::Hours72) => "snooze_72",
            TriageAct::Snooze(SnoozeChoice::Hours168) => "snooze_168",
        }
    }

    const fn triage(self) -> Triage {
        match self {
            TriageAct::Resolve => Triage::Resolved,
            TriageAct::Ignore => Triage::Ignored,
            TriageAct::New => Triage::New,
            TriageAct::Snooze(_) => Triage::Snoozed,
        }
    }
}

/// A note as a person wrote it, checked: not blank, at most [`MAX_NOTE_CHARS`].
pub fn check_note(field: &'static str, note: &str) -> Result<String, InvalidInput> {
    let note = note.trim();
    if note.is_empty() {
        return Err(InvalidInput::new(field, "must not be empty"));
    }
    if note.chars().count() > MAX_NOTE_CHARS {
        return Err(InvalidInput::new(
            field,
            format!("must be at most {MAX_NOTE_CHARS} characters"),
        ));
    }
    Ok(note.to_string())
}

/// What a triage act writes on the record and its timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct TriageChange {
    pub triage: Triage,
    pub snooze_until: Option<DateTime<Utc>>,
    pub at: DateTime<Utc>,
    pub by: Actor,
    pub entry: TimelineEntry,
}

/// The change `act` by `person` makes at `now`, or `None` when the incident already reads as
/// that triage (IN-19: it records nothing, not even the note — a note has its own act).
/// A snooze always changes the end time, so it is always recorded.
pub fn triage(
    incident: &Incident,
    act: TriageAct,
    person: &str,
    note: Option<&str>,
    now: DateTime<Utc>,
) -> Result<Option<TriageChange>, InvalidInput> {
    let note = note
        .filter(|text| !text.trim().is_empty())
        .map(|text| check_note("note", text))
        .transpose()?;
    let wanted = act.triage();
    let snooze_until = match act {
        TriageAct::Snooze(choice) => Some(now + choice.duration()),
        _ => None,
    };
    if snooze_until.is_none() && incident.triage_at_read(now) == wanted {
        return Ok(None);
    }
    let by = Actor::Person(person.to_string());
    Ok(Some(TriageChange {
        triage: wanted,
        snooze_until,
        at: now,
        by: by.clone(),
        entry: TimelineEntry::triage(now, by, wanted, note),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::{at, incident};
    use crate::domain::record::View;
    use crate::domain::timeline::EntryKind;

    #[test]
    fn in_19_every_do_value_reads_and_spells_back() {
        for text in [
            "resolved",
            "ignored",
            "new",
            "snooze_4",
            "snooze_24",
            "snooze_72",
            "snooze_168",
        ] {
            assert_eq!(TriageAct::parse(text).unwrap().as_str(), text);
        }
    }

    #[test]
    fn in_19_an_unknown_do_value_is_refused_naming_the_field() {
        let error = TriageAct::parse("snooze_5").unwrap_err();
        assert_eq!(error.field, "do");
        assert!(error.to_string().contains("snooze_168"));
    }

    #[test]
    fn in_18_the_snooze_choices_are_4_24_72_and_168_hours() {
        let hours: Vec<i64> = SnoozeChoice::ALL.iter().map(|c| c.hours()).collect();
        assert_eq!(hours, [4, 24, 72, 168]);
    }

    #[test]
    fn in_19_setting_the_triage_an_incident_already_has_records_nothing() {
        let mut record = incident(1);
        assert_eq!(
            triage(&record, TriageAct::New, "ann", Some("again"), at(1)).unwrap(),
            None
        );
        record.triage = Triage::Ignored;
        assert_eq!(
            triage(&record, TriageAct::Ignore, "ann", None, at(1)).unwrap(),
            None
        );
    }

    #[test]
    fn in_19_setting_new_on_an_expired_snooze_records_nothing_because_it_already_reads_as_new() {
        let mut record = incident(1);
        record.triage = Triage::Snoozed;
        record.snooze_until = Some(at(10));
        assert_eq!(
            triage(&record, TriageAct::New, "ann", None, at(11)).unwrap(),
            None
        );
        assert!(triage(&record, TriageAct::New, "ann", None, at(9))
            .unwrap()
            .is_some());
    }

    #[test]
    fn in_19_a_triage_change_records_who_when_and_the_note_on_the_timeline() {
        let change = triage(
            &incident(1),
            TriageAct::Resolve,
            "ann",
            Some(" restarted it "),
            at(3),
        )
        .unwrap()
        .unwrap();
        assert_eq!(change.triage, Triage::Resolved);
        assert_eq!(change.by, Actor::Person("ann".into()));
        assert_eq!(change.entry.kind, EntryKind::Triage);
        assert_eq!(change.entry.at, at(3));
        assert_eq!(change.entry.note.as_deref(), Some("restarted it"));
    }

    #[test]
    fn in_18_a_snooze_ends_after_the_chosen_hours_and_hides_the_incident_until_then() {
        let change = triage(
            &incident(1),
            TriageAct::Snooze(SnoozeChoice::Hours4),
            "ann",
            None,
            at(0),
        )
        .unwrap()
        .unwrap();
        assert_eq!(change.snooze_until, Some(at(4 * 60)));
        let snoozed = Incident {
            triage: change.triage,
            snooze_until: change.snooze_until,
            ..incident(1)
        };
        assert_eq!(snoozed.view(at(4 * 60 - 1)), View::Snoozed);
        assert_eq!(snoozed.view(at(4 * 60)), View::New);
    }

    #[test]
    fn in_06_reopen_sets_a_resolved_incident_back_to_new() {
        let mut record = incident(1);
        record.triage = Triage::Resolved;
        let change = triage(&record, TriageAct::New, "ann", None, at(1))
            .unwrap()
            .unwrap();
        assert_eq!(change.triage, Triage::New);
    }

    #[test]
    fn in_19_a_note_over_the_limit_is_refused_and_a_blank_one_is_no_note() {
        let long = "x".repeat(MAX_NOTE_CHARS + 1);
        let error =
            triage(&incident(1), TriageAct::Resolve, "ann", Some(&long), at(1)).unwrap_err();
        assert_eq!(error.field, "note");
        let change = triage(&incident(1), TriageAct::Resolve, "ann", Some("  "), at(1))
            .unwrap()
            .unwrap();
        assert_eq!(change.entry.note, None);
        assert!(check_note("note", "  ").is_err());
    }
}
