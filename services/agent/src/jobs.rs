//! One job, from the claim answer to the result (PROTOCOL.md "claim", "result", "job_status"):
//! judged against the vocabulary and policy, held for the node's approval when the policy
//! says `ask`, run within its time budget, redacted, capped, and reported.

use capstan_signing::NodeKey;
use chrono::Utc;
use serde_json::{json, Value};
use std::time::{Duration, Instant};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::{
    config::Config,
    domain::{
        backoff,
        output::cap,
        redact,
        vocabulary::{judge, run_budget, ClaimedJob, NodeView, Verdict, Word},
        APPROVAL_CHECK_EVERY, MAX_ANSWER_BYTES, MAX_OUTPUT_BYTES, WATCH_EVERY,
    },
    plane::{Plane, PlaneError},
    state::{self, StateDir},
    words::{self, Redaction},
};

/// The largest structured result sent (the result body may be 4 MiB in all; the output takes
/// up to 1 MiB of it).
const MAX_RESULT_BYTES: usize = 2 * 1024 * 1024;
/// The longest reason sent (the plane takes 4096 bytes).
const MAX_REASON_BYTES: usize = 4000;

/// What the node says about a job.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub job_id: i64,
    /// `completed`, `failed` or `refused`: `lost` is only ever the plane's word.
    pub outcome: &'static str,
    pub output: String,
    pub result: Value,
    pub reason: Option<String>,
}

impl Report {
    fn refused(job_id: i64, reason: impl AsRef<str>) -> Report {
        Report {
            job_id,
            outcome: "refused",
            output: String::new(),
            result: Value::Null,
            reason: Some(cap(&redact::text(reason.as_ref()), MAX_REASON_BYTES)),
        }
    }

    fn ran(
        job_id: i64,
        outcome: &'static str,
        output: &str,
        mut result: Value,
        reason: Option<&str>,
        redaction: Redaction,
    ) -> Report {
        let output = match redaction {
            Redaction::Text | Redaction::TextExcept(_) => redact::text(output),
            Redaction::Config => redact::config(output),
        };
        match redaction {
            Redaction::Text => redact::value(&mut result),
            Redaction::Config => redact::value_with(&mut result, redact::config),
            Redaction::TextExcept(kept) => {
                let held: Vec<(String, Value)> = kept
                    .iter()
                    .filter_map(|name| {
                        let value = result.as_object_mut()?.remove(*name)?;
                        Some((name.to_string(), value))
                    })
                    .collect();
                redact::value(&mut result);
                if let Some(fields) = result.as_object_mut() {
                    fields.extend(held);
                }
            }
        }
        if result.to_string().len() > MAX_RESULT_BYTES {
            result = json!({"truncated": true,
                            "why": format!("the result was larger than {MAX_RESULT_BYTES} bytes; the output holds what fits")});
        }
        Report {
            job_id,
            outcome,
            output: cap(&output, MAX_OUTPUT_BYTES),
            result,
            reason: reason.map(|reason| cap(&redact::text(reason), MAX_REASON_BYTES)),
        }
    }

    fn failed(job_id: i64, reason: impl AsRef<str>) -> Report {
        Report::ran(
            job_id,
            "failed",
            "",
            Value::Null,
            Some(reason.as_ref()),
            Redaction::Text,
        )
    }

    pub fn body(&self) -> Value {
        json!({
            "job_id": self.job_id,
            "outcome": self.outcome,
            "output": self.output,
            "result": if self.result.is_object() { self.result.clone() } else { Value::Null },
            "reason": self.reason,
        })
    }
}

/// What a job needs from the running agent.
pub struct JobContext<'a> {
    pub state: &'a StateDir,
    pub config: &'a Config,
    pub plane: &'a Plane,
    pub key: &'a NodeKey,
    pub shutdown: watch::Receiver<bool>,
}

/// How a wait for the node's approval ended.
#[derive(Debug, PartialEq)]
enum Approval {
    Approved,
    Denied,
    /// The plane cancelled it (AG-23: ends as a refusal).
    Withdrawn,
    /// The plane no longer holds it as running (lost, or past its budget): nothing to report.
    GaveUp(String),
    Stopped,
}

/// Writes the job marker: the pid, then the job (AG-18).
pub fn write_marker(state: &StateDir, job: &ClaimedJob) -> Result<(), state::StateError> {
    let primitive: String = job
        .primitive
        .chars()
        .take(64)
        .filter(|c| !c.is_control())
        .collect();
    state.write(
        state::JOB_MARKER,
        format!("{}\njob {} {primitive}\n", std::process::id(), job.id).as_bytes(),
        0o600,
    )
}

/// Judges and runs the job the plane handed out; `None` when there is nothing to report.
pub async fn handle(context: &JobContext<'_>, raw: &Value) -> Option<Report> {
    let claimed_at = Instant::now();
    let job = match ClaimedJob::read(raw) {
        Ok(job) => job,
        Err((Some(id), why)) => return Some(Report::refused(id, why)),
        Err((None, why)) => {
            warn!(%why, "the plane handed out a job without an id; it cannot be answered");
            return None;
        }
    };
    if let Err(error) = write_marker(context.state, &job) {
        return Some(Report::failed(
            job.id,
            format!("the agent cannot write its job marker, so it does not run the job: {error}"),
        ));
    }
    let policy = context.state.policy();
    let (log_access, _) = context.state.log_access();
    let node = NodeView {
        policy: &policy,
        log_access,
        has_site: context.config.site_root.is_some() || context.state.has_marker(state::SITE),
    };
    let word = match judge(&job, &node) {
        Verdict::Refuse(reason) => {
            info!(job_id = job.id, primitive = %job.primitive, %reason, "job refused");
            return Some(Report::refused(job.id, reason));
        }
        Verdict::Run(word) => word,
        Verdict::Ask(word) => match approved(context, &job, word).await {
            Ok(()) => word,
            Err(report) => return report,
        },
    };
    let budget = run_budget(word, job.budget, claimed_at.elapsed());
    if budget.is_zero() {
        return Some(Report::failed(
            job.id,
            "no time was left in the job's budget to run it",
        ));
    }
    info!(
        job_id = job.id,
        primitive = word.name(),
        budget_s = budget.as_secs(),
        "job running"
    );
    let mut shutdown = context.shutdown.clone();
    let ran = tokio::select! {
        ran = tokio::time::timeout(budget, run_word(context, word, &job)) => ran,
        _ = shutdown.wait_for(|stop| *stop) => {
            return Some(Report::failed(
                job.id,
                "the agent was stopped while the job ran; what it did may be partial",
            ));
        }
    };
    let report = match ran {
        Err(_) => Report::failed(
            job.id,
            format!(
                "{} ran past its time budget of {} seconds and was stopped",
                word.name(),
                budget.as_secs()
            ),
        ),
        Ok(ran) => report_of(job.id, ran),
    };
    info!(job_id = job.id, outcome = report.outcome, "job ended");
    Some(report)
}

/// The report of a word that ran to its end: completed, failed or refused.
fn report_of(job_id: i64, ran: Result<words::Finished, words::Failed>) -> Report {
    match ran {
        Ok(finished) => Report::ran(
            job_id,
            "completed",
            &finished.output,
            finished.result,
            None,
            finished.redaction,
        ),
        Err(failed) => Report::ran(
            job_id,
            if failed.refused { "refused" } else { "failed" },
            &failed.output,
            failed.result,
            Some(failed.reason.as_str()),
            Redaction::Text,
        ),
    }
}

/// A word the policy asks about (AG-02), held until a person on the node decides: `Ok` when
/// approved; otherwise what to report (a refusal, or nothing when the wait was given up).
async fn approved(
    context: &JobContext<'_>,
    job: &ClaimedJob,
    word: &Word,
) -> Result<(), Option<Report>> {
    let approval = await_approval(context, job, word).await;
    // The wait is logged as ended before `status` stops showing it, so whoever watches
    // the node sees why it ended once the line is gone.
    let forget = || {
        let _ = context.state.remove(&state::awaiting(job.id));
        let _ = context.state.remove(&state::decision(job.id));
    };
    let refusal = match approval {
        Approval::Approved => None,
        Approval::Denied => Some("denied on the node by its operator"),
        Approval::Withdrawn => {
            Some("withdrawn on the management node while it waited for approval on the node")
        }
        Approval::Stopped => {
            Some("the agent was stopped while the job waited for approval on the node")
        }
        Approval::GaveUp(why) => {
            info!(job_id = job.id, %why, "stopped waiting for approval");
            forget();
            return Err(None);
        }
    };
    if let Some(reason) = refusal {
        info!(job_id = job.id, primitive = %job.primitive, reason, "job refused");
        forget();
        return Err(Some(Report::refused(job.id, reason)));
    }
    forget();
    Ok(())
}

/// Runs a word: the backup words with the job's broker, state and key; the rest as words.
async fn run_word(
    context: &JobContext<'_>,
    word: &Word,
    job: &ClaimedJob,
) -> Result<words::Finished, words::Failed> {
    if crate::backups::is_backup_word(word.name()) {
        let backups = crate::backups::Backups {
            state: context.state,
            node_key: context.key,
            broker: crate::backups::transfer::PlaneBroker {
                plane: context.plane,
                key: context.key,
                job_id: job.id,
            },
            objects: crate::plane::Objects::new(),
        };
        return crate::backups::run(&backups, word.name(), &job.params).await;
    }
    if crate::site_release::is_site_release_word(word.name()) {
        let site = crate::site_release::SiteWords {
            state: context.state,
            plane: context.plane,
            key: context.key,
        };
        return crate::site_release::run(&site, word.name(), &job.params).await;
    }
    words::run(word, &job.params, context.config).await
}

/// Holds the job until a person runs `capstan-agent approve|deny JOB`, asking the plane every
/// 30 seconds whether it still wants it (AG-23).
async fn await_approval(context: &JobContext<'_>, job: &ClaimedJob, word: &Word) -> Approval {
    let state = context.state;
    // A decision written before the job arrived is not a decision about it.
    let _ = state.remove(&state::decision(job.id));
    let waiting = json!({
        "job_id": job.id, "primitive": word.name(), "class": job.class, "params": job.params,
        "since": Utc::now().to_rfc3339(),
    });
    if let Err(error) = state.write_json(&state::awaiting(job.id), &waiting, 0o600) {
        warn!(%error, "cannot record the job waiting for approval");
    }
    info!(
        job_id = job.id,
        primitive = word.name(),
        "job waits for approval on the node (capstan-agent approve|deny {})",
        job.id
    );
    let started = Instant::now();
    let give_up_after = job.budget.unwrap_or(word.primitive.claim_budget);
    let mut last_check = Instant::now();
    let mut shutdown = context.shutdown.clone();
    loop {
        tokio::select! {
            () = tokio::time::sleep(WATCH_EVERY) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Approval::Stopped,
        }
        match state.read_deciding(&state::decision(job.id)) {
            Ok(Some(bytes)) => match String::from_utf8_lossy(&bytes).trim() {
                "approve" => return Approval::Approved,
                "deny" => return Approval::Denied,
                other => warn!(
                    job_id = job.id,
                    decision = other,
                    "an unreadable decision is ignored"
                ),
            },
            Ok(None) => {}
            Err(error) => {
                warn!(job_id = job.id, %error, "a decision file that is not trusted is ignored")
            }
        }
        if last_check.elapsed() >= APPROVAL_CHECK_EVERY {
            last_check = Instant::now();
            match context
                .plane
                .send(
                    context.key,
                    "job_status",
                    "",
                    &json!({"job_id": job.id}),
                    MAX_ANSWER_BYTES,
                    Duration::ZERO,
                )
                .await
            {
                Ok(answer) => match answer["state"].as_str() {
                    Some("withdrawn") => return Approval::Withdrawn,
                    Some("running") | None => {}
                    Some(other) => {
                        return Approval::GaveUp(format!(
                            "the management node says the job is {other}"
                        ))
                    }
                },
                Err(PlaneError::Refused { status: 404, .. }) => {
                    return Approval::GaveUp("the management node no longer has the job".into())
                }
                Err(error) => warn!(job_id = job.id, %error, "job_status could not be asked"),
            }
        }
        if started.elapsed() >= give_up_after {
            return Approval::GaveUp(
                "its claim budget ran out while it waited; the management node has given up on it"
                    .into(),
            );
        }
    }
}

/// Why a result could not be delivered.
#[derive(Debug, PartialEq, Eq)]
pub enum Undelivered {
    /// The plane no longer knows this key.
    UnknownKey,
    /// The agent is stopping; the marker stays so the next start says it is idle.
    Stopped,
}

/// Posts the report until the plane acknowledges it or refuses it for good, backing off while
/// it cannot be reached. A result for a job the plane has already ended (`409 not_running`)
/// is dropped: the plane decided how that job ended.
pub async fn post(context: &JobContext<'_>, report: &Report) -> Result<(), Undelivered> {
    let body = report.body();
    let mut failures = 0u32;
    let mut shutdown = context.shutdown.clone();
    loop {
        let wait = match context
            .plane
            .send(
                context.key,
                "result",
                "",
                &body,
                MAX_ANSWER_BYTES,
                Duration::ZERO,
            )
            .await
        {
            Ok(_) => return Ok(()),
            Err(PlaneError::Refused {
                status: 401, code, ..
            }) if code == "unknown_key" => return Err(Undelivered::UnknownKey),
            Err(PlaneError::Refused {
                status,
                code,
                message,
            }) => {
                warn!(job_id = report.job_id, status, %code, %message, "the result was refused and is dropped");
                return Ok(());
            }
            Err(PlaneError::RateLimited { wait, .. }) => wait,
            Err(error) => {
                failures += 1;
                warn!(job_id = report.job_id, %error, "the result could not be delivered; trying again");
                backoff::delay(failures, rand::random::<f64>())
            }
        };
        tokio::select! {
            () = tokio::time::sleep(wait) => {}
            _ = shutdown.wait_for(|stop| *stop) => return Err(Undelivered::Stopped),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_is_redacted_and_capped_before_it_leaves() {
        let output = format!(
            "login from 203.0.113.7\n{}",
            "x".repeat(2 * MAX_OUTPUT_BYTES)
        );
        let report = Report::ran(
            3,
            "completed",
            &output,
            json!({"user": "alice@example.com", "password": "hunter2"}),
            None,
            Redaction::Text,
        );
        assert!(report.output.starts_with("login from [ip]\n"));
        assert!(report.output.len() <= MAX_OUTPUT_BYTES);
        assert!(report.output.contains("[output truncated by the agent"));
        assert_eq!(
            report.result,
            json!({"user": "[user]@example.com", "password": "[redacted]"})
        );
    }

    #[test]
    fn configuration_output_keeps_addresses_and_drops_credential_values() {
        let report = Report::ran(
            4,
            "completed",
            "listen 203.0.113.7\nDB_PASSWORD=x\n",
            json!({"lines": ["listen 203.0.113.7", "DB_PASSWORD=x"]}),
            None,
            Redaction::Config,
        );
        assert_eq!(report.output, "listen 203.0.113.7\nDB_PASSWORD\n");
        assert_eq!(
            report.result,
            json!({"lines": ["listen 203.0.113.7", "DB_PASSWORD"]})
        );
    }

    #[test]
    fn a_refusal_carries_its_reason_and_no_result() {
        let report = Report::refused(9, "this node's policy refuses change words");
        assert_eq!(
            report.body(),
            json!({"job_id": 9, "outcome": "refused", "output": "", "result": null,
                   "reason": "this node's policy refuses change words"})
        );
    }
}
