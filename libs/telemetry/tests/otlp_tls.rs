//! OpenTelemetry export over `https`: spans reach a collector stand-in that speaks OTLP/HTTP
//! behind TLS with a test certificate (`tests/fixtures`: a test CA and a certificate it signed
//! for `localhost` and 127.0.0.1, valid for a century; no secret of any real system). The
//! exporter trusts the test CA the way an operator trusts a private one, through `SSL_CERT_FILE`.

use capstan_telemetry::{init, LogFormat, TelemetryConfig};
use rustls::pki_types::{pem::PemObject, CertificateDer, PrivateKeyDer};
use std::{path::PathBuf, sync::Arc, time::Duration};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// One OTLP request as the stand-in received it: (request line, headers, body length).
type Received = (String, Vec<(String, String)>, usize);

/// Accepts TLS connections on `listener` and answers every HTTP request `200` with an empty
/// `ExportTraceServiceResponse`, sending what it received to `received`.
async fn collector(
    listener: tokio::net::TcpListener,
    received: tokio::sync::mpsc::UnboundedSender<Received>,
) {
    let certificates = CertificateDer::pem_file_iter(fixture("collector.pem"))
        .unwrap()
        .collect::<Result<Vec<_>, _>>()
        .unwrap();
    let key = PrivateKeyDer::from_pem_file(fixture("collector.key")).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certificates, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    loop {
        let (stream, _) = listener.accept().await.unwrap();
        let (acceptor, received) = (acceptor.clone(), received.clone());
        tokio::spawn(async move {
            let Ok(mut tls) = acceptor.accept(stream).await else {
                return;
            };
            let mut buffer = Vec::new();
            loop {
                let mut chunk = [0u8; 4096];
                let Ok(read) = tls.read(&mut chunk).await else {
                    return;
                };
                if read == 0 {
                    return;
                }
                buffer.extend_from_slice(&chunk[..read]);
                let mut headers = [httparse::EMPTY_HEADER; 32];
                let mut request = httparse::Request::new(&mut headers);
                let Ok(httparse::Status::Complete(head)) = request.parse(&buffer) else {
                    continue;
                };
                let fields: Vec<(String, String)> = request
                    .headers
                    .iter()
                    .map(|header| {
                        (
                            header.name.to_ascii_lowercase(),
                            String::from_utf8_lossy(header.value).into_owned(),
                        )
                    })
                    .collect();
                let length: usize = fields
                    .iter()
                    .find(|(name, _)| name == "content-length")
                    .and_then(|(_, value)| value.parse().ok())
                    .unwrap_or(0);
                if buffer.len() < head + length {
                    continue;
                }
                let line = format!(
                    "{} {}",
                    request.method.unwrap_or_default(),
                    request.path.unwrap_or_default()
                );
                let _ = received.send((line, fields, length));
                buffer.drain(..head + length);
                let _ = tls
                    .write_all(
                        b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n",
                    )
                    .await;
            }
        });
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spans_are_exported_over_https_to_a_collector_with_a_private_certificate() {
    // Read when the exporter's client is built, below; nothing else in this process runs yet.
    trust_the_test_ca();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let (sent, mut received) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(collector(listener, sent));

    let guard = init(&TelemetryConfig {
        service_name: "otlp-tls-test".into(),
        log_format: LogFormat::Pretty,
        log_level: "warn".into(),
        otlp_endpoint: Some(format!("https://localhost:{port}")),
        logs_to_stderr: true,
    })
    .expect("telemetry starts with an https endpoint");
    tracing::info_span!("exported over tls").in_scope(|| {});
    // Dropping the guard flushes what is buffered.
    tokio::task::spawn_blocking(move || drop(guard))
        .await
        .unwrap();

    let (line, headers, length) = tokio::time::timeout(Duration::from_secs(20), received.recv())
        .await
        .expect("the collector received an export over TLS")
        .unwrap();
    assert_eq!(line, "POST /v1/traces");
    assert!(
        headers
            .iter()
            .any(|(name, value)| name == "content-type" && value == "application/x-protobuf"),
        "{headers:?}"
    );
    assert!(length > 0, "the export carries the span");
}

/// Points the system's trust store at the test CA for this test process alone.
fn trust_the_test_ca() {
    // `set_var` is safe on edition 2021; this process runs this one test, before any thread
    // that reads the environment.
    std::env::set_var("SSL_CERT_FILE", fixture("ca.pem"));
}
