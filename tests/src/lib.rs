//! Shared fixtures of the workspace tests and benchmarks: a test event, a service wired to a
//! test's own database and NATS server, a whole plane of the test's own ([`plane`]), the real
//! agent binary ([`agent`]), and helpers that wait for an effect instead of sleeping.
#![forbid(unsafe_code)]

pub mod agent;
pub mod confinement;
pub mod dns;
pub mod fleet;
pub mod heard;
pub mod pages;
pub mod plane;
pub mod process;
pub mod s3;
pub mod tls;
pub mod web;

use capstan_bus::testsuite::NatsServer;
use capstan_events::{Domain, Event, Kind, Message};
use capstan_runtime::Service;
use capstan_settings::Settings;
use capstan_store::{testsuite::TestDatabase, Migrator, Store};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::{future::Future, time::Duration};

/// The schema the test consumers and producers use (`tests/migrations/e2e`).
pub static MIGRATOR: Migrator = sqlx::migrate!("migrations/e2e");

/// A numbered event the tests produce and count.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct Tick {
    pub sequence: i64,
}

impl Message for Tick {
    const DOMAIN: Domain = Domain::Incidents;
    const NAME: &'static str = "test_tick";
    const KIND: Kind = Kind::Event;
}
impl Event for Tick {}

/// Settings pointing at a test's own servers, with `extra` `CAPSTAN__*` overrides.
pub fn settings(database: &TestDatabase, nats: &NatsServer, extra: &[(&str, &str)]) -> Settings {
    settings_with::<()>(database, nats, extra).0
}

/// As [`settings`], with the sections `S` of the services a test runs (`capstan_settings::load`).
pub fn settings_with<S: capstan_settings::Sections>(
    database: &TestDatabase,
    nats: &NatsServer,
    extra: &[(&str, &str)],
) -> (Settings, S) {
    let mut environment = vec![
        (
            "CAPSTAN__DATABASE__URL".to_string(),
            database.url().to_string(),
        ),
        ("CAPSTAN__NATS__URL".to_string(), nats.url()),
    ];
    environment.extend(
        extra
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string())),
    );
    capstan_settings::load_from(None, environment).expect("test settings are valid")
}

/// A service of `domain` on the test's servers, its schema migrated with the test migrations.
pub async fn service(settings: &Settings, domain: Domain) -> Service {
    Service::start(settings, domain, &MIGRATOR)
        .await
        .expect("the test service starts")
}

/// Counts the rows the test consumers applied: (all rows, distinct message ids).
pub async fn applied(store: &Store) -> (i64, i64) {
    sqlx::query_as("SELECT count(*), count(DISTINCT message_id) FROM applied")
        .fetch_one(store.pool())
        .await
        .expect("the applied table is readable")
}

/// Polls `check` every 50 ms until it answers `Some`, failing after `limit` with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, limit: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {what} after {limit:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// What the test consumers do with a tick: decode it (a message that is not a tick is
/// rejected) and insert a row into `applied`. Returns the tick's sequence number.
pub async fn apply_tick(
    connection: &mut capstan_store::PgConnection,
    delivery: &capstan_bus::Delivery,
) -> Result<i64, capstan_bus::HandlerError> {
    use capstan_bus::HandlerError;
    let tick = delivery
        .envelope
        .decode::<Tick>()
        .map_err(|error| HandlerError::Reject(error.to_string()))?;
    sqlx::query("INSERT INTO applied (message_id, sequence) VALUES ($1, $2)")
        .bind(tick.id)
        .bind(tick.data.sequence)
        .execute(connection)
        .await
        .map_err(|error| HandlerError::Retry(error.to_string()))?;
    Ok(tick.data.sequence)
}

/// Waits until `replicas` replicas of `domain` have answered their health question (each answer
/// names its replica): a replica is serving once it answers.
pub async fn wait_replicas(bus: &capstan_bus::Bus, domain: Domain, replicas: usize) {
    let limit = Duration::from_secs(60);
    let deadline = tokio::time::Instant::now() + limit;
    let mut seen = std::collections::HashSet::new();
    while seen.len() < replicas {
        assert!(
            tokio::time::Instant::now() < deadline,
            "gave up waiting for {replicas} replica(s) of {domain} to answer after {limit:?}"
        );
        let asked: Result<capstan_events::rpc::Health, _> =
            bus.health(domain, Duration::from_millis(500)).await;
        match asked.ok().and_then(|health| health.replica) {
            Some(replica) => {
                seen.insert(replica);
            }
            None => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// The value of the metric `name` in this process (0 when not recorded yet). The plane's
/// services run in the test's process, so this is what they recorded (nextest runs each test in
/// a process of its own).
pub fn metric(name: &str) -> f64 {
    let rendered = capstan_telemetry::metrics(None)
        .expect("the metrics recorder is installed")
        .render();
    let prefix = format!("{name} ");
    rendered
        .lines()
        .find_map(|line| line.strip_prefix(prefix.as_str()))
        .and_then(|value| value.trim().parse().ok())
        .unwrap_or(0.0)
}

/// Waits until the agent channel holds at least `polls` long polls parked (their wake-up armed,
/// counted in `capstan_agent_long_polls`).
pub async fn wait_parked(polls: usize) {
    wait_for(
        &format!("{polls} long poll(s) parked"),
        Duration::from_secs(30),
        || async { (metric("capstan_agent_long_polls") >= polls as f64).then_some(()) },
    )
    .await;
}
