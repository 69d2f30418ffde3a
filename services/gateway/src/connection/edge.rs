//! Handing a connection to hyper: what was read already first ([`Edge`]), a request body paced
//! at the minimum rate, an answer nobody reads dropped after the head timeout.

use axum::{
    body::{Body, HttpBody},
    extract::ConnectInfo,
    Router,
};
use bytes::{Buf, Bytes};
use futures::StreamExt;
use std::{
    future::Future,
    io,
    net::SocketAddr,
    pin::Pin,
    task::{Context, Poll},
    time::Duration,
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::TcpStream,
    time::{timeout_at, Instant, Sleep},
};
use tokio_util::sync::CancellationToken;
use tower_service::Service;

use super::limits::{dropped, ConnectionLimits};

/// Gives the connection to hyper, which reads first what was already read. Hyper closes a
/// connection whose head takes longer than the head timeout (idle ones too); a body is read at
/// least at the minimum rate ([`paced`]), and an answer nobody reads stalls at most the head
/// timeout ([`Edge`]).
pub(super) async fn hand_off(
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
