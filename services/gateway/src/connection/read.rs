//! Reading an agent's request on the connection: its head (parsed by
//! [`crate::domain::agent_request`]), then its body, each within its limits.

use axum::{
    body::Body,
    extract::Request,
    http::{Method, Version},
};
use bytes::{Bytes, BytesMut};
use std::io;
use tokio::{
    io::AsyncReadExt,
    net::TcpStream,
    time::{timeout_at, Instant},
};

use super::limits::{ConnectionLimits, COPIED_BODY, MAX_HEAD, READ_ROOM};
use crate::domain::agent_request::{Head, Lane, Parsed};

/// What the next request on a connection is.
pub(super) enum Read {
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
pub(super) async fn read_head(
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
pub(super) enum BodyRead {
    Whole(Bytes),
    /// The peer closed the connection before the body was whole.
    Closed,
    /// It came slower than the minimum rate.
    TimedOut,
}

/// Reads an agent request's body, at least at the minimum rate. What follows the request (a
/// pipelined next one) stays in `buffer`; when nothing does, the buffer is let go.
pub(super) async fn read_body(
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
pub(super) fn request_of(lane: Lane, body: Bytes) -> Request {
    let mut request = Request::new(Body::from(body));
    *request.method_mut() = Method::POST;
    *request.uri_mut() = lane.uri;
    *request.version_mut() = Version::HTTP_11;
    *request.headers_mut() = lane.headers;
    request
}
