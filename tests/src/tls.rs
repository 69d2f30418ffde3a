//! A TLS server of the test's own that picks its certificate by SNI, as a web server with
//! several vhosts does, serving certificates the test makes with `rcgen` (valid for a number
//! of days from today) and can replace while it runs (a renewal). Each connection completes
//! the handshake and is closed.

use chrono::{Datelike, Utc};
use rcgen::{CertificateParams, DistinguishedName, DnType, KeyPair};
use rustls::{
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
    server::{ClientHello, ResolvesServerCert},
    sign::CertifiedKey,
};
use std::{
    collections::HashMap,
    net::SocketAddr,
    sync::{Arc, Mutex},
};
use tokio::{net::TcpListener, task::JoinHandle};

#[derive(Debug, Default)]
struct BySni(Mutex<HashMap<String, Arc<CertifiedKey>>>);

impl ResolvesServerCert for BySni {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let name = hello.server_name()?.to_ascii_lowercase();
        self.0.lock().unwrap().get(&name).cloned()
    }
}

/// `(year, month, day)` of today plus `offset` days.
fn day(offset: i64) -> (i32, u8, u8) {
    let date = (Utc::now() + chrono::Duration::days(offset)).date_naive();
    (date.year(), date.month() as u8, date.day() as u8)
}

/// A self-signed certificate for `name`, valid from 30 days ago until midnight (UTC) of today
/// plus `days`.
pub fn certificate(name: &str, days: i64) -> (CertificateDer<'static>, PrivateKeyDer<'static>) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(vec![name.to_string()]).unwrap();
    params.distinguished_name = DistinguishedName::new();
    params.distinguished_name.push(DnType::CommonName, name);
    let (from, to) = (day(-30), day(days));
    params.not_before = rcgen::date_time_ymd(from.0, from.1, from.2);
    params.not_after = rcgen::date_time_ymd(to.0, to.1, to.2);
    let certificate = params.self_signed(&key).unwrap();
    (
        certificate.der().clone(),
        PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
    )
}

pub struct SniServer {
    pub address: SocketAddr,
    certificates: Arc<BySni>,
    task: JoinHandle<()>,
}

impl SniServer {
    /// On 127.0.0.1, on a port of its own; it serves no name until [`SniServer::serve`].
    pub async fn start() -> SniServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let address = listener.local_addr().unwrap();
        let certificates = Arc::new(BySni::default());
        let config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(certificates.clone());
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    return;
                };
                let acceptor = acceptor.clone();
                tokio::spawn(async move {
                    let _ = acceptor.accept(stream).await;
                });
            }
        });
        SniServer {
            address,
            certificates,
            task,
        }
    }

    pub fn port(&self) -> u16 {
        self.address.port()
    }

    /// From now on, SNI `name` gets a new certificate valid for `days` more days.
    pub fn serve(&self, name: &str, days: i64) {
        let (der, key) = certificate(name, days);
        let signer = rustls::crypto::ring::sign::any_supported_type(&key).unwrap();
        self.certificates.0.lock().unwrap().insert(
            name.to_ascii_lowercase(),
            Arc::new(CertifiedKey::new(vec![der], signer)),
        );
    }
}

impl Drop for SniServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}
