//! [`advance`]: the engine's one move on a tick or a finished job (RO-12..RO-14, RO-17, soak).

use chrono::{DateTime, Duration, Utc};

use super::phases::{enter, finish, judge_phase, next_phase};
use super::{Effect, Facts, Halt, Phase, Rollout, State, Step, Verdict};

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
