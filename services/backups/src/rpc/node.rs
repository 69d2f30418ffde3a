//! The operator's policy and node questions (pinned in issue 14): the fleet policy and each
//! node's position (BK-08), a node's backups (BK-20, BK-25), and the acts that take the
//! machine's turn (BK-09) — run, verify, restore, move. An act commits its turn and its
//! `request_job` together, then answers with the agent channel's job id once the agent channel
//! took it; a machine whose turn is held answers `conflict` naming the job that holds it.

use capstan_events::NodeId;
use std::time::Duration;

use capstan_bus::RpcServer;
use capstan_events::agent_channel::machine_key;
use capstan_events::backups::rpc::{
    ChainView, Dispatched, FleetPolicyView, GetNodePolicy, GetPolicy, MoveRequest, NodeBackups,
    NodeBackupsRequest, NodePolicyView, OrphansView, RestoreRequest, RestoreWhat, RunKind, RunNow,
    RunView, SetNodePolicy, SetPolicy, TurnView, VerifyRequest, VerifyState, VerifyView,
};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::{PgConnection, Store, StoreError};
use chrono::Utc;
use uuid::Uuid;

use crate::domain::policy::{self, check_fields, effective};
use crate::domain::schedule::{self, next_run, LastVerify};
use crate::store::schedule::{self as store, Dispatch, JobRow, LandedRow, NodeRow, VerifyRow};
use capstan_events::Word as _;

/// A handler's answer: store and bus failures go up with `?` (answered `unavailable`).
type Answer<T> = Result<T, ServiceError>;

/// What the handlers reach.
#[derive(Clone)]
pub struct State {
    pub store: Store,
    /// How long an act waits for the agent channel to say its job's id.
    pub job_id_wait: Duration,
}

/// Adds the policy and node questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, get_policy)
        .route_with_state(&state, set_policy)
        .route_with_state(&state, get_node_policy)
        .route_with_state(&state, set_node_policy)
        .route_with_state(&state, node_backups)
        .route_with_state(&state, run_now)
        .route_with_state(&state, verify)
        .route_with_state(&state, restore)
        .route_with_state(&state, move_node)
}

async fn connection(state: &State) -> Answer<sqlx::pool::PoolConnection<sqlx::Postgres>> {
    Ok(state.store.acquire().await?)
}

pub async fn get_policy(state: State, request: GetPolicy) -> Answer<FleetPolicyView> {
    request
        .actor
        .require(Level::Read, "reading the backup policy")?;
    let mut connection = connection(&state).await?;
    let (policy, changed_by, changed_at) = store::fleet_policy(&mut connection).await?;
    Ok(FleetPolicyView {
        policy,
        changed_by,
        changed_at,
    })
}

pub async fn set_policy(state: State, request: SetPolicy) -> Answer<FleetPolicyView> {
    request
        .actor
        .require(Level::Admin, "changing the fleet backup policy")?;
    check_fields(&request.policy.fields).map_err(RpcError::from)?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    store::set_fleet_policy(&mut transaction, &request.policy, &request.actor.name, now).await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(FleetPolicyView {
        policy: request.policy,
        changed_by: Some(request.actor.name),
        changed_at: Some(now),
    })
}

async fn known_node(connection: &mut PgConnection, node: NodeId) -> Answer<NodeRow> {
    store::node(connection, node).await?.ok_or_else(|| {
        RpcError::new(
            ErrorCode::NotFound,
            format!("node {node} is not known to the backups service"),
        )
        .into()
    })
}

async fn node_policy_view(connection: &mut PgConnection, node: NodeId) -> Answer<NodePolicyView> {
    let (fleet, _, _) = store::fleet_policy(connection).await?;
    let (stored, decided_by, decided_at) = store::node_policy(connection, node).await?;
    let applied = effective(&fleet, &stored);
    Ok(NodePolicyView {
        node_id: node,
        position: stored.position(),
        scheduled: applied.scheduled,
        fields: applied.fields,
        decided_by,
        decided_at,
    })
}

pub async fn get_node_policy(state: State, request: GetNodePolicy) -> Answer<NodePolicyView> {
    request
        .actor
        .require(Level::Read, "reading a node's backup policy")?;
    let mut connection = connection(&state).await?;
    known_node(&mut connection, request.node_id).await?;
    node_policy_view(&mut connection, request.node_id).await
}

pub async fn set_node_policy(state: State, request: SetNodePolicy) -> Answer<NodePolicyView> {
    request
        .actor
        .require(Level::Admin, "changing a node's backup policy")?;
    let mut transaction = state.store.begin().await?;
    known_node(&mut transaction, request.node_id).await?;
    let (fleet, _, _) = store::fleet_policy(&mut transaction).await?;
    let stored = policy::decide(&request.body, &fleet).map_err(RpcError::from)?;
    store::set_node_policy(
        &mut transaction,
        request.node_id,
        &stored,
        &request.actor.name,
        Utc::now(),
    )
    .await?;
    let view = node_policy_view(&mut transaction, request.node_id).await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(view)
}

fn turn(job: &JobRow) -> TurnView {
    TurnView {
        job_id: job.job_id,
        node_id: job.node_id,
        primitive: job.primitive.clone(),
        requested_by: job.requested_by.clone(),
        dispatched_at: job.dispatched_at,
    }
}

/// The node's last verify as the operator sees it.
fn verify_view(row: VerifyRow) -> VerifyView {
    VerifyView {
        job_id: row.job_id,
        seq: row.seq,
        level: u8::try_from(row.level).unwrap_or(2),
        ok: row.ok,
        finished_at: row.finished_at,
        checked: row.checked.map(|checked| checked.0),
        problems: row.problems.0,
    }
}

/// A node's landed runs (newest first) grouped into their chains, each in its space.
fn chain_views(rows: &[LandedRow]) -> Answer<Vec<ChainView>> {
    let mut chains: Vec<ChainView> = Vec::new();
    for row in rows {
        let kind = RunKind::parse(&row.kind)
            .ok_or_else(|| StoreError::Database(format!("{:?} is not a run kind", row.kind)))?;
        let run = RunView {
            seq: row.seq,
            kind,
            started_at: row.started_at,
            finished_at: row.finished_at,
            bytes: row.bytes,
            verified_at: row.verified_at,
            requested_by: row
                .requested_by
                .clone()
                .unwrap_or_else(|| store::REQUESTED_BY.to_string()),
        };
        match chains
            .iter_mut()
            .find(|chain| chain.full_seq == row.full_seq && chain.space_id == row.space_id)
        {
            Some(chain) => chain.runs.push(run),
            None => chains.push(ChainView {
                space_id: row.space_id,
                space_state: row.space_state.clone(),
                target_id: row.target_id,
                target_name: row.target_name.clone(),
                full_seq: row.full_seq,
                runs: vec![run],
            }),
        }
    }
    Ok(chains)
}

pub async fn node_backups(state: State, request: NodeBackupsRequest) -> Answer<NodeBackups> {
    request
        .actor
        .require(Level::Read, "reading a node's backups")?;
    let now = Utc::now();
    let mut connection = connection(&state).await?;
    let node = known_node(&mut connection, request.node_id).await?;
    let (fleet, _, _) = store::fleet_policy(&mut connection).await?;
    let (stored, _, _) = store::node_policy(&mut connection, node.node_id).await?;
    let applied = effective(&fleet, &stored);
    let rows = store::landed_runs(&mut connection, node.node_id).await?;
    let chains = chain_views(&rows)?;
    let last_backup = rows.first().map(|row| row.started_at);
    let last_full = rows
        .iter()
        .find(|row| row.kind == RunKind::Full.as_str())
        .map(|row| row.started_at);
    let oldest = rows.last().map(|row| row.started_at);
    let last = store::last_verify(&mut connection, node.node_id).await?;
    let last_facts = last.as_ref().map(|row| LastVerify {
        ok: row.ok,
        finished_at: row.finished_at,
        problems: row.problems.0.clone(),
    });
    // The storage check's finding (BK-15), as the storage pass last stamped it.
    let shelf = crate::store::shelf::shelf(&mut connection, node.node_id).await?;
    let orphans = OrphansView {
        waiting: u32::try_from(shelf.orphans_waiting).unwrap_or(0),
        deleted: u64::try_from(shelf.orphans_deleted).unwrap_or(0),
        bytes_deleted: u64::try_from(shelf.orphan_bytes_deleted).unwrap_or(0),
    };
    let shelf_problem = shelf.problem;
    let (state_kind, problem, words) = schedule::verify_state(
        &applied.fields,
        shelf_problem.as_deref(),
        last_facts.as_ref(),
        oldest,
        now,
    );
    let machine = machine_key(node.node_id, node.host_node_id);
    let busy = store::holder(&mut connection, &machine)
        .await?
        .map(|job| turn(&job));
    Ok(NodeBackups {
        node_id: node.node_id,
        chains,
        last_backup,
        last_full,
        oldest,
        shelf_problem,
        verify_state: VerifyState {
            state: state_kind,
            problem,
            words,
            last: last.map(verify_view),
        },
        recovery_key: recovery_key_view(&mut connection, node.node_id).await?,
        last_failure: store::last_failure(&mut connection, node.node_id).await?,
        busy,
        orphans,
    })
}

fn held(job: &JobRow) -> RpcError {
    let what = match job.job_id {
        Some(id) => format!("job {id}"),
        None => "a job the agent channel has not yet taken".to_string(),
    };
    RpcError::new(
        ErrorCode::Conflict,
        format!(
            "the machine's turn is held by {} ({what} of node {}, asked by {} at {}); one backup, verify or restore at a time per machine",
            job.primitive,
            job.node_id,
            job.requested_by,
            job.dispatched_at.format("%Y-%m-%d %H:%M:%S UTC")
        ),
    )
}

/// Dispatches `job` in `transaction` (with whatever else it holds), commits, and waits for
/// the agent channel's job id.
async fn act(
    state: &State,
    mut transaction: sqlx::Transaction<'static, sqlx::Postgres>,
    job: Dispatch<'_>,
) -> Answer<Dispatched> {
    let key = job.key.clone();
    if let Err(holder) = store::dispatch(&mut transaction, job).await? {
        return Err(held(&holder).into());
    }
    transaction.commit().await.map_err(StoreError::from)?;
    let deadline = tokio::time::Instant::now() + state.job_id_wait;
    loop {
        let mut connection = connection(state).await?;
        if let Some(job_id) = store::job_id_of(&mut connection, &key).await? {
            return Ok(Dispatched { job_id });
        }
        drop(connection);
        if tokio::time::Instant::now() >= deadline {
            return Err(RpcError::new(
                ErrorCode::Unavailable,
                format!(
                    "the job was asked for (key {key}) but the agent channel has not said its id yet; it runs when taken"
                ),
            ).into());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

async fn paired_node(connection: &mut PgConnection, node: NodeId) -> Answer<NodeRow> {
    let row = known_node(connection, node).await?;
    if !row.paired {
        return Err(RpcError::new(
            ErrorCode::NotPaired,
            format!("node {node}'s agent is not paired (it moved away)"),
        )
        .into());
    }
    Ok(row)
}

pub async fn run_now(state: State, request: RunNow) -> Answer<Dispatched> {
    request.actor.require(Level::Change, "running a backup")?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let node = paired_node(&mut transaction, request.node_id).await?;
    let (fleet, _, _) = store::fleet_policy(&mut transaction).await?;
    let (stored, _, _) = store::node_policy(&mut transaction, node.node_id).await?;
    let fields = effective(&fleet, &stored).fields;
    let machine = machine_key(node.node_id, node.host_node_id);
    let job = crate::tasks::backup_job(
        &mut transaction,
        node.node_id,
        machine,
        &fields,
        &request.actor.name,
        now,
    )
    .await?;
    act(&state, transaction, job).await
}

/// A landed run of the node, or `not_found` naming it.
async fn landed_seq(connection: &mut PgConnection, node: NodeId, seq: i64) -> Answer<()> {
    let landed = store::landed_runs(connection, node).await?;
    if landed.iter().any(|run| run.seq == seq) {
        Ok(())
    } else {
        Err(RpcError::new(
            ErrorCode::NotFound,
            format!("seq: node {node} has no run {seq} that landed"),
        )
        .into())
    }
}

pub async fn verify(state: State, request: VerifyRequest) -> Answer<Dispatched> {
    request.actor.require(Level::Change, "verifying a backup")?;
    if !(2..=3).contains(&request.level) {
        return Err(RpcError::new(
            ErrorCode::InvalidRequest,
            format!(
                "level: {} is not 2 (open and read) or 3 (rehearse a restore)",
                request.level
            ),
        )
        .into());
    }
    let mut transaction = state.store.begin().await?;
    let node = paired_node(&mut transaction, request.node_id).await?;
    landed_seq(&mut transaction, node.node_id, request.seq).await?;
    let job = Dispatch {
        key: format!(
            "backups/node-{}/verify-{}/{}",
            node.node_id,
            request.level,
            Uuid::now_v7()
        ),
        node_id: node.node_id,
        machine: machine_key(node.node_id, node.host_node_id),
        primitive: "verify_backup",
        params: serde_json::json!({"seq": request.seq, "level": request.level}),
        seq: Some(request.seq),
        requested_by: &request.actor.name,
        at: Utc::now(),
    };
    act(&state, transaction, job).await
}

pub async fn restore(state: State, request: RestoreRequest) -> Answer<Dispatched> {
    request.actor.require(Level::Admin, "restoring a backup")?;
    let mut transaction = state.store.begin().await?;
    let node = paired_node(&mut transaction, request.node_id).await?;
    landed_seq(&mut transaction, node.node_id, request.seq).await?;
    let primitive = match request.what {
        RestoreWhat::Database => "restore_database",
        RestoreWhat::Project => "restore_project",
    };
    let job = Dispatch {
        key: format!(
            "backups/node-{}/{primitive}/{}",
            node.node_id,
            Uuid::now_v7()
        ),
        node_id: node.node_id,
        machine: machine_key(node.node_id, node.host_node_id),
        primitive,
        params: serde_json::json!({"seq": request.seq}),
        seq: Some(request.seq),
        requested_by: &request.actor.name,
        at: Utc::now(),
    };
    act(&state, transaction, job).await
}

/// BK-02: new backups go to the target; the next run (dispatched now) is a full there.
pub async fn move_node(state: State, request: MoveRequest) -> Answer<Dispatched> {
    request
        .actor
        .require(Level::Admin, "moving a node's backups")?;
    let now = Utc::now();
    let mut transaction = state.store.begin().await?;
    let node = paired_node(&mut transaction, request.node_id).await?;
    if !store::target_exists(&mut transaction, request.target_id).await? {
        return Err(RpcError::new(
            ErrorCode::NotFound,
            format!("target_id: no target {}", request.target_id),
        )
        .into());
    }
    let machine = machine_key(node.node_id, node.host_node_id);
    if let Some(holder) = store::holder(&mut transaction, &machine).await? {
        return Err(held(&holder).into());
    }
    store::move_to(&mut transaction, node.node_id, request.target_id).await?;
    let (fleet, _, _) = store::fleet_policy(&mut transaction).await?;
    let (stored, _, _) = store::node_policy(&mut transaction, node.node_id).await?;
    let fields = effective(&fleet, &stored).fields;
    let used = store::newest_used_seq(&mut transaction, node.node_id).await?;
    // The new space holds nothing: the run is a full (no landed run is in it).
    let next = next_run(&fields, used, None, None, now);
    let job = crate::tasks::run_dispatch(node.node_id, machine, &next, &request.actor.name, now);
    act(&state, transaction, job).await
}

/// BK-22: the recovery key as the node's latest check_status reported it (none before one did).
async fn recovery_key_view(
    connection: &mut capstan_store::PgConnection,
    node: NodeId,
) -> Answer<Option<capstan_events::backups::rpc::RecoveryKeyView>> {
    let (key, at) = crate::store::health::recovery_key(connection, node).await?;
    use crate::domain::health::RecoveryKey;
    let (state, fingerprint) = match key {
        RecoveryKey::Unreported => return Ok(None),
        RecoveryKey::None => ("none", None),
        RecoveryKey::Invalid => ("invalid", None),
        RecoveryKey::Already { fingerprint } => ("already", Some(fingerprint)),
    };
    Ok(at.map(
        |reported_at| capstan_events::backups::rpc::RecoveryKeyView {
            state: state.to_string(),
            fingerprint,
            reported_at,
        },
    ))
}
