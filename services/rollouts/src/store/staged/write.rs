//! What the engine decided, written: the changed rows, the job requests and the events.

use super::*;
use capstan_events::NodeId;

pub(super) async fn save(
    connection: &mut PgConnection,
    before: &Rollout,
    rollout: &Rollout,
    old: &[Step],
    steps: &[Step],
    now: DateTime<Utc>,
) -> Result<()> {
    if before != rollout {
        let ended = matches!(
            rollout.state,
            State::Halted | State::Stopped | State::Finished
        );
        sqlx::query(
            "UPDATE rollouts SET state = $2, stage = $3, soak_until = $4, halt_node_id = $5,
                    halt_reason = $6,
                    finished_at = CASE WHEN $7 THEN COALESCE(finished_at, $8) ELSE NULL END
             WHERE id = $1",
        )
        .bind(rollout.id)
        .bind(rollout.state.as_str())
        .bind(rollout.stage as i32)
        .bind(rollout.soak_until)
        .bind(rollout.halt.as_ref().map(|halt| halt.node_id))
        .bind(rollout.halt.as_ref().map(|halt| halt.reason.as_str()))
        .bind(ended)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    for (was, step) in old.iter().zip(steps) {
        if was == step {
            continue;
        }
        let slots: Vec<&str> = step.slots.iter().map(|slot| slot.key.as_str()).collect();
        let before: Vec<Option<Value>> = step.before.iter().map(probe_value).collect();
        let after: Vec<Option<Value>> = step.after.iter().map(probe_value).collect();
        sqlx::query(
            "UPDATE rollout_steps SET phase = $2, verdict = $3, reason = $4, phase_since = $5,
                    attempt = $6, slots = $7, probes_before = $8, probes_after = $9,
                    waiting_on = $10, updated_at = $11
             WHERE id = $1",
        )
        .bind(step.id)
        .bind(step.phase.as_str())
        .bind(step.verdict.as_str())
        .bind(&step.reason)
        .bind(step.phase_since)
        .bind(step.attempt as i32)
        .bind(&slots)
        .bind(Json(&before))
        .bind(Json(&after))
        .bind(&step.waiting_on)
        .bind(now)
        .execute(&mut *connection)
        .await?;
    }
    Ok(())
}

/// A job an effect asks for.
struct Job {
    step_id: i64,
    node_id: NodeId,
    key: String,
    word: &'static str,
    params: Value,
}

/// Records a job asked for under its key and sends the request, once: a key already recorded
/// (a decision repeated after a crash) sends nothing again.
async fn request_job(
    connection: &mut PgConnection,
    rollout: &Rollout,
    job: Job,
    now: DateTime<Utc>,
) -> Result<()> {
    let correlation = Uuid::now_v7();
    let inserted = sqlx::query(
        "INSERT INTO rollout_jobs (key, rollout_id, step_id, node_id, word, correlation_id, requested_at)
         VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT (key) DO NOTHING",
    )
    .bind(&job.key)
    .bind(rollout.id)
    .bind(job.step_id)
    .bind(job.node_id)
    .bind(job.word)
    .bind(correlation)
    .bind(now)
    .execute(&mut *connection)
    .await?
    .rows_affected();
    if inserted == 0 {
        return Ok(());
    }
    let request = RequestJob {
        idempotency_key: job.key,
        node_id: job.node_id,
        primitive: job.word.to_string(),
        params: job.params,
        requested_by: REQUESTED_BY.to_string(),
    };
    outbox::push_command_from(
        connection,
        crate::DOMAIN,
        Envelope::new(request, Some(format!("rollout/{}", rollout.id)))
            .correlated(Some(correlation)),
    )
    .await
}

/// Writes what the engine decided: each job request with its row (a key already asked for is
/// never asked again), each withdrawal, each event.
pub(super) async fn write_effects(
    connection: &mut PgConnection,
    rollout: &Rollout,
    steps: &[Step],
    effects: Vec<Effect>,
    now: DateTime<Utc>,
) -> Result<()> {
    let subject = Some(format!("rollout/{}", rollout.id));
    for effect in effects {
        match effect {
            Effect::RequestJob {
                step_id,
                node_id,
                key,
                word,
                params,
            } => {
                let job = Job {
                    step_id,
                    node_id,
                    key,
                    word,
                    params,
                };
                request_job(connection, rollout, job, now).await?;
            }
            Effect::CancelJob { key } => {
                let cancel = CancelJob {
                    idempotency_key: key,
                    requested_by: REQUESTED_BY.to_string(),
                };
                outbox::push_command_from(
                    connection,
                    crate::DOMAIN,
                    Envelope::new(cancel, subject.clone()),
                )
                .await?;
            }
            Effect::StepFinished {
                step_id,
                node_id,
                verdict,
                reason,
            } => {
                let stage = steps
                    .iter()
                    .find(|step| step.id == step_id)
                    .map(|step| step.stage)
                    .unwrap_or(0);
                let event = RolloutStepFinished {
                    rollout_id: rollout.id,
                    step_id,
                    node_id,
                    stage: stage as u32,
                    verdict,
                    reason,
                };
                outbox::push(connection, Envelope::new(event, subject.clone())).await?;
            }
            Effect::StageStarted { .. } => {}
            Effect::Halted(halt) => {
                let event = RolloutHalted {
                    rollout_id: rollout.id,
                    node_id: halt.node_id,
                    reason: halt.reason,
                };
                outbox::push(connection, Envelope::new(event, subject.clone())).await?;
            }
            Effect::Finished => {
                outbox::push(
                    connection,
                    Envelope::new(finished_event(rollout, steps), subject.clone()),
                )
                .await?;
            }
        }
    }
    Ok(())
}

pub(super) fn finished_event(rollout: &Rollout, steps: &[Step]) -> RolloutFinished {
    let count =
        |verdict: Verdict| steps.iter().filter(|step| step.verdict == verdict).count() as u32;
    RolloutFinished {
        rollout_id: rollout.id,
        state: rollout.state,
        passed: count(Verdict::Passed),
        failed: count(Verdict::Failed),
        skipped: count(Verdict::Skipped),
    }
}
