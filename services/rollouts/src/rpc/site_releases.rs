//! Site releases' questions (issue 16): publishing one (level 10, the archive as the body),
//! listing them (level 7), the agent's `release_manifest`, `release_file` and
//! `release_archive` artifacts, and RO-23's deploy to every node a publish may ask for.

use bytes::Bytes;
use capstan_bus::IntoRpcError;
use capstan_events::rollouts::rpc::AgentArtifactKind;
use capstan_events::rollouts::{
    rpc::{ListSiteReleases, PublishSiteRelease, SiteReleaseView, SiteReleases},
    staged::StartRollout,
};
use capstan_events::rpc::{Actor, ErrorCode, InvalidInput, Level, RpcError};
use capstan_events::Word as _;
use capstan_runtime::ServiceError;
use capstan_store::{Store, StoreError};
use chrono::{DateTime, Utc};
use serde_json::json;

use crate::domain::plan::{deploy_all_decision, DeployAll};
use crate::domain::site_releases::{self, file_by_hash};
use crate::store::site_releases::{self as store, SiteReleaseRow};

/// A handler's answer: store failures go up with `?` (answered `unavailable`, logged once).
type Answer<T> = Result<T, ServiceError>;

fn view(row: SiteReleaseRow) -> SiteReleaseView {
    SiteReleaseView {
        version: row.version,
        archive_sha256: row.archive_sha256,
        archive_bytes: row.archive_bytes,
        files: row.files,
        signed_by: row.signed_by,
        published_at: row.published_at,
        published_by: row.published_by,
        deploy_all: row.deploy_all,
        deploy_all_outcome: row.deploy_all_outcome,
        deploy_all_rollout: row.deploy_all_rollout,
        deploy_all_reason: row.deploy_all_reason,
    }
}

/// Stores a site release, or says why not: a version is published once (a second upload of
/// it is a conflict, whatever its bytes). A publish asking for a deploy to all decides it at
/// once (RO-23), or leaves it to the clock while another rollout runs.
pub async fn publish(
    store: &Store,
    request: PublishSiteRelease,
    archive: Bytes,
) -> Answer<SiteReleaseView> {
    request
        .actor
        .require(Level::Admin, "publishing a site release")?;
    let upload = site_releases::read_upload(
        &request.version,
        &request.manifest,
        &request.signatures,
        archive.to_vec(),
    )
    .map_err(|(field, reason)| RpcError::from(InvalidInput::new(field, reason)))?;
    let now = Utc::now();
    let version = upload.version.clone();
    let deploy_all = request.deploy_all;
    let by = request.actor.name;
    let publisher = by.clone();
    store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                if !store::insert(transaction, &upload, deploy_all, &publisher, now).await? {
                    return Err(RpcError::new(
                        ErrorCode::Conflict,
                        format!(
                            "site release {} is already published; a version is published once (publish a new version)",
                            upload.version
                        ),
                    )
                    .into());
                }
                Ok::<_, ServiceError>(())
            })
        })
        .await?;
    tracing::info!(%version, %by, deploy_all, "site release published");
    if deploy_all {
        decide_deploy_all(store, now).await?;
    }
    let mut connection = store.acquire().await?;
    Ok(store::get(&mut connection, &version)
        .await?
        .map(view)
        .ok_or_else(|| {
            RpcError::new(ErrorCode::Internal, "the release just stored is not there")
        })?)
}

pub async fn list(store: &Store, request: ListSiteReleases) -> Answer<SiteReleases> {
    request
        .actor
        .require(Level::Read, "listing site releases")?;
    let mut connection = store.acquire().await?;
    let rows = store::list(&mut connection).await?;
    Ok(SiteReleases {
        releases: rows.into_iter().map(view).collect(),
    })
}

/// The actor a deploy to all is started as: the publisher's, at the level a deploy to all
/// needs, named so the rollout says where it came from.
fn deploy_all_actor(published_by: &str) -> Actor {
    Actor {
        name: format!("deploy-all:{published_by}"),
        level: Level::Admin,
        address: None,
    }
}

/// RO-23: decides every deploy-to-all publish still pending: starts it when its release is the
/// newest and was published within the window and no other rollout runs, refuses it (with the
/// reason written back) when too late or no longer the newest, and leaves it pending while
/// another rollout runs (RO-16). A start already made for it (a crash between the start and
/// the write-back) is found and recorded, never started twice.
pub async fn decide_deploy_all(store: &Store, now: DateTime<Utc>) -> Result<(), StoreError> {
    let mut transaction = store.begin().await?;
    let pending = store::deploy_all_pending(&mut transaction).await?;
    if pending.is_empty() {
        return Ok(());
    }
    let newest = store::newest(&mut transaction).await?.unwrap_or_default();
    for (version, published_at, published_by) in pending {
        let actor = deploy_all_actor(&published_by);
        if let Some(id) = store::rollout_started_by(&mut transaction, &version, &actor.name).await?
        {
            store::record_deploy_all(&mut transaction, &version, Some(id), None).await?;
            continue;
        }
        let running = crate::store::staged::one_under_way(&mut transaction)
            .await?
            .is_some();
        match deploy_all_decision(published_at, &version, &newest, running, now) {
            DeployAll::Wait => {}
            DeployAll::Refuse(reason) => {
                store::record_deploy_all(&mut transaction, &version, None, Some(&reason)).await?;
            }
            DeployAll::Start => {
                let started = crate::rpc::staged::start(
                    crate::rpc::staged::State {
                        store: store.clone(),
                    },
                    StartRollout {
                        actor,
                        kind: None,
                        version: Some(version.clone()),
                        stages: Vec::new(),
                        all: true,
                        pages: None,
                    },
                )
                .await
                // Read in the rpc's words (a store failure logged once, as `unavailable`).
                .map_err(|error| error.into_rpc_error(crate::DOMAIN));
                match started {
                    Ok(rollout) => {
                        tracing::info!(%version, rollout = rollout.id, "deploy to all started");
                        store::record_deploy_all(
                            &mut transaction,
                            &version,
                            Some(rollout.id),
                            None,
                        )
                        .await?;
                    }
                    // Another start won the turn meanwhile: wait for the next tick.
                    Err(error)
                        if error.code == ErrorCode::Conflict
                            && error.message.contains("one rollout runs at a time") => {}
                    Err(error) if error.code == ErrorCode::Unavailable => {
                        return Err(StoreError::Unavailable(error.message));
                    }
                    Err(error) => {
                        store::record_deploy_all(
                            &mut transaction,
                            &version,
                            None,
                            Some(&error.message),
                        )
                        .await?;
                    }
                }
            }
        }
    }
    transaction.commit().await?;
    Ok(())
}

fn not_found(message: String) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, message).into()
}

fn need_version(version: Option<&str>, kind: &str) -> Answer<String> {
    match version {
        Some(version) if site_releases::version_ok(version) => Ok(version.to_string()),
        Some(_) => Err(RpcError::new(
            ErrorCode::InvalidRequest,
            format!("{kind}: version is not a site release version"),
        )
        .into()),
        None => Err(RpcError::new(
            ErrorCode::InvalidRequest,
            format!("{kind} names the version"),
        )
        .into()),
    }
}

/// The agent's site-release artifacts: `release_manifest {version}` (the manifest file and its
/// signature file, as JSON text), `release_archive {version}` (the tar's bytes),
/// `release_file {sha256}` (one file's bytes, of `version` when named). `None` for any other
/// kind.
pub async fn artifact(
    store: &Store,
    kind: AgentArtifactKind,
    version: Option<&str>,
    sha256: Option<&str>,
) -> Option<Answer<(Option<serde_json::Value>, Bytes)>> {
    let answer = async {
        let mut connection = store.acquire().await?;
        match kind {
            AgentArtifactKind::ReleaseManifest => {
                let version = need_version(version, kind.as_str())?;
                let (manifest, signatures) = store::manifest(&mut connection, &version)
                    .await?
                    .ok_or_else(|| not_found(format!("no site release {version}")))?;
                Ok((
                    Some(json!({
                        "version": version,
                        "manifest": String::from_utf8_lossy(&manifest),
                        "signatures": String::from_utf8_lossy(&signatures),
                    })),
                    Bytes::new(),
                ))
            }
            AgentArtifactKind::ReleaseArchive => {
                let version = need_version(version, kind.as_str())?;
                let archive = store::archive(&mut connection, &version)
                    .await?
                    .ok_or_else(|| not_found(format!("no site release {version}")))?;
                Ok((None, Bytes::from(archive)))
            }
            _ => {
                let sha256 = sha256.ok_or_else(|| {
                    RpcError::new(ErrorCode::InvalidRequest, "release_file names the sha256")
                })?;
                if let Some(version) = version {
                    need_version(Some(version), kind.as_str())?;
                }
                let archive = store::archive_holding(&mut connection, sha256, version)
                    .await?
                    .ok_or_else(|| not_found(format!("no site release lists a file {sha256}")))?;
                let bytes = file_by_hash(&archive, sha256)
                    .map_err(|error| {
                        RpcError::new(
                            ErrorCode::Internal,
                            format!("a stored archive cannot be read: {error}"),
                        )
                    })?
                    .ok_or_else(|| not_found(format!("no site release holds a file {sha256}")))?;
                Ok((None, Bytes::from(bytes)))
            }
        }
    };
    match kind {
        AgentArtifactKind::ReleaseManifest
        | AgentArtifactKind::ReleaseArchive
        | AgentArtifactKind::ReleaseFile => Some(answer.await),
        _ => None,
    }
}
