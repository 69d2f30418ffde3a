//! [`advance`]: the engine's one move on a tick or a finished job (RO-12..RO-14, RO-17, soak).

use capstan_events::NodeId;
use chrono::{DateTime, Duration, Utc};

use super::phases::{enter, finish, judge_phase, next_phase};
use super::{Effect, Facts, Halt, Phase, Rollout, State, Step, Verdict};

/// Started and not done: the step holds its machine's turn.
fn in_flight(phase: Phase) -> bool {
    !matches!(phase, Phase::Waiting | Phase::Done)
}

/// The apply has been asked for: the step is judged to its end whatever happens.
fn applying(phase: Phase) -> bool {
    matches!(phase, Phase::Apply | Phase::ProbesAfter)
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
        judge_after_the_end(rollout, steps, now, &mut effects);
        return effects;
    }
    let newly_failed = judge_under_way(rollout, steps, now, &mut effects);
    if matches!(rollout.state, State::Running | State::Paused) {
        spend_budget(rollout, steps, &newly_failed);
    }
    if rollout.state == State::Halting {
        wind_down(rollout, steps, &mut effects);
        return effects;
    }
    if rollout.state == State::Running {
        move_stages(rollout, steps, facts, now, &mut effects);
    }
    effects
}

/// Stop (RO-15): an apply already running finishes on its node; its answer is still recorded
/// on its step, and nothing further is queued.
fn judge_after_the_end(
    rollout: &Rollout,
    steps: &mut [Step],
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) {
    for step in steps.iter_mut().filter(|step| step.phase == Phase::Apply) {
        if let Some((verdict, reason)) = judge_phase(rollout, step, now) {
            finish(step, verdict, reason, effects);
        } else if step.slots.iter().all(|slot| slot.answer.is_some()) {
            let reason = Some("the rollout ended before the pages were checked after it".into());
            finish(step, Verdict::Skipped, reason, effects);
        }
    }
}

/// Judges what is under way, phase by phase, until nothing moves; returns the steps that
/// failed on this call, in the order they were judged.
fn judge_under_way(
    rollout: &Rollout,
    steps: &mut [Step],
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) -> Vec<i64> {
    let mut newly_failed = Vec::new();
    loop {
        let mut moved = false;
        for step in steps.iter_mut() {
            if !in_flight(step.phase) {
                continue;
            }
            let may_continue = match rollout.state {
                State::Running => true,
                // Only an apply already asked for goes on to its end (RO-14), and a paused
                // rollout asks for no apply it has not already asked for.
                State::Halting | State::Paused => applying(step.phase),
                _ => false,
            };
            if let Some((verdict, reason)) = judge_phase(rollout, step, now) {
                if verdict == Verdict::Failed {
                    newly_failed.push(step.id);
                }
                finish(step, verdict, reason, effects);
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
            enter(rollout, step, next, now, effects);
            moved = true;
        }
        if !moved {
            return newly_failed;
        }
    }
}

/// Budgets (RO-14): the first miss past its stage's budget halts the rollout.
fn spend_budget(rollout: &mut Rollout, steps: &[Step], newly_failed: &[i64]) {
    let policy = rollout
        .stages
        .get(rollout.stage)
        .copied()
        .unwrap_or_default();
    let total = stage_steps(steps, rollout.stage).count();
    let failed: Vec<&Step> = stage_steps(steps, rollout.stage)
        .filter(|step| step.verdict == Verdict::Failed)
        .collect();
    if policy.budget.allows(failed.len(), total) {
        return;
    }
    // The miss that went past the budget: the first judged on this call (the earlier ones
    // were within it when they came), else the first of the stage. Past a budget at least
    // one step failed, so there is always one to name.
    let first = newly_failed
        .iter()
        .filter_map(|id| failed.iter().find(|step| step.id == *id))
        .next()
        .or(failed.first());
    if let Some(first) = first {
        rollout.halt = Some(Halt {
            node_id: first.node_id,
            reason: first.reason.clone().unwrap_or_else(|| "missed".into()),
        });
        rollout.state = State::Halting;
    }
}

/// A halting rollout starts nothing new: what has not asked for its apply is skipped, and
/// once every step is done the rollout is halted.
fn wind_down(rollout: &mut Rollout, steps: &mut [Step], effects: &mut Vec<Effect>) {
    let at = rollout.halt.as_ref().map(|halt| halt.node_id);
    for step in steps.iter_mut() {
        if step.phase != Phase::Done && !applying(step.phase) {
            let reason = Some(match at {
                Some(node) => format!("not applied: the rollout halted at node {node}"),
                None => "not applied: the rollout halted".into(),
            });
            finish(step, Verdict::Skipped, reason, effects);
        }
    }
    if steps.iter().all(|step| step.phase == Phase::Done) {
        rollout.state = State::Halted;
        rollout.soak_until = None;
        if let Some(halt) = rollout.halt.clone() {
            effects.push(Effect::Halted(halt));
        }
    }
}

/// Starts what may start in the current stage and, once it is done and soaked, moves to the
/// next one (or finishes the rollout).
fn move_stages(
    rollout: &mut Rollout,
    steps: &mut [Step],
    facts: &Facts,
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) {
    loop {
        let stage = rollout.stage;
        start_free_machines(rollout, steps, &facts.holds, now, effects);
        if !stage_steps(steps, stage).all(|step| step.phase == Phase::Done) {
            return;
        }
        // The stage is done within its budget: soak, then the next stage.
        if !soaked(rollout, steps, facts, now, effects) {
            return;
        }
        rollout.soak_until = None;
        if stage + 1 >= rollout.stages.len().max(max_stage(steps) + 1) {
            rollout.state = State::Finished;
            effects.push(Effect::Finished);
            return;
        }
        rollout.stage = stage + 1;
        effects.push(Effect::StageStarted {
            stage: rollout.stage,
        });
    }
}

/// RO-12 and RO-17: start a waiting step of the current stage on each machine with none under
/// way, unless its site copy holds it.
fn start_free_machines(
    rollout: &Rollout,
    steps: &mut [Step],
    holds: &[(NodeId, String)],
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) {
    for index in 0..steps.len() {
        if steps[index].stage != rollout.stage || steps[index].phase != Phase::Waiting {
            continue;
        }
        let machine = steps[index].machine.clone();
        let busy = steps
            .iter()
            .any(|other| other.machine == machine && in_flight(other.phase));
        if busy {
            continue;
        }
        let step = &mut steps[index];
        if let Some((_, why)) = holds.iter().find(|(node, _)| *node == step.node_id) {
            step.waiting_on = Some(why.clone());
            continue;
        }
        let next = next_phase(rollout, step, Phase::Waiting);
        enter(rollout, step, next, now, effects);
    }
}

/// Beyond the spec: whether the done stage's soak has passed. An incident opened on one of its
/// passed nodes meanwhile halts the rollout at once (and the soak never passes).
fn soaked(
    rollout: &mut Rollout,
    steps: &mut [Step],
    facts: &Facts,
    now: DateTime<Utc>,
    effects: &mut Vec<Effect>,
) -> bool {
    let policy = rollout
        .stages
        .get(rollout.stage)
        .copied()
        .unwrap_or_default();
    if policy.soak <= Duration::zero() {
        return true;
    }
    let until = *rollout.soak_until.get_or_insert(now + policy.soak);
    let stage_nodes: Vec<NodeId> = stage_steps(steps, rollout.stage)
        .filter(|step| step.verdict == Verdict::Passed)
        .map(|step| step.node_id)
        .collect();
    let Some((node, what)) = facts
        .incidents
        .iter()
        .find(|(node, _)| stage_nodes.contains(node))
    else {
        return now >= until;
    };
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
        finish(step, Verdict::Skipped, reason, effects);
    }
    rollout.state = State::Halted;
    rollout.soak_until = None;
    effects.push(Effect::Halted(halt));
    false
}

fn max_stage(steps: &[Step]) -> usize {
    steps.iter().map(|step| step.stage).max().unwrap_or(0)
}
