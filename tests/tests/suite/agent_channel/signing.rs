//! Every refusal of PROTOCOL.md "Signing" and "Limits", in order, over HTTP.

use super::PairedAgent;
use super::{now, Plane, TestAgent};
use capstan_signing::{sign_request, NodeKey};
use reqwest::StatusCode;
use serde_json::json;

async fn code(reply: super::Reply) -> (StatusCode, String) {
    (
        reply.status,
        reply.body["error"]["code"]
            .as_str()
            .unwrap_or_default()
            .to_string(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_401_code_is_given_for_its_fault() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let body = br#"{"agent_version":"0.1.0"}"#;
    let path = "/api/v1/agent/claim";

    let unsigned = agent.send_with(path, body, None).await;
    assert_eq!(
        code(unsigned).await,
        (StatusCode::UNAUTHORIZED, "missing_signature".into())
    );

    let garbage = agent
        .send_with(path, body, Some(("sha-256=:x:", "nonsense", "nonsense")))
        .await;
    assert_eq!(code(garbage).await.1, "missing_signature");

    let headers = sign_request(&agent.key, "POST", path, body, now());
    let tampered = agent
        .send_with(
            path,
            br#"{"agent_version":"9.9.9"}"#,
            Some((
                &headers.content_digest,
                &headers.signature_input,
                &headers.signature,
            )),
        )
        .await;
    assert_eq!(code(tampered).await.1, "bad_digest");

    for skew in [-301, 301] {
        let reply = agent.send_at("claim", "", body, now() + skew).await;
        assert_eq!(
            code(reply).await,
            (StatusCode::UNAUTHORIZED, "clock_skew".into()),
            "skew {skew}"
        );
    }
    let within = agent.send_at("claim", "", body, now() - 200).await;
    assert_eq!(within.status, StatusCode::OK);

    let stranger = TestAgent::new(&plane);
    let reply = stranger.send_at("claim", "", body, now()).await;
    assert_eq!(code(reply).await.1, "unknown_key");

    // Signed for another path, sent to this one.
    let elsewhere = sign_request(&agent.key, "POST", "/api/v1/agent/leave", body, now());
    let reply = agent
        .send_with(
            path,
            body,
            Some((
                &elsewhere.content_digest,
                &elsewhere.signature_input,
                &elsewhere.signature,
            )),
        )
        .await;
    assert_eq!(code(reply).await.1, "bad_signature");
    // The right keyid, another key's signature.
    let forger = NodeKey::generate();
    let forged = sign_request(&forger, "POST", path, body, now());
    let input = forged.signature_input.replace(
        &forger.public_key().fingerprint().to_string(),
        &agent.fingerprint(),
    );
    let reply = agent
        .send_with(
            path,
            body,
            Some((&forged.content_digest, &input, &forged.signature)),
        )
        .await;
    assert_eq!(code(reply).await.1, "bad_signature");

    let once = sign_request(&agent.key, "POST", path, body, now());
    let headers = Some((
        once.content_digest.as_str(),
        once.signature_input.as_str(),
        once.signature.as_str(),
    ));
    assert_eq!(
        agent.send_with(path, body, headers).await.status,
        StatusCode::OK
    );
    let again = agent.send_with(path, body, headers).await;
    assert_eq!(
        code(again).await,
        (StatusCode::UNAUTHORIZED, "replayed".into())
    );
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_over_its_cap_is_413_too_large() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let padding = "x".repeat(256 * 1024);
    let body = serde_json::to_vec(&json!({"agent_version": "0.1.0", "padding": padding})).unwrap();
    let reply = agent.send_at("claim", "", &body, now()).await;
    assert_eq!(
        code(reply).await,
        (StatusCode::PAYLOAD_TOO_LARGE, "too_large".into())
    );
    let join = agent
        .send_at("join", "", &vec![b' '; 17 * 1024], now())
        .await;
    assert_eq!(join.status, StatusCode::PAYLOAD_TOO_LARGE);
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unsigned_flood_is_limited_per_address_while_a_signed_node_behind_it_gets_through() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let mut limited = None;
    for _ in 0..200 {
        let reply = agent.send_with("/api/v1/agent/claim", b"{}", None).await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some(reply);
            break;
        }
        assert_eq!(reply.status, StatusCode::UNAUTHORIZED);
    }
    let limited = limited.expect("the flood was limited");
    assert_eq!(limited.body["error"]["code"], "rate_limited");
    let retry_after: u64 = limited
        .retry_after
        .expect("a Retry-After header")
        .parse()
        .unwrap();
    assert!(retry_after >= 1);
    // The node at the same address still gets through, again and again.
    for _ in 0..5 {
        let (status, claim) = agent.claim(&json!({})).await;
        assert_eq!(status, StatusCode::OK, "{claim}");
    }
    plane.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replays_and_long_poll_wake_ups_hold_across_two_agent_channel_replicas() {
    let mut plane = Plane::start().await;
    plane.add_agent_channel_replica();
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    let (agent, node) = plane.paired_agent("web-1").await;
    let body = br#"{"agent_version":"0.1.0"}"#;
    let path = "/api/v1/agent/claim";
    // Whichever replica answers, a nonce is used once.
    for _ in 0..6 {
        let once = sign_request(&agent.key, "POST", path, body, now());
        let headers = Some((
            once.content_digest.as_str(),
            once.signature_input.as_str(),
            once.signature.as_str(),
        ));
        assert_eq!(
            agent.send_with(path, body, headers).await.status,
            StatusCode::OK
        );
        let again = agent.send_with(path, body, headers).await;
        assert_eq!(code(again).await.1, "replayed");
    }
    // A long poll held by one replica wakes when the job is queued through either.
    let agent = std::sync::Arc::new(agent);
    for _ in 0..4 {
        let polling = agent.clone();
        let waiting =
            tokio::spawn(async move { polling.send_at("claim", "?wait=20", body, now()).await });
        tokio::time::sleep(std::time::Duration::from_millis(300)).await;
        let started = std::time::Instant::now();
        let job = plane.queue(node, "check_status", json!({})).await;
        let reply = waiting.await.unwrap();
        assert_eq!(reply.body["job"]["id"], job);
        assert!(
            started.elapsed() < std::time::Duration::from_secs(10),
            "woken, not timed out"
        );
        agent.result(job, "completed", "").await;
    }
    plane.stop().await;
}
