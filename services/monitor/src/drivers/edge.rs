//! One edge probe run (MO-11): the public name resolved once, then rounds of a `GET /login`
//! and a `POST {}` down every path at once — the edge (the name's addresses, the chain
//! verified as an uptime check does) and each of the machine's own addresses (SNI and `Host`
//! kept, nothing verified, the presented certificate read). Every request is a connection of
//! its own, so its time covers the whole path.

use std::net::IpAddr;
use std::time::Instant;

use bytes::Bytes;
use capstan_events::monitor::rpc::{EdgePath, EdgePathKind, PresentedCertificate};
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use rustls::pki_types::ServerName;

use super::http::connect;
use super::ProbeError;
use super::Prober;
use crate::domain::certificates;
use crate::domain::edge::{
    self, Leg, Site, HEARTBEAT_BODY, HEARTBEAT_PATH, LOGIN_PATH, NO_ANSWER, USER_AGENT,
};

/// What a run found: its rounds and each path's figures (the edge first).
#[derive(Debug, Clone)]
pub struct Probed {
    pub rounds: u32,
    pub paths: Vec<EdgePath>,
}

/// One path as it is asked.
struct Path {
    kind: EdgePathKind,
    target: String,
    connect_to: Vec<IpAddr>,
    addresses: Vec<String>,
    legs: Vec<Leg>,
    certificate: Option<PresentedCertificate>,
}

#[derive(Clone, Copy)]
enum Ask {
    Login,
    Heartbeat,
}

impl Prober {
    /// Runs the rounds against `site` and the node's own `direct` addresses.
    pub async fn edge_probe(&self, site: &Site, direct: &[IpAddr]) -> Probed {
        let started = Instant::now();
        let resolved =
            match tokio::time::timeout(NO_ANSWER, self.resolver.addresses(&site.name)).await {
                Ok(found) => found,
                Err(_) => Err(ProbeError::Timeout(format!(
                    "resolving {} took more than {} s",
                    site.name,
                    NO_ANSWER.as_secs()
                ))),
            };
        let mut paths = Vec::with_capacity(direct.len() + 1);
        let (edge_to, edge_error) = match resolved {
            Ok(addresses) => (addresses, None),
            Err(error) => (Vec::new(), Some(error)),
        };
        paths.push(Path {
            kind: EdgePathKind::Edge,
            target: site.name.clone(),
            addresses: edge_to.iter().map(ToString::to_string).collect(),
            connect_to: edge_to,
            legs: Vec::new(),
            certificate: None,
        });
        for address in direct {
            paths.push(Path {
                kind: EdgePathKind::Direct,
                target: address.to_string(),
                connect_to: vec![*address],
                addresses: Vec::new(),
                legs: Vec::new(),
                certificate: None,
            });
        }
        let mut rounds = 0;
        while edge::may_start_round(rounds, started.elapsed()) {
            rounds += 1;
            let asks = paths.iter().flat_map(|path| {
                [Ask::Login, Ask::Heartbeat]
                    .map(|ask| self.edge_request(site, path.kind, &path.connect_to, ask))
            });
            let answers = futures::future::join_all(asks).await;
            for (index, (leg, certificate)) in answers.into_iter().enumerate() {
                let path = &mut paths[index / 2];
                let leg = match (&edge_error, path.kind) {
                    (Some(error), EdgePathKind::Edge) => Leg::Failed(error.to_string()),
                    _ => leg,
                };
                path.legs.push(leg);
                if path.certificate.is_none() {
                    path.certificate = certificate;
                }
            }
        }
        Probed {
            rounds,
            paths: paths
                .into_iter()
                .map(|path| {
                    edge::summarise(
                        path.kind,
                        path.target,
                        path.addresses,
                        &path.legs,
                        path.certificate,
                    )
                })
                .collect(),
        }
    }

    /// One request down one path, given up at [`NO_ANSWER`]; for a direct `https://` path,
    /// also the certificate the origin presented.
    async fn edge_request(
        &self,
        site: &Site,
        kind: EdgePathKind,
        connect_to: &[IpAddr],
        ask: Ask,
    ) -> (Leg, Option<PresentedCertificate>) {
        let started = Instant::now();
        let mut presented = None;
        let leg = match tokio::time::timeout(
            NO_ANSWER,
            self.edge_attempt(site, kind, connect_to, ask, &mut presented),
        )
        .await
        {
            Ok(Ok(status)) => Leg::Answered {
                status,
                elapsed: started.elapsed(),
            },
            Ok(Err(reason)) => Leg::Failed(reason.to_string()),
            Err(_) => Leg::NoAnswer,
        };
        (leg, presented)
    }

    async fn edge_attempt(
        &self,
        site: &Site,
        kind: EdgePathKind,
        connect_to: &[IpAddr],
        ask: Ask,
        presented: &mut Option<PresentedCertificate>,
    ) -> Result<u16, ProbeError> {
        let stream = connect(self.outbound, connect_to, site.port).await?;
        let host = &site.origin[url::Position::BeforeHost..url::Position::AfterPort];
        let request = match ask {
            Ask::Login => hyper::Request::get(LOGIN_PATH).body(Full::new(Bytes::new())),
            Ask::Heartbeat => hyper::Request::post(HEARTBEAT_PATH)
                .header(hyper::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from_static(HEARTBEAT_BODY.as_bytes()))),
        };
        let mut request = request
            .map_err(|error| ProbeError::Unusable(format!("building the request: {error}")))?;
        let headers = request.headers_mut();
        headers.insert(
            hyper::header::HOST,
            host.parse()
                .map_err(|_| ProbeError::Unusable(format!("{host} cannot be a Host header")))?,
        );
        headers.insert(
            hyper::header::USER_AGENT,
            hyper::header::HeaderValue::from_static(USER_AGENT),
        );
        if !site.https {
            return send(TokioIo::new(stream), request).await;
        }
        let name = ServerName::try_from(site.name.clone()).map_err(|error| {
            ProbeError::Unusable(format!("{} cannot be a TLS name: {error}", site.name))
        })?;
        let connector = match kind {
            EdgePathKind::Edge => &self.verified,
            EdgePathKind::Direct => &self.any,
        };
        let tls = connector
            .connect(name, stream)
            .await
            .map_err(|error| ProbeError::Tls(format!("TLS: {error}")))?;
        if kind == EdgePathKind::Direct {
            let (_, connection) = tls.get_ref();
            *presented = connection
                .peer_certificates()
                .and_then(|chain| chain.first())
                .and_then(|leaf| certificates::parse(leaf.as_ref()).ok())
                .map(|served| PresentedCertificate {
                    names: served.names,
                    not_after: served.not_after,
                    self_signed: served.self_signed,
                });
        }
        send(TokioIo::new(tls), request).await
    }
}

/// Sends `request` and answers the status of its answer (the body is not waited for).
async fn send<T>(io: TokioIo<T>, request: hyper::Request<Full<Bytes>>) -> Result<u16, ProbeError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|error| ProbeError::BadAnswer(format!("HTTP: {error}")))?;
    // The connection is driven beside the request and ends with it, even when the request is
    // given up at the timeout (the guard is dropped with this future).
    let _driving = AbortOnDrop(tokio::spawn(async move {
        let _ = connection.await;
    }));
    sender
        .send_request(request)
        .await
        .map(|response| response.status().as_u16())
        .map_err(|error| ProbeError::BadAnswer(format!("HTTP: {error}")))
}

struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}
