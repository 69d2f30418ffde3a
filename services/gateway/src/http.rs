//! The router and the layers every request passes through.

use axum::{
    extract::{MatchedPath, Request, State},
    http::{header, HeaderValue, StatusCode, Uri},
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
        .layer(middleware::from_fn(page_headers))
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

/// The operator UI's pages may load only this site's own script, style and images, may not be
/// framed, and post forms only here.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// The headers of every UI answer (`/` and `/ui...`): the CSP, no sniffing, the referrer kept
/// to this site, and for anything but the versioned assets, no caching.
async fn page_headers(request: Request, next: Next) -> Response {
    let path = request.uri().path();
    let is_ui = path == "/" || path == "/ui" || path.starts_with("/ui/");
    let mut response = next.run(request).await;
    if !is_ui {
        return response;
    }
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    if !headers.contains_key(header::CACHE_CONTROL) {
        headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    }
    response
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
