//! The agent routes (`POST /api/v1/agent/*`, PROTOCOL.md): the body is read under the
//! endpoint's cap ("a larger body is refused with `413 too_large` before it is read whole") and
//! forwarded byte for byte, with the request's path, query, signature headers and source
//! address, to the agent channel, which verifies the signature and answers. The gateway sends
//! that answer back as it is.

use crate::route::schema;
use axum::{
    extract::Request,
    http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode},
    response::{IntoResponse, Response},
    Json,
};
use bytes::Bytes;
use capstan_events::{
    agent_channel::{
        rpc::{
            AgentEndpoint, AgentRequest, AgentResponse, ClaimsReleased, HandBack, HandedBack,
            ReleaseClaims, ReleasePoll, VetAgentRequest, Vetted,
        },
        wait,
    },
    Domain,
};
use futures::FutureExt;
use std::{future::Future, time::Duration};

use super::agent_doc;
use crate::{
    error::ApiError,
    identity::peer_address,
    input::read_limited,
    route::{Handler, Route},
    AppState,
};

/// Time beyond a claim's wait for the agent channel to answer.
pub const CLAIM_ANSWER_MARGIN: Duration = Duration::from_secs(5);
/// Beyond the rpc timeout, for a claim whose `wait` the contract's rule refuses (unreadable or
/// out of 0..=30): the agent channel refuses it (`400`), and the gateway does not guess how long
/// it would have waited.
pub const UNREADABLE_WAIT_MARGIN: Duration = Duration::from_secs(30);

/// The row of an agent endpoint: signed per PROTOCOL.md and posted, answered by [`forward`].
macro_rules! endpoint {
    ($path:literal, $endpoint:ident) => {{
        const HANDLER: Handler = |filter| {
            axum::routing::on(
                filter,
                |axum::extract::State(state): axum::extract::State<AppState>, request: Request| {
                    forward(state, AgentEndpoint::$endpoint, request)
                },
            )
        };
        Route::agent($path, AgentEndpoint::$endpoint, HANDLER)
    }};
}

/// The agent channel's protocol endpoints, `POST /api/v1/agent/<endpoint>`.
pub const ROUTES: &[Route] = &[
    endpoint!("/api/v1/agent/join", Join).doc(agent_doc::JOIN),
    endpoint!("/api/v1/agent/join_status", JoinStatus).doc(agent_doc::JOIN_STATUS),
    endpoint!("/api/v1/agent/claim", Claim).doc(agent_doc::CLAIM),
    endpoint!("/api/v1/agent/result", Result).doc(agent_doc::RESULT),
    endpoint!("/api/v1/agent/job_status", JobStatus).doc(agent_doc::JOB_STATUS),
    endpoint!("/api/v1/agent/leave", Leave).doc(agent_doc::LEAVE),
    endpoint!("/api/v1/agent/artifact", Artifact).doc(agent_doc::ARTIFACT),
    endpoint!("/api/v1/agent/backup_urls", BackupUrls)
        .answer(schema::<capstan_events::backups::rpc::BackupUrlsAnswer>)
        .doc(agent_doc::BACKUP_URLS),
];

const CONTENT_DIGEST: HeaderName = HeaderName::from_static("content-digest");
const SIGNATURE_INPUT: HeaderName = HeaderName::from_static("signature-input");
const SIGNATURE: HeaderName = HeaderName::from_static("signature");

/// Answers one agent request: the agent channel's answer, or the gateway's refusal. Not an
/// `async fn`, which would hold its arguments a second time beside `ask`'s future for as long as
/// a long poll waits.
pub fn forward(
    state: AppState,
    endpoint: AgentEndpoint,
    request: Request,
) -> impl Future<Output = Response> {
    ask(state, endpoint, request).map(|answer| answer.unwrap_or_else(IntoResponse::into_response))
}

async fn ask(
    state: AppState,
    endpoint: AgentEndpoint,
    request: Request,
) -> Result<Response, ApiError> {
    // A body hyper would read (not read already by `crate::connection`) of unknown or large
    // length is read only once the agent channel has heard the request's head.
    if request.extensions().get::<ReadHere>().is_none() && vetted_first(request.headers()) {
        let source = peer_address(&request);
        let vetting = vet(
            state.clone(),
            endpoint,
            request.uri(),
            request.headers(),
            source,
        );
        if let Some(refusal) = Box::pin(vetting).await {
            return Ok(refusal);
        }
    }
    // Boxed, as the question below: this future is as large as its largest state, and a long
    // poll holds it for its whole wait, so no state of it holds either inline.
    let (mut meta, body, timeout) =
        Box::pin(question(endpoint, request, state.rpc_timeout)).await?;
    meta.gateway = Some(state.long_polls().gateway);
    let long_poll =
        endpoint == AgentEndpoint::Claim && wait::wait_of(meta.query.as_deref()) != Ok(0);
    let poll = meta.poll;
    let asked = state
        .bus
        .ask_with_body(&meta, body, timeout + GIVE_UP_SLACK);
    // Written out already: a long poll waits without it.
    drop(meta);
    // The gateway's own deadline, so it knows when it gave up on a claim (the bus's is a
    // moment later and never the one that ends the wait). Boxed, with what giving up needs.
    let shared = &state;
    let mut asking = Box::pin(async move {
        match tokio::time::timeout(timeout, asked).await {
            Ok(answered) => answered.map_err(ApiError::from),
            Err(_) => Err(Box::pin(give_up(shared, endpoint, poll, timeout)).await),
        }
    });
    if !long_poll {
        let (answer, bytes) = asking.await?;
        return respond(endpoint, answer, bytes);
    }
    let stopping = &state.long_polls().stopping;
    let (answer, bytes) = tokio::select! {
        answered = &mut asking => answered?,
        _ = stopping.cancelled() => {
            // The agent channel ends a released claim at once with its own answer (or the job
            // it was handing out just then); past a moment, the agent gets an empty claim here.
            match tokio::time::timeout(RELEASE_GRACE, asking).await {
                Ok(answered) => answered?,
                Err(_) => return Ok(empty_claim()),
            }
        }
    };
    respond(endpoint, answer, bytes)
}

/// Beyond a request's own deadline, the bus's (which the gateway's always passes first).
const GIVE_UP_SLACK: Duration = Duration::from_secs(1);

/// The agent channel did not answer within `timeout`: the agent is answered `503` here. For a
/// claim, the agent channel is told to release it (`release_poll`, its `poll` id), since
/// nothing it answers now reaches the agent: a long poll still held ends without a job, and a
/// job already handed to it goes back to `pending`. Counted in
/// `capstan_gateway_claims_given_up_total`.
async fn give_up(
    state: &AppState,
    endpoint: AgentEndpoint,
    poll: Option<uuid::Uuid>,
    timeout: Duration,
) -> ApiError {
    if endpoint == AgentEndpoint::Claim {
        metrics::counter!("capstan_gateway_claims_given_up_total").increment(1);
        if let Some(poll) = poll {
            tracing::warn!(%poll, ?timeout, "gave up waiting for a claim's answer; releasing it");
            release_poll(state, poll).await;
        }
    }
    ApiError::from(capstan_events::rpc::RpcError::new(
        capstan_events::rpc::ErrorCode::Unavailable,
        format!(
            "{} did not answer {} within {timeout:?}",
            Domain::AgentChannel,
            <AgentRequest as capstan_events::rpc::Rpc>::OP
        ),
    ))
}

/// How long a stopping gateway waits for the agent channel to answer a released long poll.
pub const RELEASE_GRACE: Duration = Duration::from_millis(500);
/// How long a stopping gateway waits for the agent channel to take its release.
pub const RELEASE_TIMEOUT: Duration = Duration::from_secs(1);

/// A claim answered with no job, as the agent channel answers one whose wait ran out.
fn empty_claim() -> Response {
    (
        StatusCode::OK,
        Json(serde_json::json!({"job": null, "ignored_fields": []})),
    )
        .into_response()
}

/// As the gateway stops: answers its open long polls (each waits at most [`RELEASE_GRACE`] more)
/// and asks every agent-channel replica to release the claims it holds for them, so none is
/// handed a job nobody would take to its agent.
pub async fn release(state: &AppState) {
    let long_polls = state.long_polls();
    long_polls.stopping.cancel();
    let asked: Result<ClaimsReleased, _> = state
        .bus
        .ask(
            &ReleaseClaims {
                gateway: long_polls.gateway,
            },
            RELEASE_TIMEOUT,
        )
        .await;
    match asked {
        Ok(answer) => tracing::info!(
            gateway = %long_polls.gateway,
            released = answer.released,
            "long polls released"
        ),
        Err(error) => {
            tracing::warn!(%error, "the agent channel did not take the release of this gateway's long polls")
        }
    }
}

/// A body longer than this is read only after `vet_agent_request` (docs/security.md, "The
/// gateway's connections"): a stranger's large body is refused before it is read or stored.
pub const VET_ABOVE: usize = 16 * 1024;

/// On an agent request read by [`crate::connection`]: its body is read (and was vetted there
/// when large), and a claim's `poll` names it, to release it alone when its agent hangs up.
#[derive(Debug, Clone, Copy)]
pub(crate) struct ReadHere {
    pub poll: Option<uuid::Uuid>,
}

/// Whether a request's body must be vetted before hyper reads it: its length is unknown
/// (chunked) or over [`VET_ABOVE`].
fn vetted_first(headers: &HeaderMap) -> bool {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|value| value.to_str().ok())
        .and_then(|value| value.trim().parse::<u64>().ok());
    match declared {
        Some(length) => length > VET_ABOVE as u64,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

/// Asks the agent channel whether `request` (its head alone) would be refused whatever its
/// body: its `401`/`429` answer, or `None` to read the body. When the agent channel cannot say,
/// the request is refused `503` rather than read.
pub(crate) async fn vet(
    state: AppState,
    endpoint: AgentEndpoint,
    uri: &axum::http::Uri,
    headers: &HeaderMap,
    source: Option<std::net::IpAddr>,
) -> Option<Response> {
    let source = source?;
    let question = VetAgentRequest {
        request: AgentRequest {
            endpoint,
            path: uri.path().to_string(),
            query: uri.query().map(str::to_string),
            content_digest: field(headers, &CONTENT_DIGEST),
            signature_input: field(headers, &SIGNATURE_INPUT),
            signature: field(headers, &SIGNATURE),
            source_address: source.to_string(),
            gateway: None,
            poll: None,
        },
    };
    let asked: Result<Vetted, _> = state.bus.ask(&question, state.rpc_timeout).await;
    match asked {
        Ok(Vetted { refusal: None }) => None,
        Ok(Vetted {
            refusal: Some(answer),
        }) => Some(
            respond(endpoint, answer, Bytes::new()).unwrap_or_else(IntoResponse::into_response),
        ),
        Err(error) => Some(ApiError::from(error).into_response()),
    }
}

/// Releases one claim whose answer will reach no agent (its agent hung up while it was held, or
/// the gateway gave up waiting for it): the agent-channel replica holding it ends it at once,
/// without a job, and a job it had handed out already goes back to `pending` there. Whether the
/// agent channel took the release.
pub(crate) async fn release_poll(state: &AppState, poll: uuid::Uuid) -> bool {
    let asked: Result<ClaimsReleased, _> =
        state.bus.ask(&ReleasePoll { poll }, RELEASE_TIMEOUT).await;
    if let Err(error) = &asked {
        tracing::warn!(%error, %poll, "the agent channel did not take the release of a claim");
    }
    asked.is_ok()
}

/// A claim's answer that was never written to its agent: a job in it goes back to `pending`
/// (PROTOCOL.md: a job is handed out once; this one never reached the node).
pub(crate) async fn hand_back_unwritten(state: &AppState, response: Response) {
    if !response.status().is_success() {
        return;
    }
    let Ok(body) = axum::body::to_bytes(response.into_body(), usize::MAX).await else {
        return;
    };
    let Some(job_id) = serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|answer| answer["job"]["id"].as_i64())
    else {
        return;
    };
    let asked: Result<HandedBack, _> = state.bus.ask(&HandBack { job_id }, state.rpc_timeout).await;
    match asked {
        Ok(HandedBack { returned }) => {
            tracing::info!(job_id, returned, "a claim's answer never reached its agent")
        }
        Err(error) => {
            tracing::warn!(%error, job_id, "a job whose answer never reached its agent could not be handed back")
        }
    }
}

/// The question for the agent channel: the request's path, query, signature headers and source
/// address, its body read under the endpoint's cap, and how long to wait for the answer.
async fn question(
    endpoint: AgentEndpoint,
    request: Request,
    usual_timeout: Duration,
) -> Result<(AgentRequest, Bytes, Duration), ApiError> {
    let source = peer_address(&request)
        .ok_or_else(|| ApiError::internal("the gateway does not know the caller's address"))?;
    // A claim's own id, for its release: the one `crate::connection` drew, else a new one.
    let poll = request
        .extensions()
        .get::<ReadHere>()
        .and_then(|read| read.poll)
        .or_else(|| (endpoint == AgentEndpoint::Claim).then(uuid::Uuid::now_v7));
    let (parts, body) = request.into_parts();
    let body = read_limited(&parts.headers, body, endpoint.body_limit()).await?;
    let query = parts.uri.query().map(str::to_string);
    let timeout = rpc_timeout(endpoint, query.as_deref(), usual_timeout);
    // Taken out of the request's head, which is let go before the answer is awaited: its URI
    // and header values are slices of the connection's read buffer, which hyper would otherwise
    // have to keep beside a second one while a long poll waits.
    let meta = AgentRequest {
        endpoint,
        path: parts.uri.path().to_string(),
        query,
        content_digest: field(&parts.headers, &CONTENT_DIGEST),
        signature_input: field(&parts.headers, &SIGNATURE_INPUT),
        signature: field(&parts.headers, &SIGNATURE),
        source_address: source.to_string(),
        gateway: None,
        poll,
    };
    Ok((meta, body, timeout))
}

/// A header's value as the agent sent it; several lines of one field are joined with `, `
/// (RFC 9110 §5.3), and a value that is not visible ASCII is treated as absent (the agent
/// channel then answers `missing_signature`).
fn field(headers: &HeaderMap, name: &HeaderName) -> Option<String> {
    let values: Vec<&str> = headers
        .get_all(name)
        .iter()
        .map(|value| value.to_str().ok())
        .collect::<Option<_>>()?;
    (!values.is_empty()).then(|| values.join(", "))
}

/// How long to wait for the agent channel: a claim is held open for its `wait` (clamped to
/// 0..=30 s) and then answered, so it gets that plus a margin; every other request the usual
/// rpc timeout.
pub fn rpc_timeout(endpoint: AgentEndpoint, query: Option<&str>, usual: Duration) -> Duration {
    if endpoint == AgentEndpoint::Artifact {
        // A binary is megabytes, through the object store twice (rollouts, the agent channel).
        return usual.max(ARTIFACT_TIMEOUT);
    }
    if endpoint != AgentEndpoint::Claim {
        return usual;
    }
    match wait::wait_of(query) {
        Ok(wait) => (Duration::from_secs(wait) + CLAIM_ANSWER_MARGIN).max(usual),
        Err(_) => usual + UNREADABLE_WAIT_MARGIN,
    }
}

/// How long an `artifact` request may take to be answered.
const ARTIFACT_TIMEOUT: Duration = Duration::from_secs(120);

/// The agent channel's answer as HTTP: its status and JSON body, `Retry-After` when it set
/// one, and for an artifact with bytes, the bytes.
fn respond(
    endpoint: AgentEndpoint,
    answer: AgentResponse,
    bytes: Bytes,
) -> Result<Response, ApiError> {
    let status = StatusCode::from_u16(answer.status)
        .ok()
        .filter(|status| !status.is_informational())
        .ok_or_else(|| {
            ApiError::internal(format!(
                "the agent channel answered status {}",
                answer.status
            ))
        })?;
    let mut response = if endpoint == AgentEndpoint::Artifact && !bytes.is_empty() {
        (
            status,
            [(header::CONTENT_TYPE, "application/octet-stream")],
            bytes,
        )
            .into_response()
    } else {
        (status, Json(answer.body)).into_response()
    };
    if let Some(seconds) = answer.retry_after {
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(seconds));
    }
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    const USUAL: Duration = Duration::from_secs(5);

    #[test]
    fn a_claim_waits_its_wait_plus_a_margin_and_others_the_usual_timeout() {
        let claim = |query| rpc_timeout(AgentEndpoint::Claim, query, USUAL);
        assert_eq!(claim(Some("wait=20")), Duration::from_secs(25));
        assert_eq!(claim(Some("x=1&wait=99")), Duration::from_secs(35));
        // Refused by the agent channel at once (the contract's one rule, never clamped): the
        // gateway does not guess a wait for it.
        assert_eq!(claim(Some("wait=-4")), Duration::from_secs(35));
        assert_eq!(claim(Some("wait=0")), USUAL);
        assert_eq!(claim(None), USUAL);
        assert_eq!(claim(Some("wait=soon")), Duration::from_secs(35));
        assert_eq!(
            rpc_timeout(AgentEndpoint::Result, Some("wait=20"), USUAL),
            USUAL
        );
        assert_eq!(
            rpc_timeout(AgentEndpoint::Artifact, None, USUAL),
            Duration::from_secs(120)
        );
    }

    #[test]
    fn repeated_signature_fields_are_joined_and_absent_ones_are_none() {
        let mut headers = HeaderMap::new();
        assert_eq!(field(&headers, &SIGNATURE), None);
        headers.append(SIGNATURE, HeaderValue::from_static("a=:x:"));
        headers.append(SIGNATURE, HeaderValue::from_static("b=:y:"));
        assert_eq!(field(&headers, &SIGNATURE).as_deref(), Some("a=:x:, b=:y:"));
    }

    // Every agent in a fleet holds one of these for as long as its long poll waits, so at
    // thousands of agents each byte counts thousands of times. It was 4.2 KiB while the state
    // was 800 bytes copied by value and the question's meta was kept beside it, then about
    // 2 KiB while the rpc question was held inline (for the short requests' sake); boxed like
    // the question before it, it is under 1 KiB (debug build), the question's future apart.
    // And the span and metric around it (`http::answer_agent`) hold it once: as an `async fn`
    // taking it as an argument, they held it twice.
    #[tokio::test]
    async fn an_agents_request_holds_little_while_it_waits() {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let state = AppState::from(crate::Shared {
            bus: capstan_bus::Bus::connect("nats://127.0.0.1:1", "sizes")
                .await
                .unwrap(),
            store: capstan_store::Store::connect(database.url(), "gateway", 1)
                .await
                .unwrap(),
            rpc_timeout: USUAL,
            metrics: capstan_telemetry::metrics(None).unwrap(),
            client_addresses: Default::default(),
        });
        assert_eq!(std::mem::size_of::<AppState>(), 8);
        let request = Request::new(axum::body::Body::from("{}"));
        let waiting = forward(state.clone(), AgentEndpoint::Claim, request);
        let size = std::mem::size_of_val(&waiting);
        assert!(size <= 1024, "an agent's request holds {size} bytes");
        let route = crate::routes::ROUTES
            .iter()
            .find(|route| route.path == "/api/v1/agent/claim")
            .expect("the claim's route");
        let request = Request::new(axum::body::Body::from("{}"));
        let traced = crate::http::answer_agent(state, route, AgentEndpoint::Claim, request);
        let whole = std::mem::size_of_val(&traced);
        assert!(
            whole <= size + 256,
            "an agent's request in its span holds {whole} bytes for {size} of its own"
        );
    }
}
