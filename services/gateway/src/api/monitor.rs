//! `/api/v1/uptime`, `/api/v1/nodes/{id}/uptime`, `/api/v1/nodes/{id}/certificate`,
//! `/api/v1/fleet/security`, `/api/v1/nodes/{id}/edge-probe(s)` and `/api/v1/edge-probes/{id}`:
//! the monitor service's API (levels in the rows).

use axum::{
    extract::State,
    http::{StatusCode, Uri},
    response::{IntoResponse, Response},
    routing::{on, MethodFilter, MethodRouter},
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
    input::{JsonBody, NodeId, PathId, QueryParams},
    route::{Access, Method, Op, Route},
    AppState,
};

/// What each monitor route does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MonitorOp {
    ListUptime,
    GetUptime,
    SetUptime,
    GetCertificate,
    FleetSecurity,
    StartEdgeProbe,
    GetEdgeProbe,
    ListEdgeProbes,
}

use capstan_events::rpc::Level::{Change, Read};

const fn row(
    method: Method,
    path: &'static str,
    level: capstan_events::rpc::Level,
    op: MonitorOp,
    action: Option<&'static str>,
) -> Route {
    Route {
        method,
        path,
        access: Access::Operator(level),
        op: Op::Monitor(op),
        action,
    }
}

/// This domain's rows of the route table.
pub const ROUTES: &[Route] = &[
    row(
        Method::Get,
        "/api/v1/uptime",
        Read,
        MonitorOp::ListUptime,
        None,
    ),
    row(
        Method::Get,
        "/api/v1/nodes/{id}/uptime",
        Read,
        MonitorOp::GetUptime,
        None,
    ),
    row(
        Method::Put,
        "/api/v1/nodes/{id}/uptime",
        Change,
        MonitorOp::SetUptime,
        Some("set_uptime"),
    ),
    row(
        Method::Get,
        "/api/v1/nodes/{id}/certificate",
        Read,
        MonitorOp::GetCertificate,
        None,
    ),
    row(
        Method::Get,
        "/api/v1/fleet/security",
        Read,
        MonitorOp::FleetSecurity,
        None,
    ),
    // MO-11: a look that changes nothing on the node (level 7), recorded as an act.
    row(
        Method::Post,
        "/api/v1/nodes/{id}/edge-probe",
        Read,
        MonitorOp::StartEdgeProbe,
        Some("edge_probe"),
    ),
    row(
        Method::Get,
        "/api/v1/nodes/{id}/edge-probes",
        Read,
        MonitorOp::ListEdgeProbes,
        None,
    ),
    row(
        Method::Get,
        "/api/v1/edge-probes/{id}",
        Read,
        MonitorOp::GetEdgeProbe,
        None,
    ),
];

/// The handler of `op`.
pub fn handler(filter: MethodFilter, op: MonitorOp) -> MethodRouter<AppState> {
    match op {
        MonitorOp::ListUptime => on(filter, list_uptime),
        MonitorOp::GetUptime => on(filter, get_uptime),
        MonitorOp::SetUptime => on(filter, set_uptime),
        MonitorOp::GetCertificate => on(filter, get_certificate),
        MonitorOp::FleetSecurity => on(filter, fleet_security),
        MonitorOp::StartEdgeProbe => on(filter, start_edge_probe),
        MonitorOp::GetEdgeProbe => on(filter, get_edge_probe),
        MonitorOp::ListEdgeProbes => on(filter, list_edge_probes),
    }
}

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
    NodeId(node_id): NodeId,
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
    NodeId(node_id): NodeId,
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
    NodeId(node_id): NodeId,
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
    NodeId(node_id): NodeId,
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
    NodeId(node_id): NodeId,
) -> Result<Json<EdgeProbes>, ApiError> {
    Ok(Json(ask(&state, &ListEdgeProbes { actor, node_id }).await?))
}
