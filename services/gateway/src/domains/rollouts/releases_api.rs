//! `/api/v1/releases` and `/api/v1/fleet/versions` (issue 15): publishing a signed release
//! (level 10), listing releases and the fleet's spread across versions (level 7). Releases
//! belong to rollouts; the versions nodes run and their update verdicts to the agent channel.
//! The plane never holds the signing key: a release arrives signed by `capstan release`.
//! `/api/v1/site-releases` (issue 16) publishes (level 10) and lists (level 7) site releases:
//! a signed file manifest and the archive of its files, from `capstan release site`.

use crate::api_doc::{refusals, Answer, Doc};
use crate::route::schema;
use std::collections::BTreeMap;

use axum::{
    extract::{Request, State},
    http::StatusCode,
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use base64::{engine::general_purpose::STANDARD, Engine as _};
use bytes::{Bytes, BytesMut};
use capstan_events::agent_channel::rpc::{FleetVersions, FleetVersionsRequest};
use capstan_events::rollouts::rpc::{
    ListReleases, ListSiteReleases, PublishRelease, PublishSiteRelease, ReleaseView, Releases,
    SiteReleaseView, SiteReleases,
};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask,
    error::ApiError,
    identity::Operator,
    input::{parse_json, read_limited},
    route::{Method, Route},
    AppState,
};

/// The most a release upload may be: two binaries and a bundle, base64 in JSON.
pub const RELEASE_BODY_LIMIT: usize = 512 * 1024 * 1024;
/// How long rollouts has to store an upload (megabytes through the object store).
const PUBLISH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(120);

use capstan_events::rpc::Level::{Admin, Read};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/releases",
        Read,
        |filter| on(filter, list),
        None,
    )
    .answer(schema::<capstan_events::rollouts::rpc::Releases>)
    .doc(Doc {
        operation: "listReleases",
        tag: "releases",
        summary: "List the published releases, highest sequence (the one on offer) first",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/releases",
        Admin,
        |filter| on(filter, publish),
        Some("publish_release"),
    )
    .body(schema::<ReleaseBody>)
    .answer(schema::<capstan_events::rollouts::rpc::ReleaseView>)
    .doc(Doc {
        operation: "publishRelease",
        tag: "releases",
        summary: "Publish a signed release of the agent",
        description: Some(
            "Audited. The metadata is signed where `capstan release` runs; the \
            plane never holds the key. Refused when the version or the sequence is already \
            published, or the sequence is not higher than every published one; the same metadata \
            again changes nothing.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE_IN_STATE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/fleet/versions",
        Read,
        |filter| on(filter, fleet_versions),
        None,
    )
    .answer(schema::<capstan_events::agent_channel::rpc::FleetVersions>)
    .doc(Doc {
        operation: "fleetVersions",
        tag: "releases",
        summary: "How many nodes run each agent version, and each node's update verdict",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/site-releases",
        Read,
        |filter| on(filter, list_site),
        None,
    )
    .answer(schema::<capstan_events::rollouts::rpc::SiteReleases>)
    .doc(Doc {
        operation: "listSiteReleases",
        tag: "releases",
        summary: "List the published site releases, newest first, with each deploy-to-all outcome",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Post,
        "/api/v1/site-releases",
        Admin,
        |filter| on(filter, publish_site),
        Some("publish_site_release"),
    )
    .body(schema::<SiteReleaseBody>)
    .answer(schema::<capstan_events::rollouts::rpc::SiteReleaseView>)
    .doc(Doc {
        operation: "publishSiteRelease",
        tag: "releases",
        summary: "Publish a signed site release",
        description: Some(
            "Audited. A site release made by `capstan release site`: the signed \
            manifest (RELEASE_MANIFEST and its .sig) and the tar of exactly its files, base64. \
            Refused when the version is already published, or the archive does not match the \
            manifest. With deploy_all, the deploy to every node is started (RO-23). See \
            docs/site-releases.md.",
        ),
        parameters: &[],
        body: None,
        answer: Answer::CREATED,
        refusals: refusals::ONE_IN_STATE,
    }),
];

pub async fn list(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<Releases>, ApiError> {
    Ok(Json(ask(&state, &ListReleases { actor }).await?))
}

pub async fn fleet_versions(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<FleetVersions>, ApiError> {
    Ok(Json(ask(&state, &FleetVersionsRequest { actor }).await?))
}

/// `POST /api/v1/releases`: what `capstan release upload` sends.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReleaseBody {
    /// The signed metadata document, as `capstan release sign` wrote it.
    pub metadata: String,
    /// Each binary the metadata names, standard base64, by architecture.
    pub binaries: BTreeMap<String, String>,
    /// The support bundle's archive, standard base64, when the metadata names one.
    #[serde(default)]
    pub support_bundle: Option<String>,
    /// The release's `RELEASE_STATEMENT` for the public log (AG-27), as the log's tooling wrote
    /// it. It may come later: the same metadata uploaded again with a statement stores it.
    #[serde(default)]
    pub statement: Option<String>,
}

/// The artifacts in the order rollouts reads them: binaries by architecture, then the bundle.
fn artifacts(body: &ReleaseBody) -> Result<Bytes, ApiError> {
    let mut joined = BytesMut::new();
    let decode = |field: String, text: &str| {
        STANDARD
            .decode(text)
            .map_err(|_| ApiError::invalid(&field, "is not standard base64"))
    };
    for (arch, text) in &body.binaries {
        joined.extend_from_slice(&decode(format!("binaries.{arch}"), text)?);
    }
    if let Some(bundle) = &body.support_bundle {
        joined.extend_from_slice(&decode("support_bundle".into(), bundle)?);
    }
    Ok(joined.freeze())
}

pub async fn publish(
    State(state): State<AppState>,
    Operator(actor): Operator,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_limited(&parts.headers, body, RELEASE_BODY_LIMIT).await?;
    let body: ReleaseBody = parse_json(&bytes)?;
    drop(bytes);
    let artifacts = artifacts(&body)?;
    let request = PublishRelease {
        actor,
        metadata: body.metadata,
        statement: body.statement,
    };
    let (view, _): (ReleaseView, Bytes) = state
        .bus
        .ask_with_body(&request, artifacts, PUBLISH_TIMEOUT.max(state.rpc_timeout))
        .await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}

/// `POST /api/v1/site-releases`: what `capstan release site` sends (issue 16).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SiteReleaseBody {
    pub version: String,
    /// The manifest file (`RELEASE_MANIFEST`), exactly as signed.
    pub manifest: String,
    /// Its signature file (`RELEASE_MANIFEST.sig`).
    pub signatures: String,
    /// The release's tar archive, standard base64.
    pub archive: String,
    /// Start the deploy to every node once published (RO-23).
    #[serde(default)]
    pub deploy_all: bool,
}

pub async fn list_site(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<SiteReleases>, ApiError> {
    Ok(Json(ask(&state, &ListSiteReleases { actor }).await?))
}

pub async fn publish_site(
    State(state): State<AppState>,
    Operator(actor): Operator,
    request: Request,
) -> Result<Response, ApiError> {
    let (parts, body) = request.into_parts();
    let bytes = read_limited(&parts.headers, body, RELEASE_BODY_LIMIT).await?;
    let body: SiteReleaseBody = parse_json(&bytes)?;
    drop(bytes);
    let archive = Bytes::from(
        STANDARD
            .decode(&body.archive)
            .map_err(|_| ApiError::invalid("archive", "is not standard base64"))?,
    );
    let request = PublishSiteRelease {
        actor,
        version: body.version,
        manifest: body.manifest,
        signatures: body.signatures,
        deploy_all: body.deploy_all,
    };
    let (view, _): (SiteReleaseView, Bytes) = state
        .bus
        .ask_with_body(&request, archive, PUBLISH_TIMEOUT.max(state.rpc_timeout))
        .await?;
    Ok((StatusCode::CREATED, Json(view)).into_response())
}
