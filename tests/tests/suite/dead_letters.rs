//! Poison messages land on the dead-letter subject with their reason, after the bounded
//! retries when the failure looked passing, at once when the message itself is wrong; and the
//! consumer keeps going.

use capstan_bus::{
    testsuite::{consumer_settled, read_stream, NatsServer},
    ConsumerSpec, Delivery, HandlerError, Outgoing,
};
use capstan_e2e::{applied, apply_tick, service, settings, wait_for, Tick};
use capstan_events::{dead_letter_subject, Domain, Envelope, Message, DEAD_LETTER_STREAM};
use capstan_runtime::{consume_with_inbox, Apply};
use capstan_store::{testsuite::TestDatabase, PgConnection};
use futures::future::BoxFuture;
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;

const ALWAYS_FAILS: i64 = 666;

struct PickyApply;

impl Apply for PickyApply {
    type Message = ();

    /// Every message on its subject.
    fn read(&self, _delivery: &Delivery) -> Option<Result<(), HandlerError>> {
        Some(Ok(()))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        _message: (),
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move {
            // The insert is rolled back with the failing transaction.
            if apply_tick(connection, delivery).await? == ALWAYS_FAILS {
                return Err(HandlerError::Retry("the ledger is locked".into()));
            }
            Ok(())
        })
    }
}

/// A service on the test's servers whose consumer `durable` reads the ticks through `apply`,
/// with the token that stops it and its task.
async fn consuming(
    database: &TestDatabase,
    nats: &NatsServer,
    durable: &str,
    apply: Arc<impl Apply>,
) -> (
    capstan_runtime::Service,
    CancellationToken,
    tokio::task::JoinHandle<anyhow::Result<()>>,
) {
    let settings = settings(database, nats, &[]);
    let service = service(&settings, Domain::Incidents).await;
    let shutdown = CancellationToken::new();
    let spec = ConsumerSpec {
        domain: Domain::Incidents,
        stream: Tick::stream(),
        durable: durable.into(),
        filter_subject: Tick::subject(),
        max_deliver: 3,
        ack_wait: Duration::from_secs(5),
    };
    let task = {
        let (service, shutdown) = (service.clone(), shutdown.clone());
        tokio::spawn(async move { consume_with_inbox(&service, spec, apply, shutdown).await })
    };
    (service, shutdown, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn poison_messages_are_dead_lettered_with_a_reason_and_the_consumer_keeps_going() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let (service, shutdown, consumer) =
        consuming(&database, &nats, "picky", Arc::new(PickyApply)).await;

    let garbage = Outgoing {
        subject: Tick::subject(),
        message_id: "garbage-1".into(),
        payload: "{this is not an envelope".into(),
        traceparent: None,
    };
    let mut from_the_future = Envelope::new(Tick { sequence: 2 }, None).into_raw();
    from_the_future.dataversion = 9;
    for message in [
        Outgoing::of(Envelope::new(Tick { sequence: 1 }, None)),
        garbage,
        Outgoing::raw(Tick::subject(), &from_the_future),
        Outgoing::of(Envelope::new(
            Tick {
                sequence: ALWAYS_FAILS,
            },
            None,
        )),
        Outgoing::of(Envelope::new(Tick { sequence: 3 }, None)),
    ] {
        service.bus.publish(message).await.unwrap();
    }

    let dead = wait_for("three dead letters", Duration::from_secs(30), || {
        let bus = service.bus.clone();
        async move {
            let dead = read_stream(&bus, DEAD_LETTER_STREAM, 10).await;
            (dead.len() >= 3).then_some(dead)
        }
    })
    .await;
    wait_for("the good ticks applied", Duration::from_secs(30), || {
        let store = service.store.clone();
        async move { (applied(&store).await == (2, 2)).then_some(()) }
    })
    .await;

    assert_eq!(dead.len(), 3);
    let expected_subject = dead_letter_subject(Domain::Incidents, "picky");
    let reason = |index: usize| dead[index].headers["Capstan-Dead-Letter-Reason"].clone();
    for letter in &dead {
        assert_eq!(letter.subject, expected_subject);
        assert_eq!(letter.headers["Capstan-Original-Subject"], Tick::subject());
        assert_eq!(letter.headers["Capstan-Consumer"], "picky");
    }
    assert!(reason(0).contains("malformed envelope"), "{}", reason(0));
    assert_eq!(dead[0].payload.as_ref(), b"{this is not an envelope");
    assert!(
        reason(1).contains("unsupported dataversion 9"),
        "{}",
        reason(1)
    );
    assert_eq!(
        dead[1].headers["Capstan-Deliveries"], "1",
        "a wrong message is not retried"
    );
    assert!(
        reason(2).contains("still failing after 3 deliveries"),
        "{}",
        reason(2)
    );
    assert!(reason(2).contains("the ledger is locked"), "{}", reason(2));
    assert_eq!(dead[2].headers["Capstan-Deliveries"], "3");

    let sequences = applied_sequences(&service).await;
    assert_eq!(
        sequences,
        vec![1, 3],
        "the message after the poison ones was taken"
    );
    shutdown.cancel();
    consumer.await.unwrap().unwrap();
}

/// Applies even ticks only, and says so before any transaction.
struct EvenTicks;

impl Apply for EvenTicks {
    type Message = ();

    fn read(&self, delivery: &Delivery) -> Option<Result<(), HandlerError>> {
        delivery
            .envelope
            .decode::<Tick>()
            .is_ok_and(|tick| tick.data.sequence % 2 == 0)
            .then_some(Ok(()))
    }

    fn apply<'c>(
        &'c self,
        connection: &'c mut PgConnection,
        _message: (),
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        Box::pin(async move { apply_tick(connection, delivery).await.map(|_| ()) })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_its_consumer_does_not_apply_is_acknowledged_without_a_transaction() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let (service, shutdown, consumer) =
        consuming(&database, &nats, "even", Arc::new(EvenTicks)).await;
    // The marker (100) is published last: once it is applied, every tick before it was handed
    // to the consumer.
    for sequence in [1, 2, 3, 4, 5, 100] {
        service
            .bus
            .publish(Outgoing::of(Envelope::new(Tick { sequence }, None)))
            .await
            .unwrap();
    }
    wait_for("the marker applied", Duration::from_secs(30), || {
        let store = service.store.clone();
        async move {
            let marker: i64 =
                sqlx::query_scalar("SELECT count(*) FROM applied WHERE sequence = 100")
                    .fetch_one(store.pool())
                    .await
                    .unwrap();
            (marker == 1).then_some(())
        }
    })
    .await;
    wait_for("every tick acknowledged", Duration::from_secs(30), || {
        let bus = service.bus.clone();
        async move {
            consumer_settled(&bus, &Tick::stream(), "even")
                .await
                .then_some(())
        }
    })
    .await;
    let sequences = applied_sequences(&service).await;
    assert_eq!(
        sequences,
        vec![2, 4, 100],
        "only the even ticks are applied"
    );
    let recorded: i64 = sqlx::query_scalar("SELECT count(*) FROM inbox WHERE consumer = 'even'")
        .fetch_one(service.store.pool())
        .await
        .unwrap();
    assert_eq!(
        recorded, 3,
        "only the ticks the consumer applies are written to its inbox"
    );
    let dead = read_stream(&service.bus, DEAD_LETTER_STREAM, 10).await;
    assert!(dead.is_empty(), "nothing is dead-lettered: {dead:?}");
    shutdown.cancel();
    consumer.await.unwrap().unwrap();
}

/// The sequences the test consumer applied, in order.
async fn applied_sequences(service: &capstan_runtime::Service) -> Vec<i64> {
    sqlx::query_scalar("SELECT sequence FROM applied ORDER BY sequence")
        .fetch_all(service.store.pool())
        .await
        .unwrap()
}
