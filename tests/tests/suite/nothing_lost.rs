//! Nothing lost, nothing twice: 10,000 events through the outbox while the relay is killed,
//! the consumer is killed (and receives redeliveries), and the NATS server restarts.

use capstan_bus::{
    testsuite::{consumer_settled, NatsServer},
    ConsumerSpec, Delivery, HandlerError,
};
use capstan_e2e::{applied, apply_tick, service, settings, wait_for, Tick};
use capstan_events::{Domain, Envelope, Message};
use capstan_runtime::{consume_with_inbox, Apply, BusPublisher, Service};
use capstan_store::{outbox, testsuite::TestDatabase, OutboxRelay, PgConnection};
use futures::future::BoxFuture;
use std::{
    sync::{
        atomic::{AtomicU64, Ordering},
        Arc,
    },
    time::Duration,
};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

const EVENTS: i64 = 10_000;
const PER_TRANSACTION: i64 = 10;

/// Applies a tick by inserting a row, and counts what it sees delivered again.
#[derive(Default)]
struct CountingApply {
    redelivered: AtomicU64,
    skipped: AtomicU64,
}

impl Apply for CountingApply {
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
            if delivery.delivered > 1 {
                self.redelivered.fetch_add(1, Ordering::Relaxed);
            }
            apply_tick(connection, delivery).await.map(|_| ())
        })
    }

    fn skipped(&self, _delivery: &Delivery) {
        self.skipped.fetch_add(1, Ordering::Relaxed);
    }
}

fn spec(ack_wait: Duration) -> ConsumerSpec {
    ConsumerSpec {
        domain: Domain::Incidents,
        stream: Tick::stream(),
        durable: "nothing_lost".into(),
        filter_subject: Tick::subject(),
        max_deliver: 1_000,
        ack_wait,
    }
}

fn start_relay(service: &Service) -> JoinHandle<()> {
    let relay = OutboxRelay::new(
        service.store.clone(),
        Arc::new(BusPublisher(service.bus.clone())),
        256,
        Duration::from_millis(500),
    );
    tokio::spawn(relay.run(CancellationToken::new()))
}

fn start_consumer(service: &Service, apply: Arc<CountingApply>) -> JoinHandle<()> {
    let service = service.clone();
    tokio::spawn(async move {
        consume_with_inbox(
            &service,
            spec(Duration::from_secs(2)),
            apply,
            CancellationToken::new(),
        )
        .await
        .expect("the consumer runs until aborted");
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_event_is_applied_exactly_once_through_relay_consumer_and_nats_crashes() {
    let mut nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Incidents).await;
    let apply = Arc::new(CountingApply::default());

    let producer = {
        let store = service.store.clone();
        tokio::spawn(async move {
            for batch in 0..EVENTS / PER_TRANSACTION {
                let mut transaction = store.begin().await.unwrap();
                for offset in 0..PER_TRANSACTION {
                    let tick = Tick {
                        sequence: batch * PER_TRANSACTION + offset,
                    };
                    outbox::push(&mut transaction, Envelope::new(tick, None))
                        .await
                        .unwrap();
                }
                transaction.commit().await.unwrap();
            }
        })
    };
    let mut relay = start_relay(&service);
    let mut consumer = start_consumer(&service, apply.clone());
    let store = service.store.clone();
    let applied_at_least = |count: i64| {
        let store = store.clone();
        move || {
            let store = store.clone();
            async move { (applied(&store).await.0 >= count).then_some(()) }
        }
    };

    // (a) The relay dies mid-way (no graceful stop: the task is dropped where it stands).
    wait_for(
        "2,000 applied",
        Duration::from_secs(120),
        applied_at_least(2_000),
    )
    .await;
    relay.abort();
    let _ = relay.await;
    relay = start_relay(&service);

    // (b) The consumer dies mid-way, with messages delivered to it but not yet acknowledged.
    wait_for(
        "4,000 applied",
        Duration::from_secs(120),
        applied_at_least(4_000),
    )
    .await;
    consumer.abort();
    let _ = consumer.await;
    consumer = start_consumer(&service, apply.clone());

    // (c) The NATS server restarts once, under load.
    wait_for(
        "6,000 applied",
        Duration::from_secs(120),
        applied_at_least(6_000),
    )
    .await;
    tokio::task::block_in_place(|| nats.restart());

    producer.await.expect("the producer wrote every event");
    wait_for(
        "all events applied and the outbox empty",
        Duration::from_secs(180),
        || {
            let store = store.clone();
            async move {
                let (rows, _) = applied(&store).await;
                let mut connection = store.pool().acquire().await.ok()?;
                let pending = outbox::pending(&mut connection).await.ok()?;
                (rows >= EVENTS && pending == 0).then_some(())
            }
        },
    )
    .await;
    // Late redeliveries (an ack lost in a crash, redelivered after the 2 s ack wait) would show
    // up as duplicates: wait until the consumer has acknowledged everything, so none is left.
    wait_for(
        "the consumer to acknowledge every event",
        Duration::from_secs(60),
        || {
            let bus = service.bus.clone();
            async move {
                consumer_settled(&bus, &Tick::stream(), "nothing_lost")
                    .await
                    .then_some(())
            }
        },
    )
    .await;

    let (rows, distinct) = applied(&store).await;
    assert_eq!(rows, EVENTS, "each event applied once: no duplicate rows");
    assert_eq!(distinct, EVENTS, "no event lost");
    let sequences: (i64, i64, i64) = sqlx::query_as(
        "SELECT count(DISTINCT sequence), min(sequence), max(sequence) FROM applied",
    )
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(
        sequences,
        (EVENTS, 0, EVENTS - 1),
        "every sequence number arrived"
    );
    let mut connection = store.pool().acquire().await.unwrap();
    assert_eq!(
        outbox::pending(&mut connection).await.unwrap(),
        0,
        "outbox empty"
    );
    let (redelivered, skipped) = (
        apply.redelivered.load(Ordering::Relaxed),
        apply.skipped.load(Ordering::Relaxed),
    );
    eprintln!(
        "redelivered and applied: {redelivered}, redelivered and skipped by the inbox: {skipped}"
    );
    let redeliveries = redelivered + skipped;
    assert!(
        redeliveries > 0,
        "the killed consumer's unacknowledged messages came back"
    );
    relay.abort();
    consumer.abort();
}

/// A message that was applied but whose ack never arrived comes back; the inbox turns it away.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_message_applied_before_is_skipped_by_the_inbox() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Incidents).await;
    let apply = Arc::new(CountingApply::default());
    let consumer = start_consumer(&service, apply.clone());

    let envelope = Envelope::new(Tick { sequence: 7 }, None).into_raw();
    let first = capstan_bus::Outgoing::raw(Tick::subject(), &envelope);
    // The same envelope again under another bus id: JetStream keeps both, as it would once
    // the duplicate window has passed.
    let mut second = first.clone();
    second.message_id = format!("{}-again", envelope.id);
    service.bus.publish(first).await.unwrap();
    service.bus.publish(second).await.unwrap();

    wait_for(
        "the second delivery to be skipped",
        Duration::from_secs(30),
        || {
            let skipped = apply.skipped.load(Ordering::Relaxed);
            async move { (skipped == 1).then_some(()) }
        },
    )
    .await;
    assert_eq!(applied(&service.store).await, (1, 1));
    consumer.abort();
}
