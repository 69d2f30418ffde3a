//! The header line (IN-16): one line on every page, how many incidents need you and how many
//! are still happening, beside the problem reports that need you. Red when a critical incident
//! that needs you is still happening, amber when any incident needs you, blue when only problem
//! reports wait, absent otherwise. It is built from counts alone, so it can name no node.

use chrono::{DateTime, Utc};
use serde::Serialize;

use super::record::{Incident, Severity};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Colour {
    Red,
    Amber,
    Blue,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct HeaderLine {
    pub needs_you: u64,
    /// Incidents whose source still says open, whatever their triage.
    pub happening: u64,
    pub problem_reports: u64,
    pub colour: Colour,
}

fn count(number: u64, one: &str, many: &str) -> String {
    format!("{number} {}", if number == 1 { one } else { many })
}

impl HeaderLine {
    /// The line's words, e.g. "2 incidents need you · 3 still happening".
    pub fn words(&self) -> String {
        let mut parts = Vec::new();
        if self.needs_you > 0 || self.happening > 0 {
            parts.push(format!(
                "{} you",
                count(self.needs_you, "incident needs", "incidents need")
            ));
            parts.push(format!("{} still happening", self.happening));
        }
        if self.problem_reports > 0 {
            parts.push(format!(
                "{} you",
                count(
                    self.problem_reports,
                    "problem report needs",
                    "problem reports need"
                )
            ));
        }
        parts.join(" · ")
    }
}

/// The header line for `incidents` (every incident held, or at least every open one and every
/// one that needs you) and the problem reports that need you, at `now`; `None` when absent.
pub fn header_line<'a>(
    incidents: impl IntoIterator<Item = &'a Incident>,
    problem_reports: u64,
    now: DateTime<Utc>,
) -> Option<HeaderLine> {
    let mut needs_you = 0;
    let mut happening = 0;
    let mut red = false;
    for incident in incidents {
        let needs = incident.needs_you(now);
        needs_you += u64::from(needs);
        happening += u64::from(incident.happening());
        red |= needs && incident.happening() && incident.severity == Severity::Critical;
    }
    let colour = if red {
        Colour::Red
    } else if needs_you > 0 {
        Colour::Amber
    } else if problem_reports > 0 {
        Colour::Blue
    } else {
        return None;
    };
    Some(HeaderLine {
        needs_you,
        happening,
        problem_reports,
        colour,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::{at, incident};
    use crate::domain::record::{Status, Triage};

    fn critical() -> Incident {
        Incident {
            severity: Severity::Critical,
            ..incident(1)
        }
    }

    #[test]
    fn in_16_red_when_a_critical_incident_that_needs_you_is_still_happening() {
        let line = header_line(&[critical(), incident(2)], 0, at(0)).unwrap();
        assert_eq!(line.colour, Colour::Red);
        assert_eq!(line.words(), "2 incidents need you · 2 still happening");
    }

    #[test]
    fn in_16_amber_when_an_incident_needs_you_but_no_critical_one_is_happening() {
        let closed_critical = Incident {
            status: Status::Closed,
            heard_open: false,
            ..critical()
        };
        let resolved_critical = Incident {
            triage: Triage::Resolved,
            ..critical()
        };
        let line = header_line(&[closed_critical, resolved_critical], 0, at(0)).unwrap();
        assert_eq!(line.colour, Colour::Amber);
        assert_eq!(line.words(), "1 incident needs you · 1 still happening");
    }

    #[test]
    fn in_16_blue_when_only_problem_reports_wait() {
        let ignored = Incident {
            triage: Triage::Ignored,
            ..critical()
        };
        let line = header_line(&[ignored], 3, at(0)).unwrap();
        assert_eq!(line.colour, Colour::Blue);
        assert_eq!(
            line.words(),
            "0 incidents need you · 1 still happening · 3 problem reports need you"
        );
    }

    #[test]
    fn in_16_absent_when_nothing_needs_you() {
        let snoozed = Incident {
            triage: Triage::Snoozed,
            snooze_until: Some(at(60)),
            ..critical()
        };
        assert_eq!(header_line(std::slice::from_ref(&snoozed), 0, at(0)), None);
        assert_eq!(header_line(&[], 0, at(0)), None);
        // the snooze ends: the line comes back red without anything being written
        assert_eq!(
            header_line(&[snoozed], 0, at(60)).unwrap().colour,
            Colour::Red
        );
    }
}
