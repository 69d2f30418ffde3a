//! `/healthz`: 200 once every service of the plane answers its health rpc, 503 before (with
//! who is missing), so a load balancer or `capstan all`'s caller knows when the plane is up.
//! `/metrics`: the gateway's metrics.

use axum::{
    extract::State,
    http::{header, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use capstan_events::{rpc::Health, Domain};
use futures::future::join_all;
use serde_json::{json, Value};
use std::time::Duration;

use crate::state::AppState;

/// How long `/healthz` waits for each service; a service slower than this is not ready.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);

pub async fn healthz(State(state): State<AppState>) -> (StatusCode, Json<Value>) {
    let timeout = HEALTH_TIMEOUT.min(state.rpc_timeout);
    let answers = join_all(Domain::ALL.into_iter().map(|domain| {
        let bus = state.bus.clone();
        async move {
            let answer: Result<Health, _> =
                bus.request(domain, "health", &json!({}), timeout).await;
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
    (code, Json(json!({"status": status, "services": services})))
}

/// `/metrics`: the gateway's metrics in the Prometheus text format.
pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}
