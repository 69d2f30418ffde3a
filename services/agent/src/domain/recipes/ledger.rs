//! The ledger (AG-47): one JSON line per event, one ledger per recipe. The root-only copy is
//! the one the loop reads back — [`Memory::read`] folds its lines into what the loop needs: the
//! last verdict, the failing ticks and attempts of the current failing run, and the most recent
//! case. An attempt is written when it starts and its outcome when it ends, so an attempt with
//! no outcome is a repair that stopped the agent: it counts as a failed attempt and the loop
//! writes its outcome `interrupted` on the next start.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use super::attempt::{AttemptRecord, Outcome};
use super::{case::Case, Verdict};

/// One ledger event: the spec's set (AG-47).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Event {
    Check {
        verdict: Verdict,
        detail: String,
    },
    Attempt {
        attempt: u32,
        word: String,
        target: Option<String>,
    },
    Outcome {
        attempt: u32,
        outcome: Outcome,
        detail: String,
    },
    Held,
    HoldIgnored {
        reason: String,
    },
    /// "a job is running": the job lock was held, the attempt waits for the next tick.
    Busy,
    /// A case opened: the whole case, its body composed once.
    Escalation {
        case: Case,
    },
    EscalationNote {
        id: i64,
        notes: u32,
        note: String,
    },
    EscalationClosed {
        id: i64,
    },
    NotApplicable {
        reason: String,
    },
}

/// A ledger line: when, and what.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Line {
    pub at: DateTime<Utc>,
    #[serde(flatten)]
    pub event: Event,
}

impl Line {
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a ledger line serializes")
    }
}

/// What the loop reads back of a recipe's ledger.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Memory {
    /// The last verdict written (a check line is written only when the verdict changes or the
    /// check fails, so this is the last verdict the check gave).
    pub verdict: Option<Verdict>,
    /// Failing ticks in a row in the current run (unknown neither counts nor breaks the run).
    pub failing_ticks: u32,
    /// The attempts of the current failing run.
    pub attempts: Vec<AttemptRecord>,
    /// The most recent case, open or closed.
    pub case: Option<Case>,
    /// The highest case id this recipe has minted.
    pub last_case_id: i64,
    /// The last time the check ran and said something (from its lines).
    pub checked_at: Option<DateTime<Utc>>,
    /// Lines that could not be read (a torn last line after a crash, say).
    pub unreadable: usize,
}

impl Memory {
    /// Folds a ledger's text, oldest line first.
    pub fn read(text: &str) -> Memory {
        let mut memory = Memory::default();
        for line in text.lines().filter(|line| !line.trim().is_empty()) {
            match serde_json::from_str::<Line>(line) {
                Ok(line) => memory.take(&line),
                Err(_) => memory.unreadable += 1,
            }
        }
        memory
    }

    /// Takes one line.
    pub fn take(&mut self, line: &Line) {
        match &line.event {
            Event::Check { verdict, .. } => {
                self.verdict = Some(*verdict);
                self.checked_at = Some(line.at);
                match verdict {
                    Verdict::Pass => self.end_run(),
                    Verdict::Fail => self.failing_ticks += 1,
                    Verdict::Unknown => {}
                }
            }
            Event::Attempt {
                attempt,
                word,
                target,
            } => self.attempts.push(AttemptRecord {
                attempt: *attempt,
                at: line.at,
                word: word.clone(),
                target: target.clone(),
                outcome: None,
                detail: String::new(),
            }),
            Event::Outcome {
                attempt,
                outcome,
                detail,
            } => {
                if let Some(record) = self
                    .attempts
                    .iter_mut()
                    .rev()
                    .find(|record| record.attempt == *attempt)
                {
                    record.outcome = Some(*outcome);
                    record.detail = detail.clone();
                }
                // AG-43: a repair verified ends the run.
                if *outcome == Outcome::Repaired {
                    self.verdict = Some(Verdict::Pass);
                    self.end_run();
                }
            }
            Event::Escalation { case } => {
                self.last_case_id = self.last_case_id.max(case.id);
                self.case = Some(case.clone());
            }
            Event::EscalationNote { id, notes, note } => {
                if let Some(case) = self.case.as_mut().filter(|case| case.id == *id) {
                    case.notes = *notes;
                    case.last_note = Some(note.clone());
                    case.noted_at = Some(line.at);
                }
            }
            Event::EscalationClosed { id } => {
                if let Some(case) = self.case.as_mut().filter(|case| case.id == *id) {
                    case.close(line.at);
                }
                self.end_run();
            }
            Event::Held | Event::HoldIgnored { .. } | Event::Busy | Event::NotApplicable { .. } => {
            }
        }
    }

    fn end_run(&mut self) {
        self.failing_ticks = 0;
        self.attempts.clear();
    }

    /// The open case, if any.
    pub fn open_case(&self) -> Option<&Case> {
        self.case.as_ref().filter(|case| case.is_open())
    }

    /// An attempt that started and never ended: the agent stopped during its repair.
    pub fn interrupted(&self) -> Option<&AttemptRecord> {
        self.attempts.iter().find(|record| record.outcome.is_none())
    }

    /// The lines that carry this memory into a fresh ledger after rotation: the newest case,
    /// the current run's attempts, its failing ticks up to the repair gate, and the last
    /// verdict. Folding them gives the same memory (the test below checks it).
    pub fn carried(&self, at: DateTime<Utc>) -> Vec<Line> {
        let mut lines = Vec::new();
        let line = |at, event| Line { at, event };
        if let Some(case) = &self.case {
            let opened = case.as_opened();
            let id = opened.id;
            lines.push(line(opened.opened_at, Event::Escalation { case: opened }));
            if let Some(note) = &case.last_note {
                lines.push(line(
                    case.noted_at.unwrap_or(at),
                    Event::EscalationNote {
                        id,
                        notes: case.notes,
                        note: note.clone(),
                    },
                ));
            }
            if let Some(closed_at) = case.closed_at {
                lines.push(line(closed_at, Event::EscalationClosed { id }));
            }
        }
        let checked = self.checked_at.unwrap_or(at);
        let carried = |verdict| Event::Check {
            verdict,
            detail: "carried over from the rotated ledger".into(),
        };
        // Only whether the run has reached the repair gate matters, not how long it failed.
        for _ in 0..self.failing_ticks.min(super::FAILING_TICKS_BEFORE_REPAIR) {
            lines.push(line(checked, carried(Verdict::Fail)));
        }
        match self.verdict {
            Some(Verdict::Fail) | None => {}
            Some(verdict) => lines.push(line(checked, carried(verdict))),
        }
        for record in &self.attempts {
            lines.push(line(
                record.at,
                Event::Attempt {
                    attempt: record.attempt,
                    word: record.word.clone(),
                    target: record.target.clone(),
                },
            ));
            if let Some(outcome) = record.outcome {
                lines.push(line(
                    record.at,
                    Event::Outcome {
                        attempt: record.attempt,
                        outcome,
                        detail: record.detail.clone(),
                    },
                ));
            }
        }
        lines
    }
}

/// The JSON of a line for the ledger, as a [`Value`] (for tests and the CLI).
pub fn as_value(line: &Line) -> Value {
    serde_json::to_value(line).expect("a ledger line serializes")
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn at(minute: i64) -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap() + chrono::Duration::minutes(minute)
    }

    fn check(minute: i64, verdict: Verdict) -> Line {
        Line {
            at: at(minute),
            event: Event::Check {
                verdict,
                detail: "d".into(),
            },
        }
    }

    fn text(lines: &[Line]) -> String {
        lines.iter().map(|l| l.to_json() + "\n").collect()
    }

    #[test]
    fn ag_47_lines_are_json_with_the_spec_event_names() {
        let line = Line {
            at: at(0),
            event: Event::HoldIgnored { reason: "r".into() },
        };
        let value = as_value(&line);
        assert_eq!(value["event"], "hold_ignored");
        assert_eq!(value["reason"], "r");
        let outcome = Line {
            at: at(0),
            event: Event::Outcome {
                attempt: 1,
                outcome: Outcome::ReportOnly,
                detail: String::new(),
            },
        };
        assert_eq!(as_value(&outcome)["outcome"], "report-only");
        assert_eq!(
            as_value(&Line {
                at: at(0),
                event: Event::Busy
            })["event"],
            "busy"
        );
    }

    #[test]
    fn ag_47_an_attempt_with_no_outcome_is_an_interrupted_attempt_and_still_counts() {
        let lines = [
            check(0, Verdict::Fail),
            check(10, Verdict::Fail),
            Line {
                at: at(10),
                event: Event::Attempt {
                    attempt: 1,
                    word: "restart_unit".into(),
                    target: Some("nginx".into()),
                },
            },
        ];
        let memory = Memory::read(&text(&lines));
        assert_eq!(memory.failing_ticks, 2);
        assert_eq!(memory.attempts.len(), 1);
        assert_eq!(memory.interrupted().unwrap().attempt, 1);
    }

    #[test]
    fn ag_47_the_lines_carried_into_a_rotated_ledger_fold_to_the_same_memory() {
        use crate::domain::recipes::case::Case;
        let case = Case::open(4, at(0), "gave up".into(), None);
        let lines = [
            Line {
                at: at(0),
                event: Event::Escalation { case },
            },
            Line {
                at: at(5),
                event: Event::EscalationNote {
                    id: 4,
                    notes: 2,
                    note: "still".into(),
                },
            },
            Line {
                at: at(8),
                event: Event::EscalationClosed { id: 4 },
            },
            check(10, Verdict::Fail),
            check(20, Verdict::Fail),
            Line {
                at: at(20),
                event: Event::Attempt {
                    attempt: 1,
                    word: "restart_unit".into(),
                    target: Some("nginx".into()),
                },
            },
            Line {
                at: at(20),
                event: Event::Outcome {
                    attempt: 1,
                    outcome: Outcome::Failed,
                    detail: "no".into(),
                },
            },
            check(30, Verdict::Unknown),
        ];
        let memory = Memory::read(&text(&lines));
        let carried = Memory::read(&text(&memory.carried(at(40))));
        assert_eq!(carried.case, memory.case);
        assert_eq!(carried.last_case_id, 4);
        assert_eq!(carried.failing_ticks, memory.failing_ticks);
        assert_eq!(carried.attempts, memory.attempts);
        assert_eq!(carried.verdict, memory.verdict);
    }

    #[test]
    fn a_torn_last_line_is_skipped_and_counted() {
        let mut written = text(&[check(0, Verdict::Fail)]);
        written.push_str("{\"at\":\"2026-12-01T12:");
        let memory = Memory::read(&written);
        assert_eq!(memory.failing_ticks, 1);
        assert_eq!(memory.unreadable, 1);
    }

    #[test]
    fn ag_43_a_pass_or_a_verified_repair_ends_the_run_and_unknown_changes_nothing() {
        let attempt = Line {
            at: at(10),
            event: Event::Attempt {
                attempt: 1,
                word: "restart_unit".into(),
                target: None,
            },
        };
        let repaired = Line {
            at: at(10),
            event: Event::Outcome {
                attempt: 1,
                outcome: Outcome::Repaired,
                detail: String::new(),
            },
        };
        let memory = Memory::read(&text(&[
            check(0, Verdict::Fail),
            check(10, Verdict::Fail),
            attempt,
            repaired,
        ]));
        assert_eq!((memory.failing_ticks, memory.attempts.len()), (0, 0));
        let memory = Memory::read(&text(&[
            check(0, Verdict::Fail),
            check(10, Verdict::Unknown),
            check(20, Verdict::Fail),
        ]));
        assert_eq!(memory.failing_ticks, 2);
        let memory = Memory::read(&text(&[check(0, Verdict::Fail), check(10, Verdict::Pass)]));
        assert_eq!(memory.failing_ticks, 0);
        assert_eq!(memory.verdict, Some(Verdict::Pass));
    }
}
