//! The trial of a new version (AG-29, AG-30), without I/O: what `.pending` records, what a
//! start decides, what the start guard decides, and what `.rejected` holds.

use std::time::Duration;

use serde::{Deserialize, Serialize};

/// `.pending` beside the binary: the version on trial, how many of its starts the binary itself
/// recorded (AG-29), and how many the start guard handed over to it (AG-30).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Pending {
    pub version: String,
    /// Starts the new binary recorded itself, once running (its own "started" record).
    pub starts: u32,
    /// Starts the start guard handed over to the new binary: counted outside it, so a binary
    /// that dies before it can record anything is still counted. Absent in a record written by
    /// an agent older than the count.
    #[serde(default)]
    pub handed_over: u32,
}

/// AG-30 with AG-29: how many starts the guard hands over to a binary on trial that never
/// records its own start before the `.bak` is put back. A binary that answers `--version` but
/// dies at start (a bad configuration read, a panic before `run`) would otherwise be restarted
/// for ever with no agent running. Two, not one: a start lost between the guard and the binary
/// (the supervisor stopped in between) is not held against the build.
pub const STARTS_WITHOUT_RECORD_ALLOWED: u32 = 2;

/// What a starting agent does about a swap on trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Start {
    /// No trial (or one for another version: the `.bak` was already put back): run.
    Run { clear_pending: bool },
    /// The first start of the new version: run on trial, recording this start.
    Trial(Pending),
    /// The previous start of this version died on trial: put the `.bak` back, record the
    /// version in `.rejected`, and exit so the supervisor starts the previous agent.
    RollBack { version: String },
}

/// AG-29 at start: a start that finds the previous start of the same version still on trial
/// rolls back.
pub fn on_start(pending: Option<&Pending>, running: &str, has_bak: bool) -> Start {
    match pending {
        None => Start::Run {
            clear_pending: false,
        },
        Some(pending) if pending.version != running => Start::Run {
            clear_pending: true,
        },
        Some(pending) if pending.starts >= 1 && has_bak => Start::RollBack {
            version: pending.version.clone(),
        },
        Some(pending) => Start::Trial(Pending {
            version: pending.version.clone(),
            starts: pending.starts.saturating_add(1),
            handed_over: pending.handed_over,
        }),
    }
}

/// AG-29: a deliberate stop during the trial (a signal, the switch, a leave) starts the trial
/// afresh rather than counting against it.
pub fn on_deliberate_stop(pending: &Pending) -> Pending {
    Pending {
        version: pending.version.clone(),
        starts: 0,
        handed_over: 0,
    }
}

/// Whether a process started `uptime` ago has passed its trial.
pub fn trial_passed(uptime: Duration, trial: Duration) -> bool {
    uptime >= trial
}

/// What the start guard does before a start.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Guarded {
    /// No swap on trial, or no `.bak` to go back to: the start goes ahead as it is.
    Start,
    /// The start goes ahead, counted in `.pending` as handed over.
    HandOver(Pending),
    /// Put the `.bak` back, record the version in `.rejected`, and start the previous agent.
    RollBack { version: String, why: GuardRollBack },
}

/// Why the guard rolled a version back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GuardRollBack {
    /// The binary cannot answer `--version` with the version on trial.
    NoAnswer,
    /// The binary was started this many times without once recording its own start.
    NeverStarted { handed_over: u32 },
}

/// AG-30's start guard, run by the supervisor before every start (outside the binary on
/// trial): while a swap is on trial with a `.bak` kept, a binary that cannot answer
/// `--version` with the version on trial is replaced by the `.bak` and rejected; so is one
/// that was handed [`STARTS_WITHOUT_RECORD_ALLOWED`] starts that it never recorded (it dies
/// before it runs: AG-29's "a start that dies during its trial" counted where the binary
/// cannot lie about it). Otherwise the start is counted and goes ahead.
pub fn guard(pending: Option<&Pending>, has_bak: bool, probe_ok: bool) -> Guarded {
    let Some(pending) = pending.filter(|_| has_bak) else {
        return Guarded::Start;
    };
    if !probe_ok {
        return Guarded::RollBack {
            version: pending.version.clone(),
            why: GuardRollBack::NoAnswer,
        };
    }
    let unrecorded = pending.handed_over.saturating_sub(pending.starts);
    if unrecorded >= STARTS_WITHOUT_RECORD_ALLOWED {
        return Guarded::RollBack {
            version: pending.version.clone(),
            why: GuardRollBack::NeverStarted {
                handed_over: pending.handed_over,
            },
        };
    }
    Guarded::HandOver(Pending {
        version: pending.version.clone(),
        starts: pending.starts,
        handed_over: pending.handed_over.saturating_add(1),
    })
}

/// The versions in `.rejected`, one a line.
pub fn parse_rejected(text: &str) -> Vec<String> {
    text.lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(str::to_string)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::update::TRIAL_UPTIME;

    #[test]
    fn ag_29_the_second_start_of_a_version_still_on_trial_rolls_back() {
        let pending = on_trial(0, 0);
        // the first start after the swap runs on trial and counts itself
        let first = on_start(Some(&pending), "1.1.0", true);
        let Start::Trial(counted) = first else {
            panic!("{first:?}")
        };
        assert_eq!(counted.starts, 1);
        // it died within its trial: the next start of the same version rolls back
        assert_eq!(
            on_start(Some(&counted), "1.1.0", true),
            Start::RollBack {
                version: "1.1.0".into()
            }
        );
        // the previous agent, started from the .bak, clears the stale record and runs
        assert_eq!(
            on_start(Some(&counted), "1.0.0", true),
            Start::Run {
                clear_pending: true
            }
        );
        assert_eq!(
            on_start(None, "1.0.0", false),
            Start::Run {
                clear_pending: false
            }
        );
    }

    #[test]
    fn ag_29_a_deliberate_stop_during_the_trial_starts_it_afresh() {
        let counted = on_trial(1, 0);
        let after_stop = on_deliberate_stop(&counted);
        assert!(matches!(
            on_start(Some(&after_stop), "1.1.0", true),
            Start::Trial(_)
        ));
    }

    #[test]
    fn ag_29_the_trial_lasts_three_minutes_of_uptime() {
        assert_eq!(TRIAL_UPTIME, Duration::from_secs(180));
        assert!(!trial_passed(Duration::from_secs(179), TRIAL_UPTIME));
        assert!(trial_passed(Duration::from_secs(180), TRIAL_UPTIME));
    }

    fn on_trial(starts: u32, handed_over: u32) -> Pending {
        Pending {
            version: "1.1.0".into(),
            starts,
            handed_over,
        }
    }

    #[test]
    fn ag_30_the_start_guard_restores_the_bak_for_a_binary_on_trial_that_cannot_answer() {
        let pending = on_trial(0, 0);
        assert_eq!(
            guard(Some(&pending), true, false),
            Guarded::RollBack {
                version: "1.1.0".into(),
                why: GuardRollBack::NoAnswer
            }
        );
        assert_eq!(
            guard(Some(&pending), true, true),
            Guarded::HandOver(on_trial(0, 1))
        );
        // no .bak to go back to, or no trial: the start goes ahead uncounted
        assert_eq!(guard(Some(&pending), false, false), Guarded::Start);
        assert_eq!(guard(None, true, false), Guarded::Start);
    }

    #[test]
    fn ag_29_ag_30_a_binary_that_answers_version_but_never_records_a_start_is_rolled_back_after_the_allowed_starts(
    ) {
        // The supervisor's loop as the guard sees it: the binary answers --version, then dies
        // before it can record its start, so `starts` stays 0.
        let mut pending = on_trial(0, 0);
        let mut handed = 0;
        let rolled_back = loop {
            match guard(Some(&pending), true, true) {
                Guarded::HandOver(counted) => {
                    handed += 1;
                    assert!(handed <= STARTS_WITHOUT_RECORD_ALLOWED, "never rolled back");
                    pending = counted;
                }
                other => break other,
            }
        };
        assert_eq!(handed, STARTS_WITHOUT_RECORD_ALLOWED);
        assert_eq!(
            rolled_back,
            Guarded::RollBack {
                version: "1.1.0".into(),
                why: GuardRollBack::NeverStarted {
                    handed_over: STARTS_WITHOUT_RECORD_ALLOWED
                }
            }
        );
    }

    #[test]
    fn ag_29_ag_30_a_start_the_binary_recorded_is_judged_by_the_binary_and_not_held_against_it_by_the_guard(
    ) {
        // guard hands over, the binary records its start: on trial, both counted
        let Guarded::HandOver(handed) = guard(Some(&on_trial(0, 0)), true, true) else {
            panic!("the first start is handed over")
        };
        let Start::Trial(running) = on_start(Some(&handed), "1.1.0", true) else {
            panic!("the first start runs on trial")
        };
        assert_eq!(running, on_trial(1, 1));
        // it dies after recording: the guard hands over again, and the binary's own rule
        // (the previous start died on trial) rolls it back
        let Guarded::HandOver(again) = guard(Some(&running), true, true) else {
            panic!("a recorded start is not held against the build by the guard")
        };
        assert_eq!(
            on_start(Some(&again), "1.1.0", true),
            Start::RollBack {
                version: "1.1.0".into()
            }
        );
        // had it died before recording the second time, the guard ends it all the same
        let mut dying = again;
        while let Guarded::HandOver(counted) = guard(Some(&dying), true, true) {
            assert!(counted.handed_over <= 1 + STARTS_WITHOUT_RECORD_ALLOWED);
            dying = counted;
        }
        assert!(matches!(
            guard(Some(&dying), true, true),
            Guarded::RollBack {
                why: GuardRollBack::NeverStarted { .. },
                ..
            }
        ));
    }

    #[test]
    fn ag_29_a_deliberate_stop_clears_the_guards_count_too() {
        let after_stop = on_deliberate_stop(&on_trial(1, 1 + STARTS_WITHOUT_RECORD_ALLOWED));
        assert_eq!(after_stop, on_trial(0, 0));
        assert!(matches!(
            guard(Some(&after_stop), true, true),
            Guarded::HandOver(_)
        ));
    }

    #[test]
    fn ag_30_a_trial_record_without_the_guards_count_still_reads() {
        let older: Pending = serde_json::from_str(r#"{"version":"1.1.0","starts":1}"#).unwrap();
        assert_eq!(older, on_trial(1, 0));
    }
}
