//! The questions asked of the backups service (`capstan.rpc.backups.*`): the operator's
//! targets (level 10, BK-04) and the fleet's coverage of them, and the broker's `backup_urls`, asked by the agent channel for a
//! node whose signed request it verified and whose named job it found running. A change and
//! the event it causes commit together.

pub mod node;

use capstan_events::NodeId;
use std::collections::BTreeMap;
use std::time::Duration;

use capstan_bus::RpcServer;
use capstan_events::backups::rpc::{
    BackupUrls, BackupUrlsAnswer, CreateTarget, FleetCoverage, FleetCoverageRequest, ListTargets,
    PresignedUrl, SetDefaultTarget, TargetView, Targets, COVERAGE_UNCOVERED_LISTED,
};
use capstan_events::backups::{TargetChanged, UrlOp};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_store::{Store, StoreError};
use chrono::Utc;

use crate::domain::broker::{self, Refusal};
use crate::domain::coverage::{self, TargetFacts};
use crate::domain::keys::{object_key, NodeKey};
use crate::domain::targets;
use crate::drivers::s3::{Http, Storage};
use crate::drivers::seal::{Credentials, SealError, Sealer};
use crate::store::{self, Space, TargetRow};

/// A handler's answer: store and bus failures go up with `?` (answered `unavailable`).
type Answer<T> = Result<T, ServiceError>;

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
    pub sealer: Sealer,
    pub http: Http,
    /// How long a presigned URL stays valid.
    pub url_ttl: Duration,
}

/// Adds the backups service's questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    server
        .route_with_state(&state, list_targets)
        .route_with_state(&state, create_target)
        .route_with_state(&state, set_default_target)
        .route_with_state(&state, backup_urls)
        .route_with_state(&state, fleet_coverage)
}

fn sealing(error: SealError) -> RpcError {
    RpcError::new(ErrorCode::Unavailable, error.to_string())
}

fn view(row: &TargetRow) -> Answer<TargetView> {
    Ok(TargetView {
        id: row.id,
        name: row.name.clone(),
        provider: row.provider()?,
        endpoint: row.endpoint.clone(),
        region: row.region.clone(),
        bucket: row.bucket.clone(),
        folder: row.folder.clone(),
        is_default: row.is_default,
        created_at: row.created_at,
    })
}

/// The storage of a target, with its credentials opened.
pub fn storage(state: &State, row: &TargetRow) -> Result<Storage, RpcError> {
    let credentials = state
        .sealer
        .open(row.id, &row.sealed_credentials)
        .map_err(sealing)?;
    Storage::new(
        &row.endpoint,
        &row.region,
        &row.bucket,
        &credentials,
        row.conditional_writes,
        state.http.clone(),
    )
    .map_err(|error| RpcError::new(ErrorCode::Unavailable, error.to_string()))
}

pub async fn list_targets(state: State, request: ListTargets) -> Answer<Targets> {
    request
        .actor
        .require(Level::Admin, "reading backup targets")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::targets(&mut connection).await?;
    Ok(Targets {
        targets: rows.iter().map(view).collect::<Answer<_>>()?,
        seal_key: state.sealer.view(),
    })
}

/// The Targets page's fleet coverage (level 10, like every target page): how many nodes back
/// up to each target and which are not backed up, and why, read in one transaction.
pub async fn fleet_coverage(state: State, request: FleetCoverageRequest) -> Answer<FleetCoverage> {
    request
        .actor
        .require(Level::Admin, "reading the fleet's backup coverage")?;
    let mut transaction = state.store.begin().await?;
    let targets: Vec<TargetFacts> = store::targets(&mut transaction)
        .await?
        .into_iter()
        .map(|row| TargetFacts {
            id: row.id,
            name: row.name,
            is_default: row.is_default,
        })
        .collect();
    let (fleet, _, _) = store::schedule::fleet_policy(&mut transaction).await?;
    let nodes = store::coverage::nodes(&mut transaction).await?;
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(coverage::coverage(
        &targets,
        &nodes,
        fleet.enabled,
        COVERAGE_UNCOVERED_LISTED,
    ))
}

/// BK-04: a target is saved only when its credential can list its folder; answers the
/// endpoint as stored.
async fn try_target(
    state: &State,
    checked: &targets::NewTarget,
    credentials: &Credentials,
) -> Answer<String> {
    let endpoint = checked.endpoint.as_str().trim_end_matches('/').to_string();
    let trial = Storage::new(
        &endpoint,
        &checked.region,
        &checked.bucket,
        credentials,
        true,
        state.http.clone(),
    )
    .map_err(|error| RpcError::new(ErrorCode::InvalidRequest, error.to_string()))?;
    let prefix = if checked.folder.is_empty() {
        String::new()
    } else {
        format!("{}/", checked.folder)
    };
    trial.probe(&prefix).await.map_err(|error| {
        RpcError::new(
            ErrorCode::InvalidRequest,
            format!("the target was not saved: listing its bucket with these keys failed: {error}"),
        )
    })?;
    Ok(endpoint)
}

/// BK-04: a target is checked, tried (its credential must list its folder), sealed and saved.
pub async fn create_target(state: State, request: CreateTarget) -> Answer<TargetView> {
    request
        .actor
        .require(Level::Admin, "adding a backup target")?;
    let checked = targets::check(&targets::Input {
        name: &request.name,
        provider: &request.provider,
        endpoint: &request.endpoint,
        region: &request.region,
        bucket: &request.bucket,
        folder: &request.folder,
        access_key: &request.access_key,
        secret_key: &request.secret_key,
    })
    .map_err(RpcError::from)?;
    if !state.sealer.has_key() {
        return Err(sealing(SealError::NoKey).into());
    }
    let credentials = Credentials {
        access_key: request.access_key.clone(),
        secret_key: request.secret_key.clone(),
    };
    let endpoint = try_target(&state, &checked, &credentials).await?;
    let mut transaction = state.store.begin().await?;
    if store::name_taken(&mut transaction, &checked.name).await? {
        return Err(RpcError::new(
            ErrorCode::AlreadyExists,
            format!("name: a target named {:?} exists", checked.name),
        )
        .into());
    }
    let id = store::next_target_id(&mut transaction).await?;
    let sealed = state.sealer.seal(id, &credentials).map_err(sealing)?;
    store::insert_target(
        &mut transaction,
        &store::NewTargetRow {
            id,
            name: &checked.name,
            provider: checked.provider,
            endpoint: &endpoint,
            region: &checked.region,
            bucket: &checked.bucket,
            folder: &checked.folder,
            sealed_credentials: &sealed,
            conditional_writes: true,
            is_default: false,
            created_by: &request.actor.name,
        },
    )
    .await?;
    let row = store::target(&mut transaction, id)
        .await?
        .ok_or_else(|| RpcError::new(ErrorCode::Internal, "the new target is not there"))?;
    store::target_changed(
        &mut transaction,
        TargetChanged {
            target_id: id,
            name: row.name.clone(),
            provider: checked.provider,
            is_default: false,
            changed_by: request.actor.name.clone(),
            changed_at: Utc::now(),
        },
    )
    .await?;
    transaction.commit().await.map_err(StoreError::from)?;
    view(&row)
}

/// "Where new backups go" (BK-04).
pub async fn set_default_target(state: State, request: SetDefaultTarget) -> Answer<TargetView> {
    request
        .actor
        .require(Level::Admin, "choosing where new backups go")?;
    let mut transaction = state.store.begin().await?;
    let Some(row) = store::target(&mut transaction, request.target_id).await? else {
        return Err(RpcError::new(
            ErrorCode::NotFound,
            format!("no target {}", request.target_id),
        )
        .into());
    };
    store::set_default(&mut transaction, row.id).await?;
    store::target_changed(
        &mut transaction,
        TargetChanged {
            target_id: row.id,
            name: row.name.clone(),
            provider: row.provider()?,
            is_default: true,
            changed_by: request.actor.name.clone(),
            changed_at: Utc::now(),
        },
    )
    .await?;
    let row = store::target(&mut transaction, row.id)
        .await?
        .ok_or_else(|| RpcError::new(ErrorCode::Internal, "the target went away"))?;
    transaction.commit().await.map_err(StoreError::from)?;
    view(&row)
}

fn refused(refusal: Refusal) -> RpcError {
    match refusal {
        Refusal::Invalid(invalid) => invalid.into(),
        Refusal::Forbidden(why) => RpcError::new(ErrorCode::Forbidden, why),
    }
}

fn presigned(
    key: &NodeKey,
    method: &str,
    signed: crate::drivers::s3::Presigned,
    ttl: Duration,
) -> PresignedUrl {
    PresignedUrl {
        key: key.as_string(),
        method: method.to_string(),
        url: signed.url.to_string(),
        headers: signed.headers.into_iter().collect::<BTreeMap<_, _>>(),
        expires_at: Utc::now() + chrono::Duration::from_std(ttl).unwrap_or_default(),
    }
}

/// The broker (BK-14, BACKUPS-CONTRACT.md): PUTs only for a running `backup_run` under its own
/// seq and only for keys that do not exist yet (checked here with the plane's HEAD, and by the
/// store itself through the signed `If-None-Match: *`); GETs only of this node's own runs, in
/// the space each run is in (BK-01). The node never receives a credential.
pub async fn backup_urls(state: State, request: BackupUrls) -> Answer<BackupUrlsAnswer> {
    let plan = broker::plan(
        &request.op,
        &request.primitive,
        &request.params,
        &request.keys,
    )
    .map_err(refused)?;
    issued_here(&state, &request).await?;
    match (plan.op, plan.run_seq) {
        (UrlOp::Put, Some(seq)) => put_urls(&state, &request, seq, &plan.keys).await,
        (UrlOp::Put, None) => Err(RpcError::new(ErrorCode::Forbidden, "no run to write").into()),
        (UrlOp::Get, _) => get_urls(&state, request.node_id, &plan.keys).await,
    }
}

/// BK-14: PUTs for a running `backup_run`'s own seq, each of a key that does not exist yet.
async fn put_urls(
    state: &State,
    request: &BackupUrls,
    seq: i64,
    keys: &[NodeKey],
) -> Answer<BackupUrlsAnswer> {
    let (node, ttl) = (request.node_id, state.url_ttl);
    let space = open_run(state, request, seq).await?;
    let storage = storage(state, &space.target)?;
    let mut urls = Vec::with_capacity(keys.len());
    for key in keys {
        let object = object_key(&space.target.folder, space.id, node, key);
        let exists = storage
            .head(&object)
            .await
            .map_err(|error| RpcError::new(ErrorCode::Unavailable, error.to_string()))?;
        if exists.is_some() {
            return Err(RpcError::new(
                ErrorCode::AlreadyExists,
                format!("{} exists: no key is written twice", key.as_string()),
            )
            .into());
        }
        urls.push(presigned(
            key,
            "PUT",
            storage.presign_put(&object, ttl),
            ttl,
        ));
    }
    Ok(BackupUrlsAnswer { urls })
}

/// BK-01, BK-14: GETs only of this node's own runs, in the space each run is in.
async fn get_urls(state: &State, node: NodeId, keys: &[NodeKey]) -> Answer<BackupUrlsAnswer> {
    let ttl = state.url_ttl;
    let mut connection = state.store.acquire().await?;
    let mut seqs: Vec<i64> = keys.iter().map(|key| key.seq).collect();
    seqs.dedup();
    let runs = store::runs_of(&mut connection, node, &seqs).await?;
    let mut spaces: BTreeMap<i64, (Space, Storage)> = BTreeMap::new();
    let mut urls = Vec::with_capacity(keys.len());
    for key in keys {
        let run = runs.iter().find(|run| run.seq == key.seq).ok_or_else(|| {
            RpcError::new(
                ErrorCode::NotFound,
                format!("{}: run {} is not this node's", key.as_string(), key.seq),
            )
        })?;
        let (space, storage) = match spaces.entry(run.space_id) {
            std::collections::btree_map::Entry::Occupied(entry) => entry.into_mut(),
            std::collections::btree_map::Entry::Vacant(entry) => {
                let space = store::space(&mut connection, run.space_id)
                    .await?
                    .ok_or_else(|| {
                        RpcError::new(ErrorCode::NotFound, format!("run {} has no space", run.seq))
                    })?;
                let storage = storage(state, &space.target)?;
                entry.insert((space, storage))
            }
        };
        let object = object_key(&space.target.folder, space.id, node, key);
        urls.push(presigned(
            key,
            "GET",
            storage.presign_get(&object, ttl),
            ttl,
        ));
    }
    Ok(BackupUrlsAnswer { urls })
}

/// Issue 27: the job is one this service asked for (its own table, by the correlation id it
/// gave), else it gets nothing.
async fn issued_here(state: &State, request: &BackupUrls) -> Answer<()> {
    let issued = match request.correlation_id {
        Some(correlation) => {
            let mut connection = state.store.acquire().await?;
            store::schedule::issued_job(
                &mut connection,
                correlation,
                request.node_id,
                request.job_id,
            )
            .await?
        }
        None => None,
    };
    broker::issued_here(
        request.job_id,
        issued
            .as_ref()
            .map(|job| (job.primitive.as_str(), &job.params.0)),
        &request.primitive,
        &request.params,
    )
    .map_err(|refusal| refused(refusal).into())
}

/// The node's active space, opened on the target where new backups go when it has none.
async fn active_space(connection: &mut capstan_store::PgConnection, node: NodeId) -> Answer<Space> {
    if let Some(space) = store::active_space(connection, node).await? {
        return Ok(space);
    }
    let target = store::default_target(connection).await?.ok_or_else(|| {
        RpcError::new(
            ErrorCode::Unavailable,
            "no target is chosen as where new backups go",
        )
    })?;
    let id = store::open_space(connection, node, target.id).await?;
    store::space(connection, id)
        .await?
        .ok_or_else(|| RpcError::new(ErrorCode::Internal, "the new space is not there").into())
}

/// The space a `backup_run`'s seq writes to: the run's own when the broker opened it already
/// for this job; else a new run in the node's active space (opened on the target where new
/// backups go when the node has none), if the seq is newer than every run the node has.
async fn open_run(state: &State, request: &BackupUrls, seq: i64) -> Answer<Space> {
    let node = request.node_id;
    let mut transaction = state.store.begin().await?;
    if let Some(run) = store::run(&mut transaction, node, seq).await? {
        if run.job_id != request.job_id {
            return Err(RpcError::new(
                ErrorCode::Forbidden,
                format!("run {seq} was written by job {}, not this one", run.job_id),
            )
            .into());
        }
        let space = store::space(&mut transaction, run.space_id)
            .await?
            .ok_or_else(|| RpcError::new(ErrorCode::NotFound, format!("run {seq} has no space")))?;
        return Ok(space);
    }
    if let Some(newest) = store::newest_seq(&mut transaction, node).await? {
        if seq <= newest {
            return Err(RpcError::new(
                ErrorCode::Forbidden,
                format!("seq {seq} is not after this node's newest run {newest}: seqs only grow"),
            )
            .into());
        }
    }
    let space = active_space(&mut transaction, node).await?;
    // BK-02: a chain may not span spaces; an incremental is written where its previous run is.
    if let Some(previous) = broker::extends(&request.params).map_err(refused)? {
        let previous_space = store::run(&mut transaction, node, previous)
            .await?
            .map(|run| run.space_id);
        broker::chain_in_space(seq, previous, previous_space, space.id).map_err(refused)?;
    }
    let kind = request
        .params
        .get("kind")
        .and_then(serde_json::Value::as_str)
        .filter(|kind| matches!(*kind, "full" | "incremental"));
    if !store::open_run(&mut transaction, node, seq, space.id, request.job_id, kind).await? {
        // Another request of the same job opened it just now, or another job holds the seq.
        return Err(RpcError::new(
            ErrorCode::Conflict,
            format!("run {seq} is being opened by another request; ask again"),
        )
        .into());
    }
    transaction.commit().await.map_err(StoreError::from)?;
    Ok(space)
}
