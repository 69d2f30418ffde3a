//! Writing an answer on the connection: its head, then its body framed by `Content-Length`, at
//! least at the minimum rate.

use axum::{http::header, response::Response};
use bytes::Bytes;
use tokio::{
    io::AsyncWriteExt,
    net::TcpStream,
    time::{timeout_at, Instant},
};

use super::limits::{ConnectionLimits, COPIED_BODY};

/// An answer that was not written whole.
pub(super) struct Unwritten {
    /// Not a byte of it left: the agent provably never had it.
    pub(super) nothing_written: bool,
    /// The peer read too slowly (or not at all).
    pub(super) timed_out: bool,
}

/// Writes a response whole, its body read into memory first (an agent's answers are JSON or
/// an artifact's bytes, both already in memory).
pub(super) async fn write(
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
pub(super) async fn write_parts(
    stream: &mut TcpStream,
    parts: &axum::http::response::Parts,
    body: &Bytes,
    close: bool,
    limits: &ConnectionLimits,
) -> Result<(), Unwritten> {
    let (mut head, bodiless) = head_of(parts, body.len(), close);
    // One write for a small answer: a head and body sent apart could wait on the peer's
    // delayed acknowledgement (Nagle).
    let pieces: [&[u8]; 2] = if bodiless {
        [&head, &[]]
    } else if body.len() <= COPIED_BODY {
        head.extend_from_slice(body);
        [&head, &[]]
    } else {
        [&head, body]
    };
    send(stream, pieces, limits).await
}

/// The head of an answer with a body of `length` bytes, and whether its status has no body.
fn head_of(parts: &axum::http::response::Parts, length: usize, close: bool) -> (Vec<u8>, bool) {
    let status = parts.status;
    let mut head = Vec::with_capacity(256 + if length <= COPIED_BODY { length } else { 0 });
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
        field(&mut head, b"content-length", length.to_string().as_bytes());
    }
    if close {
        field(&mut head, b"connection", b"close");
    }
    head.extend_from_slice(b"\r\n");
    (head, bodiless)
}

/// Sends `pieces` in order, at least at the minimum rate, never stalled beyond the grace.
async fn send(
    stream: &mut TcpStream,
    pieces: [&[u8]; 2],
    limits: &ConnectionLimits,
) -> Result<(), Unwritten> {
    let mut written = 0;
    let started = Instant::now();
    for piece in pieces {
        let mut sent = 0;
        while sent < piece.len() {
            // The minimum rate, and no stall longer than the grace: what the socket's buffers
            // took at first earns no credit for a reader that then stops.
            let by = limits
                .next_byte_by(started, written)
                .min(Instant::now() + limits.header_timeout);
            match timeout_at(by, stream.write(&piece[sent..])).await {
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
