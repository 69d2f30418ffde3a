//! The operator acts on joins, nodes and jobs. Each checks the actor's level (ARCHITECTURE.md
//! decision 6.2-3) before it reads or changes anything.

use capstan_events::NodeId;
use capstan_events::{
    agent_channel::{
        rpc::{
            check_search, ApproveJoin, Approved, CancelJobRequest, CreateJob, DisconnectNode, Done,
            GetJob, GetNode, JobCreated, JobOutput, JobOutputRequest, JobRef, JobState, JobView,
            Jobs, Joins, ListJobs, ListJoins, ListNodes, MarkJobFailed, NodeView, Nodes, Page,
            PageInfo, RefusalCount, RefusalCountRequest, RejectJoin, ReopenJoin, PAGE_LIMIT_MAX,
        },
        JobOutcome, JoinRejected, NodeApproved,
    },
    rpc::{ErrorCode, Level, RpcError},
};
use capstan_runtime::ServiceError;
use capstan_store::{PgConnection, StoreError};
use chrono::Utc;
use sqlx::{pool::PoolConnection, Postgres};

use super::State;
use crate::{
    actions::{self, emit, Asker, PairingEnd},
    domain::{
        fleet,
        jobs::{lost, Door},
        joins::{reopenable, JoinRecordState},
        JOIN_TTL,
    },
    store::{self, Binding, JoinRow},
};
use capstan_events::Word as _;

/// A handler's answer: store failures go up with `?` (answered `unavailable`, logged once).
pub(super) type Answer<T> = Result<T, ServiceError>;

pub(super) fn not_found(what: String) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, what).into()
}

/// A connection from the pool, or `unavailable`.
async fn connection(state: &State) -> Answer<PoolConnection<Postgres>> {
    Ok(state.connection().await?)
}

/// The row a look-up found, `not_found` naming `what` (`node 7`) when it found none, or
/// `unavailable` when the store failed.
pub(super) fn found<T>(row: Result<Option<T>, StoreError>, what: String) -> Answer<T> {
    row?.ok_or_else(|| not_found(format!("no {what}")))
}

pub(super) fn conflict(what: impl Into<String>) -> ServiceError {
    RpcError::new(ErrorCode::Conflict, what).into()
}

/// A listing's page and search checked: `invalid_request` naming the parameter.
fn check_listing(page: &Page, search: &Option<String>) -> Result<(), RpcError> {
    page.check()
        .and_then(|()| check_search(search))
        .map_err(|(parameter, why)| {
            RpcError::new(ErrorCode::InvalidRequest, format!("{parameter}: {why}"))
        })
}

pub async fn list_joins(state: State, request: ListJoins) -> Answer<Joins> {
    request.actor.require(Level::Read, "listing joins")?;
    check_listing(&request.page, &request.search)?;
    let mut connection = connection(&state).await?;
    let (rows, total) = store::list_joins_page(&mut connection, &request).await?;
    let now = Utc::now();
    Ok(Joins {
        joins: rows
            .iter()
            .map(|row| actions::join_view(&row.join, row.name_taken_by, now))
            .collect(),
        page: PageInfo::of(request.page, total),
    })
}

/// AC-06: the join's key bound to a new node, or to the unpaired node named; answers the
/// node's id.
async fn bind_node(
    connection: &mut PgConnection,
    join: &JoinRow,
    named: Option<NodeId>,
) -> Answer<NodeId> {
    let binding = Binding {
        public_key: &join.public_key,
        fingerprint: &join.fingerprint,
        addresses: &join.addresses.0,
        site_root: join.site_root.as_deref(),
        container: join.container.as_deref(),
        agent_version: &join.agent_version,
    };
    let Some(node_id) = named else {
        return Ok(store::insert_node(connection, &join.name, &binding).await?);
    };
    found(
        store::lock_node(connection, node_id).await,
        format!("node {node_id}"),
    )?;
    if !store::bind_key(connection, node_id, &binding).await? {
        return Err(conflict(format!(
            "node {node_id} already has a paired agent; disconnect it first"
        )));
    }
    Ok(node_id)
}

/// AC-06: binds the join's key to a new node, or to the unpaired node the operator names.
pub async fn approve_join(state: State, request: ApproveJoin) -> Answer<Approved> {
    request.actor.require(Level::Admin, "approving a join")?;
    let node_id = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let join = found(
                    store::join_by_id(transaction, request.join_id).await,
                    format!("join request {}", request.join_id),
                )?;
                if join.state != JoinRecordState::Pending || join.expires_at <= Utc::now() {
                    return Err(conflict(format!("join request {} is not pending", join.id)));
                }
                if store::node_by_fingerprint(transaction, &join.fingerprint)
                    .await?
                    .is_some()
                {
                    return Err(conflict("this key is already paired with a node"));
                }
                approve_pending(transaction, &join, request.node_id, &request.actor.name).await
            })
        })
        .await?;
    Ok(Approved { node_id })
}

/// Binds the pending `join` (checked by the caller, in its transaction) to a new node, or to
/// the unpaired node `named`; records who approved (`by`), announces `node_approved` and
/// settles the placements the pairing may move. Answers the node's id.
pub(super) async fn approve_pending(
    transaction: &mut PgConnection,
    join: &JoinRow,
    named: Option<NodeId>,
    by: &str,
) -> Answer<NodeId> {
    let node_id = bind_node(transaction, join, named).await?;
    store::decide_join(
        transaction,
        join.id,
        JoinRecordState::Approved,
        by,
        Some(node_id),
    )
    .await?;
    let node = found(
        store::node_by_id(transaction, node_id).await,
        format!("node {node_id}"),
    )?;
    let approved = NodeApproved {
        request_id: join.id,
        node_id,
        name: node.name.clone(),
        fingerprint: join.fingerprint.clone(),
        addresses: join.addresses.0.clone(),
        site_root: node.site_root.clone(),
        container: node.container.clone(),
        approved_by: by.to_string(),
    };
    emit(transaction, approved, format!("node/{node_id}")).await?;
    let new_machine =
        named.is_none() && !fleet::approval_can_move_placements(node.container.as_deref());
    if !new_machine {
        actions::settle_placements(transaction, &[node_id]).await?;
    }
    Ok(node_id)
}

pub async fn reject_join(state: State, RejectJoin(request): RejectJoin) -> Answer<Done> {
    request.actor.require(Level::Admin, "rejecting a join")?;
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let join = found(
                    store::join_by_id(transaction, request.join_id).await,
                    format!("join request {}", request.join_id),
                )?;
                reject_pending(transaction, &join, &request.actor.name).await
            })
        })
        .await?;
    Ok(Done {})
}

/// Rejects `join` (read locked in the caller's transaction) if it is pending, recording who
/// (`by`) and announcing `join_rejected`; `conflict` when it is not pending.
pub(super) async fn reject_pending(
    transaction: &mut PgConnection,
    join: &JoinRow,
    by: &str,
) -> Answer<()> {
    if join.state != JoinRecordState::Pending {
        return Err(conflict(format!("join request {} is not pending", join.id)));
    }
    store::decide_join(transaction, join.id, JoinRecordState::Rejected, by, None).await?;
    let rejected = JoinRejected {
        request_id: join.id,
        name: join.name.clone(),
        fingerprint: join.fingerprint.clone(),
        rejected_by: by.to_string(),
    };
    emit(transaction, rejected, format!("join/{}", join.id)).await?;
    Ok(())
}

/// AC-07: a join rejected within the last day becomes pending again (the node still asks with
/// the same key, so the fingerprint was already compared).
pub async fn reopen_join(state: State, ReopenJoin(request): ReopenJoin) -> Answer<Done> {
    request.actor.require(Level::Admin, "reopening a join")?;
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let join = found(
                    store::join_by_id(transaction, request.join_id).await,
                    format!("join request {}", request.join_id),
                )?;
                let now = Utc::now();
                let rejected_at = join.decided_at.unwrap_or(join.requested_at);
                if join.state != JoinRecordState::Rejected || !reopenable(rejected_at, now) {
                    return Err(conflict(format!(
                        "join request {} was not rejected within the last day",
                        join.id
                    )));
                }
                let expires_at = now + chrono::Duration::from_std(JOIN_TTL).expect("an hour fits");
                store::reopen_join(transaction, join.id, expires_at).await?;
                Ok(())
            })
        })
        .await?;
    Ok(Done {})
}

pub async fn list_nodes(state: State, request: ListNodes) -> Answer<Nodes> {
    request.actor.require(Level::Read, "listing nodes")?;
    check_listing(&request.page, &request.search)?;
    if request
        .ids
        .as_ref()
        .is_some_and(|ids| ids.len() > PAGE_LIMIT_MAX as usize)
    {
        return Err(RpcError::new(
            ErrorCode::InvalidRequest,
            format!("ids: more than {PAGE_LIMIT_MAX}"),
        )
        .into());
    }
    let now = Utc::now();
    let mut connection = connection(&state).await?;
    let (nodes, total) = store::list_nodes_page(&mut connection, &request, now).await?;
    // The page's nodes, and the hosts its containers may sit on (placement reads their
    // reports; no view is made of them).
    let mut ids: Vec<NodeId> = nodes.iter().map(|node| node.id).collect();
    let containers: Vec<String> = nodes
        .iter()
        .filter_map(|node| node.container.clone())
        .collect();
    ids.extend(store::hosts_listing_any_container(&mut connection, &containers).await?);
    ids.sort_unstable();
    ids.dedup();
    let readings = store::latest_readings(&mut connection, &ids).await?;
    let page_ids: Vec<NodeId> = nodes.iter().map(|node| node.id).collect();
    let healths = store::health::of(&mut connection, &page_ids).await?;
    Ok(Nodes {
        nodes: actions::node_views(&nodes, &readings, &healths, now),
        page: PageInfo::of(request.page, total),
    })
}

/// The fleet's spread across versions and each paired node's update verdict (issue 15).
pub async fn fleet_versions(
    state: State,
    request: capstan_events::agent_channel::rpc::FleetVersionsRequest,
) -> Answer<capstan_events::agent_channel::rpc::FleetVersions> {
    request
        .actor
        .require(Level::Read, "reading the fleet's versions")?;
    let mut connection = connection(&state).await?;
    let rows = store::node_updates(&mut connection).await?;
    Ok(crate::domain::updates::fleet_versions(rows))
}

pub async fn get_node(state: State, GetNode(request): GetNode) -> Answer<NodeView> {
    request.actor.require(Level::Read, "reading a node")?;
    let mut connection = connection(&state).await?;
    let node = found(
        store::node_by_id(&mut connection, request.node_id).await,
        format!("node {}", request.node_id),
    )?;
    let mut ids = vec![node.id];
    if let Some(container) = node.container_name() {
        ids.extend(store::hosts_listing_container(&mut connection, container).await?);
    }
    let readings = store::latest_readings(&mut connection, &ids).await?;
    let healths = store::health::of(&mut connection, &[node.id]).await?;
    actions::node_views(std::slice::from_ref(&node), &readings, &healths, Utc::now())
        .pop()
        .ok_or_else(|| not_found(format!("no node {}", request.node_id)))
}

pub async fn disconnect_node(
    state: State,
    DisconnectNode(request): DisconnectNode,
) -> Answer<Done> {
    request
        .actor
        .require(Level::Admin, "disconnecting a node")?;
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let node = found(
                    store::lock_node(transaction, request.node_id).await,
                    format!("node {}", request.node_id),
                )?;
                if node.fingerprint.is_none() {
                    return Err(conflict(format!("node {} has no paired agent", node.id)));
                }
                let by = PairingEnd::Disconnected {
                    by: &request.actor.name,
                };
                actions::forget_agent(transaction, &node, by).await?;
                Ok(())
            })
        })
        .await?;
    Ok(Done {})
}

pub async fn create_job(state: State, request: CreateJob) -> Answer<JobCreated> {
    request.actor.require(Level::Read, "running a job")?;
    let job = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let node = found(
                    store::node_by_id(transaction, request.node_id).await,
                    format!("node {}", request.node_id),
                )?;
                let asker = Asker {
                    name: &request.actor.name,
                    level: request.actor.level,
                    door: Door::Operator,
                    idempotency_key: None,
                    correlation_id: None,
                };
                actions::create_job(
                    transaction,
                    &node,
                    &request.primitive,
                    &request.params,
                    &asker,
                )
                .await
            })
        })
        .await?;
    Ok(JobCreated {
        id: job.id,
        state: JobState::Pending,
    })
}

pub async fn list_jobs(state: State, request: ListJobs) -> Answer<Jobs> {
    request.actor.require(Level::Read, "listing jobs")?;
    let limit = i64::from(request.limit.unwrap_or(50).clamp(1, 500));
    let mut connection = connection(&state).await?;
    let rows = store::list_jobs(&mut connection, request.node_id, request.state, limit).await?;
    Ok(Jobs {
        jobs: rows.iter().map(actions::job_view).collect(),
    })
}

pub async fn get_job(state: State, GetJob(request): GetJob) -> Answer<JobView> {
    request.actor.require(Level::Read, "reading a job")?;
    let mut connection = connection(&state).await?;
    let job = found(
        store::job_by_id(&mut connection, request.job_id).await,
        format!("job {}", request.job_id),
    )?;
    Ok(actions::job_view(&job))
}

/// AC-36: only the output after `offset` (bytes, moved forward to a character boundary).
pub async fn job_output(state: State, request: JobOutputRequest) -> Answer<JobOutput> {
    request
        .actor
        .require(Level::Read, "reading a job's output")?;
    let mut connection = connection(&state).await?;
    let (job_state, output) = found(
        store::job_output(&mut connection, request.job_id).await,
        format!("job {}", request.job_id),
    )?;
    let mut start = (request.offset as usize).min(output.len());
    while !output.is_char_boundary(start) {
        start += 1;
    }
    Ok(JobOutput {
        state: job_state,
        new_output: output[start..].to_string(),
        offset: output.len() as u64,
    })
}

/// Withdraws a pending job, or a running one the node holds waiting for its own approval
/// (it learns so from job_status and ends it as refused).
pub async fn cancel_job(state: State, CancelJobRequest(request): CancelJobRequest) -> Answer<Done> {
    request.actor.require(Level::Change, "cancelling a job")?;
    let reason = format!("withdrawn by {}", request.actor.name);
    end_job(
        &state,
        request,
        &[JobState::Pending, JobState::Running],
        JobOutcome::Withdrawn,
        reason,
    )
    .await
}

/// AC-30: an operator marks a running job failed; it is recorded as lost, by whom, and the
/// node is free for its next job.
pub async fn mark_job_failed(state: State, MarkJobFailed(request): MarkJobFailed) -> Answer<Done> {
    request
        .actor
        .require(Level::Change, "marking a job as failed")?;
    let reason = lost::marked(&request.actor.name);
    end_job(
        &state,
        request,
        &[JobState::Running],
        JobOutcome::Lost,
        reason,
    )
    .await
}

/// Ends a job an operator names, if it is in one of `from`, as `to` with `reason` and the
/// operator's name, and announces it.
async fn end_job(
    state: &State,
    request: JobRef,
    from: &'static [JobState],
    to: JobOutcome,
    reason: String,
) -> Answer<Done> {
    state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                let job = found(
                    store::job_by_id(transaction, request.job_id).await,
                    format!("job {}", request.job_id),
                )?;
                if !from.contains(&job.state) {
                    let from: Vec<&str> = from.iter().map(|state| state.as_str()).collect();
                    return Err(conflict(format!(
                        "job {} is {}, not {}",
                        job.id,
                        job.state.as_str(),
                        from.join(" or ")
                    )));
                }
                let by = Some(request.actor.name.as_str());
                let ended =
                    store::finish_job(transaction, job.id, to, Some(&reason), None, None, by)
                        .await?;
                actions::announce_all_finished(transaction, ended.as_slice()).await?;
                Ok(())
            })
        })
        .await?;
    Ok(Done {})
}

pub async fn refusal_count(state: State, request: RefusalCountRequest) -> Answer<RefusalCount> {
    request.actor.require(Level::Read, "reading refusals")?;
    let mut connection = connection(&state).await?;
    let refused =
        store::refusal_count(&mut connection, request.node_id, request.window_secs as f64).await?;
    Ok(RefusalCount {
        node_id: request.node_id,
        refused,
    })
}
