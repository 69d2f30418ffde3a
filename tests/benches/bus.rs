//! The bus benchmark: raw JetStream publish-with-ack per second, outbox-relayed events per
//! second on the same server, and end-to-end latency (outbox commit → consumer) p50/p99.
//!
//! `cargo bench -p capstan-e2e --bench bus` (release build; a NATS server and a database of
//! its own; `BENCH_EVENTS` sets the volume, 20,000 by default).

use capstan_bus::{testsuite::NatsServer, ConsumerSpec, Delivery, HandlerError, Outgoing};
use capstan_e2e::{service, settings, wait_for, Tick};
use capstan_events::{Domain, Envelope, Event, Kind, Message};
use capstan_runtime::{consume_with_inbox, Apply, BusPublisher};
use capstan_store::{outbox, testsuite::TestDatabase, OutboxRelay, PgConnection};
use futures::future::BoxFuture;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{
    sync::{Arc, Mutex},
    time::{Duration, Instant},
};
use tokio_util::sync::CancellationToken;

const BATCH: usize = 256;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
struct Probe {
    sequence: i64,
}
impl Message for Probe {
    const DOMAIN: Domain = Domain::Incidents;
    const NAME: &'static str = "bench_probe";
    const KIND: Kind = Kind::Event;
}
impl Event for Probe {}

/// Records how long after its creation each probe reached the consumer.
struct Latency(Mutex<Vec<Duration>>);

impl Apply for Latency {
    type Message = ();

    /// Every message on its subject.
    fn read(&self, _delivery: &Delivery) -> Option<Result<(), HandlerError>> {
        Some(Ok(()))
    }

    fn apply<'c>(
        &'c self,
        _connection: &'c mut PgConnection,
        _message: (),
        delivery: &'c Delivery,
    ) -> BoxFuture<'c, Result<(), HandlerError>> {
        let elapsed = (chrono::Utc::now() - delivery.envelope.time)
            .to_std()
            .unwrap_or_default();
        self.0.lock().unwrap().push(elapsed);
        Box::pin(async { Ok(()) })
    }
}

fn percentile(sorted: &[Duration], fraction: f64) -> Duration {
    let index = ((sorted.len() as f64 - 1.0) * fraction).round() as usize;
    sorted[index]
}

fn main() {
    let events: usize = std::env::var("BENCH_EVENTS")
        .ok()
        .and_then(|value| value.parse().ok())
        .unwrap_or(20_000);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(run(events));
}

async fn run(events: usize) {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Incidents).await;

    // 1. Raw publish-with-ack, pipelined in the relay's batch size.
    let started = Instant::now();
    let mut sent = 0;
    while sent < events {
        let batch: Vec<Outgoing> = (0..BATCH.min(events - sent))
            .map(|offset| {
                Outgoing::of(Envelope::new(
                    Tick {
                        sequence: (sent + offset) as i64,
                    },
                    None,
                ))
            })
            .collect();
        sent += service.bus.publish_batch(batch).await.unwrap();
    }
    let raw_rate = events as f64 / started.elapsed().as_secs_f64();

    // 2. The outbox path: rows committed first, then relayed (publish, ack, delete) in full.
    let store = service.store.clone();
    for chunk in 0..events.div_ceil(100) {
        let mut transaction = store.begin().await.unwrap();
        for offset in 0..100.min(events - chunk * 100) {
            let tick = Tick {
                sequence: (chunk * 100 + offset) as i64,
            };
            outbox::push(&mut transaction, Envelope::new(tick, None))
                .await
                .unwrap();
        }
        transaction.commit().await.unwrap();
    }
    let relay_stop = CancellationToken::new();
    let started = Instant::now();
    let relay = OutboxRelay::new(
        store.clone(),
        Arc::new(BusPublisher(service.bus.clone())),
        BATCH as u32,
        Duration::from_millis(500),
    );
    let relay = tokio::spawn(relay.run(relay_stop.clone()));
    wait_for("the outbox to drain", Duration::from_secs(600), || {
        let store = store.clone();
        async move {
            let mut connection = store.pool().acquire().await.ok()?;
            (outbox::pending(&mut connection).await.ok()? == 0).then_some(())
        }
    })
    .await;
    let relay_rate = events as f64 / started.elapsed().as_secs_f64();

    // 3. End to end: one probe per transaction at a steady pace, relay and consumer running.
    let latency = Arc::new(Latency(Mutex::new(Vec::new())));
    let consumer_stop = CancellationToken::new();
    let consumer = {
        let service = service.clone();
        let latency = latency.clone();
        let stop = consumer_stop.clone();
        tokio::spawn(async move {
            let spec = ConsumerSpec {
                domain: Domain::Incidents,
                stream: Probe::stream(),
                durable: "bench_latency".into(),
                filter_subject: Probe::subject(),
                max_deliver: 5,
                ack_wait: Duration::from_secs(30),
            };
            consume_with_inbox(&service, spec, latency, stop).await
        })
    };
    let probes = 2_000.min(events);
    let pace = Duration::from_millis(2);
    for sequence in 0..probes {
        let mut transaction = store.begin().await.unwrap();
        outbox::push(
            &mut transaction,
            Envelope::new(
                Probe {
                    sequence: sequence as i64,
                },
                None,
            ),
        )
        .await
        .unwrap();
        transaction.commit().await.unwrap();
        tokio::time::sleep(pace).await;
    }
    wait_for("every probe consumed", Duration::from_secs(120), || {
        let count = latency.0.lock().unwrap().len();
        async move { (count >= probes).then_some(()) }
    })
    .await;
    let mut samples = latency.0.lock().unwrap().clone();
    samples.sort();
    consumer_stop.cancel();
    relay_stop.cancel();
    let _ = consumer.await;
    let _ = relay.await;

    println!("bus benchmark ({events} events, batches of {BATCH}, one NATS server, one PostgreSQL, {} cores)",
        std::thread::available_parallelism().map_or(0, |n| n.get()));
    println!("  raw JetStream publish-with-ack     {raw_rate:>10.0} msg/s");
    println!(
        "  outbox relayed (publish+ack+delete) {relay_rate:>9.0} msg/s  ({:.0}% of raw)",
        100.0 * relay_rate / raw_rate
    );
    println!(
        "  end-to-end commit → consumer ({probes} probes, one per transaction every {pace:?}):"
    );
    println!(
        "    p50 {:>8.2} ms",
        percentile(&samples, 0.50).as_secs_f64() * 1e3
    );
    println!(
        "    p99 {:>8.2} ms",
        percentile(&samples, 0.99).as_secs_f64() * 1e3
    );
    println!(
        "    max {:>8.2} ms",
        samples.last().copied().unwrap_or_default().as_secs_f64() * 1e3
    );
}
