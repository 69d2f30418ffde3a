//! `/healthz`: 200 once every service of the plane answers its health rpc, 503 before, so a
//! load balancer or `capstan all`'s caller knows when the plane is up. Anyone is told only
//! that (`{"status": "ready"}` or `"starting"`); an operator's token (level 7 or more) also
//! gets each service's state and version, and who is missing with why.
//! `/metrics`: the gateway's metrics.

use axum::{
    extract::{Request, State},
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use capstan_events::{
    rpc::{Health, Level},
    Domain,
};
use futures::future::join_all;
use serde_json::{json, Value};
use std::time::Duration;

use crate::{identity, state::AppState};

/// How long `/healthz` waits for each service; a service slower than this is not ready.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

pub async fn healthz(State(state): State<AppState>, request: Request) -> (StatusCode, Json<Value>) {
    let detailed = request
        .headers()
        .contains_key(axum::http::header::AUTHORIZATION)
        && identity::authenticate(
            &state.store,
            request.headers(),
            identity::peer_address(&request),
        )
        .await
        .is_ok_and(|actor| actor.level >= Level::Read);
    drop(request);
    let timeout = HEALTH_TIMEOUT.min(state.rpc_timeout);
    let answers = join_all(Domain::ALL.into_iter().map(|domain| {
        let bus = state.bus.clone();
        async move {
            let answer: Result<Health, _> = bus.health(domain, timeout).await;
            (domain, answer)
        }
    }))
    .await;
    let mut ready = true;
    let mut services = serde_json::Map::new();
    for (domain, answer) in answers {
        let status = match answer {
            Ok(health) if health.ready => json!({"ready": true, "version": health.version}),
            Ok(_) => {
                ready = false;
                json!({"ready": false})
            }
            Err(error) => {
                ready = false;
                json!({"ready": false, "error": error.message})
            }
        };
        services.insert(domain.service_name(), status);
    }
    let code = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let status = if ready { "ready" } else { "starting" };
    if detailed {
        (code, Json(json!({"status": status, "services": services})))
    } else {
        (code, Json(json!({"status": status})))
    }
}

/// `/metrics`: the gateway's metrics in the Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
