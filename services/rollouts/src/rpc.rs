//! The questions rollouts answers: the gateway's (publish a release at level 10, list them at
//! level 7) and the agent channel's (`artifact`, for an agent it has already authenticated).

use bytes::Bytes;
pub mod site_releases;
pub mod staged;

use capstan_bus::{IntoRpcError, RpcServer};
use capstan_events::rollouts::{
    rpc::{
        ArtifactFound, ArtifactRequest, ListReleases, ListSiteReleases, PublishRelease,
        PublishSiteRelease, ReleaseView, Releases,
    },
    ReleasePublished,
};
use capstan_events::rpc::{ErrorCode, Level, RpcError};
use capstan_runtime::ServiceError;
use capstan_signing::release::SignedRelease;
use capstan_store::Store;
use chrono::Utc;

use crate::domain::releases::{self, ArtifactKind, Asked, Decision, Refusal};
use crate::store::{self, ReleaseRow};

/// A handler's answer: store failures go up with `?` (answered `unavailable`, logged once).
type Answer<T> = Result<T, ServiceError>;

/// A handler's answer in the rpc's words, for the routes that carry a body (whose handlers
/// answer an `RpcError`).
fn answered<T>(answer: Answer<T>) -> Result<T, RpcError> {
    answer.map_err(|error| error.into_rpc_error(crate::DOMAIN))
}

/// What every handler reaches.
#[derive(Clone)]
pub struct State {
    pub store: Store,
}

/// Adds rollouts' questions to `server`.
pub fn routes(server: RpcServer, state: State) -> RpcServer {
    let publishing = state.clone();
    let serving = state.clone();
    let publishing_site = state.clone();
    let listing_site = state.clone();
    server
        .route_with_body(move |request: PublishRelease, body: Bytes| {
            let state = publishing.clone();
            async move {
                Ok((
                    answered(publish(&state, request, &body).await)?,
                    Bytes::new(),
                ))
            }
        })
        .route_with_state(&state, list)
        .route_with_body(move |request: ArtifactRequest, _body: Bytes| {
            let state = serving.clone();
            async move { answered(artifact(&state, request).await) }
        })
        .route_with_body(move |request: PublishSiteRelease, body: Bytes| {
            let state = publishing_site.clone();
            async move {
                let view = answered(site_releases::publish(&state.store, request, body).await)?;
                Ok((view, Bytes::new()))
            }
        })
        .route_with_state(
            &listing_site,
            |state: State, request: ListSiteReleases| async move {
                site_releases::list(&state.store, request).await
            },
        )
}

fn view(row: &ReleaseRow, on_offer: bool) -> ReleaseView {
    let document = SignedRelease::parse(&row.metadata).ok();
    let signed = document.as_ref().map(|document| &document.signed);
    ReleaseView {
        version: row.version.clone(),
        sequence: row.sequence,
        expires_at: row.expires_at,
        arches: signed
            .map(|release| release.binaries.keys().cloned().collect())
            .unwrap_or_default(),
        has_support_bundle: signed.is_some_and(|release| release.support_bundle.is_some()),
        has_statement: row.has_statement,
        next_key: signed.and_then(|release| release.next_key.clone()),
        signed_by: document
            .as_ref()
            .map(|document| {
                document
                    .signatures
                    .iter()
                    .map(|signature| signature.keyid.clone())
                    .collect()
            })
            .unwrap_or_default(),
        published_at: row.published_at,
        published_by: row.published_by.clone(),
        on_offer,
    }
}

/// Stores a signed release and its artifacts with its event, or says why not. The same
/// metadata again is answered as already published and changes nothing (RO-05).
async fn publish(state: &State, request: PublishRelease, body: &[u8]) -> Answer<ReleaseView> {
    request
        .actor
        .require(Level::Admin, "publishing a release")?;
    let now = Utc::now();
    let upload = releases::read_upload(
        request.metadata.as_bytes(),
        body,
        request.statement.as_deref().map(str::as_bytes),
        now,
    )
    .map_err(|refusal| RpcError::new(ErrorCode::InvalidRequest, refusal.to_string()))?;
    let by = request.actor.name;
    let (rows, version) = state
        .store
        .in_transaction(move |transaction| {
            Box::pin(async move {
                store::lock(transaction).await?;
                let published = store::published(transaction).await?;
                match releases::decide(&upload, &published) {
                    Ok(Decision::AlreadyPublished) => {}
                    Ok(Decision::Statement) => {
                        let statement = upload
                            .statement
                            .as_ref()
                            .expect("a statement decision has a statement");
                        store::set_statement(transaction, upload.version(), &statement.bytes)
                            .await?;
                        tracing::info!(version = upload.version(), by = %by, "release statement stored");
                    }
                    Ok(Decision::Store) => {
                        let event = ReleasePublished {
                            version: upload.version().to_string(),
                            sequence: upload.sequence(),
                            expires_at: upload.expires_at,
                            arches: upload.document.signed.binaries.keys().cloned().collect(),
                            signed_by: upload
                                .document
                                .signatures
                                .iter()
                                .map(|signature| signature.keyid.clone())
                                .collect(),
                            published_by: by.clone(),
                        };
                        store::insert(transaction, &upload, event, now).await?;
                        tracing::info!(version = upload.version(), sequence = upload.sequence(), by = %by, "release published");
                    }
                    Err(refusal) => {
                        let code = match refusal {
                            Refusal::Invalid(_) => ErrorCode::InvalidRequest,
                            _ => ErrorCode::Conflict,
                        };
                        return Err(RpcError::new(code, refusal.to_string()).into());
                    }
                }
                let rows = store::list(transaction).await?;
                Ok::<_, ServiceError>((rows, upload.version().to_string()))
            })
        })
        .await?;
    let highest = rows.first().map(|row| row.sequence);
    Ok(rows
        .iter()
        .find(|row| row.version == version)
        .map(|row| view(row, Some(row.sequence) == highest))
        .ok_or_else(|| {
            RpcError::new(ErrorCode::Internal, "the release just stored is not there")
        })?)
}

async fn list(state: State, request: ListReleases) -> Answer<Releases> {
    request.actor.require(Level::Read, "listing releases")?;
    let mut connection = state.store.acquire().await?;
    let rows = store::list(&mut connection).await?;
    Ok(Releases {
        releases: rows
            .iter()
            .enumerate()
            .map(|(index, row)| view(row, index == 0))
            .collect(),
    })
}

fn not_found(message: String) -> ServiceError {
    RpcError::new(ErrorCode::NotFound, message).into()
}

/// An authenticated agent's `artifact` request: the release on offer's metadata as JSON, or
/// an artifact's bytes.
async fn artifact(state: &State, request: ArtifactRequest) -> Answer<(ArtifactFound, Bytes)> {
    if let Some(answer) = site_releases::artifact(
        &state.store,
        request.kind,
        request.version.as_deref(),
        request.sha256.as_deref(),
    )
    .await
    {
        let (metadata, bytes) = answer?;
        return Ok((ArtifactFound { metadata }, bytes));
    }
    let asked = releases::asked(request.kind, request.arch, request.version.as_deref())
        .map_err(|bad| RpcError::new(ErrorCode::InvalidRequest, bad.to_string()))?;
    let mut connection = state.store.acquire().await?;
    let (kind, arch, version) = match asked {
        Asked::Manifest => {
            let row = store::on_offer(&mut connection)
                .await?
                .ok_or_else(|| not_found("no release has been published to this plane".into()))?;
            let metadata: serde_json::Value =
                serde_json::from_slice(&row.metadata).map_err(|error| {
                    RpcError::new(
                        ErrorCode::Internal,
                        format!("stored metadata is not JSON: {error}"),
                    )
                })?;
            return Ok((
                ArtifactFound {
                    metadata: Some(metadata),
                },
                Bytes::new(),
            ));
        }
        Asked::Binary { arch, version } => (ArtifactKind::Binary, arch, version),
        Asked::SupportBundle { version } => (ArtifactKind::SupportBundle, String::new(), version),
        Asked::Statement { version } => {
            let bytes = store::statement(&mut connection, version.as_deref())
                .await?
                .ok_or_else(|| {
                    not_found(match &version {
                        Some(version) => format!("release {version} has no release statement"),
                        None => "the release on offer has no release statement".into(),
                    })
                })?;
            return Ok((ArtifactFound { metadata: None }, Bytes::from(bytes)));
        }
        Asked::NotKept(kind) => {
            return Err(not_found(format!("this plane keeps no {kind}")));
        }
    };
    let bytes = store::artifact(&mut connection, kind, &arch, version.as_deref())
        .await?
        .ok_or_else(|| {
            not_found(match &version {
                Some(version) => format!("release {version} has no {} {arch}", kind.as_str()),
                None => format!("the release on offer has no {} {arch}", kind.as_str()),
            })
        })?;
    Ok((ArtifactFound { metadata: None }, Bytes::from(bytes)))
}
