//! Request/reply between services: `{"ok"}` and `{"error": {"code", "message"}}` replies,
//! refusals of bad requests, and `unavailable` when nobody answers.

use capstan_bus::testsuite::NatsServer;
use capstan_e2e::{service, settings};
use capstan_events::{
    rpc::{ErrorCode, Health, RpcError},
    Domain,
};
use capstan_store::testsuite::TestDatabase;
use serde::{Deserialize, Serialize};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

#[derive(Serialize, Deserialize)]
struct Add {
    left: i64,
    right: i64,
}

/// The same question with a left side that is no number: what a careless caller might send.
#[derive(Serialize, Deserialize)]
struct AddWords {
    left: String,
}

/// A question billing does not answer.
#[derive(Serialize, Deserialize)]
struct Subtract {}

/// Waits the given seconds, then answers them.
#[derive(Serialize, Deserialize)]
struct Slow(u64);

capstan_events::rpc! { Domain::Billing;
    "add": Add => i64,
    "add": AddWords => i64,
    "subtract": Subtract => i64,
    "slow": Slow => u64,
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_service_answers_its_questions_and_refuses_bad_ones_by_code() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Billing).await;
    let bus = service.bus.clone();
    let rpc = service.rpc().route(|add: Add| async move {
        add.left
            .checked_add(add.right)
            .ok_or_else(|| RpcError::new(ErrorCode::InvalidRequest, "the sum overflows"))
    });
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.run(rpc, Vec::new(), shutdown.clone()));
    let timeout = Duration::from_secs(5);

    let health: Health = capstan_e2e::wait_for("billing to answer", timeout, || {
        let bus = bus.clone();
        async move { bus.health(Domain::Billing, timeout).await.ok() }
    })
    .await;
    assert_eq!((health.service.as_str(), health.ready), ("billing", true));

    let sum: i64 = bus.ask(&Add { left: 2, right: 40 }, timeout).await.unwrap();
    assert_eq!(sum, 42);

    let overflow = bus
        .ask(
            &Add {
                left: i64::MAX,
                right: 1,
            },
            timeout,
        )
        .await
        .unwrap_err();
    assert_eq!(overflow.code, ErrorCode::InvalidRequest);
    assert_eq!(overflow.message, "the sum overflows");

    let malformed = bus
        .ask(&AddWords { left: "two".into() }, timeout)
        .await
        .unwrap_err();
    assert_eq!(malformed.code, ErrorCode::InvalidRequest);
    assert!(malformed.message.contains("add"), "{}", malformed.message);

    let unknown = bus.ask(&Subtract {}, timeout).await.unwrap_err();
    assert_eq!(unknown.code, ErrorCode::NotFound);

    let nobody = bus
        .health(Domain::Dns, Duration::from_millis(500))
        .await
        .unwrap_err();
    assert_eq!(nobody.code, ErrorCode::Unavailable);

    shutdown.cancel();
    running.await.unwrap().unwrap();
}

/// An answer that takes longer than the client's default request timeout (10 s) still arrives
/// when the caller allows it: a long poll held by a service is never cut short in between.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_answer_arrives_within_the_callers_own_deadline() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Billing).await;
    let bus = service.bus.clone();
    let rpc = service.rpc().route(|Slow(seconds): Slow| async move {
        tokio::time::sleep(Duration::from_secs(seconds)).await;
        Ok::<_, RpcError>(seconds)
    });
    let shutdown = CancellationToken::new();
    let running = tokio::spawn(service.run(rpc, Vec::new(), shutdown.clone()));
    capstan_e2e::wait_replicas(&bus, Domain::Billing, 1).await;
    let waited: u64 = bus.ask(&Slow(11), Duration::from_secs(20)).await.unwrap();
    assert_eq!(waited, 11);
    let cut = bus.ask(&Slow(3), Duration::from_secs(1)).await.unwrap_err();
    assert_eq!(
        cut.code,
        ErrorCode::Unavailable,
        "the caller's own deadline still holds"
    );
    shutdown.cancel();
    running.await.unwrap().unwrap();
}
