//! Sites of the test's own: a plain HTTP server whose answer the test switches (200, 500, or
//! a stall: the request is read and never answered), counting the requests it took; and a TLS
//! server presenting a certificate the test made, for reading served certificates.

use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
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
}

pub struct Site {
    pub address: SocketAddr,
    answer: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
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
        let answer = Arc::new(AtomicU8::new(Answer::Ok as u8));
        let requests = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept(listener, answer.clone(), requests.clone(), None));
        Site {
            address,
            answer,
            requests,
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
        let answer = Arc::new(AtomicU8::new(Answer::Ok as u8));
        let requests = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept(
            listener,
            answer.clone(),
            requests.clone(),
            Some(acceptor),
        ));
        Site {
            address,
            answer,
            requests,
            task,
        }
    }

    pub fn answer(&self, answer: Answer) {
        self.answer.store(answer as u8, Ordering::SeqCst);
    }

    /// Requests read so far (TLS handshakes without a request are not counted).
    pub fn requests(&self) -> usize {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Site {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn accept(
    listener: TcpListener,
    answer: Arc<AtomicU8>,
    requests: Arc<AtomicUsize>,
    tls: Option<tokio_rustls::TlsAcceptor>,
) {
    let mut connections = tokio::task::JoinSet::new();
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            return;
        };
        let (answer, requests, tls) = (answer.clone(), requests.clone(), tls.clone());
        connections.spawn(async move {
            match tls {
                Some(acceptor) => {
                    if let Ok(stream) = acceptor.accept(stream).await {
                        serve(stream, &answer, &requests).await;
                    }
                }
                None => serve(stream, &answer, &requests).await,
            }
        });
        while connections.try_join_next().is_some() {}
    }
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    answer: &AtomicU8,
    requests: &AtomicUsize,
) {
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
    requests.fetch_add(1, Ordering::SeqCst);
    let status = match answer.load(Ordering::SeqCst) {
        0 => "200 OK",
        1 => "500 Internal Server Error",
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
