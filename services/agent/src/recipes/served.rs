//! `served_certificates` (AG-56, internal to the agent): the certificate this machine's own web
//! server serves for a name, read over the machine's own connection (127.0.0.1 on the TLS
//! port) with the name as SNI, and not validated (an expired certificate, or one for another
//! name, must still be read). The certificate's dates are read by
//! `domain::certificates`; this file is only the network.

use chrono::{DateTime, Utc};
use rustls::{
    client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier},
    pki_types::{CertificateDer, ServerName, UnixTime},
    DigitallySignedStruct, SignatureScheme,
};
use std::{sync::Arc, time::Duration};
use tokio::net::TcpStream;

use crate::domain::{
    certificates::{days_left, not_after_of_der},
    recipes::checks::Unanswered,
};

/// How long one name's handshake may take.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Accepts whatever the server presents: the certificate is read, never trusted, and nothing
/// is sent over the connection after the handshake.
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

fn connector() -> Result<tokio_rustls::TlsConnector, Unanswered> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|error| error.to_string())?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(ReadOnly(provider)))
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// The `notAfter` of the certificate served on 127.0.0.1:`port` for SNI `name`.
pub async fn served_not_after(name: &str, port: u16) -> Result<DateTime<Utc>, Unanswered> {
    let server_name = ServerName::try_from(name.to_string())
        .map_err(|error| format!("{name} cannot be a TLS name: {error}"))?;
    let connector = connector()?;
    let read = async {
        let stream = TcpStream::connect(("127.0.0.1", port))
            .await
            .map_err(|error| format!("no TLS on 127.0.0.1:{port}: {error}"))?;
        let tls = connector
            .connect(server_name, stream)
            .await
            .map_err(|error| format!("the TLS handshake on 127.0.0.1:{port} failed: {error}"))?;
        let (_, connection) = tls.get_ref();
        let leaf = connection
            .peer_certificates()
            .and_then(|chain| chain.first())
            .ok_or_else(|| format!("127.0.0.1:{port} presented no certificate"))?;
        not_after_of_der(leaf.as_ref())
            .ok_or_else(|| Unanswered::from("the served certificate's validity could not be read"))
    };
    tokio::time::timeout(HANDSHAKE_TIMEOUT, read)
        .await
        .unwrap_or_else(|_| {
            Err(format!(
                "no TLS answer on 127.0.0.1:{port} within {} seconds",
                HANDSHAKE_TIMEOUT.as_secs()
            )
            .into())
        })
}

/// Whole days left on the certificate served for `name` at `now`.
pub async fn served_days_left(
    name: &str,
    port: u16,
    now: DateTime<Utc>,
) -> Result<i64, Unanswered> {
    served_not_after(name, port)
        .await
        .map(|not_after| days_left(not_after, now))
}
