//! [`act`]: an operator's stop, pause, resume or retry (RO-15 and beyond the spec).

use capstan_events::Word as _;
use chrono::{DateTime, Utc};

use super::phases::finish;
use super::{Act, Effect, Phase, Rollout, State, Step, Verdict};

/// Why an operator's act is refused in the rollout's state, worded for the operator.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refused(pub String);

/// Applies an operator's act to the rollout and its steps, or says why it is refused in the
/// rollout's state.
pub fn act(
    rollout: &mut Rollout,
    steps: &mut [Step],
    act: Act,
    _now: DateTime<Utc>,
) -> Result<Vec<Effect>, Refused> {
    let mut effects = Vec::new();
    let state = rollout.state.as_str();
    match act {
        Act::Stop if !rollout.state.active() => {
            return Err(Refused(format!("the rollout is {state}, not under way")));
        }
        Act::Stop => stop(rollout, steps, &mut effects),
        Act::Pause if rollout.state != State::Running => {
            return Err(Refused(format!(
                "only a running rollout can be paused; this one is {state}"
            )));
        }
        Act::Pause => rollout.state = State::Paused,
        Act::Resume if rollout.state != State::Paused => {
            return Err(Refused(format!(
                "only a paused rollout can be resumed; this one is {state}"
            )));
        }
        Act::Resume => rollout.state = State::Running,
        Act::Retry if !matches!(rollout.state, State::Halted | State::Finished) => {
            return Err(Refused(format!(
                "only a halted or finished rollout can retry its failed nodes; this one is {state}"
            )));
        }
        Act::Retry => retry(rollout, steps)?,
    }
    Ok(effects)
}

/// RO-15: the rollout ends at once; an apply already asked for finishes on its node, and
/// every other step not done is skipped.
fn stop(rollout: &mut Rollout, steps: &mut [Step], effects: &mut Vec<Effect>) {
    rollout.state = State::Stopped;
    rollout.soak_until = None;
    for step in steps.iter_mut() {
        if step.phase != Phase::Done && step.phase != Phase::Apply {
            finish(
                step,
                Verdict::Skipped,
                Some("not applied: the rollout was stopped".into()),
                effects,
            );
        }
    }
}

/// Beyond the spec: failed and left-out nodes go again under a new try (so new job keys),
/// from the earliest stage that has one.
fn retry(rollout: &mut Rollout, steps: &mut [Step]) -> Result<(), Refused> {
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
        return Err(Refused(
            "no node failed or was left out: there is nothing to retry".into(),
        ));
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
    Ok(())
}
