//! The agent channel's acts that more than one door leads to (an operator's rpc, another
//! service's command, an agent's request, a periodic task): each writes its state change and
//! the events it causes in the caller's transaction.

use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{
        primitives,
        rpc::{Finding, Health, JobState, JobView, JoinView, NodeView, Placement},
        JobClaimed, JobFinished, JobOutcome, JobQueued, NodeDisconnected, NodeLeft,
        PlacementChanged, PrimitiveClass,
    },
    rpc::{ErrorCode, Level, RpcError},
    Envelope, Message,
};
use capstan_runtime::ServiceError;
use capstan_store::{outbox, PgConnection, StoreError};
use chrono::{DateTime, Utc};
use serde_json::Value;
use std::collections::HashMap;
use uuid::Uuid;

use crate::{
    domain::{
        fleet,
        jobs::{self, lost, Door, DoorRefusal, Routing, RoutingRefusal},
        version::below_floor,
        ONLINE_WINDOW,
    },
    store::{self, JobRow, JoinRow, NodeRow, ReadingRow},
};
use capstan_events::Word as _;

pub async fn emit<M: Message>(
    connection: &mut PgConnection,
    data: M,
    subject: String,
) -> Result<(), StoreError> {
    outbox::push(connection, Envelope::new(data, Some(subject))).await
}

/// A class as the table keeps it (its CHECK allows only the three).
fn class_of(text: &str) -> PrimitiveClass {
    PrimitiveClass::parse(text).unwrap_or(PrimitiveClass::Read)
}

pub fn job_view(row: &JobRow) -> JobView {
    JobView {
        id: row.id,
        node_id: row.node_id,
        primitive: row.primitive.clone(),
        class: class_of(&row.class),
        params: row.params.0.clone(),
        state: row.state,
        outcome: row.outcome(),
        reason: row.reason.clone(),
        result: row.result.as_ref().map(|result| result.0.clone()),
        requested_by: row.requested_by.clone(),
        created_at: row.created_at,
        claimed_at: row.claimed_at,
        finished_at: row.finished_at,
    }
}

/// The views of `rows`, each with the monitor's health dot as kept here (`healths`, from
/// `store::health::of`; a node never judged is gray) and its placement judged from the latest
/// readings (`store::latest_readings`, domain/fleet.rs). `readings` may also hold the host reports of
/// nodes not in `rows` (the hosts a container asked for alone may sit on); placement reads
/// them, and no view is made of them.
pub fn node_views(
    rows: &[NodeRow],
    readings: &[ReadingRow],
    healths: &HashMap<NodeId, Health>,
    now: DateTime<Utc>,
) -> Vec<NodeView> {
    let mut checks: HashMap<NodeId, &ReadingRow> = HashMap::new();
    let mut reports: HashMap<NodeId, &ReadingRow> = HashMap::new();
    for reading in readings {
        match reading.primitive.as_str() {
            "check_status" => checks.insert(reading.node_id, reading),
            "host_report" => reports.insert(reading.node_id, reading),
            _ => None,
        };
    }
    let placements = placements_of(rows, &reports);
    rows.iter()
        .map(|row| {
            let last_check = checks.get(&row.id).and_then(|reading| finding(reading));
            let last_report = reports.get(&row.id).and_then(|reading| finding(reading));
            let health = healths
                .get(&row.id)
                .cloned()
                .unwrap_or_else(store::health::never_checked);
            node_view(
                row,
                now,
                health,
                last_check,
                last_report,
                placements.get(&row.id).copied().unwrap_or_default(),
            )
        })
        .collect()
}

/// Where each of `rows` sits (domain/fleet.rs), from the latest host reports in `reports`
/// (which may hold nodes not in `rows`: the hosts they may sit on).
fn placements_of(
    rows: &[NodeRow],
    reports: &HashMap<NodeId, &ReadingRow>,
) -> HashMap<NodeId, Placement> {
    let report_result = |id: NodeId| {
        reports
            .get(&id)
            .filter(|reading| reading.outcome == JobOutcome::Completed)
            .and_then(|reading| reading.result.as_ref())
            .map(|result| &result.0)
    };
    let mut inputs: Vec<fleet::PlacementInput<'_>> = rows
        .iter()
        .map(|row| fleet::PlacementInput {
            id: row.id,
            container: row.container_name(),
            host_report: report_result(row.id),
        })
        .collect();
    inputs.extend(
        reports
            .keys()
            .filter(|id| !rows.iter().any(|row| row.id == **id))
            .map(|id| fleet::PlacementInput {
                id: *id,
                container: None,
                host_report: report_result(*id),
            }),
    );
    fleet::placements(&inputs)
}

/// The readings `rows` are placed from: theirs, and those of every host listing one of their
/// containers.
async fn placement_readings(
    connection: &mut PgConnection,
    rows: &[NodeRow],
) -> Result<Vec<ReadingRow>, StoreError> {
    let mut ids: Vec<NodeId> = rows.iter().map(|row| row.id).collect();
    let mut names: Vec<&str> = rows.iter().filter_map(NodeRow::container_name).collect();
    names.sort_unstable();
    names.dedup();
    for name in names {
        ids.extend(store::hosts_listing_container(connection, name).await?);
    }
    ids.sort_unstable();
    ids.dedup();
    store::latest_readings(connection, &ids).await
}

/// Announces every placement the facts of `touched` just changed (a host report finished, a
/// container named, a pairing made or ended): one `placement_changed` per node whose Docker
/// host is no longer the one last announced, in the caller's transaction.
pub async fn settle_placements(
    connection: &mut PgConnection,
    touched: &[NodeId],
) -> Result<(), StoreError> {
    store::lock_placements(connection).await?;
    let rows = store::placement_candidates(connection, touched).await?;
    if rows.is_empty() {
        return Ok(());
    }
    let readings = placement_readings(connection, &rows).await?;
    let reports: HashMap<NodeId, &ReadingRow> = readings
        .iter()
        .filter(|reading| reading.primitive == "host_report")
        .map(|reading| (reading.node_id, reading))
        .collect();
    let placements = placements_of(&rows, &reports);
    let ids: Vec<NodeId> = rows.iter().map(|row| row.id).collect();
    let announced = store::announced_hosts(connection, &ids).await?;
    for row in &rows {
        let host = placements
            .get(&row.id)
            .copied()
            .and_then(fleet::docker_host);
        if announced.get(&row.id).copied() == host {
            continue;
        }
        store::announce_host(connection, row.id, host).await?;
        let changed = PlacementChanged {
            node_id: row.id,
            host_node_id: host,
        };
        emit(connection, changed, format!("node/{}", row.id)).await?;
    }
    Ok(())
}

/// A claim saved `facts` for `node`: when they name another container than before, its
/// placement is settled.
pub async fn claim_placed(
    connection: &mut PgConnection,
    node: &NodeRow,
    facts: &serde_json::Map<String, Value>,
) -> Result<(), StoreError> {
    if fleet::container_named(node.container.as_deref(), facts) == node.container_name() {
        return Ok(());
    }
    settle_placements(connection, &[node.id]).await
}

fn finding(reading: &ReadingRow) -> Option<Finding> {
    Some(Finding {
        job_id: reading.id,
        outcome: reading.outcome,
        finished_at: reading.finished_at,
        result: reading.result.as_ref().map(|result| result.0.clone()),
    })
}

fn node_view(
    row: &NodeRow,
    now: DateTime<Utc>,
    health: Health,
    last_check: Option<Finding>,
    last_report: Option<Finding>,
    placement: Placement,
) -> NodeView {
    let paired = row.fingerprint.is_some();
    let heard_lately = row.last_seen_at.is_some_and(|seen| {
        now.signed_duration_since(seen).to_std().unwrap_or_default() <= ONLINE_WINDOW
    });
    NodeView {
        id: row.id,
        name: row.name.clone(),
        fingerprint: row.fingerprint.clone(),
        agent_version: row.agent_version.clone(),
        vocabulary: row.vocabulary.0.clone(),
        addresses: row.addresses.0.clone(),
        site_root: row.site_root.clone(),
        container: row.container.clone(),
        connected_at: row.connected_at,
        last_seen_at: row.last_seen_at,
        left_at: row.left_at,
        online: paired && heard_lately,
        below_floor: paired && below_floor(row.agent_version.as_deref(), &row.vocabulary.0),
        facts: Value::Object(row.facts.0.clone()),
        health,
        last_check,
        last_report,
        placement,
        install_state: row.install_state.map(|state| state.0),
    }
}

pub fn join_view(row: &JoinRow, name_taken_by: Option<NodeId>, now: DateTime<Utc>) -> JoinView {
    let state = row.state.shown(row.expires_at, now);
    JoinView {
        id: row.id,
        name: row.name.clone(),
        fingerprint: row.fingerprint.clone(),
        source_address: row.source_address.clone(),
        addresses: row.addresses.0.clone(),
        agent_version: row.agent_version.clone(),
        site_root: row.site_root.clone(),
        container: row.container.clone(),
        state,
        requested_at: row.requested_at,
        expires_at: row.expires_at,
        name_taken_by,
    }
}

/// Who asks for a job, for the record and for its answer.
pub struct Asker<'a> {
    pub name: &'a str,
    pub level: Level,
    /// The door the job is asked through, which decides the words it may be (issue 27).
    pub door: Door,
    pub idempotency_key: Option<&'a str>,
    pub correlation_id: Option<Uuid>,
}

/// Whether `asker` may have `primitive` run on `node` with `params`: the word is known, asked
/// through its door at its class's level, its parameters fit its shape, and the node has a
/// paired agent that reports it. Answers the word.
fn may_create(
    node: &NodeRow,
    primitive: &str,
    params: &Value,
    asker: &Asker<'_>,
) -> Result<&'static primitives::Primitive, RpcError> {
    let Some(word) = primitives::find(primitive) else {
        return Err(RpcError::new(
            ErrorCode::InvalidRequest,
            format!("primitive: the plane knows no primitive named {primitive:?}"),
        ));
    };
    // Issue 27: a service's word is made by that service alone, whatever the level.
    jobs::may_ask(word, asker.door).map_err(|refusal| match refusal {
        DoorRefusal::OwnedByService(_) | DoorRefusal::NotTheSendersWord { .. } => {
            RpcError::new(ErrorCode::Forbidden, refusal.to_string())
        }
    })?;
    let needed = word.class.needed_level();
    if asker.level < needed {
        return Err(RpcError::new(
            ErrorCode::Forbidden,
            format!(
                "{primitive} is a {} word and needs level {}",
                word.class.as_str(),
                needed as u8
            ),
        ));
    }
    word.check_params(params)
        .map_err(|reason| RpcError::new(ErrorCode::InvalidRequest, format!("params: {reason}")))?;
    let routing = Routing {
        paired: node.fingerprint.is_some(),
        agent_version: node.agent_version.as_deref(),
        vocabulary: &node.vocabulary.0,
    };
    jobs::route(&routing, primitive).map_err(|refusal| match refusal {
        RoutingRefusal::NotPaired => RpcError::new(ErrorCode::NotPaired, refusal.to_string()),
        RoutingRefusal::NeedsNewerAgent { .. } => {
            RpcError::new(ErrorCode::NeedsNewerAgent, refusal.to_string())
        }
    })?;
    Ok(word)
}

/// Creates a job for a node, or refuses: an unknown word, too low a level for its class,
/// parameters outside its shape, a node without a paired agent or whose agent lacks the word.
/// Returns the job (an existing one when the idempotency key was seen before).
pub async fn create_job(
    connection: &mut PgConnection,
    node: &NodeRow,
    primitive: &str,
    params: &Value,
    asker: &Asker<'_>,
) -> Result<JobRow, ServiceError> {
    if let Some(key) = asker.idempotency_key {
        if let Some(existing) = store::job_by_key(connection, key).await? {
            return Ok(existing);
        }
    }
    let word = may_create(node, primitive, params, asker)?;
    let params = if params.is_null() {
        serde_json::json!({})
    } else {
        params.clone()
    };
    let new = store::NewJob {
        node_id: node.id,
        primitive,
        class: word.class.as_str(),
        params: &params,
        requested_by: asker.name,
        idempotency_key: asker.idempotency_key,
        correlation_id: asker.correlation_id,
        budget_s: word.claim_budget.as_secs() as i32,
        state: JobState::Pending,
        reason: None,
    };
    let job = match store::insert_job(connection, &new).await? {
        Some(job) => job,
        // Another transaction made it with the same key a moment ago.
        None => store::job_by_key(connection, asker.idempotency_key.unwrap_or_default())
            .await?
            .ok_or_else(|| {
                RpcError::new(ErrorCode::Conflict, "the job was made and then removed")
            })?,
    };
    let queued = JobQueued {
        job_id: job.id,
        node_id: node.id,
        primitive: job.primitive.clone(),
        requested_by: job.requested_by.clone(),
        correlation_id: job.correlation_id,
    };
    emit(connection, queued, format!("job/{}", job.id)).await?;
    metrics::counter!("capstan_agent_jobs_queued_total").increment(1);
    Ok(job)
}

/// Announces a job's end to whoever asked for it.
pub async fn announce_finished(
    connection: &mut PgConnection,
    job: &JobRow,
) -> Result<(), StoreError> {
    let finished_outcome = job.outcome().ok_or_else(|| {
        StoreError::Database(format!(
            "job {} is announced finished while {}",
            job.id,
            job.state.as_str()
        ))
    })?;
    let finished = JobFinished {
        job_id: job.id,
        node_id: job.node_id,
        primitive: job.primitive.clone(),
        outcome: finished_outcome,
        reason: job.reason.clone(),
        result: job.result.as_ref().map(|result| result.0.clone()),
        requested_by: job.requested_by.clone(),
        correlation_id: job.correlation_id,
    };
    let envelope =
        Envelope::new(finished, Some(format!("job/{}", job.id))).correlated(job.correlation_id);
    outbox::push(connection, envelope).await?;
    metrics::counter!("capstan_agent_jobs_finished_total", "outcome" => finished_outcome.as_str())
        .increment(1);
    // A node's latest host report is what places its containers (PV-15).
    if job.primitive == "host_report" {
        settle_placements(connection, &[job.node_id]).await?;
    }
    Ok(())
}

pub async fn announce_all_finished(
    connection: &mut PgConnection,
    jobs: &[JobRow],
) -> Result<(), StoreError> {
    for job in jobs {
        announce_finished(connection, job).await?;
    }
    Ok(())
}

pub async fn announce_claimed(
    connection: &mut PgConnection,
    job: &JobRow,
) -> Result<(), StoreError> {
    let claimed = JobClaimed {
        job_id: job.id,
        node_id: job.node_id,
        primitive: job.primitive.clone(),
    };
    emit(connection, claimed, format!("job/{}", job.id)).await
}

/// Why a pairing ends.
pub enum PairingEnd<'a> {
    /// The node's own signed goodbye.
    Left,
    /// An operator's disconnect.
    Disconnected { by: &'a str },
}

/// AC-37, AC-38: the one function that forgets a node's key, for a leave and a disconnect
/// alike. Running jobs are lost (what they did is unknown), pending ones withdrawn.
pub async fn forget_agent(
    connection: &mut PgConnection,
    node: &NodeRow,
    end: PairingEnd<'_>,
) -> Result<(), StoreError> {
    let Some(fingerprint) = node.fingerprint.clone() else {
        return Ok(());
    };
    store::forget_key(connection, node.id, matches!(end, PairingEnd::Left)).await?;
    let lost = store::lose_running(connection, node.id, lost::LEFT).await?;
    let withdrawn =
        store::withdraw_pending(connection, node.id, "the node's pairing ended").await?;
    announce_all_finished(connection, &lost).await?;
    announce_all_finished(connection, &withdrawn).await?;
    let subject = format!("node/{}", node.id);
    match end {
        PairingEnd::Left => {
            let left = NodeLeft {
                node_id: node.id,
                fingerprint,
                left_at: Utc::now(),
            };
            emit(connection, left, subject).await?;
        }
        PairingEnd::Disconnected { by } => {
            let disconnected = NodeDisconnected {
                node_id: node.id,
                fingerprint,
                disconnected_by: by.to_string(),
            };
            emit(connection, disconnected, subject).await?;
        }
    }
    settle_placements(connection, &[node.id]).await
}
