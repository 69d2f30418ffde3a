//! TLS the way every Capstan program makes it: rustls with the ring provider (never aws-lc),
//! written once for the services, the agent and the admin commands.
//!
//! * [`https_connector`]: the one HTTPS (or plain HTTP) client connector for hyper, trusting
//!   the system's certificate authorities (`SSL_CERT_FILE` / `SSL_CERT_DIR` name others);
//!   [`https_connector_from`] the same, connecting from a chosen local address.
//! * [`read_only_config`]: a client set-up that verifies nothing, for reading the certificate
//!   a server presents (its dates must be readable even when expired or for another name);
//!   nothing may be sent over such a connection after the handshake.

use hyper_util::client::legacy::connect::HttpConnector;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use std::sync::Arc;
use std::time::Duration;

/// hyper's connector for `https://` and `http://` URLs.
pub type HttpsConnector = hyper_rustls::HttpsConnector<HttpConnector>;

/// The HTTPS client connector: HTTP/1, `https://` through rustls (ring) with the system's
/// roots, `http://` plain; connecting gives up after `connect_timeout` when one is given. When
/// the machine has no trusted roots, `no_roots` is told why (the caller logs it in its own
/// words) and https fails to verify, each failure saying so; plain http still works.
pub fn https_connector(
    connect_timeout: Option<Duration>,
    no_roots: impl FnOnce(&std::io::Error),
) -> HttpsConnector {
    https_connector_from(None, connect_timeout, no_roots)
}

/// As [`https_connector`], with every connection's socket bound to `local_address` before it
/// connects (`None`: the system chooses), so the server sees that source address: a machine
/// with several addresses tells which one it speaks from.
pub fn https_connector_from(
    local_address: Option<std::net::IpAddr>,
    connect_timeout: Option<Duration>,
    no_roots: impl FnOnce(&std::io::Error),
) -> HttpsConnector {
    let mut connector = HttpConnector::new();
    connector.set_connect_timeout(connect_timeout);
    connector.set_local_address(local_address);
    connector.enforce_http(false);
    let builder = match hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_native_roots(rustls::crypto::ring::default_provider())
    {
        Ok(builder) => builder,
        Err(error) => {
            no_roots(&error);
            let config = ClientConfig::builder_with_provider(provider())
                .with_safe_default_protocol_versions()
                .expect("ring supports the default protocol versions")
                .with_root_certificates(rustls::RootCertStore::empty())
                .with_no_client_auth();
            hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(config)
        }
    };
    builder
        .https_or_http()
        .enable_http1()
        .wrap_connector(connector)
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A client set-up that accepts whatever certificate the server presents: for reading it,
/// never for trusting the connection (wrap it in `tokio_rustls::TlsConnector::from`).
pub fn read_only_config() -> Arc<ClientConfig> {
    let provider = provider();
    let config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ReadOnly(provider)))
        .with_no_client_auth();
    Arc::new(config)
}

/// Accepts whatever the server presents: the certificate is read, never trusted.
#[derive(Debug)]
struct ReadOnly(Arc<rustls::crypto::CryptoProvider>);

impl ServerCertVerifier for ReadOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Ok(HandshakeSignatureValid::assertion())
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The read-only set-up names the ring provider's schemes (a handshake offers them), and
    // the connector is made whether or not the machine has roots.
    #[test]
    fn the_read_only_set_up_offers_ring_schemes_and_the_connector_is_made() {
        let config = read_only_config();
        assert!(config.alpn_protocols.is_empty());
        let schemes = ReadOnly(provider()).supported_verify_schemes();
        assert!(schemes.contains(&SignatureScheme::ED25519), "{schemes:?}");
        let _connector = https_connector(Some(Duration::from_secs(1)), |_| {});
    }
}
