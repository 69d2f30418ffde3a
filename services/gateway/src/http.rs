//! The router and the layers every request passes through.

use axum::{
    extract::{ConnectInfo, MatchedPath, Request, State},
    http::{header, HeaderName, HeaderValue, StatusCode, Uri},
    middleware::{self, Next},
    response::{IntoResponse, Response},
    Router,
};
use capstan_bus::Bus;
use capstan_events::agent_channel::rpc::AgentEndpoint;
use capstan_settings::GatewaySettings;
use capstan_store::Store;
use capstan_telemetry::{propagation, MetricsHandle};
use ipnet::IpNet;
use std::{
    borrow::Cow,
    future::Future,
    net::{IpAddr, SocketAddr},
    sync::Arc,
    time::Duration,
};
use tracing::{info_span, Instrument};

use crate::{domain::client_address::client_address, error::ApiError};

/// What every handler can reach: one pointer to the gateway's [`Shared`] parts. A request holds
/// it in several places at once (the edge, the handler, the rpc it waits on), for as long as a
/// long poll waits, so a copy is a pointer rather than the 800 bytes of the parts.
#[derive(Clone)]
pub struct AppState(Arc<(Shared, LongPolls)>);

impl From<Shared> for AppState {
    fn from(shared: Shared) -> AppState {
        AppState(Arc::new((shared, LongPolls::default())))
    }
}

impl std::ops::Deref for AppState {
    type Target = Shared;

    fn deref(&self) -> &Shared {
        &self.0 .0
    }
}

impl AppState {
    /// This gateway process's long polls, released together when it stops.
    pub(crate) fn long_polls(&self) -> &LongPolls {
        &self.0 .1
    }
}

/// This gateway process as the agent channel knows it: every agent request it forwards names
/// `gateway`, and when it stops (`stopping`) its open long polls are answered at once and the
/// claims the agent channel holds for them are released ([`crate::agent::release`]).
pub struct LongPolls {
    pub gateway: uuid::Uuid,
    pub stopping: tokio_util::sync::CancellationToken,
}

impl Default for LongPolls {
    fn default() -> LongPolls {
        LongPolls {
            gateway: uuid::Uuid::now_v7(),
            stopping: tokio_util::sync::CancellationToken::new(),
        }
    }
}

/// The gateway's bus, store and settings, shared by every request through [`AppState`].
pub struct Shared {
    pub bus: Bus,
    /// The `gateway` schema: operators, tokens, audit.
    pub store: Store,
    pub rpc_timeout: Duration,
    pub metrics: MetricsHandle,
    /// Whose word the gateway takes for a request's client address.
    pub client_addresses: ClientAddresses,
}

/// The proxies whose client address header is believed, and that header (GW-07;
/// `gateway.trusted_proxies`, `gateway.client_address_header`). The default trusts nobody: the
/// TCP peer is every request's address.
#[derive(Debug, Clone)]
pub struct ClientAddresses {
    pub trusted: Arc<[IpNet]>,
    pub header: HeaderName,
}

impl Default for ClientAddresses {
    fn default() -> ClientAddresses {
        ClientAddresses {
            trusted: Arc::from(Vec::new()),
            header: HeaderName::from_static("x-forwarded-for"),
        }
    }
}

impl ClientAddresses {
    pub fn from_settings(gateway: &GatewaySettings) -> Result<ClientAddresses, String> {
        let header = HeaderName::try_from(gateway.client_address_header.to_ascii_lowercase())
            .map_err(|error| format!("gateway.client_address_header: {error}"))?;
        let trusted = gateway
            .trusted_networks()
            .map_err(|reason| format!("gateway.trusted_proxies: {reason}"))?;
        Ok(ClientAddresses {
            trusted: Arc::from(trusted),
            header,
        })
    }
}

/// The client address of a request, as [`resolve_client`] worked it out.
#[derive(Debug, Clone, Copy)]
pub struct ClientAddress(pub IpAddr);

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
/// [`crate::agent::forward`].
pub(crate) fn answer_agent(
    state: AppState,
    route: &'static crate::routes::Route,
    endpoint: AgentEndpoint,
    mut request: Request,
) -> impl Future<Output = Response> {
    resolve_client(&state, &mut request);
    let span = request_span(&request, route.path);
    traced(
        span,
        Cow::Borrowed(route.path),
        crate::agent::forward(state, endpoint, request),
    )
}

/// The agent channel's refusal of an agent request's head, before its body is read
/// ([`crate::agent::vet`]), with the client address worked out as for [`answer_agent`].
pub(crate) async fn vet_agent(
    state: AppState,
    route: &'static crate::routes::Route,
    endpoint: AgentEndpoint,
    mut request: Request,
) -> Option<Response> {
    resolve_client(&state, &mut request);
    let span = request_span(&request, route.path);
    let source = crate::identity::peer_address(&request);
    crate::agent::vet(state, endpoint, request.uri(), request.headers(), source)
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

/// Runs `answer` in `span`, records its status there and its duration as a metric.
async fn traced(
    span: tracing::Span,
    route: Cow<'static, str>,
    answer: impl Future<Output = Response>,
) -> Response {
    let started = std::time::Instant::now();
    let response = answer.instrument(span.clone()).await;
    let status = response.status();
    span.record("status", status.as_u16());
    metrics::histogram!("capstan_http_request_seconds", "route" => route, "status" => status.as_u16().to_string())
        .record(started.elapsed().as_secs_f64());
    if status == StatusCode::INTERNAL_SERVER_ERROR {
        tracing::error!(parent: &span, "request failed");
    }
    response
}
