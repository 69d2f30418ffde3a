//! Large rpc bodies (the claim check): a body above 512 KiB travels through the JetStream
//! object store, named in a `Capstan-Body-Object` header with an empty payload, and the
//! receiver collects and deletes it; a smaller one rides in the message itself. NATS' default
//! `max_payload` is 1 MiB, and an agent's `result` may be 4 MiB.

use bytes::Bytes;
use capstan_bus::{
    bodies::{BODY_OBJECT_HEADER, INLINE_BODY_LIMIT, META_OBJECT_HEADER},
    rpc::META_HEADER,
    testsuite::{spy, stored_bodies, NatsServer, Spy, StoredMessage},
    Bus, RpcServer,
};
use capstan_events::{
    rpc::{ErrorCode, Rpc, RpcError},
    Domain,
};
use rand::RngCore;
use serde_json::{json, Value};
use std::{
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio_util::sync::CancellationToken;

/// Billing's `store` in these tests: keeps the body it got.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Store(Value);

/// Billing's `echo` in these tests: answers the JSON it got.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Echo(Value);

/// A question nobody routes.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(transparent)]
struct Nonesuch(Value);

capstan_events::rpc! { Domain::Billing;
    "store" [body]: Store => Value,
    "echo": Echo => Value,
    "nonesuch" [body]: Nonesuch => Value,
}

const TIMEOUT: Duration = Duration::from_secs(20);
const SPY_WAIT: Duration = Duration::from_secs(5);

fn random_body(length: usize) -> Bytes {
    let mut bytes = vec![0u8; length];
    rand::rng().fill_bytes(&mut bytes);
    bytes.into()
}

/// A billing "service" whose `store` op keeps the body it got and answers with `answer`.
async fn serve_store(
    bus: &Bus,
    answer: Bytes,
) -> (Arc<Mutex<Option<(Value, Bytes)>>>, CancellationToken) {
    let received = Arc::new(Mutex::new(None));
    let keep = received.clone();
    let server = RpcServer::new(bus.clone(), Domain::Billing).route_with_body(
        move |Store(meta): Store, body: Bytes| {
            let keep = keep.clone();
            let answer = answer.clone();
            async move {
                let length = body.len();
                *keep.lock().unwrap() = Some((meta, body));
                Ok::<_, RpcError>((json!({"received": length}), answer))
            }
        },
    );
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(stop.clone()));
    // The server subscribes asynchronously; ask until it answers.
    capstan_e2e::wait_for("the test server to answer", TIMEOUT, || {
        let bus = bus.clone();
        async move {
            bus.ask_with_body(
                &Store(json!({"warm": true})),
                Bytes::new(),
                Duration::from_millis(500),
            )
            .await
            .ok()
        }
    })
    .await;
    (received, stop)
}

/// The next rpc answer on `_INBOX.>`, skipping the JetStream API's own replies (the body
/// store's traffic travels on inboxes too).
async fn next_answer(replies: &mut Spy) -> StoredMessage {
    loop {
        let message = replies.next(SPY_WAIT).await.expect("an rpc answer");
        if message.headers.contains_key(META_HEADER)
            || message.headers.contains_key(META_OBJECT_HEADER)
        {
            return message;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_four_mebibyte_body_round_trips_byte_exact_both_ways_through_the_object_store() {
    let nats = NatsServer::start();
    let bus = Bus::connect(&nats.url(), "rpc-bodies-test").await.unwrap();
    let reply_body = random_body(4 * 1024 * 1024);
    let (received, stop) = serve_store(&bus, reply_body.clone()).await;
    let mut requests = spy(&bus, &Store::subject()).await;
    let mut replies = spy(&bus, "_INBOX.>").await;

    let request_body = random_body(4 * 1024 * 1024);
    let (answer, body): (Value, Bytes) = bus
        .ask_with_body(&Store(json!({"job_id": 42})), request_body.clone(), TIMEOUT)
        .await
        .unwrap();

    let (meta, got) = received.lock().unwrap().take().unwrap();
    assert_eq!(meta, json!({"job_id": 42}));
    assert!(
        got == request_body,
        "the service got the request body byte for byte ({} bytes)",
        got.len()
    );
    assert_eq!(answer, json!({"received": 4 * 1024 * 1024}));
    assert!(
        body == reply_body,
        "the asker got the reply body byte for byte ({} bytes)",
        body.len()
    );

    let asked = requests.next(SPY_WAIT).await.unwrap();
    assert!(
        asked.headers.contains_key(BODY_OBJECT_HEADER),
        "{:?}",
        asked.headers
    );
    assert!(
        asked.payload.is_empty(),
        "the large request body is not in the message"
    );
    assert_eq!(
        asked.headers.get(META_HEADER).map(String::as_str),
        Some(r#"{"job_id":42}"#)
    );
    let answered = next_answer(&mut replies).await;
    assert!(
        answered.headers.contains_key(BODY_OBJECT_HEADER),
        "{:?}",
        answered.headers
    );
    assert!(
        answered.payload.is_empty(),
        "the large reply body is not in the message"
    );

    assert_eq!(
        stored_bodies(&bus).await,
        0,
        "each receiver deleted what it collected"
    );
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_up_to_512_kib_stays_in_the_message_and_one_byte_more_goes_through_the_store() {
    let nats = NatsServer::start();
    let bus = Bus::connect(&nats.url(), "rpc-bodies-test").await.unwrap();
    let (received, stop) = serve_store(&bus, Bytes::from_static(b"small answer")).await;
    let mut requests = spy(&bus, &Store::subject()).await;
    let mut replies = spy(&bus, "_INBOX.>").await;

    for (length, inline) in [
        (200, true),
        (INLINE_BODY_LIMIT, true),
        (INLINE_BODY_LIMIT + 1, false),
    ] {
        let request_body = random_body(length);
        let (_, body): (Value, Bytes) = bus
            .ask_with_body(&Store(json!({})), request_body.clone(), TIMEOUT)
            .await
            .unwrap();
        assert_eq!(body, Bytes::from_static(b"small answer"));
        let (_, got) = received.lock().unwrap().take().unwrap();
        assert!(got == request_body, "{length} bytes arrive byte for byte");

        let asked = requests.next(SPY_WAIT).await.unwrap();
        assert_eq!(
            !asked.headers.contains_key(BODY_OBJECT_HEADER),
            inline,
            "{length} bytes"
        );
        assert_eq!(
            asked.payload.len(),
            if inline { length } else { 0 },
            "{length} bytes"
        );
        let answered = next_answer(&mut replies).await;
        assert!(!answered.headers.contains_key(BODY_OBJECT_HEADER));
        assert_eq!(
            answered.payload,
            Bytes::from_static(b"small answer"),
            "a small reply is inline"
        );
    }
    assert_eq!(stored_bodies(&bus).await, 0);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_json_half_goes_through_the_store_and_an_unanswerable_question_leaves_nothing_behind(
) {
    let nats = NatsServer::start();
    let bus = Bus::connect(&nats.url(), "rpc-bodies-test").await.unwrap();
    let (received, stop) = serve_store(&bus, Bytes::new()).await;
    let mut requests = spy(&bus, &Store::subject()).await;

    // A JSON half too large for a header (a claim answer carrying a large job).
    let params = "x".repeat(300 * 1024);
    let _: (Value, Bytes) = bus
        .ask_with_body(&Store(json!({"params": params})), Bytes::new(), TIMEOUT)
        .await
        .unwrap();
    let (meta, _) = received.lock().unwrap().take().unwrap();
    assert_eq!(meta["params"].as_str().map(str::len), Some(300 * 1024));
    let asked = requests.next(SPY_WAIT).await.unwrap();
    assert!(
        asked.headers.contains_key(META_OBJECT_HEADER),
        "{:?}",
        asked.headers
    );
    assert!(!asked.headers.contains_key(META_HEADER));

    // An op nobody routes: the server still collects the body it was sent.
    let refused = bus
        .ask_with_body(&Nonesuch(json!({})), random_body(1024 * 1024), TIMEOUT)
        .await
        .unwrap_err();
    assert_eq!(refused.code, ErrorCode::NotFound);
    assert_eq!(stored_bodies(&bus).await, 0);
    stop.cancel();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_json_question_and_answer_too_large_for_a_message_go_through_the_store_too() {
    let nats = NatsServer::start();
    let bus = Bus::connect(&nats.url(), "rpc-bodies-test").await.unwrap();
    let server = RpcServer::new(bus.clone(), Domain::Billing)
        .route(|Echo(value): Echo| async move { Ok::<_, RpcError>(value) });
    let stop = CancellationToken::new();
    tokio::spawn(server.serve(stop.clone()));
    capstan_e2e::wait_for("the echo server", TIMEOUT, || {
        let bus = bus.clone();
        async move {
            bus.ask(&Echo(json!(1)), Duration::from_millis(500))
                .await
                .ok()
        }
    })
    .await;
    let mut requests = spy(&bus, &Echo::subject()).await;
    let mut replies = spy(&bus, "_INBOX.>").await;

    // A listing of many nodes, or a job's megabyte of output, as JSON.
    let large = json!({"output": "é".repeat(1024 * 1024)});
    let echoed: Value = bus.ask(&Echo(large.clone()), TIMEOUT).await.unwrap();
    assert!(echoed == large, "the answer arrives whole");
    let asked = requests.next(SPY_WAIT).await.unwrap();
    assert!(asked.headers.contains_key(BODY_OBJECT_HEADER));
    assert!(asked.payload.is_empty());
    let answered = loop {
        let message = replies.next(SPY_WAIT).await.expect("the answer");
        if message.headers.contains_key(BODY_OBJECT_HEADER) {
            break message;
        }
    };
    assert!(answered.payload.is_empty());
    assert_eq!(stored_bodies(&bus).await, 0);
    stop.cancel();
}
