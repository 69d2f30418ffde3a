//! One tick of one recipe (AG-41..AG-45, AG-52): from what the loop read back of the ledger
//! ([`Memory`]), the check's answer, the clock and the hold, the lines to write and whether a
//! repair attempt is due. The runtime takes the job lock for a repair (writing `busy` when a
//! job holds it), composes a case's body, and writes each line as it goes.

use chrono::{DateTime, Utc};
use std::time::Duration;

use super::{
    bounded, case, ledger::Event, ledger::Memory, registry::Recipe, Check, Verdict,
    ATTEMPTS_PER_RUN, ATTEMPT_WAITS, DEFAULT_TICK, EARLY_TICK_TOLERANCE_DIVISOR,
    FAILING_TICKS_BEFORE_REPAIR, MAX_DETAIL_BYTES,
};

use capstan_events::agent_channel::recipes::{RecipeHold, MAX_HOLD_REASON_BYTES};

/// The hold marker as the loop found it (AG-45).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hold {
    None,
    /// `hold/<recipe>` is present in a hold directory that is root's and writable by root
    /// alone: the recipe repairs nothing.
    Honoured,
    /// The marker is present but the hold directory could have been written by someone else:
    /// ignored, and the ledger says why.
    Ignored(String),
}

impl Hold {
    /// The hold as the claim reports it: its word and, when ignored, why (issue 27: the plane
    /// hears of a hold, so the Recipes tab can say why a failing recipe is not repaired).
    pub fn reported(&self) -> (RecipeHold, Option<String>) {
        match self {
            Hold::None => (RecipeHold::None, None),
            Hold::Honoured => (RecipeHold::Held, None),
            Hold::Ignored(why) => (
                RecipeHold::Ignored,
                Some(bounded(why, MAX_HOLD_REASON_BYTES)),
            ),
        }
    }
}

/// What the tick does, in order.
#[derive(Debug, Clone, PartialEq)]
pub enum Step {
    /// Write this line.
    Write(Event),
    /// Repair: attempt `attempt` of the run is due (take the job lock first).
    Repair { attempt: u32 },
    /// Open a case with id `id`: compose its body and write its escalation line.
    Escalate { id: i64, summary: String },
}

/// The wait before attempt `next` (2 or 3) of a run, scaled to the tick length: ten and
/// thirty minutes at the default tick (AG-43).
pub fn wait_before(next: usize, tick: Duration) -> Duration {
    let wait = ATTEMPT_WAITS[next - 2];
    let scaled = wait.as_secs_f64() * tick.as_secs_f64() / DEFAULT_TICK.as_secs_f64();
    Duration::from_secs_f64(scaled)
}

/// Whether attempt `next` is due at `now`: the first tick at or after its wait, a tick
/// landing up to a tenth of a tick early counting as on time (AG-43).
pub fn attempt_due(memory: &Memory, now: DateTime<Utc>, tick: Duration) -> bool {
    let next = memory.attempts.len() + 1;
    let Some(last) = memory.attempts.last() else {
        return true;
    };
    let wait = wait_before(next, tick);
    let early = tick / EARLY_TICK_TOLERANCE_DIVISOR;
    let waited = now
        .signed_duration_since(last.at)
        .to_std()
        .unwrap_or_default();
    waited + early >= wait
}

/// The tick's plan for `recipe`, whose check just answered `check`.
pub fn plan(
    recipe: &Recipe,
    memory: &Memory,
    check: &Check,
    hold: &Hold,
    now: DateTime<Utc>,
    tick: Duration,
) -> Vec<Step> {
    let detail = bounded(&check.detail, MAX_DETAIL_BYTES);
    let check_line = |verdict| {
        Step::Write(Event::Check {
            verdict,
            detail: detail.clone(),
        })
    };
    let mut steps = Vec::new();
    match check.verdict {
        // AG-41, AG-47: unknown never repairs and never counts; written only when it is new.
        Verdict::Unknown => {
            if memory.verdict != Some(Verdict::Unknown) {
                steps.push(check_line(Verdict::Unknown));
            }
        }
        // AG-44: a pass closes the open case; written only when the verdict changed.
        Verdict::Pass => {
            if memory.verdict != Some(Verdict::Pass) {
                steps.push(check_line(Verdict::Pass));
            }
            if let Some(open) = memory.open_case() {
                steps.push(Step::Write(Event::EscalationClosed { id: open.id }));
            }
        }
        Verdict::Fail => steps = failing(recipe, memory, hold, detail, now, tick),
    }
    steps
}

/// A failing tick's steps: the check line, the hold's line, then a note on the open case, an
/// escalation, a repair or nothing, by the recipe's rules.
fn failing(
    recipe: &Recipe,
    memory: &Memory,
    hold: &Hold,
    detail: String,
    now: DateTime<Utc>,
    tick: Duration,
) -> Vec<Step> {
    // AG-47: a check line on every failing tick.
    let mut steps = vec![Step::Write(Event::Check {
        verdict: Verdict::Fail,
        detail: detail.clone(),
    })];
    let failing_ticks = memory.failing_ticks + 1;
    let held = match hold {
        Hold::None => false,
        Hold::Honoured => {
            steps.push(Step::Write(Event::Held));
            true
        }
        Hold::Ignored(reason) => {
            steps.push(Step::Write(Event::HoldIgnored {
                reason: bounded(reason, MAX_DETAIL_BYTES),
            }));
            false
        }
    };
    // AG-44, AG-59: while a case is open the recipe checks, notes and never repairs.
    if let Some(open) = memory.open_case() {
        steps.push(Step::Write(Event::EscalationNote {
            id: open.id,
            notes: open.notes + 1,
            note: case::note(&detail),
        }));
        return steps;
    }
    let escalate = || Step::Escalate {
        id: memory.last_case_id + 1,
        summary: case::summary(&format!("{}: {}", recipe.gives_up, detail)),
    };
    // AG-52: a check-only recipe opens its case on the first failing check and spends
    // no attempts (a hold stops repairs; a check-only recipe has none).
    if recipe.check_only() {
        steps.push(escalate());
        return steps;
    }
    // AG-45: a held recipe repairs nothing and spends nothing.
    if held {
        return steps;
    }
    // AG-42: two consecutive failing ticks before the first repair.
    if failing_ticks < FAILING_TICKS_BEFORE_REPAIR {
        return steps;
    }
    // AG-44: the fourth is an escalation.
    if memory.attempts.len() >= ATTEMPTS_PER_RUN {
        steps.push(escalate());
        return steps;
    }
    // AG-43: each attempt on the first tick at or after its wait.
    if attempt_due(memory, now, tick) {
        steps.push(Step::Repair {
            attempt: memory.attempts.len() as u32 + 1,
        });
    }
    steps
}

#[cfg(test)]
mod tests {
    //! The loop driven tick by tick with an injected clock and fake checks: each step's lines
    //! are folded back into the memory, as the runtime's ledger would be read.
    use super::*;
    use crate::domain::recipes::{
        case::Case,
        ledger::{Line, Outcome},
        registry,
    };
    use chrono::TimeZone;

    const TICK: Duration = DEFAULT_TICK;

    fn start() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 1, 12, 0, 0).unwrap()
    }

    /// A loop around [`plan`] with a fake repair that always fails, or always works.
    struct Harness {
        recipe: &'static Recipe,
        memory: Memory,
        lines: Vec<Line>,
        /// The job lock is held by a job.
        busy: bool,
        /// Report-only (AG-48): attempts are ledgered and run nothing.
        report_only: bool,
        repairs_run: u32,
        repair_works: bool,
    }

    impl Harness {
        fn new(name: &str) -> Harness {
            Harness {
                recipe: registry::find(name).unwrap(),
                memory: Memory::default(),
                lines: Vec::new(),
                busy: false,
                report_only: false,
                repairs_run: 0,
                repair_works: false,
            }
        }

        fn write(&mut self, at: DateTime<Utc>, event: Event) {
            let line = Line { at, event };
            self.memory.take(&line);
            self.lines.push(line);
        }

        /// One tick at `at` whose check says `verdict`; the events it wrote.
        fn tick(&mut self, at: DateTime<Utc>, verdict: Verdict, hold: Hold) -> Vec<String> {
            let check = Check {
                verdict,
                detail: format!("{verdict:?} at {at}"),
                target: Some("nginx".into()),
            };
            let before = self.lines.len();
            for step in plan(self.recipe, &self.memory, &check, &hold, at, TICK) {
                match step {
                    Step::Write(event) => self.write(at, event),
                    Step::Escalate { id, summary } => {
                        let case = Case::open(id, at, summary, None);
                        self.write(at, Event::Escalation { case });
                    }
                    Step::Repair { attempt } => {
                        if self.busy {
                            self.write(at, Event::Busy);
                            continue;
                        }
                        self.write(
                            at,
                            Event::Attempt {
                                attempt,
                                word: "restart_unit".into(),
                                target: check.target.clone(),
                            },
                        );
                        let outcome = if self.report_only {
                            Outcome::ReportOnly
                        } else {
                            self.repairs_run += 1;
                            if self.repair_works {
                                Outcome::Repaired
                            } else {
                                Outcome::Failed
                            }
                        };
                        self.write(
                            at,
                            Event::Outcome {
                                attempt,
                                outcome,
                                detail: String::new(),
                            },
                        );
                    }
                }
            }
            self.lines[before..]
                .iter()
                .map(|line| {
                    let value = serde_json::to_value(line).unwrap();
                    let mut name = value["event"].as_str().unwrap().to_string();
                    if let Some(outcome) = value["outcome"].as_str() {
                        name = format!("{name}:{outcome}");
                    }
                    if let Some(verdict) = value["verdict"].as_str() {
                        name = format!("{name}:{verdict}");
                    }
                    name
                })
                .collect()
        }

        fn attempts(&self) -> usize {
            self.lines
                .iter()
                .filter(|line| matches!(line.event, Event::Attempt { .. }))
                .count()
        }
    }

    fn minutes(n: i64) -> chrono::Duration {
        chrono::Duration::minutes(n)
    }

    #[test]
    fn ag_42_a_repair_runs_only_on_the_second_consecutive_failing_tick() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        assert_eq!(loop_.tick(t, Verdict::Fail, Hold::None), ["check:fail"]);
        assert_eq!(
            loop_.tick(t + minutes(10), Verdict::Fail, Hold::None),
            ["check:fail", "attempt", "outcome:failed"]
        );
        // A pass in between starts the count again.
        let mut loop_ = Harness::new("service_health");
        loop_.tick(t, Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(10), Verdict::Pass, Hold::None);
        assert_eq!(
            loop_.tick(t + minutes(20), Verdict::Fail, Hold::None),
            ["check:fail"]
        );
        assert_eq!(loop_.attempts(), 0);
    }

    #[test]
    fn ag_41_unknown_never_repairs_never_counts_and_is_written_once() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        assert_eq!(
            loop_.tick(t, Verdict::Unknown, Hold::None),
            ["check:unknown"]
        );
        assert!(loop_
            .tick(t + minutes(10), Verdict::Unknown, Hold::None)
            .is_empty());
        // One failing tick, unknowns, one failing tick: still the first repair only now.
        loop_.tick(t + minutes(20), Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(30), Verdict::Unknown, Hold::None);
        loop_.tick(t + minutes(40), Verdict::Unknown, Hold::None);
        assert_eq!(loop_.attempts(), 0);
        loop_.tick(t + minutes(50), Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 1);
        // Many unknowns never reach the budget or a case.
        for n in 0..20 {
            loop_.tick(t + minutes(60 + n * 10), Verdict::Unknown, Hold::None);
        }
        assert_eq!(loop_.attempts(), 1);
        assert!(loop_.memory.case.is_none());
    }

    #[test]
    fn ag_43_the_second_attempt_ten_minutes_after_the_first_and_the_third_thirty_after_the_second_even_on_an_early_tick(
    ) {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        loop_.tick(t, Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(10), Verdict::Fail, Hold::None); // attempt 1 at +10
        assert_eq!(loop_.attempts(), 1);
        // The timer lands the next tick five seconds early: still due.
        let early = t + minutes(20) - chrono::Duration::seconds(5);
        loop_.tick(early, Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 2, "attempt 2 on the slightly early tick");
        let second = early;
        // Ticks ten and twenty minutes after the second are not yet due.
        loop_.tick(second + minutes(10), Verdict::Fail, Hold::None);
        loop_.tick(second + minutes(20), Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 2);
        // Thirty minutes after the second, a few seconds early: the third.
        loop_.tick(
            second + minutes(30) - chrono::Duration::seconds(3),
            Verdict::Fail,
            Hold::None,
        );
        assert_eq!(loop_.attempts(), 3);
        // A tick far too early (half a tick) is not "at or after".
        let mut loop_ = Harness::new("service_health");
        loop_.tick(t, Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(10), Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(15), Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 1);
    }

    #[test]
    fn ag_44_the_fourth_attempt_is_an_escalation_noted_each_failing_tick_and_closed_by_a_pass() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        for minute in [0, 10, 20, 30, 40, 50] {
            loop_.tick(t + minutes(minute), Verdict::Fail, Hold::None);
        }
        assert_eq!(loop_.attempts(), 3, "attempts at +10, +20 and +50");
        assert_eq!(
            loop_.tick(t + minutes(60), Verdict::Fail, Hold::None),
            ["check:fail", "escalation"]
        );
        assert_eq!(loop_.memory.open_case().unwrap().id, 1);
        // Further failing ticks note the one case and never repair.
        assert_eq!(
            loop_.tick(t + minutes(70), Verdict::Fail, Hold::None),
            ["check:fail", "escalation_note"]
        );
        loop_.tick(t + minutes(80), Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 3);
        assert_eq!(loop_.memory.open_case().unwrap().notes, 2);
        assert_eq!(loop_.repairs_run, 3);
        // The check passing closes it, and a new failing run starts from nothing.
        assert_eq!(
            loop_.tick(t + minutes(90), Verdict::Pass, Hold::None),
            ["check:pass", "escalation_closed"]
        );
        assert!(loop_.memory.open_case().is_none());
        assert!(loop_.memory.case.as_ref().unwrap().closed_at.is_some());
        loop_.tick(t + minutes(100), Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(110), Verdict::Fail, Hold::None);
        assert_eq!(loop_.attempts(), 4, "a new run's first attempt");
        // The next case has the next id.
        for minute in [120, 150, 160, 170] {
            loop_.tick(t + minutes(minute), Verdict::Fail, Hold::None);
        }
        assert_eq!(loop_.memory.open_case().unwrap().id, 2);
    }

    #[test]
    fn ag_43_a_verified_repair_ends_the_run() {
        let mut loop_ = Harness::new("service_health");
        loop_.repair_works = true;
        let t = start();
        for n in 0..10 {
            loop_.tick(t + minutes(n * 10), Verdict::Fail, Hold::None);
        }
        // Each repair works, and each time the check fails again two ticks are needed.
        assert_eq!(loop_.attempts(), 5);
        assert!(loop_.memory.case.is_none());
    }

    #[test]
    fn ag_52_a_check_only_recipe_opens_its_case_on_the_first_failing_check_and_spends_no_attempts()
    {
        let mut loop_ = Harness::new("disk_headroom");
        let t = start();
        assert_eq!(
            loop_.tick(t, Verdict::Fail, Hold::None),
            ["check:fail", "escalation"]
        );
        assert_eq!(
            loop_.tick(t + minutes(10), Verdict::Fail, Hold::None),
            ["check:fail", "escalation_note"]
        );
        assert_eq!(loop_.attempts(), 0);
        assert_eq!(
            loop_.tick(t + minutes(20), Verdict::Pass, Hold::None),
            ["check:pass", "escalation_closed"]
        );
        // A pass after a pass writes nothing.
        assert!(loop_
            .tick(t + minutes(30), Verdict::Pass, Hold::None)
            .is_empty());
    }

    #[test]
    fn ag_45_a_honoured_hold_records_held_on_every_failing_tick_and_repairs_nothing() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        for n in 0..8 {
            assert_eq!(
                loop_.tick(t + minutes(n * 10), Verdict::Fail, Hold::Honoured),
                ["check:fail", "held"]
            );
        }
        assert_eq!(loop_.attempts(), 0);
        assert!(loop_.memory.case.is_none());
        // The marker goes: the run's failing ticks counted, so the repair is due at once.
        assert_eq!(
            loop_.tick(t + minutes(80), Verdict::Fail, Hold::None),
            ["check:fail", "attempt", "outcome:failed"]
        );
    }

    #[test]
    fn ag_45_an_ignored_hold_is_ledgered_and_the_loop_repairs_as_if_there_were_none() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        let ignored = Hold::Ignored("hold is writable by others".into());
        assert_eq!(
            loop_.tick(t, Verdict::Fail, ignored.clone()),
            ["check:fail", "hold_ignored"]
        );
        assert_eq!(
            loop_.tick(t + minutes(10), Verdict::Fail, ignored),
            ["check:fail", "hold_ignored", "attempt", "outcome:failed"]
        );
    }

    #[test]
    fn ag_48_report_only_ledgers_attempts_runs_nothing_and_escalates_the_same() {
        let mut loop_ = Harness::new("service_health");
        loop_.report_only = true;
        let t = start();
        for minute in [0, 10, 20, 30, 40, 50, 60] {
            loop_.tick(t + minutes(minute), Verdict::Fail, Hold::None);
        }
        assert_eq!(loop_.repairs_run, 0);
        assert_eq!(loop_.attempts(), 3);
        assert!(loop_
            .lines
            .iter()
            .filter(|line| matches!(line.event, Event::Outcome { .. }))
            .all(|line| matches!(
                line.event,
                Event::Outcome {
                    outcome: Outcome::ReportOnly,
                    ..
                }
            )));
        assert!(loop_.memory.open_case().is_some());
    }

    #[test]
    fn ag_42_a_busy_job_lock_is_ledgered_and_the_attempt_is_tried_next_tick() {
        let mut loop_ = Harness::new("service_health");
        loop_.busy = true;
        let t = start();
        loop_.tick(t, Verdict::Fail, Hold::None);
        assert_eq!(
            loop_.tick(t + minutes(10), Verdict::Fail, Hold::None),
            ["check:fail", "busy"]
        );
        loop_.busy = false;
        assert_eq!(
            loop_.tick(t + minutes(20), Verdict::Fail, Hold::None),
            ["check:fail", "attempt", "outcome:failed"]
        );
    }

    #[test]
    fn ag_47_a_repair_that_killed_the_agent_counts_as_a_failed_attempt_after_restart() {
        let mut loop_ = Harness::new("service_health");
        let t = start();
        loop_.tick(t, Verdict::Fail, Hold::None);
        loop_.tick(t + minutes(10), Verdict::Fail, Hold::None);
        // Attempt 2 starts, and the agent dies before its outcome is written.
        loop_.write(
            t + minutes(20),
            Event::Attempt {
                attempt: 2,
                word: "restart_unit".into(),
                target: Some("nginx".into()),
            },
        );
        // Restart: the ledger is read back from its text.
        let text: String = loop_.lines.iter().map(|l| l.to_json() + "\n").collect();
        let mut restarted = Harness::new("service_health");
        restarted.memory = Memory::read(&text);
        restarted.lines = loop_.lines.clone();
        let interrupted = restarted.memory.interrupted().unwrap().attempt;
        assert_eq!(interrupted, 2);
        restarted.write(
            t + minutes(21),
            Event::Outcome {
                attempt: 2,
                outcome: Outcome::Interrupted,
                detail: "the agent stopped during the repair".into(),
            },
        );
        // The interrupted attempt is spent: the next is the third, thirty minutes later.
        restarted.tick(t + minutes(30), Verdict::Fail, Hold::None);
        assert_eq!(restarted.attempts(), 2);
        restarted.tick(t + minutes(50), Verdict::Fail, Hold::None);
        assert_eq!(restarted.attempts(), 3);
        restarted.tick(t + minutes(60), Verdict::Fail, Hold::None);
        assert!(restarted.memory.open_case().is_some());
    }

    #[test]
    fn ag_43_a_short_tick_keeps_the_same_path_in_ticks() {
        let tick = Duration::from_secs(2);
        assert_eq!(wait_before(2, tick), Duration::from_secs(2));
        assert_eq!(wait_before(3, tick), Duration::from_secs(6));
        assert_eq!(wait_before(2, DEFAULT_TICK), Duration::from_secs(600));
        assert_eq!(wait_before(3, DEFAULT_TICK), Duration::from_secs(1800));
    }
}
