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
    body::Body,
    extract::{ConnectInfo, Request},
    http::{header, Method, Version},
    response::Response,
    Router,
};
use bytes::{Buf, Bytes, BytesMut};
use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
};
use tokio::{
    io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, ReadBuf},
    net::TcpStream,
};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use crate::{
    domain::agent_request::{Head, Lane, Parsed},
    http::answer_agent,
    AppState,
};

/// A head longer than this is not an agent's (theirs are about 1 KiB); hyper reads it instead.
const MAX_HEAD: usize = 8 * 1024;
/// Room taken for each read of a head.
const READ_ROOM: usize = 2 * 1024;
/// A body up to this size is copied out of the read buffer, so the buffer is let go while the
/// request waits (a long poll: seconds); a larger one keeps the buffer it was read into.
const COPIED_BODY: usize = 16 * 1024;

/// Serves the connection until the peer closes it or `stop`; a request in hand is finished
/// first.
pub(crate) async fn serve(
    mut stream: TcpStream,
    address: SocketAddr,
    state: AppState,
    routes: Router,
    stop: CancellationToken,
) {
    let mut buffer = BytesMut::new();
    loop {
        // A request not yet read whole when the plane stops is not begun.
        let read = tokio::select! {
            _ = stop.cancelled() => return,
            read = read(&mut stream, &mut buffer) => read,
        };
        let (lane, body) = match read {
            Ok(Read::Agent { lane, body }) => (lane, body),
            Ok(Read::Other) => {
                return hand_off(stream, buffer.freeze(), address, routes, stop).await
            }
            Ok(Read::Closed) | Err(_) => return,
        };
        let (route, endpoint, close) = (lane.route, lane.endpoint, lane.close);
        let mut request = request_of(*lane, body);
        request.extensions_mut().insert(ConnectInfo(address));
        // Boxed: an idle connection's task stays small, and only a request in hand holds this.
        let response = Box::pin(answer_agent(state.clone(), route, endpoint, request)).await;
        let close = close || stop.is_cancelled();
        if write(&mut stream, response, close).await.is_err() || close {
            let _ = stream.shutdown().await;
            return;
        }
    }
}

/// What the next request on a connection is.
enum Read {
    /// An agent's request, read whole.
    Agent { lane: Box<Lane>, body: Bytes },
    /// Anything else, for hyper: the bytes read so far are in the buffer.
    Other,
    /// The peer closed the connection (with or without part of a request sent).
    Closed,
}

/// Reads one request's head and, when it is an agent's, its body. What follows the request
/// (a pipelined next one) stays in `buffer`; when nothing does, the buffer is let go.
async fn read(stream: &mut TcpStream, buffer: &mut BytesMut) -> io::Result<Read> {
    let head = loop {
        match Head::parse(buffer) {
            Parsed::Complete(head) => break head,
            Parsed::Unreadable => return Ok(Read::Other),
            Parsed::Partial if buffer.len() >= MAX_HEAD => return Ok(Read::Other),
            Parsed::Partial => {
                let read = if buffer.is_empty() {
                    read_first(stream, buffer).await?
                } else {
                    buffer.reserve(READ_ROOM);
                    stream.read_buf(buffer).await?
                };
                if read == 0 {
                    return Ok(Read::Closed);
                }
            }
        }
    };
    let Some(lane) = head.lane else {
        return Ok(Read::Other);
    };
    let total = head.length + lane.content_length;
    if buffer.len() < total {
        buffer.reserve(total - buffer.len());
        while buffer.len() < total {
            if stream.read_buf(buffer).await? == 0 {
                return Ok(Read::Closed);
            }
        }
    }
    let mut request_bytes = buffer.split_to(total);
    let body = if lane.content_length <= COPIED_BODY {
        Bytes::copy_from_slice(&request_bytes[head.length..])
    } else {
        request_bytes.split_off(head.length).freeze()
    };
    drop(request_bytes);
    // `split_to` left the rest of the allocation with `buffer`; take a fresh one (or none).
    *buffer = if buffer.is_empty() {
        BytesMut::new()
    } else {
        BytesMut::from(&buffer[..])
    };
    Ok(Read::Agent { lane, body })
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

/// Writes a response: its head, then its body, whole (an agent's answers are JSON or an
/// artifact's bytes, both already in memory), framed by `Content-Length`.
async fn write(stream: &mut TcpStream, response: Response, close: bool) -> io::Result<()> {
    let (parts, body) = response.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .map_err(io::Error::other)?;
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
    if bodiless {
        return stream.write_all(&head).await;
    }
    // One write for a small answer: a head and body sent apart could wait on the peer's
    // delayed acknowledgement (Nagle).
    if body.len() <= COPIED_BODY {
        head.extend_from_slice(&body);
        stream.write_all(&head).await
    } else {
        stream.write_all(&head).await?;
        stream.write_all(&body).await
    }
}

fn field(head: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    head.extend_from_slice(name);
    head.extend_from_slice(b": ");
    head.extend_from_slice(value);
    head.extend_from_slice(b"\r\n");
}

/// Gives the connection to hyper, which reads first what was already read.
async fn hand_off(
    stream: TcpStream,
    read: Bytes,
    address: SocketAddr,
    routes: Router,
    stop: CancellationToken,
) {
    let service =
        hyper::service::service_fn(move |request: hyper::Request<hyper::body::Incoming>| {
            let mut request = request.map(Body::new);
            request.extensions_mut().insert(ConnectInfo(address));
            routes.clone().call(request)
        });
    let connection = hyper::server::conn::http1::Builder::new()
        .serve_connection(
            hyper_util::rt::TokioIo::new(Rewind { read, stream }),
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

/// A stream whose first reads give back bytes already read from it.
struct Rewind {
    read: Bytes,
    stream: TcpStream,
}

impl AsyncRead for Rewind {
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

impl AsyncWrite for Rewind {
    fn poll_write(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        bytes: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(context, bytes)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        context: &mut Context<'_>,
        buffers: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(context, buffers)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, context: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(context)
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
        use capstan_events::{
            agent_channel::rpc::{ops, AgentRequest, AgentResponse},
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
        let fake = capstan_bus::RpcServer::new(bus.clone(), Domain::AgentChannel).route_with_body(
            ops::AGENT_REQUEST,
            |request: AgentRequest, body: Bytes| async move {
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
                Ok::<_, capstan_events::rpc::RpcError>((answer, Bytes::new()))
            },
        );
        tokio::spawn(fake.serve(stop.clone()));
        let meta = serde_json::json!({"endpoint": "claim"});
        while bus
            .request_with_body::<_, serde_json::Value>(
                Domain::AgentChannel,
                ops::AGENT_REQUEST,
                &meta,
                Bytes::new(),
                std::time::Duration::from_millis(200),
            )
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
        tokio::spawn(crate::serve(listener, state, stop.clone()));
        Plane {
            address,
            stop,
            _nats: nats,
            _database: database,
        }
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
        let Read::Agent { lane, body } = read(&mut server, &mut buffer).await.unwrap() else {
            panic!("an agent's claim went to hyper");
        };
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
        let Read::Agent { lane, body } = read(&mut server, &mut buffer).await.unwrap() else {
            panic!("an agent's result went to hyper");
        };
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
            read(&mut server, &mut buffer).await.unwrap(),
            Read::Other
        ));
        assert_eq!(&buffer[..], &chunked[..]);
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
