//! TLS for the checks: a verifying set-up for uptime checks (the system's roots, the name
//! checked) and one that verifies nothing for reading the certificate an origin serves, whose
//! dates must be readable even when expired or for another name (MO-08).

use std::net::IpAddr;
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, ServerName};

use super::http::connect;
use super::ProbeError;
use super::Prober;
use crate::domain::certificates::{self, Served};

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Verifies against the system's roots.
pub fn verified_connector() -> tokio_rustls::TlsConnector {
    verified_connector_with(Vec::new())
}

/// Verifies against the system's roots and `extra`.
pub fn verified_connector_with(extra: Vec<CertificateDer<'static>>) -> tokio_rustls::TlsConnector {
    let mut roots = rustls::RootCertStore::empty();
    for certificate in rustls_native_certs::load_native_certs().certs {
        let _ = roots.add(certificate);
    }
    for certificate in extra {
        let _ = roots.add(certificate);
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    tokio_rustls::TlsConnector::from(Arc::new(config))
}

/// Verifies nothing (MO-08: validity is deliberately not verified): the kit's read-only
/// set-up; the certificate is read, not trusted, and nothing is sent over the connection.
pub fn any_connector() -> tokio_rustls::TlsConnector {
    tokio_rustls::TlsConnector::from(capstan_runtime::tls::read_only_config())
}

impl Prober {
    /// MO-08: the certificate `origin` serves on the TLS port for SNI `name`, read within the
    /// timeout and without validating it.
    pub async fn served_certificate(
        &self,
        origin: IpAddr,
        name: &str,
    ) -> Result<Served, ProbeError> {
        let read = async {
            let stream = connect(self.outbound, &[origin], self.tls_port).await?;
            let server_name = ServerName::try_from(name.to_string()).map_err(|error| {
                ProbeError::Unusable(format!("{name} cannot be a TLS name: {error}"))
            })?;
            let tls = self
                .any
                .connect(server_name, stream)
                .await
                .map_err(|error| {
                    ProbeError::Tls(format!("TLS with {origin} for {name}: {error}"))
                })?;
            let (_, connection) = tls.get_ref();
            let leaf = connection
                .peer_certificates()
                .and_then(|chain| chain.first())
                .ok_or_else(|| {
                    ProbeError::BadAnswer(format!("{origin} presented no certificate for {name}"))
                })?;
            certificates::parse(leaf.as_ref()).map_err(|why| ProbeError::BadAnswer(why.0))
        };
        tokio::time::timeout(self.timeout, read)
            .await
            .unwrap_or_else(|_| {
                Err(ProbeError::Timeout(format!(
                    "no TLS answer from {origin} within {} s",
                    self.timeout.as_secs_f64()
                )))
            })
    }
}
