//! One uptime check (MO-01..MO-03): resolve the name, choose the address (pinned to the
//! node's own when the pinning rule allows), connect, TLS with the name for SNI (verified
//! against the system's roots), one `GET` with the name as `Host`, and judge the answer.
//! Redirects are not followed: a 3xx is an answer.

use std::net::{IpAddr, SocketAddr};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use capstan_events::monitor::CheckKind;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;
use url::Url;

use capstan_runtime::outbound::Outbound;

use super::{ProbeError, Prober};
use crate::domain::pinning::{self, Route};
use crate::domain::uptime::{judge_answer, reads_body, Outcome, MAX_BODY_BYTES};

/// How checks introduce themselves.
pub const USER_AGENT: &str = concat!("CapstanMonitor/", env!("CARGO_PKG_VERSION"));

/// What to check.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub url: &'a Url,
    pub kind: CheckKind,
    pub keyword: Option<&'a str>,
    /// The node's own addresses, as it reported them.
    pub addresses: &'a [String],
}

/// What a check saw, how long it took and which way it went.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    pub outcome: Outcome,
    pub response_ms: u32,
    /// `None` when the name did not resolve.
    pub route: Option<Route>,
}

impl Prober {
    /// Runs one check, within the configured timeout (a stall is a failure).
    pub async fn check(&self, target: Target<'_>) -> Checked {
        let started = Instant::now();
        let mut route = None;
        let outcome = match tokio::time::timeout(self.timeout, self.attempt(target, &mut route))
            .await
        {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(reason)) => Outcome::failed(reason.to_string()),
            Err(_) => Outcome::failed(format!("no answer within {} s", self.timeout.as_secs_f64())),
        };
        Checked {
            outcome,
            response_ms: u32::try_from(started.elapsed().as_millis()).unwrap_or(u32::MAX),
            route,
        }
    }

    async fn attempt(
        &self,
        target: Target<'_>,
        route: &mut Option<Route>,
    ) -> Result<Outcome, ProbeError> {
        let url = target.url;
        let unusable = |why: &str| ProbeError::Unusable(why.to_string());
        let host = url
            .host_str()
            .ok_or_else(|| unusable("the URL names no host"))?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let port = url
            .port_or_known_default()
            .ok_or_else(|| unusable("the URL names no port"))?;
        let public = self.resolver.addresses(bare).await?;
        // Every answer is checked, not only the one dialled: a name that resolves inside the
        // plane for anyone is refused (the rule webhooks follow).
        self.outbound
            .check_all(&public)
            .map_err(|refused| ProbeError::Refused(refused.of_name(bare)))?;
        let chosen = if bare.parse::<IpAddr>().is_ok() {
            Route::ThroughName
        } else {
            pinning::route(target.addresses, &public)
        };
        *route = Some(chosen);
        let candidates = match chosen {
            Route::Pinned(address) => vec![address],
            Route::ThroughName => public,
        };
        let stream = connect(self.outbound, &candidates, port).await?;
        let path = &url[url::Position::BeforePath..url::Position::AfterQuery];
        let request = hyper::Request::get(if path.is_empty() { "/" } else { path })
            .header(
                hyper::header::HOST,
                &url[url::Position::BeforeHost..url::Position::AfterPort],
            )
            .header(hyper::header::USER_AGENT, USER_AGENT)
            .header(hyper::header::ACCEPT, "*/*")
            .body(Empty::<Bytes>::new())
            .map_err(|error| ProbeError::Unusable(format!("building the request: {error}")))?;
        let read = reads_body(target.kind);
        let (status, body) = if url.scheme() == "https" {
            let name =
                rustls::pki_types::ServerName::try_from(bare.to_string()).map_err(|error| {
                    ProbeError::Unusable(format!("the URL's host cannot be a TLS name: {error}"))
                })?;
            let tls = self
                .verified
                .connect(name, stream)
                .await
                .map_err(|error| ProbeError::Tls(format!("TLS with {bare}: {error}")))?;
            exchange(TokioIo::new(tls), request, read).await?
        } else {
            exchange(TokioIo::new(stream), request, read).await?
        };
        Ok(judge_answer(target.kind, target.keyword, status, &body))
    }
}

impl Prober {
    /// Whether an uptime URL may be set (at creation; every check asks again, since DNS can
    /// change): the addresses its host resolves to now, each passing the address policy. A
    /// name that does not resolve yet passes — its checks fail until it does, and are checked
    /// then.
    pub async fn url_allowed(&self, url: &Url) -> Result<(), ProbeError> {
        let Some(host) = url.host_str() else {
            return Ok(());
        };
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let resolved = tokio::time::timeout(self.timeout, self.resolver.addresses(bare)).await;
        let Ok(Ok(addresses)) = resolved else {
            return Ok(());
        };
        self.outbound.check_all(&addresses).map_err(|refused| {
            ProbeError::Refused(if bare.parse::<IpAddr>().is_ok() {
                refused.to_string()
            } else {
                refused.of_name(bare)
            })
        })
    }
}

/// A connection to the first of `candidates` that takes one, once every candidate has passed
/// the address policy: the monitor's one way out, so no check dials an address unchecked.
pub async fn connect(
    outbound: Outbound,
    candidates: &[IpAddr],
    port: u16,
) -> Result<TcpStream, ProbeError> {
    outbound
        .check_all(candidates)
        .map_err(|refused| ProbeError::Refused(refused.to_string()))?;
    let mut last = ProbeError::Unreachable("no address to connect to".into());
    for address in candidates {
        let socket = SocketAddr::new(*address, port);
        match TcpStream::connect(socket).await {
            Ok(stream) => {
                let _ = stream.set_nodelay(true);
                return Ok(stream);
            }
            Err(error) => {
                last = ProbeError::Unreachable(format!("connecting to {socket}: {error}"))
            }
        }
    }
    Err(last)
}

/// Sends `request` and reads the status and, when `read_body`, the start of the body.
async fn exchange<T>(
    io: TokioIo<T>,
    request: hyper::Request<Empty<Bytes>>,
    read_body: bool,
) -> Result<(u16, Bytes), ProbeError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|error| ProbeError::BadAnswer(format!("HTTP: {error}")))?;
    let driving = tokio::spawn(async move {
        let _ = connection.await;
    });
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|error| ProbeError::BadAnswer(format!("HTTP: {error}")))?;
        let status = response.status().as_u16();
        let mut kept = BytesMut::new();
        if read_body {
            let mut body = response.into_body();
            while kept.len() < MAX_BODY_BYTES {
                match body.frame().await {
                    Some(Ok(frame)) => {
                        if let Ok(data) = frame.into_data() {
                            let room = MAX_BODY_BYTES - kept.len();
                            kept.extend_from_slice(&data[..data.len().min(room)]);
                        }
                    }
                    Some(Err(error)) => {
                        return Err(ProbeError::BadAnswer(format!("reading the page: {error}")))
                    }
                    None => break,
                }
            }
        }
        Ok((status, kept.freeze()))
    }
    .await;
    driving.abort();
    answer
}
