//! [`act`]: an operator's stop, pause, resume or retry (RO-15 and beyond the spec).

use chrono::{DateTime, Utc};

use super::phases::finish;
use super::{Act, Effect, Phase, Rollout, State, Step, Verdict};

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
