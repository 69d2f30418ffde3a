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

mod edge;
mod limits;
mod read;
#[cfg(test)]
mod tests;
mod write;

use axum::{body::Body, extract::ConnectInfo, response::Response, Router};
use bytes::{Bytes, BytesMut};
use capstan_events::agent_channel::rpc::AgentEndpoint;
use futures::FutureExt;
use std::{future::Future, net::SocketAddr};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::TcpStream,
    time::{timeout_at, Instant},
};
use tokio_util::sync::CancellationToken;

pub use limits::ConnectionLimits;

use self::{
    edge::hand_off,
    limits::{dropped, LINGER_BYTES, READ_ROOM},
    read::{read_body, read_head, request_of, BodyRead, Read},
    write::{write, write_parts},
};
use crate::{
    domain::agent_request::Lane,
    domains::agent_channel::agent::{ReadHere, VET_ABOVE},
    http::{answer_agent, vet_agent},
    AppState,
};

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
        // Boxed: an idle connection's task stays small, and only a request in hand holds this.
        let next = Box::pin(answer(
            &mut stream,
            &mut buffer,
            address,
            &state,
            lane,
            &limits,
            &stop,
        ));
        if let After::Close = next.await {
            return;
        }
    }
}

/// What the connection does after an agent's request.
enum After {
    /// Reads the next request.
    Next,
    /// Ends (the answer asked for it, the peer is gone, or a limit was passed).
    Close,
}

/// Answers an agent's request read to its head: a large body is read only once the agent
/// channel has heard the head, and the answer is written on the connection.
async fn answer(
    stream: &mut TcpStream,
    buffer: &mut BytesMut,
    address: SocketAddr,
    state: &AppState,
    lane: Box<Lane>,
    limits: &ConnectionLimits,
    stop: &CancellationToken,
) -> After {
    let (route, endpoint, close) = (lane.route, lane.endpoint, lane.close);
    // A stranger's (unsigned, an unknown key, over its rate) large body is refused unread.
    if lane.content_length > VET_ABOVE {
        if let Some(refusal) = Box::pin(vetted(state, address, &lane)).await {
            metrics::counter!("capstan_gateway_bodies_refused_unread_total").increment(1);
            // Boxed, as every rare path here: a connection's task is as large as its
            // largest state, and `linger` holds a read buffer across its awaits.
            let _ = Box::pin(write(stream, refusal, true, limits)).await;
            Box::pin(linger(stream, limits)).await;
            return After::Close;
        }
    }
    let body = match Box::pin(read_body(stream, buffer, &lane, limits)).await {
        Ok(BodyRead::Whole(body)) => body,
        Ok(BodyRead::TimedOut) => {
            dropped("slow_body");
            return After::Close;
        }
        Ok(BodyRead::Closed) | Err(_) => return After::Close,
    };
    let poll = (endpoint == AgentEndpoint::Claim).then(uuid::Uuid::now_v7);
    let mut request = request_of(*lane, body);
    request.extensions_mut().insert(ConnectInfo(address));
    request.extensions_mut().insert(ReadHere { poll });
    let answering = Box::pin(answer_agent(state.clone(), route, endpoint, request));
    let response = match poll {
        None => answering.await,
        Some(poll) => match Box::pin(watched(stream, answering)).await {
            Watched::Answered(response) => response,
            Watched::HungUp(answering) => {
                dropped("hung_up");
                Box::pin(hung_up(state, poll, answering)).await;
                return After::Close;
            }
        },
    };
    let close = close || stop.is_cancelled();
    Box::pin(respond(stream, state, response, endpoint, close, limits)).await
}

/// The agent channel's refusal of a large body's head, if it refuses it.
async fn vetted(state: &AppState, address: SocketAddr, lane: &Lane) -> Option<Response> {
    let mut head = request_of(
        Lane {
            uri: lane.uri.clone(),
            headers: lane.headers.clone(),
            ..*lane
        },
        Bytes::new(),
    );
    head.extensions_mut().insert(ConnectInfo(address));
    vet_agent(state.clone(), lane.route, lane.endpoint, head).await
}

/// A claim whose agent hung up: the claim is released, and a job it was handed just then goes
/// back, since this answer is never written. The agent channel hands that job back itself once
/// it has the release; only when the release did not reach it is the answer awaited and handed
/// back here.
async fn hung_up(state: &AppState, poll: uuid::Uuid, answering: impl Future<Output = Response>) {
    if Box::pin(crate::domains::agent_channel::agent::release_poll(
        state, poll,
    ))
    .await
    {
        return;
    }
    let response = answering.await;
    Box::pin(crate::domains::agent_channel::agent::hand_back_unwritten(
        state, response,
    ))
    .await;
}

/// Writes `response` on the connection; a claim's answer the agent provably never had is
/// handed back to the agent channel.
async fn respond(
    stream: &mut TcpStream,
    state: &AppState,
    response: Response,
    endpoint: AgentEndpoint,
    close: bool,
    limits: &ConnectionLimits,
) -> After {
    let (parts, body) = response.into_parts();
    let body = match Box::pin(axum::body::to_bytes(body, usize::MAX)).await {
        Ok(body) => body,
        Err(_) => return After::Close,
    };
    match Box::pin(write_parts(stream, &parts, &body, close, limits)).await {
        Ok(()) if !close => return After::Next,
        Ok(()) => {}
        Err(unwritten) => {
            if unwritten.nothing_written && endpoint == AgentEndpoint::Claim {
                Box::pin(crate::domains::agent_channel::agent::hand_back_unwritten(
                    state,
                    Response::from_parts(parts, Body::from(body)),
                ))
                .await;
            }
            if unwritten.timed_out {
                dropped("slow_reader");
            }
            return After::Close;
        }
    }
    let _ = stream.shutdown().await;
    After::Close
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
async fn linger(stream: &mut TcpStream, limits: &ConnectionLimits) {
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
