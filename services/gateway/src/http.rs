//! The router and the layers every request passes through.

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, StatusCode, Uri},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Router,
};
use capstan_bus::Bus;
use capstan_store::Store;
use capstan_telemetry::{propagation, MetricsHandle};
use std::time::Duration;
use tracing::{info_span, Instrument};

use crate::error::ApiError;

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub bus: Bus,
    /// The `gateway` schema: operators, tokens, audit.
    pub store: Store,
    pub rpc_timeout: Duration,
    pub metrics: MetricsHandle,
}

/// The gateway's routes (every one from [`crate::routes::ROUTES`]), testable in-process. A
/// path or method it does not know is answered in the documented JSON error shape.
pub fn app(state: AppState) -> Router {
    crate::routes::router(&state)
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(middleware::from_fn(trace_request))
        .with_state(state)
}

pub(crate) async fn metrics(State(state): State<AppState>) -> Response {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        state.metrics.render(),
    )
        .into_response()
}

/// Every request runs in a span that continues the caller's trace (`traceparent`), so an rpc
/// or an event it causes carries the same trace id onward.
async fn trace_request(request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| path.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let span = info_span!("http", method = %request.method(), route = %route, status = tracing::field::Empty);
    let traceparent = request
        .headers()
        .get(propagation::TRACEPARENT)
        .and_then(|value| value.to_str().ok());
    propagation::set_parent(&span, traceparent);
    let started = std::time::Instant::now();
    let response = next.run(request).instrument(span.clone()).await;
    span.record("status", response.status().as_u16());
    metrics::histogram!("capstan_http_request_seconds", "route" => route, "status" => response.status().as_u16().to_string())
        .record(started.elapsed().as_secs_f64());
    if response.status() == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(parent: &span, "request failed");
    }
    response
}
