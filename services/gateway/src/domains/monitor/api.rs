//! `/api/v1/uptime`, `/api/v1/nodes/{id}/uptime`, `/api/v1/nodes/{id}/certificate`,
//! `/api/v1/fleet/security`, `/api/v1/nodes/{id}/edge-probe(s)` and `/api/v1/edge-probes/{id}`:
//! the monitor service's API (levels in the rows).

use crate::route::schema;
use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::on,
    Json,
};
use capstan_events::monitor::rpc::{
    CertificateView, EdgeProbeStarted, EdgeProbeView, EdgeProbes, FleetSecurity, GetCertificate,
    GetEdgeProbe, GetFleetSecurity, GetUptime, ListEdgeProbes, ListUptime, SetUptime,
    StartEdgeProbe, UptimeCheck, UptimeChecks, UptimeDetail,
};
use capstan_events::{monitor::CheckKind, Word as _};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{
    ask::ask,
    error::ApiError,
    identity::Operator,
    input::{JsonBody, NodePath, PathId, QueryParams},
    route::{Method, Route},
    AppState,
};

use capstan_events::rpc::Level::{Change, Read};

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    Route::operator(
        Method::Get,
        "/api/v1/uptime",
        Read,
        |filter| on(filter, list_uptime),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::UptimeChecks>),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/uptime",
        Read,
        |filter| on(filter, get_uptime),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::UptimeDetail>),
    Route::operator(
        Method::Put,
        "/api/v1/nodes/{id}/uptime",
        Change,
        |filter| on(filter, set_uptime),
        Some("set_uptime"),
    )
    .body(schema::<UptimeBody>)
    .answer(schema::<capstan_events::monitor::rpc::UptimeCheck>),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/certificate",
        Read,
        |filter| on(filter, get_certificate),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::CertificateView>),
    Route::operator(
        Method::Get,
        "/api/v1/fleet/security",
        Read,
        |filter| on(filter, fleet_security),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::FleetSecurity>),
    // MO-11: a look that changes nothing on the node (level 7), recorded as an act.
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/edge-probe",
        Read,
        |filter| on(filter, start_edge_probe),
        Some("edge_probe"),
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbeStarted>),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/edge-probes",
        Read,
        |filter| on(filter, list_edge_probes),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbes>),
    Route::operator(
        Method::Get,
        "/api/v1/edge-probes/{id}",
        Read,
        |filter| on(filter, get_edge_probe),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbeView>),
];

pub async fn list_uptime(
    State(state): State<AppState>,
    Operator(actor): Operator,
    uri: Uri,
) -> Result<Json<UptimeChecks>, ApiError> {
    let query = QueryParams::parse(&uri, &["status"])?;
    let request = ListUptime {
        actor,
        status: query.get::<String>("status", "up, down or unknown")?,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get_uptime(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<UptimeDetail>, ApiError> {
    Ok(Json(ask(&state, &GetUptime { actor, node_id }).await?))
}

/// `PUT /api/v1/nodes/{id}/uptime`: the node's whole check setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct UptimeBody {
    pub enabled: bool,
    /// `http_status` (the default), `keyword`, `tls_certificate` or `api`.
    #[serde(default = "http_status")]
    pub kind: String,
    /// `http://` or `https://`; none (or empty) checks nothing.
    #[serde(default)]
    pub url: Option<String>,
    /// For `keyword`: the text the page must contain.
    #[serde(default)]
    pub keyword: Option<String>,
    /// Seconds between checks; 60 when absent.
    #[serde(default)]
    pub interval_secs: Option<u32>,
}

fn http_status() -> String {
    "http_status".to_string()
}

pub async fn set_uptime(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
    JsonBody(body): JsonBody<UptimeBody>,
) -> Result<Json<UptimeCheck>, ApiError> {
    let request = SetUptime {
        actor,
        node_id,
        enabled: body.enabled,
        kind: CheckKind::parse(&body.kind).ok_or_else(|| {
            ApiError::invalid(
                "kind",
                "must be http_status, keyword, tls_certificate or api",
            )
        })?,
        url: body.url,
        keyword: body.keyword,
        interval_secs: body.interval_secs,
    };
    Ok(Json(ask(&state, &request).await?))
}

pub async fn get_certificate(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<CertificateView>, ApiError> {
    Ok(Json(ask(&state, &GetCertificate { actor, node_id }).await?))
}

/// `GET /api/v1/fleet/security`: one row per machine from its host report, red first
/// (MO-16, MO-17).
pub async fn fleet_security(
    State(state): State<AppState>,
    Operator(actor): Operator,
) -> Result<Json<FleetSecurity>, ApiError> {
    Ok(Json(ask(&state, &GetFleetSecurity { actor }).await?))
}

/// `POST /api/v1/nodes/{id}/edge-probe`: `202 {"id"}`; the run goes on in the monitor.
pub async fn start_edge_probe(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Response, ApiError> {
    let started: EdgeProbeStarted = ask(&state, &StartEdgeProbe { actor, node_id }).await?;
    Ok((StatusCode::ACCEPTED, Json(started)).into_response())
}

pub async fn get_edge_probe(
    State(state): State<AppState>,
    Operator(actor): Operator,
    PathId(id): PathId,
) -> Result<Json<EdgeProbeView>, ApiError> {
    Ok(Json(ask(&state, &GetEdgeProbe { actor, id }).await?))
}

pub async fn list_edge_probes(
    State(state): State<AppState>,
    Operator(actor): Operator,
    NodePath(node_id): NodePath,
) -> Result<Json<EdgeProbes>, ApiError> {
    Ok(Json(ask(&state, &ListEdgeProbes { actor, node_id }).await?))
}
