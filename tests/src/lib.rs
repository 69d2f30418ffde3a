//! Shared fixtures of the workspace tests and benchmarks: a test event, a service wired to a
//! test's own database and NATS server, a whole plane of the test's own ([`plane`]), the real
//! agent binary ([`agent`]), and helpers that wait for an effect instead of sleeping.
#![forbid(unsafe_code)]

pub mod agent;
pub mod dns;
pub mod plane;
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
    Settings::load_from(None, environment).expect("test settings are valid")
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
