//! What this service hears from the agent channel, each message applied once through the
//! inbox: the node facts its schedule reads (`node_approved`, `node_reported`,
//! `placement_changed`, `node_left`, `node_disconnected`), and the jobs it asked for —
//! `job_queued` gives a request its job id, `job_finished` ends it (freeing the machine's turn)
//! and records what it came to: a run's trusted manifest, a verify's result. Each end's event
//! (`run_finished`, `verified`) commits with it.

use capstan_bus::{ConsumerSpec, Delivery, HandlerError};
use capstan_events::agent_channel::{JobFinished, JobOutcome, JobQueued};
use capstan_events::backups::{RunFinished, Verified};
use capstan_events::{Domain, Envelope};
use capstan_runtime::{read_as, retry, Apply, NodeEvent};
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::Utc;
use futures::future::BoxFuture;
use serde_json::Value;
use std::time::Duration;

use crate::domain::manifest;
use crate::store::schedule::{self as store, JobRow, VerifyEnd};
use capstan_events::Word as _;

/// The durable consumers of this service (from `Domain::reach`).
pub fn specs(max_deliver: u32, ack_wait: Duration) -> Vec<ConsumerSpec> {
    capstan_runtime::event_consumer_specs(Domain::Backups, max_deliver, ack_wait)
}

/// The agent channel's events this service applies.
pub(crate) struct Events;

/// The events this service reads (joins, claims and check-ins are not this service's).
pub(crate) enum Heard {
    JobFinished(Envelope<JobFinished>),
    JobQueued(Envelope<JobQueued>),
    /// The node projection's events (the kit's `nodes` table).
    Node(NodeEvent),
}

impl Apply for Events {
    type Message = Heard;

    fn read(&self, delivery: &Delivery) -> Option<Result<Heard, HandlerError>> {
        read_as(delivery, Heard::JobFinished)
            .or_else(|| read_as(delivery, Heard::JobQueued))
            .or_else(|| NodeEvent::read(delivery, Heard::Node))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        heard: Heard,
        _delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            match heard {
                Heard::JobFinished(decoded) => {
                    let at = decoded.time;
                    job_finished(connection, decoded.data, at)
                        .await
                        .map_err(retry)
                }
                Heard::JobQueued(event) => {
                    let queued = event.data;
                    match queued.correlation_id {
                        Some(correlation) => {
                            store::job_queued(connection, correlation, queued.job_id)
                                .await
                                .map_err(retry)
                        }
                        None => Ok(()),
                    }
                }
                Heard::Node(event) => event.apply(connection).await.map_err(retry),
            }
        })
    }
}

/// A job of the agent channel ended: a `check_status` tells the node's recovery key; one of
/// ours (by its correlation id) is recorded with its event.
async fn job_finished(
    connection: &mut PgConnection,
    finished: JobFinished,
    at: chrono::DateTime<Utc>,
) -> Result<(), StoreError> {
    if finished.primitive == capstan_events::agent_channel::primitives::CHECK_STATUS {
        return recovery_key(connection, &finished, at).await;
    }
    let Some(correlation) = finished.correlation_id else {
        return Ok(());
    };
    let now = Utc::now();
    let Some(job) = store::job_finished(
        connection,
        correlation,
        finished.job_id,
        finished.outcome.as_str(),
        finished.reason.as_deref(),
        now,
    )
    .await?
    else {
        return Ok(());
    };
    job_ended(connection, &job, &finished).await
}

fn problems_of(result: Option<&Value>) -> Vec<String> {
    result
        .and_then(|result| result.get("problems"))
        .and_then(Value::as_array)
        .map(|problems| {
            problems
                .iter()
                .filter_map(|problem| problem.as_str().map(str::to_string))
                .take(50)
                .collect()
        })
        .unwrap_or_default()
}

/// BK-22: a node's check_status says which recovery key it holds (`recovery_key.state`:
/// `already | none | invalid`, with its fingerprint). Read, never written by the plane; a
/// check_status without the field (an older agent, a failed job) changes nothing.
async fn recovery_key(
    connection: &mut PgConnection,
    finished: &JobFinished,
    at: chrono::DateTime<Utc>,
) -> Result<(), StoreError> {
    let Some(report) = finished
        .result
        .as_ref()
        .and_then(|result| result.get("recovery_key"))
    else {
        return Ok(());
    };
    let Some(state) = report
        .get("state")
        .and_then(|state| state.as_str())
        .filter(|state| matches!(*state, "already" | "none" | "invalid"))
    else {
        return Ok(());
    };
    let fingerprint = report.get("fingerprint").and_then(|value| value.as_str());
    crate::store::health::recovery_key_reported(
        connection,
        finished.node_id,
        state,
        fingerprint,
        at,
    )
    .await
}

/// Records what a job of ours came to, with its event.
async fn job_ended(
    connection: &mut PgConnection,
    job: &JobRow,
    finished: &JobFinished,
) -> Result<(), StoreError> {
    match job.primitive.as_str() {
        "backup_run" => backup_ended(connection, job, finished).await,
        "verify_backup" => verify_ended(connection, job, finished).await,
        // A restore's outcome is the agent channel's job record; its end frees the turn.
        _ => Ok(()),
    }
}

/// A `backup_run` ended: a completed run lands only when its manifest is trusted and the
/// broker opened it for this job; otherwise it is recorded as not landed, with why.
async fn backup_ended(
    connection: &mut PgConnection,
    job: &JobRow,
    finished: &JobFinished,
) -> Result<(), StoreError> {
    let now = Utc::now();
    let seq = job.seq.unwrap_or_default();
    let mut event = RunFinished {
        node_id: job.node_id,
        job_id: finished.job_id,
        seq,
        kind: None,
        ok: false,
        started_at: None,
        finished_at: now,
        bytes: None,
        reason: finished.reason.clone(),
        requested_by: job.requested_by.clone(),
    };
    if finished.outcome == JobOutcome::Completed {
        let fingerprint = store::node(connection, job.node_id)
            .await?
            .map(|node| node.fingerprint)
            .unwrap_or_default();
        let trusted = finished
            .result
            .as_ref()
            .ok_or_else(|| manifest::NotTrusted::from("the node reported no result"))
            .and_then(|result| manifest::trust(result, seq, &fingerprint));
        match trusted {
            Ok(run) => {
                if store::run_landed(connection, job.node_id, finished.job_id, &run, now).await? {
                    event.ok = true;
                    event.kind = Some(run.kind);
                    event.started_at = Some(run.started_at);
                    event.finished_at = run.finished_at;
                    event.bytes = Some(run.bytes);
                } else {
                    event.reason = Some(format!(
                        "the plane's broker opened no run {seq} for this job"
                    ));
                }
            }
            Err(why) => event.reason = Some(format!("not trusted: {why}")),
        }
        if !event.ok {
            record_reason(connection, job, event.reason.as_deref()).await?;
        }
    }
    let subject = Some(format!("node/{}", job.node_id));
    outbox::push(connection, Envelope::new(event, subject)).await
}

/// A `verify_backup` ended (BK-12): passed only when completed and the agent says ok; a failed
/// one without problems of its own says how it ended.
async fn verify_ended(
    connection: &mut PgConnection,
    job: &JobRow,
    finished: &JobFinished,
) -> Result<(), StoreError> {
    let now = Utc::now();
    let level = job
        .params
        .0
        .get("level")
        .and_then(Value::as_u64)
        .and_then(|level| u8::try_from(level).ok())
        .unwrap_or(2);
    let result = finished.result.as_ref();
    let ok = finished.outcome == JobOutcome::Completed
        && result
            .and_then(|result| result.get("ok"))
            .and_then(Value::as_bool)
            == Some(true);
    let mut problems = problems_of(result);
    if problems.is_empty() && !ok {
        problems.push(
            finished
                .reason
                .clone()
                .unwrap_or_else(|| format!("the verify ended {}", finished.outcome.as_str())),
        );
    }
    let checked = result.and_then(|result| result.get("checked"));
    let end = VerifyEnd {
        job_id: finished.job_id,
        node_id: job.node_id,
        seq: job.seq.unwrap_or_default(),
        level,
        ok,
        finished_at: now,
        checked,
        problems: &problems,
        requested_by: &job.requested_by,
    };
    store::verify_finished(connection, &end).await?;
    let event = Verified {
        node_id: job.node_id,
        job_id: finished.job_id,
        seq: end.seq,
        level,
        ok,
        finished_at: now,
        problems,
        requested_by: job.requested_by.clone(),
    };
    let subject = Some(format!("node/{}", job.node_id));
    outbox::push(connection, Envelope::new(event, subject)).await
}

/// A completed run the plane does not believe is recorded as not landed, with why.
async fn record_reason(
    connection: &mut PgConnection,
    job: &JobRow,
    reason: Option<&str>,
) -> Result<(), StoreError> {
    sqlx::query("UPDATE jobs SET reason = $2 WHERE idempotency_key = $1")
        .bind(&job.idempotency_key)
        .bind(reason)
        .execute(connection)
        .await?;
    Ok(())
}

#[cfg(test)]
mod install_states;
