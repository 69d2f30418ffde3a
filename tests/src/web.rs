//! Sites of the test's own: a plain HTTP server whose answer the test switches (200, 500, 429,
//! or a stall: the request is read and never answered), counting the requests it took and
//! keeping each request's head; it can also stall only its next few requests, on purpose. And a
//! TLS server presenting a certificate the test made, for reading served certificates.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// How a [`Site`] answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum Answer {
    Ok = 0,
    ServerError = 1,
    /// Reads the request and never answers (the connection is held open).
    Stall = 2,
    /// 429 Too Many Requests: a site's own rate limit.
    TooMany = 3,
}

/// What a site shares with its connections.
#[derive(Default)]
struct Shared {
    answer: AtomicU8,
    requests: AtomicUsize,
    /// Requests still to be stalled before the answer applies again.
    stall_next: AtomicUsize,
    heads: Mutex<Vec<String>>,
}

pub struct Site {
    pub address: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Site {
    /// A site on `ip`, on a port of its own (`port` 0) or the one given.
    pub async fn start(ip: IpAddr, port: u16) -> Site {
        let listener = TcpListener::bind(SocketAddr::new(ip, port)).await.unwrap();
        Site::on(listener)
    }

    fn on(listener: TcpListener) -> Site {
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(accept(listener, shared.clone(), None));
        Site {
            address,
            shared,
            task,
        }
    }

    /// An HTTPS site on `ip` presenting `chain` (leaf first) with `key`.
    pub async fn start_tls(
        ip: IpAddr,
        port: u16,
        chain: Vec<rustls::pki_types::CertificateDer<'static>>,
        key: rustls::pki_types::PrivateKeyDer<'static>,
    ) -> Site {
        let listener = TcpListener::bind(SocketAddr::new(ip, port)).await.unwrap();
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let address = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let task = tokio::spawn(accept(listener, shared.clone(), Some(acceptor)));
        Site {
            address,
            shared,
            task,
        }
    }

    pub fn answer(&self, answer: Answer) {
        self.shared.answer.store(answer as u8, Ordering::SeqCst);
    }

    /// The next `count` requests are read and never answered; then the answer applies again.
    pub fn stall_next(&self, count: usize) {
        self.shared.stall_next.store(count, Ordering::SeqCst);
    }

    /// Requests read so far (TLS handshakes without a request are not counted).
    pub fn requests(&self) -> usize {
        self.shared.requests.load(Ordering::SeqCst)
    }

    /// Each request's head (request line and headers) as read, in order.
    pub fn heads(&self) -> Vec<String> {
        self.shared.heads.lock().unwrap().clone()
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    shared: Arc<Shared>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (shared, tls) = (shared.clone(), tls.clone());
        connections.spawn(async move {
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve(stream, &shared).await;
                    }
                }
                None => serve(stream, &shared).await,
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(mut stream: S, shared: &Shared) {
    let mut head = Vec::new();
    let mut buffer = [0u8; 1024];
    while !head.windows(4).any(|window| window == b"\r\n\r\n") {
        match stream.read(&mut buffer).await {
            Ok(0) | Err(_) => return,
            Ok(read) => head.extend_from_slice(&buffer[..read]),
        }
        if head.len() > 64 * 1024 {
            return;
        }
    }
    shared.requests.fetch_add(1, Ordering::SeqCst);
    if let Some(end) = head.windows(4).position(|window| window == b"\r\n\r\n") {
        let text = String::from_utf8_lossy(&head[..end]).into_owned();
        shared.heads.lock().unwrap().push(text);
    }
    let stalled = shared
        .stall_next
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
            left.checked_sub(1)
        })
        .is_ok();
    let answer = if stalled {
        Answer::Stall as u8
    } else {
        shared.answer.load(Ordering::SeqCst)
    };
    let status = match answer {
        0 => "200 OK",
        1 => "500 Internal Server Error",
        3 => "429 Too Many Requests",
        _ => {
            // hold the connection and say nothing until the client gives up
            let _ = stream.read(&mut buffer).await;
            return;
        }
    };
    let body = "welcome";
    let reply = format!(
        "HTTP/1.1 {status}\r\ncontent-type: text/plain\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    );
    let _ = stream.write_all(reply.as_bytes()).await;
    let _ = stream.shutdown().await;
}
