//! One gateway connection, HTTP/1.1: an agent's request is read and answered here, and every
//! other request is served by hyper, which from then on has the connection.
//!
//! Why not hyper for everything: hyper gives every connection a read buffer and a write buffer of
//! 8 KiB each for as long as it is open, and neither can be set lower. Every agent in a fleet
//! keeps a connection open, nearly always in a long poll, so at 10,000 agents that floor alone
//! was about 160 MiB of the plane's memory. Here a connection between requests holds no buffer,
//! and a request in hand holds its own bytes and no more.
//!
//! The path is narrow on purpose ([`crate::domain::agent_request`]): `POST` to one of the agent
//! endpoints, HTTP/1.1, its body framed by exactly one `Content-Length` within the endpoint's
//! limit, and no `Transfer-Encoding`, `Expect` or upgrade. The head is parsed by `httparse`,
//! hyper's own parser. Anything else (a chunked body, a body over the limit, which hyper then refuses with
//! `413 too_large` through the same handler, a head this path cannot read, an operator's or a
//! browser's request) goes to hyper together with the bytes already read, so every framing
//! rule beyond the one plain case stays hyper's. Both ways the request reaches the same router,
//! with the same layers.

use axum::{
    body::{Body, HttpBody},
    extract::{ConnectInfo, Request},
    http::{header, Method, Version},
    response::Response,
    Router,
};
use bytes::{Buf, Bytes, BytesMut};
use capstan_events::agent_channel::rpc::AgentEndpoint;
use futures::{FutureExt, StreamExt};
use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
    time::{timeout_at, Instant, Sleep},
};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::{
    agent::{ReadHere, VET_ABOVE},
    domain::agent_request::{Head, Lane, Parsed},
    http::{answer_agent, vet_agent},
    AppState,
};

/// A head longer than this is not an agent's (theirs are about 1 KiB); hyper reads it instead.
const MAX_HEAD: usize = 8 * 1024;
/// Room taken for each read of a head.
const READ_ROOM: usize = 2 * 1024;
/// A body up to this size is copied out of the read buffer, so the buffer is let go while the
/// request waits (a long poll: seconds); a larger one keeps the buffer it was read into.
const COPIED_BODY: usize = 16 * 1024;
/// At most this much of a refused request's unread body is let through before the connection
/// is dropped (so the refusal reaches a client still sending, rather than a reset).
const LINGER_BYTES: usize = 256 * 1024;

/// What bounds a connection (`gateway.*` settings; docs/security.md, "The gateway's
/// connections").
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// Connections open at once; one more is refused at once.
    pub max_connections: usize,
    /// A request head must arrive within this of its first byte (a new connection's first
    /// request, of the connection); hyper's path also closes a connection idle this long.
    pub header_timeout: Duration,
    /// An agent's keep-alive connection idle this long between requests is closed.
    pub idle_timeout: Duration,
    /// The slowest a body or an answer may move, in bytes a second, after a grace of
    /// `header_timeout`.
    pub min_rate: u64,
}

impl Default for ConnectionLimits {
    fn default() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 20_000,
            header_timeout: Duration::from_secs(5),
            idle_timeout: Duration::from_secs(75),
            min_rate: 1024,
        }
    }
}

impl ConnectionLimits {
    pub fn from_settings(gateway: &capstan_settings::GatewaySettings) -> ConnectionLimits {
        ConnectionLimits {
            max_connections: gateway.max_connections as usize,
            header_timeout: gateway.header_timeout(),
            idle_timeout: gateway.idle_timeout(),
            min_rate: gateway.min_rate_bytes_per_sec.max(1),
        }
    }

    /// When `moved` bytes of a body or answer begun at `started` must have been followed by
    /// more: the grace, then [`ConnectionLimits::min_rate`].
    fn next_byte_by(&self, started: Instant, moved: usize) -> Instant {
        started + self.header_timeout + Duration::from_secs_f64(moved as f64 / self.min_rate as f64)
    }
}

/// Why a connection was dropped, as `capstan_gateway_connections_dropped_total` counts it.
fn dropped(reason: &'static str) {
    metrics::counter!("capstan_gateway_connections_dropped_total", "reason" => reason).increment(1);
}

/// Serves the connection until the peer closes it, a limit is passed, or `stop`; a request in
/// hand is finished first.
pub(crate) async fn serve(
    mut stream: TcpStream,
    address: SocketAddr,
    state: AppState,
    routes: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let mut buffer = BytesMut::new();
    let mut first = true;
    loop {
        // A request not yet read whole when the plane stops is not begun.
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = read_head(&mut stream, &mut buffer, &limits, first) => read,
        };
        first = false;
        let lane = match read {
            Ok(Read::Agent(lane)) => lane,
            Ok(Read::Other) => {
                return hand_off(stream, buffer.freeze(), address, routes, limits, stop).await
            }
            Ok(Read::TimedOut(reason)) => {
                dropped(reason);
                return;
            }
            Ok(Read::Closed) | Err(_) => return,
        };
        let (route, endpoint, close) = (lane.route, lane.endpoint, lane.close);
        // A large body is read only once the agent channel has heard its head: a stranger's
        // (unsigned, an unknown key, over its rate) is refused unread.
        if lane.content_length > VET_ABOVE {
            let mut head = request_of(
                Lane {
                    uri: lane.uri.clone(),
                    headers: lane.headers.clone(),
                    ..*lane
                },
                Bytes::new(),
            );
            head.extensions_mut().insert(ConnectInfo(address));
            if let Some(refusal) = Box::pin(vet_agent(state.clone(), route, endpoint, head)).await {
                metrics::counter!("capstan_gateway_bodies_refused_unread_total").increment(1);
                // Boxed, as every rare path here: a connection's task is as large as its
                // largest state, and `linger` holds a read buffer across its awaits.
                let _ = Box::pin(write(&mut stream, refusal, true, &limits)).await;
                return Box::pin(linger(stream, &limits)).await;
            }
        }
        let body = match Box::pin(read_body(&mut stream, &mut buffer, &lane, &limits)).await {
            Ok(BodyRead::Whole(body)) => body,
            Ok(BodyRead::TimedOut) => {
                dropped("slow_body");
                return;
            }
            Ok(BodyRead::Closed) | Err(_) => return,
        };
        let poll = (endpoint == AgentEndpoint::Claim).then(uuid::Uuid::now_v7);
        let mut request = request_of(*lane, body);
        request.extensions_mut().insert(ConnectInfo(address));
        request.extensions_mut().insert(ReadHere { poll });
        // Boxed: an idle connection's task stays small, and only a request in hand holds this.
        let answering = Box::pin(answer_agent(state.clone(), route, endpoint, request));
        let response = match poll {
            None => answering.await,
            Some(poll) => match Box::pin(watched(&stream, answering)).await {
                Watched::Answered(response) => response,
                Watched::HungUp(answering) => {
                    // Its agent is gone: the claim is released, and a job it was handed just
                    // then goes back, since this answer is never written. The agent channel
                    // hands that job back itself once it has the release; only when the
                    // release did not reach it is the answer awaited and handed back here.
                    dropped("hung_up");
                    if Box::pin(crate::agent::release_poll(&state, poll)).await {
                        return;
                    }
                    let response = answering.await;
                    Box::pin(crate::agent::hand_back_unwritten(&state, response)).await;
                    return;
                }
            },
        };
        let close = close || stop.is_cancelled();
        let (parts, body) = response.into_parts();
        let body = match Box::pin(axum::body::to_bytes(body, usize::MAX)).await {
            Ok(body) => body,
            Err(_) => return,
        };
        match Box::pin(write_parts(&mut stream, &parts, &body, close, &limits)).await {
            Ok(()) if !close => continue,
            Ok(()) => {}
            Err(unwritten) => {
                if unwritten.nothing_written && endpoint == AgentEndpoint::Claim {
                    Box::pin(crate::agent::hand_back_unwritten(
                        &state,
                        Response::from_parts(parts, Body::from(body)),
                    ))
                    .await;
                }
                if unwritten.timed_out {
                    dropped("slow_reader");
                }
                return;
            }
        }
        let _ = stream.shutdown().await;
        return;
    }
}

/// A connection's place among the open ones (`gateway.max_connections`), counted in
/// `capstan_gateway_connections_open`; given back when its task ends, however it ends.
pub(crate) struct Open {
    _permit: tokio::sync::OwnedSemaphorePermit,
}

impl Open {
    fn new(permit: tokio::sync::OwnedSemaphorePermit) -> Open {
        metrics::gauge!("capstan_gateway_connections_open").increment(1.0);
        Open { _permit: permit }
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        metrics::gauge!("capstan_gateway_connections_open").decrement(1.0);
    }
}

/// The task of one connection: `serving` (a [`serve`] future), holding its place until it
/// ends. Not an `async` block that awaits `serving`: such a block keeps room for the future it
/// captured beside the one it awaits, so the task would hold a connection's state twice, and
/// every connected agent holds one of these tasks for as long as it stays connected.
pub(crate) fn task(
    serving: impl Future<Output = ()>,
    permit: tokio::sync::OwnedSemaphorePermit,
) -> impl Future<Output = ()> {
    let open = Open::new(permit);
    serving.map(move |()| drop(open))
}

/// How a watched request ended.
enum Watched<F> {
    Answered(Response),
    /// The peer closed the connection (or reset it) before the answer came.
    HungUp(F),
}

/// Waits for `answering` while watching the connection: an agent that hangs up while its claim
/// is held (`kill -9`, a network gone) closes it, and the claim must not then take a job.
/// Bytes of a next request (pipelined) mean the peer is there; then only the answer is awaited.
async fn watched<F: Future<Output = Response> + Unpin>(
    stream: &TcpStream,
    mut answering: F,
) -> Watched<F> {
    let hung_up = async {
        let mut byte = [0u8; 1];
        match stream.peek(&mut byte).await {
            Ok(0) | Err(_) => {}
            Ok(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        response = &mut answering => Watched::Answered(response),
        () = hung_up => Watched::HungUp(answering),
    }
}

/// After a refusal sent without reading the request's body: the write side is closed, and what
/// the client still sends is let through (up to [`LINGER_BYTES`], within the head timeout,
/// never kept) so the refusal is read rather than lost to a reset.
async fn linger(mut stream: TcpStream, limits: &ConnectionLimits) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + limits.header_timeout;
    let mut drained = 0;
    let mut chunk = [0u8; READ_ROOM];
    while drained < LINGER_BYTES {
        match timeout_at(deadline, stream.read(&mut chunk)).await {
            Ok(Ok(read)) if read > 0 => drained += read,
            _ => return,
        }
    }
}

/// What the next request on a connection is.
enum Read {
    /// An agent's request, its head read whole (its body next).
    Agent(Box<Lane>),
    /// Anything else, for hyper: the bytes read so far are in the buffer.
    Other,
    /// The peer closed the connection (with or without part of a request sent).
    Closed,
    /// A limit passed: the head, the body or an idle connection took too long.
    TimedOut(&'static str),
}

/// Reads one request's head. The first byte may take the idle timeout (the head timeout on a
/// new connection); the rest of the head, the head timeout from the first byte.
async fn read_head(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    limits: &ConnectionLimits,
    first: bool,
) -> io::Result<Read> {
    let waiting_from = Instant::now();
    let mut head_by = None;
    let head = loop {
        match Head::parse(buffer) {
            Parsed::Complete(head) => break head,
            Parsed::Unreadable => return Ok(Read::Other),
            Parsed::Partial if buffer.len() >= MAX_HEAD => return Ok(Read::Other),
            Parsed::Partial => {
                let deadline = match head_by {
                    Some(deadline) => deadline,
                    None if buffer.is_empty() => {
                        waiting_from
                            + if first {
                                limits.header_timeout
                            } else {
                                limits.idle_timeout
                            }
                    }
                    None => *head_by.insert(Instant::now() + limits.header_timeout),
                };
                let read = if buffer.is_empty() {
                    timeout_at(deadline, read_first(stream, buffer)).await
                } else {
                    buffer.reserve(READ_ROOM);
                    timeout_at(deadline, stream.read_buf(buffer)).await
                };
                let Ok(read) = read else {
                    return Ok(Read::TimedOut(match (buffer.is_empty(), first) {
                        (true, false) => "idle",
                        _ => "slow_head",
                    }));
                };
                if read? == 0 {
                    return Ok(Read::Closed);
                }
                if head_by.is_none() {
                    head_by = Some(Instant::now() + limits.header_timeout);
                }
            }
        }
    };
    match head.lane {
        Some(lane) => Ok(Read::Agent(lane)),
        None => Ok(Read::Other),
    }
}

/// How an agent request's body was read.
enum BodyRead {
    Whole(Bytes),
    /// The peer closed the connection before the body was whole.
    Closed,
    /// It came slower than the minimum rate.
    TimedOut,
}

/// Reads an agent request's body, at least at the minimum rate. What follows the request (a
/// pipelined next one) stays in `buffer`; when nothing does, the buffer is let go.
async fn read_body(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    lane: &Lane,
    limits: &ConnectionLimits,
) -> io::Result<BodyRead> {
    let head_length = lane.head_length;
    let total = head_length + lane.content_length;
    if buffer.len() < total {
        buffer.reserve(total - buffer.len());
        let started = Instant::now();
        while buffer.len() < total {
            let received = buffer.len().saturating_sub(head_length);
            let by = limits.next_byte_by(started, received);
            match timeout_at(by, stream.read_buf(buffer)).await {
                Err(_) => return Ok(BodyRead::TimedOut),
                Ok(read) => {
                    if read? == 0 {
                        return Ok(BodyRead::Closed);
                    }
                }
            }
        }
    }
    let mut request_bytes = buffer.split_to(total);
    let body = if lane.content_length <= COPIED_BODY {
        Bytes::copy_from_slice(&request_bytes[head_length..])
    } else {
        request_bytes.split_off(head_length).freeze()
    };
    drop(request_bytes);
    // `split_to` left the rest of the allocation with `buffer`; take a fresh one (or none).
    *buffer = if buffer.is_empty() {
        BytesMut::new()
    } else {
        BytesMut::from(&buffer[..])
    };
    Ok(BodyRead::Whole(body))
}

/// The first bytes of a request, into an empty buffer: between requests a connection holds no
/// buffer, so it is read into the stack first and the buffer takes only what came.
async fn read_first(stream: &TcpStream, buffer: &mut BytesMut) -> io::Result<usize> {
    loop {
        stream.readable().await?;
        let mut chunk = [0u8; READ_ROOM];
        match stream.try_read(&mut chunk) {
            Ok(read) => {
                buffer.extend_from_slice(&chunk[..read]);
                return Ok(read);
            }
            // Readiness can be reported with nothing to read.
            Err(error) if error.kind() == io::ErrorKind::WouldBlock => continue,
            Err(error) => return Err(error),
        }
    }
}

/// The request as the router would have it, with `body`.
fn request_of(lane: Lane, body: Bytes) -> Request {
    let mut request = Request::new(Body::from(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = lane.uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = lane.headers;
    request
}

/// An answer that was not written whole.
struct Unwritten {
    /// Not a byte of it left: the agent provably never had it.
    nothing_written: bool,
    /// The peer read too slowly (or not at all).
    timed_out: bool,
}

/// Writes a response whole, its body read into memory first (an agent's answers are JSON or
/// an artifact's bytes, both already in memory).
async fn write(
    stream: &mut TcpStream,
    response: Response,
    close: bool,
    limits: &ConnectionLimits,
) -> Result<(), Unwritten> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(|_| Unwritten {
            nothing_written: true,
            timed_out: false,
        })?;
    write_parts(stream, &parts, &body, close, limits).await
}

/// Writes a response's head, then its body, framed by `Content-Length`, at least at the
/// minimum rate and never stalled longer than the head timeout: a peer that does not read its
/// answer is dropped.
async fn write_parts(
    stream: &mut TcpStream,
    parts: &axum::http::response::Parts,
    body: &Bytes,
    close: bool,
    limits: &ConnectionLimits,
) -> Result<(), Unwritten> {
    let status = parts.status;
    let mut head = Vec::with_capacity(
        256 + if body.len() <= COPIED_BODY {
            body.len()
        } else {
            0
        },
    );
    head.extend_from_slice(b"HTTP/1.1 ");
    head.extend_from_slice(status.as_str().as_bytes());
    head.push(b' ');
    head.extend_from_slice(status.canonical_reason().unwrap_or("").as_bytes());
    head.extend_from_slice(b"\r\n");
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH
            || name == header::TRANSFER_ENCODING
            || name == header::CONNECTION
        {
            continue;
        }
        field(&mut head, name.as_str().as_bytes(), value.as_bytes());
    }
    if !parts.headers.contains_key(header::DATE) {
        field(
            &mut head,
            b"date",
            httpdate::fmt_http_date(std::time::SystemTime::now()).as_bytes(),
        );
    }
    let bodiless = status.is_informational()
        || status == axum::http::StatusCode::NO_CONTENT
        || status == axum::http::StatusCode::NOT_MODIFIED;
    if !bodiless {
        field(
            &mut head,
            b"content-length",
            body.len().to_string().as_bytes(),
        );
    }
    if close {
        field(&mut head, b"connection", b"close");
    }
    head.extend_from_slice(b"\r\n");
    let mut written = 0;
    let started = Instant::now();
    // One write for a small answer: a head and body sent apart could wait on the peer's
    // delayed acknowledgement (Nagle).
    let parts: [&[u8]; 2] = if bodiless {
        [&head, &[]]
    } else if body.len() <= COPIED_BODY {
        head.extend_from_slice(body);
        [&head, &[]]
    } else {
        [&head, body]
    };
    for part in parts {
        let mut sent = 0;
        while sent < part.len() {
            // The minimum rate, and no stall longer than the grace: what the socket's buffers
            // took at first earns no credit for a reader that then stops.
            let by = limits
                .next_byte_by(started, written)
                .min(Instant::now() + limits.header_timeout);
            match timeout_at(by, stream.write(&part[sent..])).await {
                Ok(Ok(count)) if count > 0 => {
                    sent += count;
                    written += count;
                }
                outcome => {
                    return Err(Unwritten {
                        nothing_written: written == 0,
                        timed_out: outcome.is_err(),
                    })
                }
            }
        }
    }
    Ok(())
}

fn field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Gives the connection to hyper, which reads first what was already read. Hyper closes a
/// connection whose head takes longer than the head timeout (idle ones too); a body is read at
/// least at the minimum rate ([`paced`]), and an answer nobody reads stalls at most the head
/// timeout ([`Edge`]).
async fn hand_off(
    stream: TcpStream,
    read: Bytes,
    address: SocketAddr,
    routes: Router,
    limits: ConnectionLimits,
    stop: CancellationToken,
) {
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let mut request = request.map(|body| {
                if body.is_end_stream() {
                    Body::new(body)
                } else {
                    paced(body, limits)
                }
            });
            request.extensions_mut().insert(ConnectInfo(address));
            routes.clone().call(request)
        });
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        .header_read_timeout(limits.header_timeout)
        .serve_connection(
            hyper_util::rt::TokioIo::new(Edge {
                read,
                stream,
                stall: limits.header_timeout,
                stalled: None,
            }),
            service,
        )
        .with_upgrades();
    tokio::pin!(connection);
    tokio::select! {
        _ = connection.as_mut() => return,
        _ = stop.cancelled() => connection.as_mut().graceful_shutdown(),
    }
    // Finishes the request in hand, then closes.
    let _ = connection.await;
}

/// A request body on hyper's path, read at least at the minimum rate after a grace: a sender
/// slower than that gets an error in place of the rest (and the handler refuses the request).
fn paced(body: hyper::body::Incoming, limits: ConnectionLimits) -> Body {
    let started = Instant::now();
    let frames = Body::new(body).into_data_stream();
    let paced = futures::stream::unfold(
        (frames, 0usize, false),
        move |(mut frames, received, ended)| async move {
            if ended {
                return None;
            }
            let by = limits.next_byte_by(started, received);
            match timeout_at(by, frames.next()).await {
                Ok(Some(Ok(frame))) => {
                    let received = received + frame.len();
                    Some((Ok(frame), (frames, received, false)))
                }
                Ok(Some(Err(error))) => {
                    Some((Err(io::Error::other(error)), (frames, received, true)))
                }
                Ok(None) => None,
                Err(_) => {
                    dropped("slow_body");
                    let error = io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the body came slower than the gateway's minimum rate",
                    );
                    Some((Err(error), (frames, received, true)))
                }
            }
        },
    );
    Body::from_stream(paced)
}

/// hyper's stream: first the bytes already read from it, then the connection; a write that
/// makes no progress for `stall` fails (a peer that does not read its answer is dropped).
struct Edge {
    read: Bytes,
    stream: TcpStream,
    stall: Duration,
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Edge {
    /// Whether a pending write has stalled too long; arms the timer on its first pending.
    fn stalled(&mut self, context: &mut Context<'_>) -> bool {
        let stall = self.stall;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(stall)));
        timer.as_mut().poll(context).is_ready()
    }

    fn written<T>(
        &mut self,
        context: &mut Context<'_>,
        polled: Poll<io::Result<T>>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Ready(outcome) => {
                self.stalled = None;
                Poll::Ready(outcome)
            }
            Poll::Pending if self.stalled(context) => {
                dropped("slow_reader");
                Poll::Ready(Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the peer does not read its answer",
                )))
            }
            Poll::Pending => Poll::Pending,
        }
    }
}

impl AsyncRead for Edge {
    fn poll_read(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffer: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.read.is_empty() {
            return Pin::new(&mut this.stream).poll_read(context, buffer);
        }
        let length = this.read.len().min(buffer.remaining());
        buffer.put_slice(&this.read[..length]);
        this.read.advance(length);
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Edge {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write(context, bytes);
        this.written(context, polled)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_write_vectored(context, buffers);
        this.written(context, polled)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let polled = Pin::new(&mut this.stream).poll_flush(context);
        this.written(context, polled)
    }

    fn poll_shutdown(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(context)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::{HeaderMap, HeaderName, HeaderValue};
    use capstan_events::agent_channel::rpc::AgentEndpoint;
    use serde_json::json;
    use tokio::net::TcpListener;

    /// The gateway's state on a NATS server and a database of the test's own, with a fake agent
    /// channel that answers an agent request with where it came from and its body (after a
    /// moment, for `leave`), and the gateway serving on a free port with this module's
    /// connections.
    struct Plane {
        address: SocketAddr,
        stop: CancellationToken,
        _nats: capstan_bus::testsuite::NatsServer,
        _database: capstan_store::testsuite::TestDatabase,
    }

    async fn plane() -> Plane {
        plane_with(ConnectionLimits::default()).await
    }

    /// Limits short enough for a test to see each one pass.
    fn short() -> ConnectionLimits {
        ConnectionLimits {
            max_connections: 1000,
            header_timeout: Duration::from_millis(500),
            idle_timeout: Duration::from_millis(800),
            min_rate: 64 * 1024,
        }
    }

    /// An artifact's answer this large does not fit in the loopback's buffers.
    const LARGE_ANSWER: usize = 12 * 1024 * 1024;

    async fn plane_with(limits: ConnectionLimits) -> Plane {
        use capstan_events::{
            agent_channel::rpc::{AgentRequest, AgentResponse, VetAgentRequest, Vetted},
            Domain,
        };
        let nats = capstan_bus::testsuite::NatsServer::start();
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let bus = capstan_bus::Bus::connect(&nats.url(), "lane")
            .await
            .unwrap();
        let store = capstan_store::Store::connect(database.url(), "gateway", 2)
            .await
            .unwrap();
        let stop = CancellationToken::new();
        let fake = capstan_bus::RpcServer::new(bus.clone(), Domain::AgentChannel)
            .route_with_body(|request: AgentRequest, body: Bytes| async move {
                if request.endpoint == AgentEndpoint::Leave {
                    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
                }
                let body = serde_json::json!({
                    "from": request.source_address,
                    "body": String::from_utf8_lossy(&body),
                });
                let answer = AgentResponse {
                    status: 200,
                    body,
                    retry_after: None,
                };
                let bytes = if request.endpoint == AgentEndpoint::Artifact {
                    Bytes::from(vec![b'a'; LARGE_ANSWER])
                } else {
                    Bytes::new()
                };
                Ok::<_, capstan_events::rpc::RpcError>((answer, bytes))
            })
            // Every head is let through (a signed agent's, as far as this fake knows).
            .route(|_: VetAgentRequest| async {
                Ok::<_, capstan_events::rpc::RpcError>(Vetted { refusal: None })
            });
        tokio::spawn(fake.serve(stop.clone()));
        let meta = AgentRequest {
            endpoint: AgentEndpoint::Claim,
            path: "/api/v1/agent/claim".into(),
            query: None,
            content_digest: None,
            signature_input: None,
            signature: None,
            source_address: "127.0.0.1".into(),
            gateway: None,
            poll: None,
        };
        while bus
            .ask_with_body(&meta, Bytes::new(), std::time::Duration::from_millis(200))
            .await
            .is_err_and(|error| error.code == capstan_events::rpc::ErrorCode::Unavailable)
        {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
        let state = AppState::from(crate::Shared {
            bus,
            store,
            rpc_timeout: std::time::Duration::from_secs(5),
            metrics: capstan_telemetry::metrics(None).unwrap(),
            client_addresses: Default::default(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        tokio::spawn(crate::serve_with(listener, state, limits, stop.clone()));
        Plane {
            address,
            stop,
            _nats: nats,
            _database: database,
        }
    }

    /// What `serve` is given for one connection, for measuring the futures' sizes (the
    /// database kept alive beside them).
    async fn one_connection() -> (
        TcpStream,
        std::net::SocketAddr,
        AppState,
        capstan_store::testsuite::TestDatabase,
    ) {
        let database = capstan_store::testsuite::TestDatabase::create().await;
        let state = AppState::from(crate::Shared {
            bus: capstan_bus::Bus::connect("nats://127.0.0.1:1", "sizes")
                .await
                .unwrap(),
            store: capstan_store::Store::connect(database.url(), "gateway", 1)
                .await
                .unwrap(),
            rpc_timeout: std::time::Duration::from_secs(5),
            metrics: capstan_telemetry::metrics(None).unwrap(),
            client_addresses: Default::default(),
        });
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let stream = TcpStream::connect(address).await.unwrap();
        (stream, address, state, database)
    }

    /// Every connected agent holds one task of `serve` between its requests, as large as the
    /// largest state of that future, so the rare paths (a refusal's linger, a hang-up, a slow
    /// reader) are boxed: inline they made the task 3,592 bytes (debug build) instead of 2,360.
    #[tokio::test]
    async fn an_agents_connection_holds_little_between_requests() {
        let (stream, address, state, _database) = one_connection().await;
        let task = serve(
            stream,
            address,
            state,
            axum::Router::new(),
            ConnectionLimits::default(),
            CancellationToken::new(),
        );
        let size = std::mem::size_of_val(&task);
        assert!(size <= 3072, "an agent's connection holds {size} bytes");
    }

    /// The task spawned for a connection holds its `serve` future once: an `async` block
    /// around it (as before) held room for it twice, about 2.4 KiB more for every connected
    /// agent in a debug build.
    #[tokio::test]
    async fn a_connections_task_holds_its_state_once() {
        let (stream, address, state, _database) = one_connection().await;
        let serving = serve(
            stream,
            address,
            state,
            axum::Router::new(),
            ConnectionLimits::default(),
            CancellationToken::new(),
        );
        let alone = std::mem::size_of_val(&serving);
        let permit = std::sync::Arc::new(tokio::sync::Semaphore::new(1))
            .try_acquire_owned()
            .unwrap();
        let task = task(serving, permit);
        let size = std::mem::size_of_val(&task);
        assert!(
            size <= alone + 64,
            "a connection's task holds {size} bytes for a serve future of {alone}"
        );
    }

    fn said(body: &str) -> serde_json::Value {
        serde_json::from_str(body).unwrap()
    }

    /// One answer read off the stream: status, head fields, body.
    async fn answer(stream: &mut TcpStream, read: &mut Vec<u8>) -> (u16, HeaderMap, String) {
        loop {
            let mut fields = [httparse::EMPTY_HEADER; 32];
            let mut response = httparse::Response::new(&mut fields);
            if let httparse::Status::Complete(length) = response.parse(read).unwrap() {
                let mut headers = HeaderMap::new();
                for field in response.headers.iter() {
                    headers.append(
                        HeaderName::from_bytes(field.name.as_bytes()).unwrap(),
                        HeaderValue::from_bytes(field.value).unwrap(),
                    );
                }
                let status = response.code.unwrap();
                let body_length: usize = headers[header::CONTENT_LENGTH]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                while read.len() < length + body_length {
                    assert_ne!(stream.read_buf(read).await.unwrap(), 0, "closed early");
                }
                let body = String::from_utf8(read[length..length + body_length].to_vec()).unwrap();
                read.drain(..length + body_length);
                return (status, headers, body);
            }
            assert_ne!(stream.read_buf(read).await.unwrap(), 0, "closed early");
        }
    }

    /// Both ends of a loopback connection: the client's and the server's.
    async fn connected() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        (client, server)
    }

    /// The next agent request off `server`: its head, then its body.
    async fn agent_request(server: &mut TcpStream, buffer: &mut BytesMut) -> (Box<Lane>, Bytes) {
        let limits = ConnectionLimits::default();
        let Read::Agent(lane) = read_head(server, buffer, &limits, true).await.unwrap() else {
            panic!("an agent's request went to hyper");
        };
        let BodyRead::Whole(body) = read_body(server, buffer, &lane, &limits).await.unwrap() else {
            panic!("the body was not read");
        };
        (lane, body)
    }

    // The point of this path: an agent's request is read here (not handed to hyper), and
    // between requests the connection holds no buffer; what follows a request stays, exactly.
    #[tokio::test]
    async fn an_agents_request_is_read_here_and_leaves_no_buffer_behind() {
        let (mut client, mut server) = connected().await;
        let mut buffer = BytesMut::new();
        client
            .write_all(b"POST /api/v1/agent/claim?wait=20 HTTP/1.1\r\ncontent-length: 2\r\n\r\n{}")
            .await
            .unwrap();
        let (lane, body) = agent_request(&mut server, &mut buffer).await;
        assert_eq!(
            (lane.endpoint, &body[..]),
            (AgentEndpoint::Claim, &b"{}"[..])
        );
        assert_eq!(lane.uri, "/api/v1/agent/claim?wait=20");
        assert_eq!(buffer.capacity(), 0, "a buffer is kept between requests");

        // Two at once: the second stays in a buffer of its own size.
        let second = b"POST /api/v1/agent/leave HTTP/1.1\r\ncontent-length: 0\r\n\r\n";
        let mut both = b"POST /api/v1/agent/result HTTP/1.1\r\ncontent-length: 1\r\n\r\nx".to_vec();
        both.extend_from_slice(second);
        client.write_all(&both).await.unwrap();
        let (lane, body) = agent_request(&mut server, &mut buffer).await;
        assert_eq!(
            (lane.endpoint, &body[..]),
            (AgentEndpoint::Result, &b"x"[..])
        );
        assert_eq!(&buffer[..], &second[..]);
        assert!(
            buffer.capacity() < 2 * second.len(),
            "{}",
            buffer.capacity()
        );

        // A chunked body is hyper's: everything read so far is kept for it.
        let mut buffer = BytesMut::new();
        let chunked = b"POST /api/v1/agent/claim HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n";
        client.write_all(chunked).await.unwrap();
        assert!(matches!(
            read_head(&mut server, &mut buffer, &ConnectionLimits::default(), true)
                .await
                .unwrap(),
            Read::Other
        ));
        assert_eq!(&buffer[..], &chunked[..]);
    }

    /// Whether the gateway closed `stream` within `within` (reading and dropping what it sent);
    /// how long it took.
    async fn closed_within(stream: &mut TcpStream, within: Duration) -> Option<Duration> {
        let started = std::time::Instant::now();
        let mut rest = vec![0u8; 64 * 1024];
        loop {
            match tokio::time::timeout_at(Instant::now() + within, stream.read(&mut rest)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return Some(started.elapsed()),
                Ok(Ok(_)) => continue,
                Err(_) => return None,
            }
        }
    }

    /// The gateway's metric `name` (summed over its labels) as `/metrics` renders it.
    fn metric(name: &str) -> f64 {
        capstan_telemetry::metrics(None)
            .unwrap()
            .render()
            .lines()
            .filter(|line| {
                line.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    // Issue 10, the gateway's connections: a head trickled in a byte at a time and then stalled
    // is closed once the head timeout has passed since its first byte, on the agent path.
    #[tokio::test]
    async fn a_head_sent_one_byte_at_a_time_then_stalled_is_closed_within_the_head_timeout() {
        let limits = short();
        let plane = plane_with(limits).await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        let started = std::time::Instant::now();
        for byte in b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-le" {
            if stream.write_all(&[*byte]).await.is_err() {
                break;
            }
            // A trickle: a byte every 10 ms, well inside the head timeout each time.
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        assert!(
            closed_within(&mut stream, limits.header_timeout * 3)
                .await
                .is_some(),
            "a stalled head is still open"
        );
        let took = started.elapsed();
        assert!(
            took < limits.header_timeout + Duration::from_millis(900),
            "closed after {took:?}"
        );
    }

    // A head promising a 4 MiB body, then nothing: closed within the body's grace.
    #[tokio::test]
    async fn a_content_length_head_then_silence_is_closed_within_the_body_grace() {
        let limits = short();
        let plane = plane_with(limits).await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        stream
            .write_all(b"POST /api/v1/agent/result HTTP/1.1\r\ncontent-length: 4194304\r\n\r\n")
            .await
            .unwrap();
        let took = closed_within(&mut stream, limits.header_timeout * 4)
            .await
            .expect("a silent body is still open");
        assert!(
            took >= limits.header_timeout && took < limits.header_timeout * 3,
            "closed after {took:?}"
        );
    }

    // On hyper's path: part of a `GET /livez` head, then nothing.
    #[tokio::test]
    async fn a_partial_get_livez_on_hypers_path_is_closed_within_the_head_timeout() {
        let limits = short();
        let plane = plane_with(limits).await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        stream
            .write_all(b"GET /livez HTTP/1.1\r\nhost: pla")
            .await
            .unwrap();
        let took = closed_within(&mut stream, limits.header_timeout * 6)
            .await
            .expect("a partial head on hyper's path is still open");
        // The agent path reads it first (up to its head timeout), then hyper (its own).
        assert!(took < limits.header_timeout * 3, "closed after {took:?}");
    }

    /// A connection whose client takes in at most a few KiB at a time.
    async fn reading_little(address: SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        socket.connect(address).await.unwrap()
    }

    // An answer its client never reads: dropped once it falls behind the minimum rate, on the
    // agent path and on hyper's.
    #[tokio::test]
    async fn a_client_that_never_reads_a_large_answer_is_dropped() {
        let limits = short();
        let plane = plane_with(limits).await;
        for request in [
            &b"POST /api/v1/agent/artifact HTTP/1.1\r\ncontent-length: 0\r\n\r\n"[..],
            // Chunked: hyper reads and answers it.
            &b"POST /api/v1/agent/artifact HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"
                [..],
        ] {
            let dropped_before = metric("capstan_gateway_connections_dropped_total");
            let mut stream = reading_little(plane.address).await;
            stream.write_all(request).await.unwrap();
            // Not a byte read until the gateway has given up on this client.
            let deadline = Instant::now() + Duration::from_secs(30);
            while metric("capstan_gateway_connections_dropped_total") <= dropped_before {
                assert!(
                    Instant::now() < deadline,
                    "a client that does not read is still served"
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut everything = Vec::new();
            let read =
                tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut everything))
                    .await
                    .expect("the connection ends");
            assert!(
                read.is_err() || everything.len() < LARGE_ANSWER,
                "the whole answer came: {} bytes",
                everything.len()
            );
        }
    }

    // A keep-alive agent connection idle past its timeout is closed.
    #[tokio::test]
    async fn an_idle_keep_alive_connection_is_closed() {
        let limits = short();
        let plane = plane_with(limits).await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        stream
            .write_all(b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        let mut read = Vec::new();
        let (status, _, _) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        let took = closed_within(&mut stream, limits.idle_timeout * 3)
            .await
            .expect("an idle connection is still open");
        assert!(took >= limits.idle_timeout, "closed after {took:?}");
    }

    // Connections over the cap are closed as they come, and counted.
    #[tokio::test]
    async fn a_connection_over_the_cap_is_closed_at_once_and_counted() {
        let limits = ConnectionLimits {
            max_connections: 2,
            ..ConnectionLimits::default()
        };
        let plane = plane_with(limits).await;
        let refused_before = metric("capstan_gateway_connections_refused_total");
        let mut held = Vec::new();
        for _ in 0..2 {
            let mut stream = TcpStream::connect(plane.address).await.unwrap();
            // Each is served (so surely counted open) before the next comes.
            stream
                .write_all(b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
                .await
                .unwrap();
            let mut read = Vec::new();
            assert_eq!(answer(&mut stream, &mut read).await.0, 200);
            held.push(stream);
        }
        let mut third = TcpStream::connect(plane.address).await.unwrap();
        assert!(
            closed_within(&mut third, Duration::from_secs(2))
                .await
                .is_some(),
            "a third connection is served over a cap of two"
        );
        assert!(metric("capstan_gateway_connections_refused_total") >= refused_before + 1.0);
        // One closed, one more comes in.
        drop(held.pop());
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut stream = TcpStream::connect(plane.address).await.unwrap();
            let _ = stream
                .write_all(b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
                .await;
            let mut read = [0u8; 12];
            if stream.read_exact(&mut read).await.is_ok() {
                assert_eq!(&read, b"HTTP/1.1 200");
                break;
            }
            assert!(Instant::now() < deadline, "a freed place is never taken");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    async fn closed(stream: &mut TcpStream) -> bool {
        let mut rest = Vec::new();
        let read = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            stream.read_to_end(&mut rest),
        )
        .await;
        matches!(read, Ok(Ok(0)))
    }

    #[tokio::test]
    async fn pipelined_agent_requests_are_answered_in_order_on_one_connection() {
        let plane = plane().await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        let request = |body: &str| {
            format!(
                "POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )
        };
        // Two in one write, the second split across two more.
        let both = format!("{}{}", request("{\"a\":1}"), request("{\"b\":22}"));
        let (first, second) = both.split_at(both.len() - 5);
        stream.write_all(first.as_bytes()).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stream.write_all(second.as_bytes()).await.unwrap();
        let mut read = Vec::new();
        let (status, headers, body) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        assert_eq!(
            said(&body),
            json!({"from": "127.0.0.1", "body": "{\"a\":1}"})
        );
        assert_eq!(headers[header::CONTENT_TYPE], "application/json");
        assert!(headers.contains_key(header::DATE));
        assert!(!headers.contains_key(header::CONNECTION));
        let (status, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        assert_eq!(said(&body)["body"], "{\"b\":22}");
        // Still open for a third.
        stream.write_all(request("{}").as_bytes()).await.unwrap();
        let (status, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        assert_eq!(said(&body)["body"], "{}");
    }

    #[tokio::test]
    async fn after_an_agent_request_hyper_serves_the_rest_of_the_connection() {
        let plane = plane().await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        // An agent request, then in the same write a chunked one and an operator's GET.
        stream
            .write_all(
                b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 1\r\n\r\nx\
                  POST /api/v1/agent/claim HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n\
                  3\r\nabc\r\n0\r\n\r\n\
                  GET /livez HTTP/1.1\r\nhost: plane\r\n\r\n",
            )
            .await
            .unwrap();
        let mut read = Vec::new();
        let (_, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!(said(&body), json!({"from": "127.0.0.1", "body": "x"}));
        let (_, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!(
            said(&body),
            json!({"from": "127.0.0.1", "body": "abc"}),
            "the chunked body, read by hyper"
        );
        let (status, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!((status, body.as_str()), (200, "live\n"));
    }

    #[tokio::test]
    async fn a_body_over_the_endpoints_limit_is_refused_before_it_is_sent() {
        let plane = plane().await;
        let mut stream = TcpStream::connect(plane.address).await.unwrap();
        let limit = AgentEndpoint::Claim.body_limit();
        stream
            .write_all(
                format!(
                    "POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: {}\r\n\r\n",
                    limit + 1
                )
                .as_bytes(),
            )
            .await
            .unwrap();
        // Not a byte of the body sent: hyper has the request, and the gateway refuses it.
        let mut read = Vec::new();
        let (status, _, body) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 413);
        assert_eq!(said(&body)["error"]["code"], "too_large");
    }

    #[tokio::test]
    async fn connection_close_is_honoured_and_a_stop_finishes_the_request_in_hand() {
        let plane = plane().await;
        let (address, stop) = (plane.address, plane.stop.clone());
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(
                b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            )
            .await
            .unwrap();
        let mut read = Vec::new();
        let (status, headers, _) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        assert_eq!(headers[header::CONNECTION], "close");
        assert!(closed(&mut stream).await);

        // A stop while a request is in hand: it is answered, with `connection: close`.
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST /api/v1/agent/leave HTTP/1.1\r\ncontent-length: 0\r\n\r\n")
            .await
            .unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        let mut idle = TcpStream::connect(address).await.unwrap();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        stop.cancel();
        let (status, headers, body) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 200);
        assert_eq!(said(&body)["body"], "");
        assert_eq!(headers[header::CONNECTION], "close");
        assert!(closed(&mut stream).await);
        // An idle connection is closed at once.
        assert!(closed(&mut idle).await);
    }

    #[tokio::test]
    async fn a_request_cut_short_or_unreadable_ends_quietly() {
        let plane = plane().await;
        let address = plane.address;
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST /api/v1/agent/claim HTTP/1.1\r\ncontent-length: 10\r\n\r\nabc")
            .await
            .unwrap();
        stream.shutdown().await.unwrap();
        assert!(closed(&mut stream).await);
        // A head hyper cannot read either: hyper answers 400.
        let mut stream = TcpStream::connect(address).await.unwrap();
        stream
            .write_all(b"POST /api/v1/agent/claim HTTP/1.1\r\nbad field\r\n\r\n")
            .await
            .unwrap();
        let mut read = Vec::new();
        let (status, _, _) = answer(&mut stream, &mut read).await;
        assert_eq!(status, 400);
    }
}
