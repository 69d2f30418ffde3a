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
    capstan_e2e::wait_replicas(&plane.bus, capstan_events::Domain::AgentChannel, 2).await;
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
        capstan_e2e::wait_parked(1).await;
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

/// The real headers of one claim of `agent`, and the same request with its signature swapped
/// for one by a forger (the node's keyid and nonce, a signature nobody made with its key).
fn real_and_forged(agent: &TestAgent, body: &[u8]) -> ([String; 3], [String; 3]) {
    let path = "/api/v1/agent/claim";
    let real = sign_request(&agent.key, "POST", path, body, now());
    let forger = sign_request(&NodeKey::generate(), "POST", path, body, now());
    let forged = [
        real.content_digest.clone(),
        real.signature_input.clone(),
        forger.signature,
    ];
    (
        [real.content_digest, real.signature_input, real.signature],
        forged,
    )
}

async fn send_headers(agent: &TestAgent, body: &[u8], headers: &[String; 3]) -> super::Reply {
    agent
        .send_with(
            "/api/v1/agent/claim",
            body,
            Some((&headers[0], &headers[1], &headers[2])),
        )
        .await
}

// Issue 10, "a nonce is recorded only after its signature verifies": a forger who saw a node's
// nonce (on the wire, in a log) cannot spend it first and so refuse the node's real request as
// `replayed`. Both with a key the replica has not yet seen and with one it has.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forged_request_with_a_nodes_keyid_and_nonce_does_not_spend_the_nonce() {
    let plane = Plane::start().await;
    let agent = TestAgent::new(&plane);
    assert_eq!(agent.join("web-1").await.0, StatusCode::ACCEPTED);
    plane.approve(&agent.fingerprint()).await;
    let body = br#"{"agent_version":"0.1.0"}"#;
    for round in ["before the node's first claim", "once its key is known"] {
        let (real, forged) = real_and_forged(&agent, body);
        let refused = send_headers(&agent, body, &forged).await;
        assert_eq!(
            code(refused).await,
            (StatusCode::UNAUTHORIZED, "bad_signature".into()),
            "{round}"
        );
        let taken = send_headers(&agent, body, &real).await;
        assert_eq!(taken.status, StatusCode::OK, "{round}: {}", taken.body);
        // And the nonce is spent now that it verified.
        let again = send_headers(&agent, body, &real).await;
        assert_eq!(code(again).await.1, "replayed", "{round}");
    }
    plane.stop().await;
}

// PROTOCOL.md "Limits": a nonce is 16 to 128 characters; outside that the request is
// malformed (`missing_signature`), refused before anything is looked up or remembered.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nonce_longer_than_128_characters_is_missing_signature() {
    let plane = Plane::start().await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let body = br#"{"agent_version":"0.1.0"}"#;
    let (real, _) = real_and_forged(&agent, body);
    let nonce = real[1]
        .split("nonce=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap()
        .to_string();
    // 132 characters of base64url: well formed, only too long.
    let long = [
        real[0].clone(),
        real[1].replace(&nonce, &"A".repeat(132)),
        real[2].clone(),
    ];
    assert_eq!(
        code(send_headers(&agent, body, &long).await).await,
        (StatusCode::UNAUTHORIZED, "missing_signature".into())
    );
    let longest = [
        real[0].clone(),
        real[1].replace(&nonce, &"A".repeat(128)),
        real[2].clone(),
    ];
    assert_eq!(
        code(send_headers(&agent, body, &longest).await).await.1,
        "bad_signature",
        "128 characters parse (the signature was over the other nonce)"
    );
    plane.stop().await;
}

/// A plane whose nodes may make `per_minute` requests a minute (PROTOCOL.md's default is 600;
/// a smaller budget keeps the tests short).
async fn plane_with_node_budget(per_minute: &str) -> Plane {
    Plane::start_with(&[(
        "CAPSTAN__AGENT_CHANNEL__NODE_REQUESTS_PER_MINUTE",
        per_minute,
    )])
    .await
}

// Issue 10, "every signed request counts against its node's rate": successful claims too, so
// a stolen or buggy node cannot report facts in a loop. 1,000 `wait=0` claims within a minute
// meet `429 rate_limited` with a Retry-After.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_quick_claims_from_one_key_meet_429() {
    let plane = plane_with_node_budget("100").await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let started = std::time::Instant::now();
    let mut limited = None;
    for sent in 1..=1_000 {
        let reply = agent
            .send_at("claim", "?wait=0", br#"{"agent_version":"0.1.0"}"#, now())
            .await;
        if reply.status == StatusCode::TOO_MANY_REQUESTS {
            limited = Some((sent, reply));
            break;
        }
        assert_eq!(reply.status, StatusCode::OK, "{}", reply.body);
    }
    let (sent, limited) = limited.expect("the claims met 429 within 1,000");
    assert!(started.elapsed() < std::time::Duration::from_secs(60));
    assert!(sent <= 100 + 10, "limited at claim {sent}");
    assert_eq!(limited.body["error"]["code"], "rate_limited");
    assert!(limited.retry_after.is_some());
    // The node's meter is its own: an unsigned request from the same address is still judged
    // on its merits (401), not refused for the node's spending.
    let unsigned = agent.send_with("/api/v1/agent/claim", b"{}", None).await;
    assert_eq!(unsigned.status, StatusCode::UNAUTHORIZED);
    plane.stop().await;
}

// Issue 10: `replayed` refusals count against the node too, so replaying a captured request
// is no free loop: 200 replays of one request meet 429 once the budget is spent, and the node
// itself is then held back as well.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_replays_of_one_request_meet_429_once_the_budget_is_spent() {
    let plane = plane_with_node_budget("100").await;
    let (agent, _) = plane.paired_agent("web-1").await;
    let body = br#"{"agent_version":"0.1.0"}"#;
    let (real, _) = real_and_forged(&agent, body);
    assert_eq!(
        send_headers(&agent, body, &real).await.status,
        StatusCode::OK
    );
    let mut replayed = 0;
    let mut limited = 0;
    for _ in 0..200 {
        let reply = send_headers(&agent, body, &real).await;
        match code(reply).await {
            // The bucket refills as it goes (a token a second or so), so a replay may be
            // judged again later; it is never taken.
            (StatusCode::UNAUTHORIZED, refusal) if refusal == "replayed" => replayed += 1,
            (StatusCode::TOO_MANY_REQUESTS, refusal) if refusal == "rate_limited" => limited += 1,
            other => panic!("a replay was answered {other:?}"),
        }
    }
    assert!(
        replayed > 0 && limited > 0,
        "{replayed} replayed, {limited} limited"
    );
    assert!(
        replayed <= 100 + 10,
        "{replayed} replays judged: about the budget and what refilled meanwhile"
    );
    // The replays spent the node's own budget: of two claims now (a token may have refilled
    // for the first), one is refused.
    let (first, _) = agent.claim(&json!({})).await;
    let (second, _) = agent.claim(&json!({})).await;
    assert!(
        [first, second].contains(&StatusCode::TOO_MANY_REQUESTS),
        "the node's budget is spent: {first}, {second}"
    );
    plane.stop().await;
}
