//! The router and the layers every request passes through.

use axum::{
    extract::{ConnectInfo, MatchedPath, Request, State},
    http::{header, HeaderValue, StatusCode, Uri},
    middleware::{self, Next},
    response::Response,
    Router,
};
use capstan_events::agent_channel::rpc::AgentEndpoint;
use capstan_telemetry::propagation;
use futures::FutureExt;
use std::{borrow::Cow, future::Future, net::SocketAddr};
use tracing::{info_span, Instrument};

use crate::{
    domain::client_address::client_address,
    error::ApiError,
    state::{AppState, ClientAddress},
};

/// Works out once, before any route, which address the request comes from: the TCP peer, or
/// what a trusted proxy says in the client address header (domain/client_address.rs).
fn resolve_client(state: &AppState, request: &mut Request) {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(address)| address.ip());
    if let Some(peer) = peer {
        let values: Vec<&str> = request
            .headers()
            .get_all(&state.client_addresses.header)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .collect();
        let client = client_address(peer, &values, &state.client_addresses.trusted);
        request.extensions_mut().insert(ClientAddress(client));
    }
}

/// The gateway's routes (every one from [`crate::routes::ROUTES`]), testable in-process. A
/// path or method it does not know is answered in the documented JSON error shape.
pub fn app(state: AppState) -> Router {
    crate::routes::router(&state)
        .fallback(|uri: Uri| async move { ApiError::no_route(uri.path()) })
        .method_not_allowed_fallback(|| async { ApiError::method_not_allowed() })
        .layer(middleware::from_fn_with_state(state.clone(), edge))
        .with_state(state)
}

/// The operator UI's pages may load only this site's own script, style and images, may not be
/// framed, and post forms only here.
pub const CONTENT_SECURITY_POLICY: &str =
    "default-src 'self'; script-src 'self'; style-src 'self'; \
     img-src 'self' data:; frame-ancestors 'none'; form-action 'self'; base-uri 'none'";

/// Every request's way in and out, in one layer: its client address, its span (continuing the
/// caller's trace) and duration metric, and on a UI answer the page headers. One layer rather
/// than three because each `from_fn` layer boxes a future and copies the routes' service, and
/// an open long poll holds all of that while it waits (about 10 KiB per agent for three).
/// An agent's request read by [`crate::connection`] takes the same way in
/// [`answer_agent`] without the router.
async fn edge(State(state): State<AppState>, mut request: Request, next: Next) -> Response {
    resolve_client(&state, &mut request);
    let path = request.uri().path();
    let is_ui = path == "/" || path == "/ui" || path.starts_with("/ui/");
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|path| Cow::Owned(path.as_str().to_string()))
        .unwrap_or(Cow::Borrowed("unmatched"));
    let span = request_span(&request, &route);
    let mut response = traced(span, route, next.run(request)).await;
    if is_ui {
        page_headers(&mut response);
    }
    response
}

/// An agent's request to `route` (one of the agent routes of [`crate::routes::ROUTES`]), as
/// the router would answer it: client address, span and metric as in [`edge`], then
/// [`crate::domains::agent_channel::agent::forward`].
pub(crate) fn answer_agent(
    state: AppState,
    route: &'static crate::route::Route,
    endpoint: AgentEndpoint,
    mut request: Request,
) -> impl Future<Output = Response> {
    resolve_client(&state, &mut request);
    let span = request_span(&request, route.path);
    traced(
        span,
        Cow::Borrowed(route.path),
        crate::domains::agent_channel::agent::forward(state, endpoint, request),
    )
}

/// The agent channel's refusal of an agent request's head, before its body is read
/// ([`crate::domains::agent_channel::agent::vet`]), with the client address worked out as for [`answer_agent`].
pub(crate) async fn vet_agent(
    state: AppState,
    route: &'static crate::route::Route,
    endpoint: AgentEndpoint,
    mut request: Request,
) -> Option<Response> {
    resolve_client(&state, &mut request);
    let span = request_span(&request, route.path);
    let source = crate::identity::peer_address(&request);
    crate::domains::agent_channel::agent::vet(
        state,
        endpoint,
        request.uri(),
        request.headers(),
        source,
    )
    .instrument(span)
    .await
}

/// The headers of every UI answer (`/` and `/ui...`): the CSP, no sniffing, the referrer kept
/// to this site, and for anything but the versioned assets, no caching.
fn page_headers(response: &mut Response) {
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
}

/// Every request runs in a span that continues the caller's trace (`traceparent`), so an rpc
/// or an event it causes carries the same trace id onward.
fn request_span(request: &Request, route: &str) -> tracing::Span {
    let span = info_span!("http", method = %request.method(), route = %route, status = tracing::field::Empty);
    let traceparent = request
        .headers()
        .get(propagation::TRACEPARENT)
        .and_then(|value| value.to_str().ok());
    propagation::set_parent(&span, traceparent);
    span
}

/// Runs `answer` in `span`, records its status there and its duration as a metric. Not an
/// `async fn`: one keeps room for the future it is given beside the one it awaits, so every
/// waiting request (an agent's long poll: seconds) would hold its answer's future twice.
fn traced(
    span: tracing::Span,
    route: Cow<'static, str>,
    answer: impl Future<Output = Response>,
) -> impl Future<Output = Response> {
    let started = std::time::Instant::now();
    answer.instrument(span.clone()).map(move |response| {
        let status = response.status();
        span.record("status", status.as_u16());
        metrics::histogram!("capstan_http_request_seconds", "route" => route, "status" => status.as_u16().to_string())
            .record(started.elapsed().as_secs_f64());
        if status == StatusCode::INTERNAL_SERVER_ERROR {
            tracing::error!(parent: &span, "request failed");
        }
        response
    })
}
