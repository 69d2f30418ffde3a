//! Webhooks over HTTP(S). The host is resolved here, every address it resolves to is checked
//! against the plane's address policy (`capstan_runtime::outbound`: public addresses only
//! unless private targets are allowed), and the connection is made to the address that
//! was checked — so a name cannot resolve to a public address for the check and an inside one
//! for the connection. TLS is rustls with the system's roots, the name kept for SNI.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::BoxFuture;
use http_body_util::{BodyExt, Full};
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

use capstan_runtime::outbound::Outbound;

use super::{DeliveryError, Poster};
use crate::domain::delivery::scheme_allowed;

/// A whole attempt (resolve, connect, send, read the answer's head) takes at most this long.
pub const ATTEMPT_TIMEOUT: Duration = Duration::from_secs(15);
/// The most of an answer's body kept for the delivery log.
const ANSWER_KEPT: usize = 200;

pub struct Http {
    outbound: Outbound,
    tls: tokio_rustls::TlsConnector,
}

impl Http {
    pub fn new(outbound: Outbound) -> Http {
        let mut roots = rustls::RootCertStore::empty();
        for certificate in rustls_native_certs::load_native_certs().certs {
            let _ = roots.add(certificate);
        }
        let config = rustls::ClientConfig::builder_with_provider(
            rustls::crypto::ring::default_provider().into(),
        )
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
        Http {
            outbound,
            tls: tokio_rustls::TlsConnector::from(Arc::new(config)),
        }
    }
}

/// Checks a webhook URL as given at creation: its scheme, and the addresses its host
/// resolves to now. The same checks run again at every delivery.
pub async fn check_url(url: &str, outbound: Outbound) -> Result<url::Url, DeliveryError> {
    let parsed =
        url::Url::parse(url).map_err(|error| DeliveryError::Unusable(format!("url: {error}")))?;
    scheme_allowed(parsed.scheme(), outbound.allows_private())
        .map_err(|error| DeliveryError::Refused(error.to_string()))?;
    if !parsed.username().is_empty() || parsed.password().is_some() {
        return Err(DeliveryError::Unusable(
            "url: must not carry a user or password".into(),
        ));
    }
    resolve(&parsed, outbound).await?;
    Ok(parsed)
}

/// The addresses `url`'s host resolves to, each allowed, or why not.
async fn resolve(
    url: &url::Url,
    outbound: Outbound,
) -> Result<Vec<std::net::SocketAddr>, DeliveryError> {
    let unusable = |why: &str| DeliveryError::Unusable(why.to_string());
    let host = url.host_str().ok_or_else(|| unusable("url: has no host"))?;
    let port = url
        .port_or_known_default()
        .ok_or_else(|| unusable("url: has no port"))?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let addresses: Vec<std::net::SocketAddr> = tokio::net::lookup_host((host, port))
        .await
        .map_err(|error| DeliveryError::NotFound(format!("url: {host} does not resolve: {error}")))?
        .collect();
    if addresses.is_empty() {
        return Err(DeliveryError::NotFound(format!(
            "url: {host} resolves to no address"
        )));
    }
    for address in &addresses {
        outbound
            .check(address.ip())
            .map_err(|refused| DeliveryError::Refused(format!("url: {}", refused.of_name(host))))?;
    }
    Ok(addresses)
}

impl Http {
    async fn post_once(
        &self,
        url: &str,
        headers: &[(&'static str, String)],
        body: &[u8],
    ) -> Result<String, DeliveryError> {
        let parsed = url::Url::parse(url)
            .map_err(|error| DeliveryError::Unusable(format!("url: {error}")))?;
        scheme_allowed(parsed.scheme(), self.outbound.allows_private())
            .map_err(|error| DeliveryError::Refused(error.to_string()))?;
        let addresses = resolve(&parsed, self.outbound).await?;
        let host = parsed.host_str().unwrap_or_default().to_string();
        let stream = TcpStream::connect(&addresses[..]).await.map_err(|error| {
            DeliveryError::Unreachable(format!("connecting to {host}: {error}"))
        })?;
        let mut request = hyper::Request::post(parsed.as_str())
            .header(
                "host",
                parsed[url::Position::BeforeHost..url::Position::AfterPort].to_string(),
            )
            .header("content-type", "application/json")
            .header(
                "user-agent",
                concat!("capstan-incidents/", env!("CARGO_PKG_VERSION")),
            );
        for (name, value) in headers {
            request = request.header(*name, value);
        }
        let request = request
            .body(Full::new(Bytes::copy_from_slice(body)))
            .map_err(|error| DeliveryError::Unusable(format!("building the request: {error}")))?;
        let answer = if parsed.scheme() == "https" {
            let name = rustls::pki_types::ServerName::try_from(
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
            )
            .map_err(|error| DeliveryError::Unusable(format!("url: {error}")))?;
            let tls =
                self.tls.connect(name, stream).await.map_err(|error| {
                    DeliveryError::Unreachable(format!("tls with {host}: {error}"))
                })?;
            send(TokioIo::new(tls), request).await
        } else {
            send(TokioIo::new(stream), request).await
        };
        answer
    }
}

async fn send<T>(
    io: TokioIo<T>,
    request: hyper::Request<Full<Bytes>>,
) -> Result<String, DeliveryError>
where
    T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) = hyper::client::conn::http1::handshake(io)
        .await
        .map_err(|error| DeliveryError::Unreachable(format!("http: {error}")))?;
    tokio::spawn(async move {
        let _ = connection.await;
    });
    let response = sender
        .send_request(request)
        .await
        .map_err(|error| DeliveryError::Unreachable(format!("http: {error}")))?;
    let status = response.status();
    let body = response
        .into_body()
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .unwrap_or_default();
    let text: String = String::from_utf8_lossy(&body)
        .chars()
        .take(ANSWER_KEPT)
        .collect();
    let said = format!("http {}: {}", status.as_u16(), text.trim());
    // Any answer but a 2xx is the receiver's refusal.
    if status.is_success() {
        Ok(said)
    } else {
        Err(DeliveryError::Rejected(said))
    }
}

impl Poster for Http {
    fn post<'a>(
        &'a self,
        url: &'a str,
        headers: &'a [(&'static str, String)],
        body: &'a [u8],
    ) -> BoxFuture<'a, Result<String, DeliveryError>> {
        Box::pin(async move {
            match tokio::time::timeout(ATTEMPT_TIMEOUT, self.post_once(url, headers, body)).await {
                Ok(outcome) => outcome,
                Err(_) => Err(DeliveryError::Timeout(format!(
                    "no answer within {} s",
                    ATTEMPT_TIMEOUT.as_secs()
                ))),
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_webhook_to_a_loopback_or_private_address_is_refused_unless_allowed() {
        for url in [
            "https://127.0.0.1/hook",
            "https://10.1.2.3/hook",
            "https://[::1]/hook",
            "https://localhost/hook",
        ] {
            let error = check_url(url, Outbound::public_only()).await.unwrap_err();
            assert!(
                error.to_string().contains("is not a public address"),
                "{url}: {error}"
            );
        }
        assert!(
            check_url("http://127.0.0.1:9/hook", Outbound::allowing_private())
                .await
                .is_ok()
        );
    }

    #[tokio::test]
    async fn a_webhook_to_a_range_the_old_filter_missed_is_refused() {
        for (url, range) in [
            ("https://[64:ff9b::7f00:1]/hook", "127.0.0.0/8"),
            ("https://192.0.0.8/hook", "192.0.0.0/24"),
            ("https://198.18.0.1/hook", "198.18.0.0/15"),
            ("https://240.0.0.1/hook", "240.0.0.0/4"),
            ("https://[fec0::1]/hook", "fec0::/10"),
            ("https://192.0.2.1/hook", "192.0.2.0/24"),
            ("https://[2001:db8::1]/hook", "2001:db8::/32"),
            ("https://[2002:a00:1::1]/hook", "10.0.0.0/8"),
        ] {
            let error = check_url(url, Outbound::public_only()).await.unwrap_err();
            assert!(error.to_string().contains(range), "{url}: {error}");
        }
    }

    #[tokio::test]
    async fn plain_http_and_credentials_in_the_url_are_refused() {
        let error = check_url("http://8.8.8.8/hook", Outbound::public_only())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("https"), "{error}");
        let error = check_url("https://user:pw@8.8.8.8/hook", Outbound::public_only())
            .await
            .unwrap_err();
        assert!(error.to_string().contains("user or password"), "{error}");
        assert!(check_url("ftp://8.8.8.8/", Outbound::allowing_private())
            .await
            .is_err());
    }
}
