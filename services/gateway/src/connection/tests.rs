//! The connection code against a real listener: an agent's requests read and answered here,
//! everything else through hyper, each limit held.

use super::*;
use axum::http::header;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use capstan_events::agent_channel::rpc::AgentEndpoint;
use serde_json::json;
use std::time::Duration;
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
        &b"POST /api/v1/agent/artifact HTTP/1.1\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"[..],
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
