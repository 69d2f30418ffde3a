//! A step's phases (RO-10, RO-19, RO-21): entering one asks for its jobs, judging one reads
//! their answers, finishing a step withdraws what it no longer waits for.

use chrono::{DateTime, Utc};
use serde_json::{json, Value};

use super::patch::patch_verdict;
use super::{
    job_key, Effect, Kind, Phase, Rollout, Slot, Step, Verdict, APPLY_WORD, PATCH_WORD,
    PREFLIGHT_TIMEOUT, PREFLIGHT_WORD, PROBE_ROUND_TIMEOUT, PROBE_WORD,
};
use crate::domain::verdict::{self, Judgement, Probe};

pub(super) fn enter(
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

pub(super) fn finish(
    step: &mut Step,
    verdict: Verdict,
    reason: Option<String>,
    effects: &mut Vec<Effect>,
) {
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
pub(super) fn next_phase(rollout: &Rollout, step: &Step, phase: Phase) -> Phase {
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

/// Judges a step whose current phase has all its answers (or has run out of time); returns
/// the verdict to end it with, or `None` to move on to the next phase.
pub(super) fn judge_phase(
    rollout: &Rollout,
    step: &mut Step,
    now: DateTime<Utc>,
) -> Option<(Verdict, Option<String>)> {
    let answered = step.slots.iter().all(|slot| slot.answer.is_some());
    let waited = now - step.phase_since.unwrap_or(now);
    match step.phase {
        Phase::Preflight if !answered => (waited >= PREFLIGHT_TIMEOUT).then(|| {
            (
                Verdict::Failed,
                Some("the readiness check did not answer within 15 minutes".into()),
            )
        }),
        Phase::Preflight => judge_preflight(step),
        Phase::ProbesBefore | Phase::ProbesAfter if !answered => (waited >= PROBE_ROUND_TIMEOUT)
            .then(|| {
                let when = if step.phase == Phase::ProbesBefore {
                    "before"
                } else {
                    "after"
                };
                (
                    Verdict::Failed,
                    Some(format!(
                        "the page checks {when} the apply did not finish within 15 minutes"
                    )),
                )
            }),
        Phase::ProbesBefore | Phase::ProbesAfter => judge_probes(rollout, step),
        Phase::Apply => judge_apply(rollout, step),
        Phase::Waiting | Phase::Done => None,
    }
}

/// RO-19: an answered readiness check passes on to the next phase or fails with its reason.
fn judge_preflight(step: &Step) -> Option<(Verdict, Option<String>)> {
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

/// RO-21, RO-22: the pages' answers before the apply are kept; after it, a page that got
/// worse fails the step.
fn judge_probes(rollout: &Rollout, step: &mut Step) -> Option<(Verdict, Option<String>)> {
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

/// The apply's answer (a release's `apply_update`, a patch run's RO-29): a miss fails the
/// step; a pass ends it unless pages are checked after it.
fn judge_apply(rollout: &Rollout, step: &Step) -> Option<(Verdict, Option<String>)> {
    let answer = step.slots.first().and_then(|slot| slot.answer.clone())?;
    let judgement = match rollout.kind {
        Kind::Release => (verdict::apply(&answer, &rollout.version), None),
        Kind::Patch => patch_verdict(&answer),
    };
    match judgement {
        (Judgement::Miss(reason), _) => Some((Verdict::Failed, Some(reason))),
        (Judgement::Pass, note) => (next_phase(rollout, step, Phase::Apply) == Phase::Done)
            .then_some((Verdict::Passed, note)),
    }
}
