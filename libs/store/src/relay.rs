//! The outbox relay: publishes a schema's outbox rows in order, deletes each once the bus has
//! acknowledged it, and retries with backoff while the bus is away. One replica relays a
//! schema at a time (a session advisory lock on a connection of its own, released if the
//! holder dies); a `NOTIFY` at commit wakes it at once, a slow sweep covers lost wake-ups.
//!
//! "One relay per schema at a time" holds through a lost connection because every batch is
//! read and deleted on the lock's own connection: when PostgreSQL ends that backend (a
//! restart, `pg_terminate_backend`, a network cut) the lock is gone for this replica and so is
//! the connection, so the next batch fails before anything is published and the relay steps
//! down. What may still go out twice is the one batch handed to the bus as the connection
//! died, as after a crash; JetStream drops it by its message id.

use futures::future::BoxFuture;
use sqlx::{postgres::PgListener, PgConnection, Row};
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};
use uuid::Uuid;

use crate::{outbox, Store, StoreError};

/// One outbox row on its way to the bus.
#[derive(Debug, Clone)]
pub struct RelayMessage {
    pub subject: String,
    pub message_id: Uuid,
    /// The envelope's JSON, exactly as written.
    pub payload: String,
    pub traceparent: Option<String>,
}

/// Something that publishes in order and says how many leading messages it got acknowledged
/// (the bus, or a test's fake). An error means none were.
pub trait Publisher: Send + Sync {
    fn publish_batch(&self, messages: Vec<RelayMessage>) -> BoxFuture<'_, Result<usize, String>>;
}

/// Relays one schema's outbox to the bus until shut down.
pub struct OutboxRelay {
    store: Store,
    publisher: Arc<dyn Publisher>,
    batch_size: i64,
    poll_interval: Duration,
}

const MAX_BACKOFF: Duration = Duration::from_secs(5);

impl OutboxRelay {
    pub fn new(
        store: Store,
        publisher: Arc<dyn Publisher>,
        batch_size: u32,
        poll_interval: Duration,
    ) -> OutboxRelay {
        OutboxRelay {
            store,
            publisher,
            batch_size: i64::from(batch_size),
            poll_interval,
        }
    }

    /// Runs until `shutdown`; a batch in flight when it comes is finished first, so nothing is
    /// left half-sent (and anything unsent stays in the outbox for the next start).
    pub async fn run(self, shutdown: CancellationToken) {
        let mut backoff = Duration::from_millis(100);
        while !shutdown.is_cancelled() {
            let mut led = false;
            match self.lead(&shutdown, &mut led).await {
                Ok(()) => backoff = Duration::from_millis(100),
                Err(error) if led => {
                    warn!(schema = %self.store.schema(), %error, "outbox relay stepped down: its lock connection failed, publishing nothing more until it leads again");
                    metrics::counter!("capstan_outbox_relay_step_downs_total", "schema" => self.store.schema().to_string())
                        .increment(1);
                    backoff = Duration::from_millis(100);
                }
                Err(error) => {
                    warn!(schema = %self.store.schema(), %error, "outbox relay interrupted");
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                }
            }
            tokio::select! {
                _ = shutdown.cancelled() => break,
                _ = tokio::time::sleep(backoff) => {}
            }
        }
        debug!(schema = %self.store.schema(), "outbox relay stopped");
    }

    /// Takes the relay lock if free and relays while holding it, setting `led` once it leads.
    /// Returns `Ok` when another replica holds it (try again later) or on shutdown, and an
    /// error when the lock's connection fails (the lock may be another replica's by now).
    async fn lead(&self, shutdown: &CancellationToken, led: &mut bool) -> Result<(), StoreError> {
        let mut lock = self.store.dedicated_connection().await?;
        let leader: bool = sqlx::query_scalar("SELECT pg_try_advisory_lock(hashtext($1))")
            .bind(format!("capstan-outbox-{}", self.store.schema()))
            .fetch_one(&mut lock)
            .await?;
        if !leader {
            tokio::select! {
                _ = shutdown.cancelled() => {}
                _ = tokio::time::sleep(self.poll_interval) => {}
            }
            return Ok(());
        }
        let mut listener = PgListener::connect_with(self.store.pool()).await?;
        listener
            .listen(&outbox::channel(self.store.schema()))
            .await?;
        *led = true;
        info!(schema = %self.store.schema(), "outbox relay leading");
        let mut backoff = Duration::from_millis(100);
        loop {
            if shutdown.is_cancelled() {
                return Ok(());
            }
            match self.relay_batch(&mut lock).await {
                Ok(sent) if sent > 0 => {
                    backoff = Duration::from_millis(100);
                    continue;
                }
                Ok(_) => {}
                Err(RelayError::Store(error)) => return Err(error),
                Err(RelayError::Bus(reason)) => {
                    warn!(schema = %self.store.schema(), %reason, ?backoff, "bus did not take the outbox, retrying");
                    tokio::select! {
                        _ = shutdown.cancelled() => return Ok(()),
                        _ = tokio::time::sleep(backoff) => {}
                    }
                    backoff = (backoff * 2).min(MAX_BACKOFF);
                    continue;
                }
            }
            // Empty: sleep until a commit notifies us, the sweep comes round, or shutdown.
            tokio::select! {
                _ = shutdown.cancelled() => return Ok(()),
                notification = listener.recv() => {
                    notification?;
                    while listener.next_buffered().is_some() {}
                }
                _ = tokio::time::sleep(self.poll_interval) => {}
            }
        }
    }

    /// Publishes the oldest rows and deletes those acknowledged, reading and deleting on `lock`,
    /// the connection that holds the relay lock: a batch is published only while that
    /// connection (and so the lock) is alive. Returns how many went out.
    async fn relay_batch(&self, lock: &mut PgConnection) -> Result<usize, RelayError> {
        let rows = sqlx::query(
            "SELECT id, message_id, subject, payload, traceparent FROM outbox ORDER BY id LIMIT $1",
        )
        .bind(self.batch_size)
        .fetch_all(&mut *lock)
        .await
        .map_err(|error| RelayError::Store(error.into()))?;
        if rows.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::with_capacity(rows.len());
        let mut messages = Vec::with_capacity(rows.len());
        for row in rows {
            ids.push(row.get::<i64, _>("id"));
            messages.push(RelayMessage {
                message_id: row.get("message_id"),
                subject: row.get("subject"),
                payload: row.get("payload"),
                traceparent: row.get("traceparent"),
            });
        }
        let total = messages.len();
        let acknowledged = self
            .publisher
            .publish_batch(messages)
            .await
            .map_err(RelayError::Bus)?;
        let sent = &ids[..acknowledged.min(total)];
        sqlx::query("DELETE FROM outbox WHERE id = ANY($1)")
            .bind(sent)
            .execute(&mut *lock)
            .await
            .map_err(|error| RelayError::Store(error.into()))?;
        metrics::counter!("capstan_outbox_relayed_total", "schema" => self.store.schema().to_string())
            .increment(sent.len() as u64);
        if acknowledged < total {
            return Err(RelayError::Bus(format!(
                "{acknowledged} of {total} messages acknowledged"
            )));
        }
        Ok(sent.len())
    }
}

enum RelayError {
    Store(StoreError),
    Bus(String),
}
