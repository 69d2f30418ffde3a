//! Two outbox relays on one schema: when PostgreSQL ends the leader's lock connection, the
//! lock passes to the other relay and the first must stop publishing at once. A plain core
//! NATS subscriber (which JetStream's duplicate window does not shield) sees every event
//! written after the fault exactly once.

use capstan_bus::testsuite::{spy, NatsServer};
use capstan_e2e::{service, settings, wait_for, Tick};
use capstan_events::Word as _;
use capstan_events::{Domain, Envelope, Message};
use capstan_runtime::BusPublisher;
use capstan_store::{outbox, testsuite::TestDatabase, OutboxRelay, Store};
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio_util::sync::CancellationToken;

const BEFORE: i64 = 50;
const AFTER: i64 = 150;
/// The tick written last: once it is seen, everything written before it went out.
const MARKER: i64 = 1_000_000;

/// The backend holding a session advisory lock in the test's database, if any.
async fn lock_holder(admin: &sqlx::PgPool) -> Option<i32> {
    sqlx::query_scalar(
        "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND granted
           AND database = (SELECT oid FROM pg_database WHERE datname = current_database())",
    )
    .fetch_optional(admin)
    .await
    .unwrap()
}

async fn write_ticks(store: &Store, sequences: impl Iterator<Item = i64>) {
    for sequence in sequences {
        let mut transaction = store.begin().await.unwrap();
        outbox::push(&mut transaction, Envelope::new(Tick { sequence }, None))
            .await
            .unwrap();
        transaction.commit().await.unwrap();
        // A steady stream rather than one burst, so both relays would be at work.
        tokio::time::sleep(Duration::from_millis(3)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_relay_whose_lock_connection_is_terminated_stops_publishing() {
    let nats = NatsServer::start();
    let database = TestDatabase::create().await;
    let settings = settings(&database, &nats, &[]);
    let service = service(&settings, Domain::Incidents).await;
    let admin = sqlx::PgPool::connect(database.url()).await.unwrap();

    // Every tick a plain subscriber sees, by sequence, with how often.
    let seen: Arc<Mutex<HashMap<i64, u32>>> = Arc::default();
    let mut watcher = spy(&service.bus, &Tick::subject()).await;
    {
        let seen = seen.clone();
        tokio::spawn(async move {
            while let Some(message) = watcher.next(Duration::from_secs(120)).await {
                let envelope: serde_json::Value = serde_json::from_slice(&message.payload).unwrap();
                let sequence = envelope["data"]["sequence"].as_i64().unwrap();
                *seen.lock().unwrap().entry(sequence).or_default() += 1;
            }
        });
    }
    let count = |sequence: i64| seen.lock().unwrap().get(&sequence).copied().unwrap_or(0);

    // Two replicas' relays, each with a pool of its own.
    let stop = CancellationToken::new();
    for _ in 0..2 {
        let store = Store::connect(database.url(), Domain::Incidents.as_str(), 4)
            .await
            .unwrap();
        let relay = OutboxRelay::new(
            store,
            Arc::new(BusPublisher(service.bus.clone())),
            16,
            Duration::from_millis(100),
        );
        tokio::spawn(relay.run(stop.clone()));
    }

    write_ticks(&service.store, 0..BEFORE).await;
    wait_for("the first ticks", Duration::from_secs(30), || async {
        (count(BEFORE - 1) > 0).then_some(())
    })
    .await;
    let leader = wait_for("a relay to lead", Duration::from_secs(10), || {
        lock_holder(&admin)
    })
    .await;

    // PostgreSQL ends the leader's lock connection; its pool is untouched.
    let terminated: bool = sqlx::query_scalar("SELECT pg_terminate_backend($1, 5000)")
        .bind(leader)
        .fetch_one(&admin)
        .await
        .unwrap();
    assert!(terminated);
    wait_for("a relay to lead again", Duration::from_secs(10), || async {
        lock_holder(&admin).await.filter(|pid| *pid != leader)
    })
    .await;

    write_ticks(&service.store, BEFORE..BEFORE + AFTER).await;
    write_ticks(&service.store, [MARKER].into_iter()).await;
    wait_for("the marker tick", Duration::from_secs(30), || async {
        (count(MARKER) > 0).then_some(())
    })
    .await;

    let seen = seen.lock().unwrap().clone();
    let missing: Vec<i64> = (0..BEFORE + AFTER)
        .filter(|sequence| !seen.contains_key(sequence))
        .collect();
    assert!(missing.is_empty(), "ticks never published: {missing:?}");
    let twice: Vec<(i64, u32)> = (BEFORE..BEFORE + AFTER)
        .filter_map(|sequence| Some((sequence, seen[&sequence])).filter(|(_, times)| *times > 1))
        .collect();
    assert!(
        twice.is_empty(),
        "{} of {AFTER} ticks written after the fault were published more than once: {twice:?}",
        twice.len()
    );
    stop.cancel();
}
