//! A rollout as a durable workflow (RO-10..RO-16, and beyond the spec: error budgets, soak,
//! pause, resume, retry). [`advance`] is the whole engine: it takes the rollout and its steps
//! as stored, what the jobs have answered since, and the clock, changes them in memory and
//! returns the effects to store with them. The service writes the changed rows and the effects
//! (job requests and events, through the outbox) in one transaction, so every step's result is
//! stored before the next step starts, and a restarted service resumes from the rows: a job is
//! requested only in the transaction that moves its step into the phase that needs it, under an
//! idempotency key that names the rollout, the step, the try and the phase, so it is never sent
//! twice; an apply the service lost track of is judged from the job's outcome (a lost job is a
//! miss), never sent again.
//!
//! A step goes `waiting → preflight → probes before → apply → probes after → done`, skipping
//! the preflight when its node does not report `upgrade_preflight` and the probes when the
//! rollout names no pages. A patch run's step is `waiting → apply → done` with
//! `install_security_updates` as its apply.

use chrono::{DateTime, Duration, Utc};
use serde_json::{json, Value};

use super::verdict::{self, Finished, Judgement, Probe, ProbePage};
use capstan_events::Word as _;

/// RO-19: a readiness check that has not answered in this long halts at its node.
pub const PREFLIGHT_TIMEOUT: Duration = Duration::minutes(15);
/// RO-21: a round of page checks that has not finished in this long halts at its node.
pub const PROBE_ROUND_TIMEOUT: Duration = Duration::minutes(15);

/// The words a rollout asks for.
pub const PREFLIGHT_WORD: &str = "upgrade_preflight";
pub const PROBE_WORD: &str = "page_probe";
pub const APPLY_WORD: &str = capstan_events::agent_channel::primitives::UPDATE;
pub const PATCH_WORD: &str = "install_security_updates";

/// What a rollout rolls out, and where it is: the contract's words (`RolloutKind`,
/// `RolloutState`), which the API and the pages show as they are.
pub use capstan_events::rollouts::staged::{RolloutKind as Kind, RolloutState as State};

/// Where a step is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    Waiting,
    Preflight,
    ProbesBefore,
    Apply,
    ProbesAfter,
    Done,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Waiting => "waiting",
            Phase::Preflight => "preflight",
            Phase::ProbesBefore => "probes_before",
            Phase::Apply => "apply",
            Phase::ProbesAfter => "probes_after",
            Phase::Done => "done",
        }
    }

    pub fn parse(word: &str) -> Option<Phase> {
        Some(match word {
            "waiting" => Phase::Waiting,
            "preflight" => Phase::Preflight,
            "probes_before" => Phase::ProbesBefore,
            "apply" => Phase::Apply,
            "probes_after" => Phase::ProbesAfter,
            "done" => Phase::Done,
            _ => return None,
        })
    }

    /// Started and not done: the step holds its machine's turn.
    fn in_flight(self) -> bool {
        !matches!(self, Phase::Waiting | Phase::Done)
    }

    /// The apply has been asked for: the step is judged to its end whatever happens.
    fn applying(self) -> bool {
        matches!(self, Phase::Apply | Phase::ProbesAfter)
    }
}

/// RO-10: a step's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Pending,
    Running,
    Passed,
    Failed,
    Skipped,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Pending => "pending",
            Verdict::Running => "running",
            Verdict::Passed => "passed",
            Verdict::Failed => "failed",
            Verdict::Skipped => "skipped",
        }
    }

    pub fn parse(word: &str) -> Option<Verdict> {
        Some(match word {
            "pending" => Verdict::Pending,
            "running" => Verdict::Running,
            "passed" => Verdict::Passed,
            "failed" => Verdict::Failed,
            "skipped" => Verdict::Skipped,
            _ => return None,
        })
    }
}

/// Beyond the spec (hawkBit's error threshold): how many of a stage's nodes may miss before
/// the rollout halts. The spec's rule — the first miss halts — is a budget of none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Budget {
    Nodes(u32),
    Percent(u8),
}

impl Budget {
    pub const NONE: Budget = Budget::Nodes(0);

    /// Whether `failed` misses out of `total` nodes are still within the budget.
    pub fn allows(self, failed: usize, total: usize) -> bool {
        match self {
            Budget::Nodes(nodes) => failed <= nodes as usize,
            Budget::Percent(percent) => failed * 100 <= usize::from(percent) * total,
        }
    }
}

/// A stage's rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagePolicy {
    pub budget: Budget,
    /// Beyond the spec: how long the stage's nodes are watched after its last step passed;
    /// an incident opened on one of them meanwhile halts the rollout.
    pub soak: Duration,
}

impl Default for StagePolicy {
    fn default() -> StagePolicy {
        StagePolicy {
            budget: Budget::NONE,
            soak: Duration::zero(),
        }
    }
}

/// The node and reason a rollout halted at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Halt {
    pub node_id: i64,
    pub reason: String,
}

/// A rollout as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Rollout {
    pub id: i64,
    pub kind: Kind,
    /// The release a `Release` rollout applies (empty for a patch run).
    pub version: String,
    pub state: State,
    /// The stage under way (0-based).
    pub stage: usize,
    pub stages: Vec<StagePolicy>,
    pub pages: Vec<ProbePage>,
    /// Set when the current stage's last step is done and its soak began.
    pub soak_until: Option<DateTime<Utc>>,
    pub halt: Option<Halt>,
}

/// One job a step is waiting for, by its idempotency key, with the answer once it came.
#[derive(Debug, Clone, PartialEq)]
pub struct Slot {
    pub key: String,
    pub answer: Option<Finished>,
}

/// A node's step as stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub id: i64,
    pub node_id: i64,
    /// RO-12: the machine the node runs on (container sites on one host are one machine).
    pub machine: String,
    pub stage: usize,
    pub phase: Phase,
    pub verdict: Verdict,
    pub reason: Option<String>,
    pub phase_since: Option<DateTime<Utc>>,
    /// Each retry is a new try, so its jobs have new keys.
    pub attempt: u32,
    /// The node reports `upgrade_preflight` (RO-19: no word, applied directly).
    pub has_preflight: bool,
    /// The jobs of the current phase.
    pub slots: Vec<Slot>,
    /// What each page answered before the apply (None: no check before).
    pub before: Vec<Option<Probe>>,
    /// What each page answered after it.
    pub after: Vec<Option<Probe>>,
    /// RO-17: why the step waits (a site copy under way), when it does.
    pub waiting_on: Option<String>,
}

impl Step {
    pub fn new(id: i64, node_id: i64, machine: &str, stage: usize, has_preflight: bool) -> Step {
        Step {
            id,
            node_id,
            machine: machine.to_string(),
            stage,
            phase: Phase::Waiting,
            verdict: Verdict::Pending,
            reason: None,
            phase_since: None,
            attempt: 0,
            has_preflight,
            slots: Vec::new(),
            before: Vec::new(),
            after: Vec::new(),
            waiting_on: None,
        }
    }
}

/// What the engine learns from outside on a tick.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Facts {
    /// RO-17: nodes whose site copy holds them, with why.
    pub holds: Vec<(i64, String)>,
    /// Incidents opened on nodes since the current stage's soak began: (node, what).
    pub incidents: Vec<(i64, String)>,
}

/// What the service does with an [`advance`]: ask for a job, withdraw one, or tell the world.
#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    RequestJob {
        step_id: i64,
        node_id: i64,
        key: String,
        word: &'static str,
        params: Value,
    },
    CancelJob {
        key: String,
    },
    StepFinished {
        step_id: i64,
        node_id: i64,
        verdict: Verdict,
        reason: Option<String>,
    },
    StageStarted {
        stage: usize,
    },
    Halted(Halt),
    Finished,
}

/// An operator's act on a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Act {
    Stop,
    Pause,
    Resume,
    Retry,
}

impl Act {
    pub fn as_str(self) -> &'static str {
        match self {
            Act::Stop => "stop",
            Act::Pause => "pause",
            Act::Resume => "resume",
            Act::Retry => "retry",
        }
    }

    pub fn parse(word: &str) -> Option<Act> {
        Some(match word {
            "stop" => Act::Stop,
            "pause" => Act::Pause,
            "resume" => Act::Resume,
            "retry" => Act::Retry,
            _ => return None,
        })
    }
}

/// The idempotency key of a step's job: the rollout, the step, the try, the phase and the
/// page. The agent channel takes a key once, so a decision repeated after a crash asks again
/// under the same key and nothing is sent twice.
pub fn job_key(rollout: i64, step: &Step, phase: Phase, index: usize) -> String {
    format!(
        "rollout-{rollout}-step-{}-try-{}-{}-{index}",
        step.id,
        step.attempt,
        phase.as_str()
    )
}

fn enter(
    rollout: &Rollout,
    step: &mut Step,
    phase: Phase,
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) {
    step.phase = phase;
    step.phase_since = Some(now);
    step.verdict = Verdict::Running;
    step.waiting_on = None;
    let jobs: Vec<(&'static str, Value)> = match (rollout.kind, phase) {
        (_, Phase::Preflight) => vec![(PREFLIGHT_WORD, json!({}))],
        (Kind::Release, Phase::ProbesBefore | Phase::ProbesAfter) => rollout
            .pages
            .iter()
            .map(|page| {
                (
                    PROBE_WORD,
                    json!({"path": page.path, "viewer": page.viewer.as_str()}),
                )
            })
            .collect(),
        (Kind::Release, Phase::Apply) => vec![(APPLY_WORD, json!({"version": rollout.version}))],
        (Kind::Patch, Phase::Apply) => vec![(PATCH_WORD, json!({}))],
        _ => Vec::new(),
    };
    step.slots = jobs
        .into_iter()
        .enumerate()
        .map(|(index, (word, params))| {
            let key = job_key(rollout.id, step, phase, index);
            effects.push(Effect::RequestJob {
                step_id: step.id,
                node_id: step.node_id,
                key: key.clone(),
                word,
                params,
            });
            Slot { key, answer: None }
        })
        .collect();
}

fn finish(step: &mut Step, verdict: Verdict, reason: Option<String>, effects: &mut Vec<Effect>) {
    for slot in &step.slots {
        if slot.answer.is_none() {
            effects.push(Effect::CancelJob {
                key: slot.key.clone(),
            });
        }
    }
    step.slots.clear();
    step.phase = Phase::Done;
    step.verdict = verdict;
    step.reason = reason.clone();
    step.waiting_on = None;
    effects.push(Effect::StepFinished {
        step_id: step.id,
        node_id: step.node_id,
        verdict,
        reason,
    });
}

/// The phase after `phase` for a step of `rollout`.
fn next_phase(rollout: &Rollout, step: &Step, phase: Phase) -> Phase {
    let pages = rollout.kind == Kind::Release && !rollout.pages.is_empty();
    match phase {
        Phase::Waiting if rollout.kind == Kind::Patch => Phase::Apply,
        Phase::Waiting if step.has_preflight => Phase::Preflight,
        Phase::Waiting | Phase::Preflight if pages => Phase::ProbesBefore,
        Phase::Waiting | Phase::Preflight | Phase::ProbesBefore => Phase::Apply,
        Phase::Apply if pages => Phase::ProbesAfter,
        Phase::Apply | Phase::ProbesAfter | Phase::Done => Phase::Done,
    }
}

/// RO-29: how a patch run's `install_security_updates` is judged. An updater failure stops the
/// run, naming the node; "nothing to install" and "another package run in the way" are
/// recorded and pass. The agent's answer (its `words::patching`): `outcome` is `installed`
/// (with `installed`, the packages), `nothing_to_install`, `busy` (with `lock`, the lock apt
/// could not get) or `failed` (with `detail`, apt's reason; the job itself ends failed);
/// `held_back` counts fixes that need a package from outside the security origin.
pub fn patch_verdict(finished: &Finished) -> (Judgement, Option<String>) {
    let result = finished.result.as_ref();
    let text = |name: &str| result.and_then(|r| r.get(name)).and_then(Value::as_str);
    if finished.outcome != verdict::Outcome::Completed {
        let why = finished
            .reason
            .clone()
            .filter(|reason| !reason.trim().is_empty())
            .or_else(|| text("detail").map(|detail| format!("the updater failed: {detail}")))
            .map(|why| format!(": {why}"))
            .unwrap_or_default();
        return (
            Judgement::Miss(format!(
                "install_security_updates {}{why}",
                finished.outcome.as_str()
            )),
            None,
        );
    }
    let held_back = result
        .and_then(|r| r.get("held_back"))
        .and_then(Value::as_u64)
        .filter(|held| *held > 0)
        .map(|held| {
            format!(" ({held} held back: they need packages from outside the security origin)")
        })
        .unwrap_or_default();
    match text("outcome") {
        Some("installed") => {
            let packages: Vec<&str> = result
                .and_then(|r| r.get("installed"))
                .and_then(Value::as_array)
                .map(|names| names.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            (
                Judgement::Pass,
                Some(format!(
                    "installed {} packages{}{held_back}",
                    packages.len(),
                    if packages.is_empty() {
                        String::new()
                    } else {
                        format!(": {}", packages.join(", "))
                    }
                )),
            )
        }
        Some("nothing_to_install") => (
            Judgement::Pass,
            Some(format!("nothing to install{held_back}")),
        ),
        Some("busy") => (
            Judgement::Pass,
            Some(match text("lock") {
                Some(lock) => format!("another package run was in the way (it holds {lock})"),
                None => "another package run was in the way".into(),
            }),
        ),
        Some("failed") => (
            Judgement::Miss(format!(
                "the updater failed: {}",
                text("detail").unwrap_or("no detail")
            )),
            None,
        ),
        _ => (
            Judgement::Miss("install_security_updates sent no outcome to judge".into()),
            None,
        ),
    }
}

/// Judges a step whose current phase has all its answers (or has run out of time); returns
/// the verdict to end it with, or `None` to move on to the next phase.
fn judge_phase(
    rollout: &Rollout,
    step: &mut Step,
    now: DateTime<Utc>,
) -> Option<(Verdict, Option<String>)> {
    let answered = step.slots.iter().all(|slot| slot.answer.is_some());
    let since = step.phase_since.unwrap_or(now);
    match step.phase {
        Phase::Preflight => {
            if !answered {
                return (now - since >= PREFLIGHT_TIMEOUT).then(|| {
                    (
                        Verdict::Failed,
                        Some("the readiness check did not answer within 15 minutes".into()),
                    )
                });
            }
            match step.slots.first().and_then(|slot| slot.answer.as_ref()) {
                Some(answer) => match verdict::preflight(answer) {
                    Judgement::Pass => None,
                    Judgement::Miss(reason) => Some((Verdict::Failed, Some(reason))),
                },
                None => Some((
                    Verdict::Failed,
                    Some("the readiness check was never asked".into()),
                )),
            }
        }
        Phase::ProbesBefore | Phase::ProbesAfter => {
            if !answered {
                return (now - since >= PROBE_ROUND_TIMEOUT).then(|| {
                    (
                        Verdict::Failed,
                        Some(format!(
                            "the page checks {} the apply did not finish within 15 minutes",
                            if step.phase == Phase::ProbesBefore {
                                "before"
                            } else {
                                "after"
                            }
                        )),
                    )
                });
            }
            let probes: Vec<Option<Probe>> = step
                .slots
                .iter()
                .map(|slot| slot.answer.as_ref().and_then(verdict::probe_answer))
                .collect();
            if step.phase == Phase::ProbesBefore {
                step.before = probes;
                return None;
            }
            step.after = probes;
            for (index, page) in rollout.pages.iter().enumerate() {
                let before = step.before.get(index).and_then(Option::as_ref);
                let after = step.after.get(index).and_then(Option::as_ref);
                if let Judgement::Miss(reason) = verdict::probe(page, before, after) {
                    return Some((Verdict::Failed, Some(reason)));
                }
            }
            Some((Verdict::Passed, None))
        }
        Phase::Apply => {
            let answer = step.slots.first().and_then(|slot| slot.answer.clone())?;
            let judgement = match rollout.kind {
                Kind::Release => (verdict::apply(&answer, &rollout.version), None),
                Kind::Patch => patch_verdict(&answer),
            };
            match judgement {
                (Judgement::Miss(reason), _) => Some((Verdict::Failed, Some(reason))),
                (Judgement::Pass, note) => {
                    if next_phase(rollout, step, Phase::Apply) == Phase::Done {
                        Some((Verdict::Passed, note))
                    } else {
                        None
                    }
                }
            }
        }
        Phase::Waiting | Phase::Done => None,
    }
}

fn stage_steps(steps: &[Step], stage: usize) -> impl Iterator<Item = &Step> {
    steps.iter().filter(move |step| step.stage == stage)
}

/// Moves a rollout on (RO-13): judges the steps under way, starts a waiting step on each
/// machine of the current stage that has none running, and moves to the next stage when the
/// current one is done within its budget and its soak has passed. Call it on every tick and
/// whenever a job of the rollout finishes; calling it again with nothing new changes nothing.
pub fn advance(
    rollout: &mut Rollout,
    steps: &mut [Step],
    facts: &Facts,
    now: DateTime<Utc>,
) -> Vec<Effect> {
    let mut effects = Vec::new();
    if matches!(
        rollout.state,
        State::Halted | State::Stopped | State::Finished
    ) {
        // Stop (RO-15): an apply already running finishes on its node; its answer is still
        // recorded on its step, and nothing further is queued.
        for step in steps.iter_mut().filter(|step| step.phase == Phase::Apply) {
            if let Some((verdict, reason)) = judge_phase(rollout, step, now) {
                finish(step, verdict, reason, &mut effects);
            } else if step.slots.iter().all(|slot| slot.answer.is_some()) {
                let reason =
                    Some("the rollout ended before the pages were checked after it".into());
                finish(step, Verdict::Skipped, reason, &mut effects);
            }
        }
        return effects;
    }

    // Judge what is under way, phase by phase, until nothing moves.
    let mut newly_failed = Vec::new();
    loop {
        let mut moved = false;
        for step in steps.iter_mut() {
            if !step.phase.in_flight() {
                continue;
            }
            let may_continue = match rollout.state {
                State::Running => true,
                // Only an apply already asked for goes on to its end (RO-14), and a paused
                // rollout asks for no apply it has not already asked for.
                State::Halting | State::Paused => step.phase.applying(),
                _ => false,
            };
            if let Some((verdict, reason)) = judge_phase(rollout, step, now) {
                if verdict == Verdict::Failed {
                    newly_failed.push(step.id);
                }
                finish(step, verdict, reason, &mut effects);
                moved = true;
                continue;
            }
            if !step.slots.iter().all(|slot| slot.answer.is_some()) {
                continue;
            }
            if !may_continue {
                // Answered, but the next phase would be a new start: it waits for resume, or
                // is skipped when the rollout halts (below).
                continue;
            }
            let next = next_phase(rollout, step, step.phase);
            if next == Phase::Done {
                continue;
            }
            enter(rollout, step, next, now, &mut effects);
            moved = true;
        }
        if !moved {
            break;
        }
    }

    // Budgets (RO-14): the first miss past its stage's budget halts the rollout.
    if matches!(rollout.state, State::Running | State::Paused) {
        let policy = rollout
            .stages
            .get(rollout.stage)
            .copied()
            .unwrap_or_default();
        let total = stage_steps(steps, rollout.stage).count();
        let failed: Vec<&Step> = stage_steps(steps, rollout.stage)
            .filter(|step| step.verdict == Verdict::Failed)
            .collect();
        if !policy.budget.allows(failed.len(), total) {
            // The miss that went past the budget: the first judged on this call (the earlier
            // ones were within it when they came), else the first of the stage.
            let first = newly_failed
                .iter()
                .filter_map(|id| failed.iter().find(|step| step.id == *id))
                .next()
                .or(failed.first())
                .expect("a failed step");
            rollout.halt = Some(Halt {
                node_id: first.node_id,
                reason: first.reason.clone().unwrap_or_else(|| "missed".into()),
            });
            rollout.state = State::Halting;
        }
    }

    if rollout.state == State::Halting {
        // Nothing new starts: what has not asked for its apply is skipped.
        let at = rollout.halt.as_ref().map(|halt| halt.node_id);
        for step in steps.iter_mut() {
            if step.phase != Phase::Done && !step.phase.applying() {
                let reason = Some(match at {
                    Some(node) => format!("not applied: the rollout halted at node {node}"),
                    None => "not applied: the rollout halted".into(),
                });
                finish(step, Verdict::Skipped, reason, &mut effects);
            }
        }
        if steps.iter().all(|step| step.phase == Phase::Done) {
            rollout.state = State::Halted;
            rollout.soak_until = None;
            if let Some(halt) = rollout.halt.clone() {
                effects.push(Effect::Halted(halt));
            }
        }
        return effects;
    }

    if rollout.state != State::Running {
        return effects;
    }

    loop {
        let stage = rollout.stage;
        // RO-12 and RO-17: start a waiting step on each machine with none under way.
        let holds = &facts.holds;
        for index in 0..steps.len() {
            if steps[index].stage != stage || steps[index].phase != Phase::Waiting {
                continue;
            }
            let machine = steps[index].machine.clone();
            let busy = steps
                .iter()
                .any(|other| other.machine == machine && other.phase.in_flight());
            if busy {
                continue;
            }
            let step = &mut steps[index];
            if let Some((_, why)) = holds.iter().find(|(node, _)| *node == step.node_id) {
                step.waiting_on = Some(why.clone());
                continue;
            }
            let next = next_phase(rollout, step, Phase::Waiting);
            enter(rollout, step, next, now, &mut effects);
        }

        let done = stage_steps(steps, stage).all(|step| step.phase == Phase::Done);
        if !done {
            return effects;
        }
        // The stage is done within its budget: soak, then the next stage.
        let policy = rollout.stages.get(stage).copied().unwrap_or_default();
        if policy.soak > Duration::zero() {
            let until = *rollout.soak_until.get_or_insert(now + policy.soak);
            let stage_nodes: Vec<i64> = stage_steps(steps, stage)
                .filter(|step| step.verdict == Verdict::Passed)
                .map(|step| step.node_id)
                .collect();
            if let Some((node, what)) = facts
                .incidents
                .iter()
                .find(|(node, _)| stage_nodes.contains(node))
            {
                let halt = Halt {
                    node_id: *node,
                    reason: format!("an incident opened on the node during the soak: {what}"),
                };
                rollout.halt = Some(halt.clone());
                rollout.state = State::Halting;
                for step in steps.iter_mut().filter(|step| step.phase != Phase::Done) {
                    let reason = Some(format!(
                        "not applied: the rollout halted at node {}",
                        halt.node_id
                    ));
                    finish(step, Verdict::Skipped, reason, &mut effects);
                }
                rollout.state = State::Halted;
                rollout.soak_until = None;
                effects.push(Effect::Halted(halt));
                return effects;
            }
            if now < until {
                return effects;
            }
        }
        rollout.soak_until = None;
        if stage + 1 >= rollout.stages.len().max(max_stage(steps) + 1) {
            rollout.state = State::Finished;
            effects.push(Effect::Finished);
            return effects;
        }
        rollout.stage = stage + 1;
        effects.push(Effect::StageStarted {
            stage: rollout.stage,
        });
    }
}

fn max_stage(steps: &[Step]) -> usize {
    steps.iter().map(|step| step.stage).max().unwrap_or(0)
}

/// Why an operator's act is refused in the rollout's state.
pub fn act(
    rollout: &mut Rollout,
    steps: &mut [Step],
    act: Act,
    now: DateTime<Utc>,
) -> Result<Vec<Effect>, String> {
    let mut effects = Vec::new();
    match act {
        Act::Stop => {
            if !rollout.state.active() {
                return Err(format!(
                    "the rollout is {}, not under way",
                    rollout.state.as_str()
                ));
            }
            rollout.state = State::Stopped;
            rollout.soak_until = None;
            for step in steps.iter_mut() {
                if step.phase != Phase::Done && step.phase != Phase::Apply {
                    finish(
                        step,
                        Verdict::Skipped,
                        Some("not applied: the rollout was stopped".into()),
                        &mut effects,
                    );
                }
            }
        }
        Act::Pause => {
            if rollout.state != State::Running {
                return Err(format!(
                    "only a running rollout can be paused; this one is {}",
                    rollout.state.as_str()
                ));
            }
            rollout.state = State::Paused;
        }
        Act::Resume => {
            if rollout.state != State::Paused {
                return Err(format!(
                    "only a paused rollout can be resumed; this one is {}",
                    rollout.state.as_str()
                ));
            }
            rollout.state = State::Running;
        }
        Act::Retry => {
            if !matches!(rollout.state, State::Halted | State::Finished) {
                return Err(format!(
                    "only a halted or finished rollout can retry its failed nodes; this one is {}",
                    rollout.state.as_str()
                ));
            }
            let mut again = false;
            for step in steps.iter_mut() {
                if matches!(step.verdict, Verdict::Failed | Verdict::Skipped) {
                    step.phase = Phase::Waiting;
                    step.verdict = Verdict::Pending;
                    step.reason = None;
                    step.phase_since = None;
                    step.slots.clear();
                    step.before.clear();
                    step.after.clear();
                    step.attempt += 1;
                    again = true;
                }
            }
            if !again {
                return Err("no node failed or was left out: there is nothing to retry".into());
            }
            rollout.stage = steps
                .iter()
                .filter(|step| step.phase == Phase::Waiting)
                .map(|step| step.stage)
                .min()
                .unwrap_or(0);
            rollout.halt = None;
            rollout.soak_until = None;
            rollout.state = State::Running;
        }
    }
    let _ = now;
    Ok(effects)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::verdict::{Outcome, Viewer};
    use chrono::TimeZone;

    fn t0() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 2, 12, 0, 0).unwrap()
    }

    fn rollout(stages: usize, pages: usize) -> Rollout {
        Rollout {
            id: 7,
            kind: Kind::Release,
            version: "2.1.0".into(),
            state: State::Running,
            stage: 0,
            stages: vec![StagePolicy::default(); stages],
            pages: (0..pages)
                .map(|i| ProbePage {
                    viewer: Viewer::Anonymous,
                    path: format!("/p{i}"),
                })
                .collect(),
            soak_until: None,
            halt: None,
        }
    }

    /// Nodes `(node, machine, stage)`, none reporting upgrade_preflight.
    fn steps(nodes: &[(i64, &str, usize)]) -> Vec<Step> {
        nodes
            .iter()
            .map(|(node, machine, stage)| Step::new(*node * 10, *node, machine, *stage, false))
            .collect()
    }

    fn requested(effects: &[Effect]) -> Vec<(i64, &'static str)> {
        effects
            .iter()
            .filter_map(|effect| match effect {
                Effect::RequestJob { node_id, word, .. } => Some((*node_id, *word)),
                _ => None,
            })
            .collect()
    }

    fn answer(step: &mut Step, outcome: Outcome, result: Value) {
        for slot in step.slots.iter_mut() {
            slot.answer = Some(Finished {
                outcome,
                result: Some(result.clone()),
                reason: None,
            });
        }
    }

    fn good_apply() -> Value {
        json!({"completed": true, "deploy_tier_passed": true, "version": "2.1.0", "rolled_back": false})
    }

    fn bad_apply() -> Value {
        json!({"completed": true, "deploy_tier_passed": false, "version": "2.1.0", "rolled_back": true})
    }

    fn step_of(steps: &mut [Step], node: i64) -> &mut Step {
        steps.iter_mut().find(|step| step.node_id == node).unwrap()
    }

    #[test]
    fn ro_12_within_a_stage_nodes_go_at_once_but_one_at_a_time_per_machine() {
        let mut r = rollout(2, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m1", 0), (3, "m2", 0), (4, "m3", 1)]);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(
            requested(&effects),
            vec![(1, APPLY_WORD), (3, APPLY_WORD)],
            "node 2 shares m1 with node 1; node 4 is in the next stage"
        );
        // Nothing new: the same tick again asks for nothing.
        assert!(advance(&mut r, &mut s, &Facts::default(), t0()).is_empty());
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
    }

    #[test]
    fn ro_12_a_stage_starts_only_when_every_node_of_the_one_before_has_passed() {
        let mut r = rollout(2, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 1)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty(), "node 2 has not passed yet");
        answer(step_of(&mut s, 2), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(3, APPLY_WORD)]);
        assert!(effects.contains(&Effect::StageStarted { stage: 1 }));
        answer(step_of(&mut s, 3), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(effects.contains(&Effect::Finished));
        assert_eq!(r.state, State::Finished);
        assert!(s.iter().all(|step| step.verdict == Verdict::Passed));
    }

    #[test]
    fn ro_14_the_first_miss_halts_in_flight_applies_are_still_judged_and_it_ends_halted_naming_the_node(
    ) {
        let mut r = rollout(2, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m1", 0), (4, "m4", 1)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, bad_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halting, "node 2's apply is still under way");
        assert!(requested(&effects).is_empty(), "nothing new starts");
        assert_eq!(step_of(&mut s, 3).verdict, Verdict::Skipped);
        assert_eq!(step_of(&mut s, 4).verdict, Verdict::Skipped);
        answer(step_of(&mut s, 2), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(step_of(&mut s, 2).verdict, Verdict::Passed, "still judged");
        assert_eq!(r.state, State::Halted);
        let halt = r.halt.clone().unwrap();
        assert_eq!(halt.node_id, 1);
        assert!(halt.reason.contains("deploy tier did not pass"), "{halt:?}");
        assert!(effects.contains(&Effect::Halted(halt)));
    }

    #[test]
    fn budget_a_stage_with_a_budget_of_one_holds_a_miss_and_carries_on_and_halts_past_it() {
        let mut r = rollout(2, 0);
        r.stages[0].budget = Budget::Nodes(1);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 0), (4, "m4", 1)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, bad_apply());
        answer(step_of(&mut s, 2), Outcome::Completed, good_apply());
        answer(step_of(&mut s, 3), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Running);
        assert_eq!(step_of(&mut s, 1).verdict, Verdict::Failed);
        assert_eq!(requested(&effects), vec![(4, APPLY_WORD)]);

        let mut r = rollout(1, 0);
        r.stages[0].budget = Budget::Nodes(1);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m3", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, bad_apply());
        answer(step_of(&mut s, 2), Outcome::Failed, Value::Null);
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(
            r.state,
            State::Halting,
            "two misses are past a budget of one"
        );
    }

    #[test]
    fn budget_percent_counts_against_the_stage_size() {
        assert!(Budget::Percent(10).allows(1, 10));
        assert!(!Budget::Percent(10).allows(2, 10));
        assert!(!Budget::Percent(10).allows(1, 9));
        assert!(Budget::NONE.allows(0, 5));
        assert!(!Budget::NONE.allows(1, 5));
    }

    #[test]
    fn ro_15_stop_ends_at_once_a_running_apply_finishes_and_nothing_further_is_queued() {
        let mut r = rollout(1, 1);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0), (3, "m1", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        // Node 1 reaches its apply; node 2 is still checking its page.
        answer(
            step_of(&mut s, 1),
            Outcome::Completed,
            json!({"status": 200, "errors": 0, "failed_assets": []}),
        );
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(step_of(&mut s, 1).phase, Phase::Apply);
        let effects = act(&mut r, &mut s, Act::Stop, t0()).unwrap();
        assert_eq!(r.state, State::Stopped);
        assert_eq!(step_of(&mut s, 2).verdict, Verdict::Skipped);
        assert_eq!(step_of(&mut s, 3).verdict, Verdict::Skipped);
        assert!(
            effects
                .iter()
                .any(|e| matches!(e, Effect::CancelJob { .. })),
            "node 2's page check is withdrawn"
        );
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty(), "no page check after a stop");
        assert_eq!(step_of(&mut s, 1).phase, Phase::Done);
        assert!(act(&mut r, &mut s, Act::Stop, t0()).is_err());
    }

    #[test]
    fn pause_starts_nothing_new_judges_applies_under_way_and_resume_goes_on() {
        let mut r = rollout(1, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m1", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        act(&mut r, &mut s, Act::Pause, t0()).unwrap();
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(step_of(&mut s, 1).verdict, Verdict::Passed);
        assert!(requested(&effects).is_empty(), "paused: node 2 waits");
        assert!(act(&mut r, &mut s, Act::Pause, t0()).is_err());
        act(&mut r, &mut s, Act::Resume, t0()).unwrap();
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
    }

    #[test]
    fn a_paused_rollout_asks_for_no_apply_it_had_not_asked_for() {
        let mut r = rollout(1, 0);
        let mut s = vec![Step::new(10, 1, "m1", 0, true)];
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, PREFLIGHT_WORD)]);
        act(&mut r, &mut s, Act::Pause, t0()).unwrap();
        answer(
            &mut s[0],
            Outcome::Completed,
            json!({"checks": [{"name": "lock", "pass": true}]}),
        );
        assert!(requested(&advance(&mut r, &mut s, &Facts::default(), t0())).is_empty());
        act(&mut r, &mut s, Act::Resume, t0()).unwrap();
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, APPLY_WORD)]);
    }

    #[test]
    fn retry_sends_failed_and_left_out_nodes_again_under_new_keys() {
        let mut r = rollout(1, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m1", 0)]);
        let first = advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, bad_apply());
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halted);
        act(&mut r, &mut s, Act::Retry, t0()).unwrap();
        assert_eq!(r.state, State::Running);
        assert_eq!(r.halt, None);
        let again = advance(&mut r, &mut s, &Facts::default(), t0());
        let key = |effects: &[Effect]| match &effects[0] {
            Effect::RequestJob { key, .. } => key.clone(),
            other => panic!("{other:?}"),
        };
        assert_ne!(
            key(&first),
            key(&again),
            "a retry is a new try with a new key"
        );
        assert!(key(&again).contains("try-1"));
        let mut r2 = rollout(1, 0);
        r2.state = State::Running;
        assert!(act(&mut r2, &mut s, Act::Retry, t0()).is_err());
    }

    #[test]
    fn ro_19_preflight_first_a_fail_halts_with_its_reason_and_no_apply_is_asked_for() {
        let mut r = rollout(1, 0);
        let mut s = vec![
            Step::new(10, 1, "m1", 0, true),
            Step::new(20, 2, "m2", 0, false),
        ];
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(
            requested(&effects),
            vec![(1, PREFLIGHT_WORD), (2, APPLY_WORD)],
            "a node without the word is applied directly"
        );
        answer(
            &mut s[0],
            Outcome::Completed,
            json!({"checks": [{"name": "lock", "pass": false, "reason": "the site lock is held"}]}),
        );
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty());
        assert_eq!(r.state, State::Halting);
        assert!(r
            .halt
            .as_ref()
            .unwrap()
            .reason
            .contains("the site lock is held"));
    }

    #[test]
    fn ro_19_a_readiness_check_unanswered_for_15_minutes_halts_and_is_withdrawn() {
        let mut r = rollout(1, 0);
        let mut s = vec![Step::new(10, 1, "m1", 0, true)];
        advance(&mut r, &mut s, &Facts::default(), t0());
        let effects = advance(
            &mut r,
            &mut s,
            &Facts::default(),
            t0() + Duration::minutes(14),
        );
        assert!(effects.is_empty());
        let effects = advance(
            &mut r,
            &mut s,
            &Facts::default(),
            t0() + Duration::minutes(15),
        );
        assert!(effects
            .iter()
            .any(|e| matches!(e, Effect::CancelJob { .. })));
        assert_eq!(r.state, State::Halted);
        assert!(r.halt.unwrap().reason.contains("15 minutes"));
    }

    #[test]
    fn ro_21_ro_22_pages_are_checked_before_and_after_and_a_page_that_got_worse_halts() {
        let mut r = rollout(1, 2);
        let mut s = steps(&[(1, "m1", 0)]);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, PROBE_WORD), (1, PROBE_WORD)]);
        let clean = json!({"status": 200, "errors": 0, "failed_assets": []});
        answer(&mut s[0], Outcome::Completed, clean.clone());
        assert_eq!(
            requested(&advance(&mut r, &mut s, &Facts::default(), t0())),
            vec![(1, APPLY_WORD)]
        );
        answer(&mut s[0], Outcome::Completed, good_apply());
        assert_eq!(
            requested(&advance(&mut r, &mut s, &Facts::default(), t0())),
            vec![(1, PROBE_WORD), (1, PROBE_WORD)],
            "after the apply passed its gate"
        );
        s[0].slots[0].answer = Some(Finished {
            outcome: Outcome::Completed,
            result: Some(clean),
            reason: None,
        });
        s[0].slots[1].answer = Some(Finished {
            outcome: Outcome::Completed,
            result: Some(json!({"status": 500, "errors": 0, "failed_assets": []})),
            reason: None,
        });
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halted);
        assert!(r.halt.unwrap().reason.contains("/p1 answered 500"));
    }

    #[test]
    fn ro_21_a_round_of_page_checks_longer_than_15_minutes_halts() {
        let mut r = rollout(1, 1);
        let mut s = steps(&[(1, "m1", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        advance(
            &mut r,
            &mut s,
            &Facts::default(),
            t0() + Duration::minutes(16),
        );
        assert_eq!(r.state, State::Halted);
        assert!(r
            .halt
            .unwrap()
            .reason
            .contains("before the apply did not finish"));
    }

    #[test]
    fn ro_17_a_node_whose_site_copy_holds_it_waits_saying_why() {
        let mut r = rollout(1, 0);
        let mut s = steps(&[(1, "m1", 0)]);
        let facts = Facts {
            holds: vec![(1, "its site copy is switching over".into())],
            ..Facts::default()
        };
        assert!(advance(&mut r, &mut s, &facts, t0()).is_empty());
        assert_eq!(
            s[0].waiting_on.as_deref(),
            Some("its site copy is switching over")
        );
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, APPLY_WORD)]);
        assert_eq!(s[0].waiting_on, None);
    }

    #[test]
    fn soak_the_next_stage_waits_for_the_soak_and_an_incident_during_it_halts() {
        let mut r = rollout(2, 0);
        r.stages[0].soak = Duration::minutes(10);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty(), "soaking");
        assert_eq!(r.soak_until, Some(t0() + Duration::minutes(10)));
        let effects = advance(
            &mut r,
            &mut s,
            &Facts::default(),
            t0() + Duration::minutes(10),
        );
        assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);

        let mut r = rollout(2, 0);
        r.stages[0].soak = Duration::minutes(10);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        advance(&mut r, &mut s, &Facts::default(), t0());
        let facts = Facts {
            incidents: vec![(1, "plane:site_down".into())],
            ..Facts::default()
        };
        let effects = advance(&mut r, &mut s, &facts, t0() + Duration::minutes(3));
        assert_eq!(r.state, State::Halted);
        assert!(requested(&effects).is_empty());
        assert_eq!(step_of(&mut s, 2).verdict, Verdict::Skipped);
        assert!(r.halt.unwrap().reason.contains("plane:site_down"));
    }

    #[test]
    fn durable_a_decision_repeated_from_the_stored_rows_asks_under_the_same_keys() {
        // A crash after the decision but before its commit: the service decides again from
        // the rows it had, and the keys are the same, so the agent channel takes it once.
        let r0 = rollout(1, 0);
        let s0 = steps(&[(1, "m1", 0)]);
        let (mut r1, mut s1) = (r0.clone(), s0.clone());
        let (mut r2, mut s2) = (r0, s0);
        assert_eq!(
            advance(&mut r1, &mut s1, &Facts::default(), t0()),
            advance(&mut r2, &mut s2, &Facts::default(), t0())
        );
    }

    #[test]
    fn durable_an_apply_whose_job_was_lost_is_a_miss_and_never_asked_again() {
        let mut r = rollout(1, 0);
        let mut s = steps(&[(1, "m1", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(&mut s[0], Outcome::Lost, Value::Null);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty());
        assert_eq!(s[0].verdict, Verdict::Failed);
        assert!(s[0].reason.as_deref().unwrap().contains("lost"));
    }

    #[test]
    fn ro_25_ro_29_a_patch_run_installs_per_machine_and_an_updater_failure_stops_it_naming_the_node(
    ) {
        let mut r = rollout(2, 0);
        r.kind = Kind::Patch;
        r.version = String::new();
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 1)]);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, PATCH_WORD)]);
        answer(&mut s[0], Outcome::Completed, json!({"outcome": "busy"}));
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(s[0].verdict, Verdict::Passed);
        assert_eq!(
            s[0].reason.as_deref(),
            Some("another package run was in the way")
        );
        assert_eq!(requested(&effects), vec![(2, PATCH_WORD)]);
        answer(
            &mut s[1],
            Outcome::Completed,
            json!({"outcome": "failed", "detail": "dpkg was interrupted"}),
        );
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halted);
        let halt = r.halt.unwrap();
        assert_eq!(halt.node_id, 2);
        assert!(halt.reason.contains("dpkg was interrupted"));
    }

    #[test]
    fn ro_29_nothing_to_install_is_recorded_and_passes() {
        let finished = Finished {
            outcome: Outcome::Completed,
            result: Some(json!({"outcome": "nothing_to_install"})),
            reason: None,
        };
        assert_eq!(
            patch_verdict(&finished),
            (Judgement::Pass, Some("nothing to install".into()))
        );
    }

    /// RO-29 on the agent's own answers (`words::patching` in capstan-agent): each outcome is
    /// read as the spec words it.
    #[test]
    fn ro_29_the_agents_answers_are_judged_as_the_spec_words_them() {
        let completed = |result: Value| Finished {
            outcome: Outcome::Completed,
            result: Some(result),
            reason: None,
        };
        assert_eq!(
            patch_verdict(&completed(json!({"outcome": "installed",
                "installed": ["libssl3", "openssl"], "held_back": 0,
                "sources": ["deb http://deb.debian.org/debian-security bookworm-security main"]}))),
            (
                Judgement::Pass,
                Some("installed 2 packages: libssl3, openssl".into())
            )
        );
        assert_eq!(
            patch_verdict(&completed(json!({"outcome": "nothing_to_install",
                "installed": [], "held_back": 2}))),
            (
                Judgement::Pass,
                Some("nothing to install (2 held back: they need packages from outside the security origin)".into())
            )
        );
        assert_eq!(
            patch_verdict(&completed(json!({"outcome": "busy",
                "lock": "/var/lib/dpkg/lock-frontend", "held_back": 0}))),
            (
                Judgement::Pass,
                Some(
                    "another package run was in the way (it holds /var/lib/dpkg/lock-frontend)"
                        .into()
                )
            )
        );
        // An updater failure: the job ends failed, with the agent's reason and apt's detail.
        let failed = Finished {
            outcome: Outcome::Failed,
            result: Some(json!({"outcome": "failed",
                "detail": "apt-get update: The repository 'file:/x bookworm-security Release' does not exist."})),
            reason: Some("the updater failed: apt-get update: The repository 'file:/x bookworm-security Release' does not exist.".into()),
        };
        let (judgement, note) = patch_verdict(&failed);
        assert_eq!(note, None);
        let Judgement::Miss(reason) = judgement else {
            panic!("an updater failure stops the run")
        };
        assert!(
            reason
                .starts_with("install_security_updates failed: the updater failed: apt-get update"),
            "{reason}"
        );
        // The same without a reason still says what apt said.
        let quiet = Finished {
            reason: None,
            ..failed
        };
        let Judgement::Miss(reason) = patch_verdict(&quiet).0 else {
            panic!()
        };
        assert!(reason.contains("does not exist"), "{reason}");
        assert!(!patch_verdict(&completed(json!({"installed": []})))
            .0
            .passed());
    }

    #[test]
    fn ro_10_a_steps_verdict_is_one_of_five_and_reads_back_as_stored() {
        let all = [
            Verdict::Pending,
            Verdict::Running,
            Verdict::Passed,
            Verdict::Failed,
            Verdict::Skipped,
        ];
        let words: Vec<&str> = all.iter().map(|verdict| verdict.as_str()).collect();
        assert_eq!(words, ["pending", "running", "passed", "failed", "skipped"]);
        for verdict in all {
            assert_eq!(Verdict::parse(verdict.as_str()), Some(verdict));
        }
        assert_eq!(Verdict::parse("halted"), None);
        // A new step is pending, with its node, stage and machine.
        let step = Step::new(5, 50, "node-50", 2, true);
        assert_eq!(
            (
                step.verdict,
                step.node_id,
                step.stage,
                step.machine.as_str()
            ),
            (Verdict::Pending, 50, 2, "node-50")
        );
    }

    #[test]
    fn ro_13_each_advance_judges_running_steps_starts_a_waiting_one_per_free_machine_and_moves_the_stage_on(
    ) {
        let mut r = rollout(2, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m1", 0), (3, "m2", 0), (4, "m3", 1)]);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, APPLY_WORD), (3, APPLY_WORD)]);
        assert_eq!(step_of(&mut s, 1).verdict, Verdict::Running);
        // One advance judges both answers and starts node 2 on the machine node 1 freed.
        answer(step_of(&mut s, 1), Outcome::Completed, good_apply());
        answer(step_of(&mut s, 3), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(step_of(&mut s, 1).verdict, Verdict::Passed);
        assert_eq!(step_of(&mut s, 3).verdict, Verdict::Passed);
        assert_eq!(requested(&effects), vec![(2, APPLY_WORD)]);
        assert_eq!(r.stage, 0);
        // When every step of the stage has passed, the same advance starts the next stage.
        answer(step_of(&mut s, 2), Outcome::Completed, good_apply());
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.stage, 1);
        assert_eq!(requested(&effects), vec![(4, APPLY_WORD)]);
        answer(step_of(&mut s, 4), Outcome::Completed, good_apply());
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Finished);
    }

    #[test]
    fn ro_29_stop_takes_effect_between_nodes_of_a_patch_run() {
        let mut r = rollout(3, 0);
        r.kind = Kind::Patch;
        r.version = String::new();
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 1), (3, "m3", 2)]);
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(requested(&effects), vec![(1, PATCH_WORD)]);
        // Stopped while machine 1 installs: its run goes on and is recorded; no other starts.
        act(&mut r, &mut s, Act::Stop, t0()).unwrap();
        assert_eq!(r.state, State::Stopped);
        answer(
            step_of(&mut s, 1),
            Outcome::Completed,
            json!({"outcome": "installed", "installed": ["libssl3"]}),
        );
        let effects = advance(&mut r, &mut s, &Facts::default(), t0());
        assert!(requested(&effects).is_empty(), "nothing after the stop");
        assert_eq!(step_of(&mut s, 1).verdict, Verdict::Passed);
        assert_eq!(
            step_of(&mut s, 1).reason.as_deref(),
            Some("installed 1 packages: libssl3")
        );
        assert_eq!(step_of(&mut s, 2).verdict, Verdict::Skipped);
        assert_eq!(step_of(&mut s, 3).verdict, Verdict::Skipped);
    }

    #[test]
    fn ro_16_a_running_paused_or_halting_rollout_holds_the_one_turn_and_an_ended_one_does_not() {
        for state in [State::Running, State::Paused, State::Halting] {
            assert!(state.active(), "{}", state.as_str());
        }
        for state in [State::Halted, State::Stopped, State::Finished] {
            assert!(!state.active(), "{}", state.as_str());
        }
        // A halt with applies under way still holds the turn until they are judged.
        let mut r = rollout(1, 0);
        let mut s = steps(&[(1, "m1", 0), (2, "m2", 0)]);
        advance(&mut r, &mut s, &Facts::default(), t0());
        answer(step_of(&mut s, 1), Outcome::Completed, bad_apply());
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halting);
        assert!(r.state.active());
        answer(step_of(&mut s, 2), Outcome::Completed, good_apply());
        advance(&mut r, &mut s, &Facts::default(), t0());
        assert_eq!(r.state, State::Halted);
        assert!(!r.state.active());
    }
}
