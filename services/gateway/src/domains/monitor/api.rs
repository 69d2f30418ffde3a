//! `/api/v1/uptime`, `/api/v1/nodes/{id}/uptime`, `/api/v1/nodes/{id}/certificate`,
//! `/api/v1/fleet/security`, `/api/v1/nodes/{id}/edge-probe(s)` and `/api/v1/edge-probes/{id}`:
//! the monitor service's API (levels in the rows).

use crate::api_doc::{refusals, Answer, Doc, Parameter};
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
use capstan_events::monitor::CheckKind;
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
    .answer(schema::<capstan_events::monitor::rpc::UptimeChecks>)
    .doc(Doc {
        operation: "listUptime",
        tag: "monitor",
        summary: "Every node's uptime check and its live state (MO-01)",
        description: None,
        parameters: &[Parameter::Query {
            name: "status",
            description: "Only the checks of this status: `up`, `down` or `unknown` (never \
                    checked).",
            schema: r##"{"enum": ["up", "down", "unknown"], "type": "string"}"##,
        }],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/uptime",
        Read,
        |filter| on(filter, get_uptime),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::UptimeDetail>)
    .doc(Doc {
        operation: "getUptime",
        tag: "monitor",
        summary: "A node's uptime check with its last day of history",
        description: None,
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Put,
        "/api/v1/nodes/{id}/uptime",
        Change,
        |filter| on(filter, set_uptime),
        Some("set_uptime"),
    )
    .body(schema::<UptimeBody>)
    .answer(schema::<capstan_events::monitor::rpc::UptimeCheck>)
    .doc(Doc {
        operation: "setUptime",
        tag: "monitor",
        summary: "Set a node's uptime check: on or off, kind, URL, keyword, interval",
        description: Some(
            "Audited. A bad value is `400 invalid_request` naming the field. A URL \
            whose host is, or resolves to, an address that is not public (loopback, private, \
            link-local such as 169.254.169.254, documentation and other special-purpose ranges) \
            is `422 refused` naming the URL, unless `CAPSTAN__OUTBOUND__ALLOW_PRIVATE` is set; \
            every check looks again, since DNS can change.",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: &[
            refusals::BAD_REQUEST,
            refusals::UNAUTHORIZED,
            refusals::FORBIDDEN,
            refusals::NOT_FOUND,
            refusals::UNPROCESSABLE,
            refusals::INTERNAL,
            refusals::UNAVAILABLE,
        ],
    }),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/certificate",
        Read,
        |filter| on(filter, get_certificate),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::CertificateView>)
    .doc(Doc {
        operation: "getCertificate",
        tag: "monitor",
        summary: "The certificate a node's origin serves, and its problem (MO-08..MO-10)",
        description: None,
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/fleet/security",
        Read,
        |filter| on(filter, fleet_security),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::FleetSecurity>)
    .doc(Doc {
        operation: "getFleetSecurity",
        tag: "monitor",
        summary: "Every machine's patching, red first, from its host report (MO-16, MO-17)",
        description: None,
        parameters: &[],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::LISTING,
    }),
    // MO-11: a look that changes nothing on the node (level 7), recorded as an act.
    Route::operator(
        Method::Post,
        "/api/v1/nodes/{id}/edge-probe",
        Read,
        |filter| on(filter, start_edge_probe),
        Some("edge_probe"),
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbeStarted>)
    .doc(Doc {
        operation: "startEdgeProbe",
        tag: "monitor",
        summary: "Compare the site through its edge and direct (MO-11, MO-12)",
        description: Some(
            "Compares the node's site through its public name (its edge) and \
            straight at each of the node's own addresses, SNI and Host kept: up to 20 rounds of a \
            `GET /login` and a `POST {}` to `/api/v1/action/vault_heartbeat` down every path at \
            once; a request taking 5 s or more, or unanswered within 10 s, is a stall; a 429 is \
            the site's own limit, not a stall; no round starts after 45 s, so a run ends inside \
            100 s. The run goes on in the monitor: follow it at `GET /api/v1/edge-probes/{id}`. A \
            look that changes nothing on the node (level 7), recorded as an act. At most 10 runs \
            per node an hour (`429 rate_limited`); a node with no uptime URL or no address of its \
            own is `422 refused`.",
        ),
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::new(202, "Taken; the run's id."),
        refusals: &[
            refusals::BAD_REQUEST,
            refusals::UNAUTHORIZED,
            refusals::FORBIDDEN,
            refusals::NOT_FOUND,
            refusals::UNPROCESSABLE,
            refusals::TOO_MANY_REQUESTS,
            refusals::INTERNAL,
            refusals::UNAVAILABLE,
        ],
    }),
    Route::operator(
        Method::Get,
        "/api/v1/nodes/{id}/edge-probes",
        Read,
        |filter| on(filter, list_edge_probes),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbes>)
    .doc(Doc {
        operation: "listEdgeProbes",
        tag: "monitor",
        summary: "A node's newest edge probe runs (up to 10), newest first",
        description: None,
        parameters: &[Parameter::Shared("NodeId")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
    Route::operator(
        Method::Get,
        "/api/v1/edge-probes/{id}",
        Read,
        |filter| on(filter, get_edge_probe),
        None,
    )
    .answer(schema::<capstan_events::monitor::rpc::EdgeProbeView>)
    .doc(Doc {
        operation: "getEdgeProbe",
        tag: "monitor",
        summary: "One edge probe run: each path's requests, stalls, p50/p95, statuses, errors and \
            429s, and the verdict line",
        description: None,
        parameters: &[Parameter::Id("The edge probe run's id")],
        body: None,
        answer: Answer::DONE,
        refusals: refusals::ONE,
    }),
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
    pub kind: CheckKind,
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

fn http_status() -> CheckKind {
    CheckKind::HttpStatus
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
        kind: body.kind,
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

#[cfg(test)]
mod tests {
    use super::UptimeBody;
    use crate::input::parse_json;
    use capstan_events::monitor::CheckKind;

    // The setting's kind is a word of the contract: serde refuses another naming the field, and
    // an absent kind is the plain status check (MO-01).
    #[test]
    fn an_uptime_setting_of_a_kind_not_known_is_refused_naming_the_field() {
        let refused =
            parse_json::<UptimeBody>(br#"{"enabled": true, "kind": "ping"}"#).unwrap_err();
        assert_eq!(refused.code, "invalid_request");
        assert!(
            refused.message.starts_with("kind: unknown variant `ping`"),
            "{}",
            refused.message
        );
        let plain = parse_json::<UptimeBody>(br#"{"enabled": true}"#).unwrap();
        assert_eq!(plain.kind, CheckKind::HttpStatus);
        let keyword = parse_json::<UptimeBody>(br#"{"enabled": true, "kind": "keyword"}"#).unwrap();
        assert_eq!(keyword.kind, CheckKind::Keyword);
    }
}
