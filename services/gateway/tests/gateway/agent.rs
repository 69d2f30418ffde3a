//! The agent routes: each endpoint's body cap (PROTOCOL.md "Limits"), refused with
//! `413 too_large` before the body is read whole, and a body within it forwarded byte for byte
//! with the request's path, query, signature headers and source address; the agent channel's
//! answer sent back as it is.

use bytes::Bytes;
use capstan_events::{
    agent_channel::rpc::{AgentEndpoint, AgentResponse},
    rpc::Level,
};
use serde_json::{json, Value};
use std::{net::SocketAddr, time::Duration};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::harness::{endpoint_path, error_of, Gateway};

const DIGEST: &str = "sha-256=:X48E9qOokqqrvdts8nOJRJN3OWDUoyWxBf7kbu9DBPE=:";
const SIGNATURE_INPUT: &str = "sig1=(\"@method\" \"@path\" \"content-digest\");created=1700000000;nonce=\"bm9uY2Vub25jZW5vbmNl\";keyid=\"SHA256:abc\";alg=\"ed25519\"";
const SIGNATURE: &str = "sig1=:c2lnbmF0dXJl:";

/// Bytes that differ from position to position, so a shifted or truncated copy shows.
fn patterned(length: usize) -> Vec<u8> {
    (0..length).map(|index| (index * 31 % 251) as u8).collect()
}

/// Reads one HTTP/1.1 response from `stream`: its status and body.
async fn read_response(stream: &mut (impl tokio::io::AsyncRead + Unpin)) -> (u16, String) {
    let mut buffer = Vec::new();
    let mut chunk = [0u8; 8192];
    let read = async {
        loop {
            if let Some(end) = buffer.windows(4).position(|window| window == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buffer[..end]).to_string();
                let length: usize = head
                    .lines()
                    .find_map(|line| {
                        let (name, value) = line.split_once(':')?;
                        name.eq_ignore_ascii_case("content-length")
                            .then(|| value.trim().parse().ok())?
                    })
                    .unwrap_or(0);
                if buffer.len() >= end + 4 + length {
                    let status = head.split(' ').nth(1).unwrap().parse().unwrap();
                    let body =
                        String::from_utf8_lossy(&buffer[end + 4..end + 4 + length]).to_string();
                    return (status, body);
                }
            }
            let count = stream.read(&mut chunk).await.expect("the response arrives");
            assert!(
                count > 0,
                "the connection closed before a whole response: {:?}",
                String::from_utf8_lossy(&buffer)
            );
            buffer.extend_from_slice(&chunk[..count]);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), read)
        .await
        .expect("a response within 10 s")
}

/// Declares `length` bytes and, as a careful client does with `Expect: 100-continue`, waits
/// for the gateway's word before sending any.
async fn declared_over(address: SocketAddr, path: &str, length: usize) -> (u16, String) {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nhost: plane\r\ncontent-type: application/json\r\ncontent-length: {length}\r\nexpect: 100-continue\r\n\r\n"
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    read_response(&mut stream).await
}

/// Sends `length` bytes chunked (no length declared), as fast as the gateway takes them.
async fn chunked_over(address: SocketAddr, path: &str, length: usize) -> (u16, String) {
    let (answer, _) = chunked_over_watching(address, path, length).await;
    answer
}

/// As [`chunked_over`], saying also whether the whole body had been sent when the answer came.
async fn chunked_over_watching(
    address: SocketAddr,
    path: &str,
    length: usize,
) -> ((u16, String), bool) {
    let stream = tokio::net::TcpStream::connect(address).await.unwrap();
    let (mut reader, mut writer) = stream.into_split();
    let head = format!("POST {path} HTTP/1.1\r\nhost: plane\r\ntransfer-encoding: chunked\r\n\r\n");
    let sending = tokio::spawn(async move {
        writer.write_all(head.as_bytes()).await?;
        let piece = patterned(8192);
        let mut left = length;
        while left > 0 {
            let size = left.min(piece.len());
            writer.write_all(format!("{size:x}\r\n").as_bytes()).await?;
            writer.write_all(&piece[..size]).await?;
            writer.write_all(b"\r\n").await?;
            left -= size;
        }
        writer.write_all(b"0\r\n\r\n").await?;
        std::io::Result::Ok(writer)
    });
    let answer = read_response(&mut reader).await;
    // Finished is not the same as sent: a writer cut off by the gateway closing the connection
    // also finishes, with an error.
    let all_sent = if sending.is_finished() {
        matches!(sending.await, Ok(Ok(_)))
    } else {
        sending.abort();
        false
    };
    (answer, all_sent)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_endpoint_refuses_a_body_just_over_its_cap_and_forwards_one_at_it_byte_for_byte() {
    let gateway = Gateway::start().await;
    for endpoint in AgentEndpoint::ALL {
        let path = endpoint_path(endpoint);
        let limit = endpoint.body_limit();

        let (status, body) = declared_over(gateway.address, &path, limit + 1).await;
        assert_eq!(status, 413, "{path} declared over: {body}");
        let body: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(body["error"]["code"], "too_large", "{path}");
        let (status, body) = chunked_over(gateway.address, &path, limit + 1).await;
        assert_eq!(status, 413, "{path} chunked over: {body}");
        assert!(body.contains("too_large"), "{path}: {body}");
        assert!(
            gateway.script.lock().unwrap().agent_requests.is_empty(),
            "{path}: nothing over the cap is forwarded"
        );

        let sent = patterned(limit);
        let query = if endpoint == AgentEndpoint::Claim {
            "?wait=0&x=1"
        } else {
            ""
        };
        let response = gateway
            .client
            .post(format!("{}{path}{query}", gateway.url))
            .header("content-type", "application/json")
            .header("content-digest", DIGEST)
            .header("signature-input", SIGNATURE_INPUT)
            .header("signature", SIGNATURE)
            .body(sent.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{path} at its cap");
        assert_eq!(response.json::<Value>().await.unwrap(), json!({"ok": true}));

        let (request, body) = gateway.script.lock().unwrap().agent_requests.pop().unwrap();
        assert!(
            body == sent,
            "{path}: the exact bytes arrive ({} of {limit})",
            body.len()
        );
        assert_eq!(request.endpoint, endpoint);
        assert_eq!(request.path, path);
        assert_eq!(request.query.as_deref(), query.strip_prefix('?'));
        assert_eq!(request.content_digest.as_deref(), Some(DIGEST));
        assert_eq!(request.signature_input.as_deref(), Some(SIGNATURE_INPUT));
        assert_eq!(request.signature.as_deref(), Some(SIGNATURE));
        assert_eq!(request.source_address, "127.0.0.1");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunked_flood_is_refused_once_past_the_cap_without_the_rest_being_read() {
    let gateway = Gateway::start().await;
    // 256 MiB offered to a 16 KiB endpoint: the answer comes while most of it is unsent.
    let ((status, body), all_sent) =
        chunked_over_watching(gateway.address, "/api/v1/agent/join", 256 * 1024 * 1024).await;
    assert_eq!(status, 413, "{body}");
    assert!(body.contains("too_large"), "{body}");
    assert!(!all_sent, "the gateway stopped reading at the cap");
    assert!(gateway.script.lock().unwrap().agent_requests.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_request_is_forwarded_with_its_headers_absent_for_the_agent_channel_to_refuse()
{
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().agent_answer = Some((
        AgentResponse {
            status: 401,
            body: json!({"error": {"code": "missing_signature", "message": "sign the request"}}),
            retry_after: None,
        },
        Bytes::new(),
    ));
    let response = gateway
        .client
        .post(format!("{}/api/v1/agent/leave", gateway.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    let (status, code, _) = error_of(response).await;
    assert_eq!((status, code.as_str()), (401, "missing_signature"));
    let (request, body) = gateway.script.lock().unwrap().agent_requests.pop().unwrap();
    assert_eq!(
        (
            request.content_digest,
            request.signature_input,
            request.signature
        ),
        (None, None, None)
    );
    assert_eq!(request.query, None);
    assert_eq!(body, Bytes::from_static(b"{}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_passes_through_on_a_429_and_an_artifact_comes_back_as_bytes() {
    let gateway = Gateway::start().await;
    gateway.script.lock().unwrap().agent_answer = Some((
        AgentResponse {
            status: 429,
            body: json!({"error": {"code": "rate_limited", "message": "slow down"}}),
            retry_after: Some(30),
        },
        Bytes::new(),
    ));
    let response = gateway
        .client
        .post(format!("{}/api/v1/agent/claim", gateway.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.headers().get("retry-after").unwrap(), "30");
    let (status, code, message) = error_of(response).await;
    assert_eq!(
        (status, code.as_str(), message.as_str()),
        (429, "rate_limited", "slow down")
    );

    // An artifact's bytes, larger than one NATS message: they come back whole.
    let binary = Bytes::from(patterned(3 * 1024 * 1024));
    gateway.script.lock().unwrap().agent_answer = Some((
        AgentResponse {
            status: 200,
            body: Value::Null,
            retry_after: None,
        },
        binary.clone(),
    ));
    let response = gateway
        .client
        .post(format!("{}/api/v1/agent/artifact", gateway.url))
        .body(r#"{"kind":"binary","arch":"linux-amd64","version":"1.3.0"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/octet-stream"
    );
    assert!(response.headers().get("retry-after").is_none());
    let got = response.bytes().await.unwrap();
    assert!(
        got == binary,
        "the artifact arrives byte for byte ({} bytes)",
        got.len()
    );

    // A manifest is JSON.
    gateway.script.lock().unwrap().agent_answer = Some((
        AgentResponse {
            status: 200,
            body: json!({"version": "1.3.0"}),
            retry_after: None,
        },
        Bytes::new(),
    ));
    let response = gateway
        .client
        .post(format!("{}/api/v1/agent/artifact", gateway.url))
        .body(r#"{"kind":"manifest"}"#)
        .send()
        .await
        .unwrap();
    assert_eq!(
        response.headers().get("content-type").unwrap(),
        "application/json"
    );
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"version": "1.3.0"})
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_nothing_answering_agents_and_operators_get_503_unavailable() {
    let gateway = Gateway::start_alone().await;
    let token = gateway.token(Level::Read).await;
    let agent = gateway
        .client
        .post(format!("{}/api/v1/agent/join", gateway.url))
        .body("{}")
        .send()
        .await
        .unwrap();
    let (status, code, message) = error_of(agent).await;
    assert_eq!((status, code.as_str()), (503, "unavailable"));
    assert!(message.contains("agent_channel"), "{message}");
    let operator = gateway.get("/api/v1/nodes", &token).send().await.unwrap();
    let (status, code, _) = error_of(operator).await;
    assert_eq!((status, code.as_str()), (503, "unavailable"));
}
