//! Claims and results: a node reports in, takes at most one job, and later says how it ended
//! (PROTOCOL.md "claim", "result"; spec AC-16..AC-18, AC-25..AC-31).

use bytes::Bytes;
use capstan_events::agent_channel::{
    primitives,
    rpc::{AgentRequest, JobState},
    wait, JobOutcome, NodeReported,
};
use capstan_events::NodeId;
use capstan_store::{outbox, PgConnection};
use chrono::{DateTime, Utc};
use serde::Deserialize;
use serde_json::{json, Value};
use std::time::Duration;

use super::State;
use crate::{
    actions::{self, emit},
    domain::{
        auth::AgentError,
        claims::{self, lane, Asking, Claim, Glimpse, Needs, NodeFacts},
        conditions,
        jobs::{self, lost},
    },
    store::{self, Glance, NodeRow},
};
use capstan_events::Word as _;

type Answer = Result<(u16, Value), AgentError>;

/// Largest `output` a result may carry.
pub const MAX_OUTPUT_BYTES: usize = 1024 * 1024;

/// The claim's `wait=` by the contract's one rule (`agent_channel::wait`): refused, never
/// clamped, outside 0..=30.
fn wait_of(query: Option<&str>) -> Result<u64, AgentError> {
    wait::wait_of(query).map_err(|bad| AgentError::InvalidRequest(bad.to_string()))
}

/// Whether a claim will be taken as far as its own words go (its `wait` and body read), so its
/// first statement may stamp the node's heartbeat: a refused claim changes nothing.
pub fn will_be_taken(request: &AgentRequest, body: &[u8]) -> bool {
    wait_of(request.query.as_deref()).is_ok() && claims::parse_claim(body).is_ok()
}

/// A claim: `glance` is the request's first read of the node's jobs, taken when the wake-ups
/// had rung `generation` times. The claim owns its request, its body and its glance, and lets
/// each go as soon as it has read it: a long poll sleeps holding the node's id, its bell and
/// the fields it will name in its answer, not the request's bytes (which pin the buffer they
/// arrived in) nor the claim's reported facts.
///
/// The wait counts from `arrived`, when the request reached this service, not from when the
/// claim got its slot: a claim that queued behind a burst of others (a restart storm) is
/// answered by its arrival plus its wait, inside the gateway's margin, instead of its wait
/// after the queue (which the gateway would have given up on and answered `503`).
pub async fn claim(
    state: &State,
    request: AgentRequest,
    glance: Glance,
    generation: u64,
    body: Bytes,
    arrived: tokio::time::Instant,
) -> Answer {
    let node_id = glance.node.id;
    let wait = wait_of(request.query.as_deref())?;
    let until = arrived + Duration::from_secs(wait);
    let claim = claims::parse_claim(&body)?;
    drop(body);
    let (gateway, poll) = (request.gateway, request.poll);
    drop(request);
    let bell = state.wake.bell(node_id);
    let rung = bell.notified();
    tokio::pin!(rung);
    rung.as_mut().enable();
    // A job queued since the first read rang before this bell was armed: read again.
    let known = (!state.wake.rung_since(generation)).then_some(&glance);
    state.wake.settle(node_id, generation, glance.has_pending);
    let handed = report_and_dispatch(state, node_id, Some(&claim), known, false).await?;
    if let Some(job) = deliverable(state, poll, handed).await? {
        return Ok(answer(Some(job), &claim.ignored_fields));
    }
    drop(glance);
    // What the answer names; the rest of what the claim reported is let go here.
    let ignored_fields = ignored_fields_of(claim);
    if wait == 0 {
        return Ok(answer(None, &ignored_fields));
    }
    // Long poll: sleep until a job is queued for this node or the wait runs out, then look once
    // more. No transaction or connection is held meanwhile. When the gateway holding the
    // request stops, it has already answered the agent itself: a job handed out now would reach
    // nobody and end lost, so the claim ends with none.
    // Its own agent hanging up ends it the same way, and so does its gateway giving up on the
    // answer (the gateway releases its poll): a claim nobody waits for is no waiter.
    let released = state.wake.released_for(gateway, poll);
    let gateway_stopped = released.cancelled();
    let open = OpenLongPoll::new();
    let woken = tokio::select! {
        woken = tokio::time::timeout_at(until, rung) => woken.is_ok(),
        _ = state.stopping.cancelled() => false,
        _ = gateway_stopped => return Ok(answer(None, &ignored_fields)),
    };
    // Counted while it sleeps, not while it waits for a slot to look once more.
    drop(open);
    let handed = report_and_dispatch(state, node_id, None, None, woken).await?;
    let job = deliverable(state, poll, handed).await?;
    Ok(answer(job, &ignored_fields))
}

/// The job a claim handed out, if its answer may still reach the agent. When the claim's poll
/// was released meanwhile (its gateway gave up waiting for this answer and answered the agent
/// itself, or the agent hung up), the job provably never reaches the node: it goes back to
/// `pending` and the claim answers none. Otherwise the hand-out is remembered for a release
/// that comes after it ([`crate::wake::Wake::handed_out`]).
async fn deliverable(
    state: &State,
    poll: Option<uuid::Uuid>,
    handed: Option<Value>,
) -> Result<Option<Value>, AgentError> {
    let (Some(poll), Some(job)) = (poll, handed.as_ref()) else {
        return Ok(handed);
    };
    let Some(job_id) = job["id"].as_i64() else {
        return Ok(handed);
    };
    if !state.wake.handed_out(poll, job_id) {
        return Ok(handed);
    }
    super::edge::give_back(state, job_id, "its claim was released before the answer")
        .await
        .map_err(AgentError::unavailable)?;
    Ok(None)
}

/// The fields a claim's answer names, the rest of the claim dropped here and now.
fn ignored_fields_of(claim: Claim) -> Vec<String> {
    claim.ignored_fields
}

/// Counts a claim in `capstan_agent_long_polls` while it sleeps: what this replica holds open
/// waiting for a job (not a claim waiting for a slot, nor one already released).
struct OpenLongPoll;

impl OpenLongPoll {
    fn new() -> OpenLongPoll {
        metrics::gauge!("capstan_agent_long_polls").increment(1.0);
        OpenLongPoll
    }
}

impl Drop for OpenLongPoll {
    fn drop(&mut self) {
        metrics::gauge!("capstan_agent_long_polls").decrement(1.0);
    }
}

fn answer(job: Option<Value>, ignored_fields: &[String]) -> (u16, Value) {
    (200, json!({"job": job, "ignored_fields": ignored_fields}))
}

/// What a claim needs ([`claims::needs`]): nothing, its heartbeat alone, or the locked work.
/// One read and no lock, so a quiet fleet costs the database little. `known` is the glance the
/// request's first read already took, if any; a read taken here also tells the wake-ups
/// whether work still waits for the node.
async fn needs(
    state: &State,
    node_id: NodeId,
    claim: Option<&Claim>,
    known: Option<&Glance>,
) -> Result<Needs, AgentError> {
    if let Some(glance) = known {
        return Ok(needs_of(glance, claim));
    }
    let generation = state.wake.generation();
    let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
    let fetched = store::glance(&mut connection, node_id)
        .await
        .map_err(AgentError::unavailable)?;
    drop(connection);
    match &fetched {
        Some(glance) => {
            state.wake.settle(node_id, generation, glance.has_pending);
            Ok(needs_of(glance, claim))
        }
        None => Ok(Needs::Work),
    }
}

fn needs_of(glance: &Glance, claim: Option<&Claim>) -> Needs {
    claims::needs(
        &Glimpse {
            paired: glance.node.fingerprint.is_some(),
            facts: glance.node.node_facts(),
            last_seen_at: glance.node.last_seen_at,
            has_pending: glance.has_pending,
            has_running: glance.has_running,
            has_stale: glance.has_stale,
        },
        claim,
        Utc::now(),
    )
}

/// Takes an agent slot, then does [`report_and_dispatch_in_slot`]. That work is boxed: its
/// future is kilobytes, and neither a claim waiting for a slot nor one sleeping in a long poll
/// should hold that much. A claim whose first read says it needs nothing takes no slot at all;
/// one that moves a job along (a job waits for its node, or its long poll was `woken` for
/// one) takes the work lane, ahead of plain renewals.
async fn report_and_dispatch(
    state: &State,
    node_id: NodeId,
    claim: Option<&Claim>,
    known: Option<&Glance>,
    woken: bool,
) -> Result<Option<Value>, AgentError> {
    if known.is_some_and(|glance| needs_of(glance, claim) == Needs::Nothing) {
        return Ok(None);
    }
    let asking = if woken {
        Asking::Woken
    } else {
        Asking::Claim {
            work_waiting: known
                .map_or_else(|| state.wake.has_work(node_id), |glance| glance.has_pending),
        }
    };
    let _slot = state
        .agent_slot_for(Some(node_id), lane(true, asking))
        .await?;
    Box::pin(report_and_dispatch_in_slot(state, node_id, claim, known)).await
}

/// In one transaction on the locked node: takes the claim's facts (writing only what changed),
/// loses what an idle claim or an exhausted budget says is lost, and hands out the oldest
/// pending job when none is running.
async fn report_and_dispatch_in_slot(
    state: &State,
    node_id: NodeId,
    claim: Option<&Claim>,
    known: Option<&Glance>,
) -> Result<Option<Value>, AgentError> {
    let now = Utc::now();
    let generation = state.wake.generation();
    match needs(state, node_id, claim, known).await? {
        Needs::Nothing => return Ok(None),
        Needs::Heartbeat => {
            let mut connection = state.connection().await.map_err(AgentError::unavailable)?;
            store::heartbeat(&mut connection, node_id, now)
                .await
                .map_err(AgentError::unavailable)?;
            return Ok(None);
        }
        Needs::Work => {}
    }
    let mut transaction = state.store.begin().await.map_err(AgentError::unavailable)?;
    let connection: &mut PgConnection = &mut transaction;
    let node = store::lock_node(connection, node_id)
        .await
        .map_err(AgentError::unavailable)?
        .filter(|node| node.fingerprint.is_some())
        .ok_or_else(AgentError::unknown_key)?;
    let facts = match claim {
        Some(claim) => take_claim(connection, &node, claim, now).await?,
        None => node.node_facts(),
    };
    // AC-29: on every poll, running jobs past their budget are lost.
    let stale = store::lose_stale(connection, Some(node.id), lost::BUDGET)
        .await
        .map_err(AgentError::unavailable)?;
    actions::announce_all_finished(connection, &stale)
        .await
        .map_err(AgentError::unavailable)?;
    // AC-25: one running job per node; a job is handed out once.
    let handing = if store::has_running(connection, node.id)
        .await
        .map_err(AgentError::unavailable)?
    {
        None
    } else {
        Some(hand_out(connection, node.id, &facts, now).await?)
    };
    transaction
        .commit()
        .await
        .map_err(AgentError::unavailable)?;
    // This transaction saw no job left pending for the node.
    let none_pending = matches!(handing, Some(None));
    let handed_out = handing.flatten();
    if handed_out.is_some() {
        metrics::counter!("capstan_agent_jobs_claimed_total").increment(1);
    }
    if none_pending {
        state.wake.settle(node_id, generation, false);
    }
    Ok(handed_out)
}

/// Takes a claim's facts on the locked node, writing (and announcing) only what changed, and
/// answers the node's facts after it. AC-28: an idle agent runs nothing, so whatever the
/// plane holds as running was lost.
async fn take_claim(
    connection: &mut PgConnection,
    node: &NodeRow,
    claim: &Claim,
    now: DateTime<Utc>,
) -> Result<NodeFacts, AgentError> {
    let mut facts = node.node_facts();
    match claims::apply(&facts, claim, now) {
        Some(next) => {
            store::save_facts(connection, node.id, &next, now)
                .await
                .map_err(AgentError::unavailable)?;
            let reported = NodeReported {
                node_id: node.id,
                agent_version: next.agent_version.clone().unwrap_or_default(),
                vocabulary: next.vocabulary.clone(),
                facts: Value::Object(next.facts.clone()),
                site_root: next.site_root.clone(),
            };
            emit(connection, reported, format!("node/{}", node.id))
                .await
                .map_err(AgentError::unavailable)?;
            for condition in conditions::changed(node.id, &facts.facts, &next.facts, now) {
                outbox::push_condition(connection, condition)
                    .await
                    .map_err(AgentError::unavailable)?;
            }
            actions::claim_placed(connection, node, &next.facts)
                .await
                .map_err(AgentError::unavailable)?;
            facts = next;
        }
        None => {
            if claims::heartbeat_due(node.last_seen_at, now) {
                store::heartbeat(connection, node.id, now)
                    .await
                    .map_err(AgentError::unavailable)?;
            }
        }
    }
    if claim.idle {
        let lost = store::lose_running(connection, node.id, lost::IDLE)
            .await
            .map_err(AgentError::unavailable)?;
        actions::announce_all_finished(connection, &lost)
            .await
            .map_err(AgentError::unavailable)?;
    }
    Ok(facts)
}

/// Hands out the oldest pending job the plane can still send and the node can take (a job
/// of a primitive the plane no longer knows, or too large for the node's claim, is refused
/// by the plane and the next one tried); `None` when no job is left pending.
async fn hand_out(
    connection: &mut PgConnection,
    node_id: NodeId,
    facts: &NodeFacts,
    now: DateTime<Utc>,
) -> Result<Option<Value>, AgentError> {
    while let Some(job) = store::next_pending(connection, node_id)
        .await
        .map_err(AgentError::unavailable)?
    {
        let Some(primitive) = primitives::find(&job.primitive) else {
            refuse_by_plane(
                connection,
                job.id,
                "the plane no longer knows this primitive",
            )
            .await?;
            continue;
        };
        let payload = jobs::claim_payload(job.id, primitive, &job.params.0, job.budget_s);
        if !jobs::fits(&payload, facts.claim_limit()) {
            let reason = jobs::too_large_reason(payload.to_string().len(), facts.claim_limit());
            refuse_by_plane(connection, job.id, &reason).await?;
            continue;
        }
        store::start_job(connection, job.id, now)
            .await
            .map_err(AgentError::unavailable)?;
        actions::announce_claimed(connection, &job)
            .await
            .map_err(AgentError::unavailable)?;
        return Ok(Some(payload));
    }
    Ok(None)
}

/// Ends a job the plane cannot hand out as `refused`, with the plane's reason, and announces it.
async fn refuse_by_plane(
    connection: &mut PgConnection,
    job_id: i64,
    reason: &str,
) -> Result<(), AgentError> {
    let ended = store::finish_job(
        connection,
        job_id,
        JobOutcome::Refused,
        Some(reason),
        None,
        None,
        None,
    )
    .await
    .map_err(AgentError::unavailable)?;
    actions::announce_all_finished(connection, ended.as_slice())
        .await
        .map_err(AgentError::unavailable)
}

#[derive(Deserialize)]
struct ResultBody {
    job_id: i64,
    outcome: String,
    #[serde(default)]
    output: Option<String>,
    #[serde(default)]
    result: Option<Value>,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn result(state: &State, node: &NodeRow, body: &[u8]) -> Answer {
    let _slot = state.agent_slot().await?;
    let reported: ResultBody = serde_json::from_slice(body).map_err(|error| {
        AgentError::InvalidRequest(format!("the result body is not valid: {error}"))
    })?;
    let outcome =
        match JobOutcome::parse(&reported.outcome) {
            Some(outcome @ (JobOutcome::Completed | JobOutcome::Failed | JobOutcome::Refused)) => {
                outcome
            }
            _ => return Err(AgentError::InvalidRequest(
                "outcome must be completed, failed or refused (lost is only ever the plane's word)"
                    .into(),
            )),
        };
    let output = reported.output.unwrap_or_default();
    if output.len() > MAX_OUTPUT_BYTES {
        return Err(AgentError::InvalidRequest(format!(
            "output must be at most {MAX_OUTPUT_BYTES} bytes"
        )));
    }
    if reported
        .result
        .as_ref()
        .is_some_and(|result| !result.is_object() && !result.is_null())
    {
        return Err(AgentError::InvalidRequest(
            "result must be a JSON object or null".into(),
        ));
    }
    if reported
        .reason
        .as_ref()
        .is_some_and(|reason| reason.len() > 4096)
    {
        return Err(AgentError::InvalidRequest(
            "reason must be at most 4096 bytes".into(),
        ));
    }
    let mut transaction = state.store.begin().await.map_err(AgentError::unavailable)?;
    let job = store::job_by_id(&mut transaction, reported.job_id)
        .await
        .map_err(AgentError::unavailable)?
        .filter(|job| job.node_id == node.id)
        .ok_or(AgentError::NotRunning(reported.job_id))?;
    if job.state != JobState::Running {
        // Repeating the same result is acknowledged again and changes nothing.
        return if job.state == JobState::from(outcome) {
            Ok((200, json!({"ack": true})))
        } else {
            Err(AgentError::NotRunning(job.id))
        };
    }
    let reason = match outcome {
        JobOutcome::Refused => Some(jobs::refused_by_node(reported.reason.as_deref())),
        _ => reported.reason,
    };
    let ended = store::finish_job(
        &mut transaction,
        job.id,
        outcome,
        reason.as_deref(),
        Some(&output),
        reported.result.as_ref().filter(|result| !result.is_null()),
        None,
    )
    .await
    .map_err(AgentError::unavailable)?;
    actions::announce_all_finished(&mut transaction, ended.as_slice())
        .await
        .map_err(AgentError::unavailable)?;
    transaction
        .commit()
        .await
        .map_err(AgentError::unavailable)?;
    Ok((200, json!({"ack": true})))
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::time::Instant;

    #[test]
    fn wait_is_read_from_the_query_and_bounded() {
        assert_eq!(wait_of(None).unwrap(), 0);
        assert_eq!(wait_of(Some("wait=20")).unwrap(), 20);
        assert_eq!(wait_of(Some("x=1&wait=30")).unwrap(), 30);
        assert!(wait_of(Some("wait=31")).is_err());
        assert!(wait_of(Some("wait=soon")).is_err());
    }

    /// The claim `CLAIM` arriving now, with the wake-ups' `generation` at its first read.
    async fn claim_now(
        state: &State,
        request: AgentRequest,
        glance: Glance,
        generation: u64,
    ) -> (u16, Value) {
        claim(
            state,
            request,
            glance,
            generation,
            Bytes::from_static(CLAIM),
            Instant::now(),
        )
        .await
        .unwrap()
    }

    /// A paired node's claim state on a database of the test's own: the node, its first read
    /// taken while nothing waits, and then a job queued (as it would be between that read and
    /// the claim arming its bell).
    async fn node_whose_job_came_after_the_first_read(
        database: &capstan_store::testsuite::TestDatabase,
    ) -> (State, Glance, AgentRequest) {
        let store = capstan_store::Store::connect(database.url(), "agent_channel", 4)
            .await
            .unwrap();
        store.migrate(&crate::MIGRATOR).await.unwrap();
        let wake = std::sync::Arc::<crate::wake::Wake>::default();
        let state = State {
            store: store.clone(),
            wake: wake.clone(),
            limits: Default::default(),
            keys: Default::default(),
            arrivals: crate::arrivals::Arrivals::start(
                store.clone(),
                wake,
                crate::domain::NONCE_WINDOW,
                crate::domain::LAST_SEEN_RESOLUTION,
            ),
            stopping: Default::default(),
            agent_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(2)),
            plain_slots: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
            intake: std::sync::Arc::new(tokio::sync::Semaphore::new(1)),
        };
        let mut connection = state.connection().await.unwrap();
        let node: NodeId = sqlx::query_scalar(
            "INSERT INTO nodes (name, public_key, fingerprint, agent_version, vocabulary, \
                                last_seen_at) \
             VALUES ('web-1', 'key', 'SHA256:web-1', '0.1.0', '[\"check_status\"]', now()) \
             RETURNING id",
        )
        .fetch_one(&mut *connection)
        .await
        .unwrap();
        let glance = store::glance(&mut connection, node).await.unwrap().unwrap();
        assert!(!glance.has_pending);
        sqlx::query(
            "INSERT INTO jobs (node_id, primitive, class, state, requested_by, budget_s) \
             VALUES ($1, 'check_status', 'read', 'pending', 'test', 900)",
        )
        .bind(node)
        .execute(&mut *connection)
        .await
        .unwrap();
        let request = AgentRequest {
            endpoint: capstan_events::agent_channel::rpc::AgentEndpoint::Claim,
            path: "/api/v1/agent/claim".into(),
            query: None,
            content_digest: None,
            signature_input: None,
            signature: None,
            source_address: "127.0.0.1".into(),
            gateway: None,
            poll: None,
        };
        (state, glance, request)
    }

    const CLAIM: &[u8] = br#"{"agent_version": "0.1.0", "vocabulary": ["check_status"]}"#;

    // AC-25 and the long poll: a job queued after the claim's first read, whose wake-up rang
    // before the claim held a bell, is handed out by that claim, not slept through. (Fails
    // when the claim trusts its first read whatever rang.)
    #[tokio::test]
    async fn a_claim_reads_again_when_a_bell_rang_since_its_first_read() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let (state, glance, request) = node_whose_job_came_after_the_first_read(&database).await;
        let before = state.wake.generation();
        // The NOTIFY of the job's commit, before the claim armed its bell: it wakes nobody.
        state.wake.ring(glance.node.id);
        let (status, answer) = claim_now(&state, request, glance, before).await;
        assert_eq!(status, 200);
        assert_eq!(answer["job"]["primitive"], "check_status", "{answer}");
    }

    // The other side: with no ring since its first read, that read stands and the quiet claim
    // costs no second one (the job queued here without a ring is one no wake-up announced).
    #[tokio::test]
    async fn with_no_ring_since_its_first_read_a_claim_answers_from_it() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let (state, glance, request) = node_whose_job_came_after_the_first_read(&database).await;
        let now = state.wake.generation();
        let (status, answer) = claim_now(&state, request, glance, now).await;
        assert_eq!(status, 200);
        assert_eq!(answer["job"], Value::Null, "{answer}");
    }

    // Issue 10, the plane's memory at 10,000 long polls: a claim that sleeps in a long poll has
    // let its request's bytes go (they pin the bus buffer they arrived in), so 10,000 open polls
    // do not hold 10,000 bodies. (Fails when the claim keeps its body to the end.)
    #[tokio::test]
    async fn a_long_poll_sleeps_without_the_bytes_of_its_request() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let (state, glance, mut request) =
            node_whose_job_came_after_the_first_read(&database).await;
        request.query = Some("wait=30".into());
        let node = glance.node.id;
        let body = Bytes::from(CLAIM.to_vec());
        let kept = body.clone();
        let now = state.wake.generation();
        let polling = tokio::spawn({
            let state = state.clone();
            async move { claim(&state, request, glance, now, body, Instant::now()).await }
        });
        // The claim reads its body, finds nothing in its first read and parks: from then on
        // the test's copy is the only one.
        tokio::time::timeout(Duration::from_secs(10), async {
            while !kept.is_unique() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .expect("the parked claim still holds its request's body");
        // Woken, it hands out the job: the poll was alive all along.
        state.wake.ring(node);
        let (status, answer) = polling.await.unwrap().unwrap();
        assert_eq!(status, 200);
        assert_eq!(answer["job"]["primitive"], "check_status", "{answer}");
    }

    // Issue 10, the restart storm: a long poll's wait counts from its arrival. A claim that sat
    // 40 s behind others before its slot (wait=30) is answered at once, not 30 s after its
    // slot, when its gateway (wait + 5 s) has long answered the agent 503. (Fails when the
    // wait starts at the slot: the claim sleeps its 30 s and the 10 s bound runs out.)
    #[tokio::test]
    async fn a_long_polls_wait_counts_from_its_arrival_not_from_its_slot() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let (state, glance, mut request) =
            node_whose_job_came_after_the_first_read(&database).await;
        request.query = Some("wait=30".into());
        let now = state.wake.generation();
        let arrived = Instant::now()
            .checked_sub(Duration::from_secs(40))
            .expect("the clock has run 40 s");
        let (status, answer) = tokio::time::timeout(
            Duration::from_secs(10),
            claim(
                &state,
                request,
                glance,
                now,
                Bytes::from_static(CLAIM),
                arrived,
            ),
        )
        .await
        .expect("a claim past its arrival plus its wait answers without sleeping")
        .unwrap();
        // Its wait over, it looks once more (as at the end of any wait) and finds the job.
        assert_eq!(status, 200);
        assert_eq!(answer["job"]["primitive"], "check_status", "{answer}");
    }

    /// A restart storm's renewals wait for their turn to have their signatures checked; a claim
    /// for a node with a job waiting, a claim whose node is rung for while it waits, and a
    /// result do not (issue 10's storm: dispatch p99 1.02 s at N = 10,000 without this turn,
    /// 143 ms with it).
    #[tokio::test]
    async fn work_passes_a_full_intake_and_a_plain_request_waits_its_turn() {
        use capstan_events::agent_channel::rpc::AgentEndpoint;
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let (state, glance, _) = node_whose_job_came_after_the_first_read(&database).await;
        let node = glance.node.id;
        let _full = state.intake.acquire().await.unwrap();
        let renewal = state.intake_for(Some(node), AgentEndpoint::Claim);
        tokio::pin!(renewal);
        assert!(
            futures::poll!(&mut renewal).is_pending(),
            "a quiet node's claim waits"
        );
        let stranger = state.intake_for(None, AgentEndpoint::Claim);
        tokio::pin!(stranger);
        assert!(
            futures::poll!(&mut stranger).is_pending(),
            "an unknown key waits"
        );
        state.wake.ring(node);
        // The ring has already ended its wait: one look answers, and a broken turn fails here
        // rather than waiting for ever.
        assert!(
            matches!(
                futures::poll!(&mut renewal),
                std::task::Poll::Ready(Ok(None))
            ),
            "rung for while it waits: goes now"
        );
        assert!(
            state
                .intake_for(Some(node), AgentEndpoint::Claim)
                .await
                .unwrap()
                .is_none(),
            "work waiting: goes at once"
        );
        assert!(state
            .intake_for(Some(NodeId(node.get() + 1)), AgentEndpoint::Result)
            .await
            .unwrap()
            .is_none());
        assert!(
            futures::poll!(&mut stranger).is_pending(),
            "still its turn to wait"
        );
    }
}
