//! Long polls: a claim with `wait` sleeps until a job is queued for its node. The insert's
//! trigger sends `NOTIFY capstan_agent_channel_jobs, '<node id>'` at commit; every replica
//! listens, so the claim wakes whichever replica holds it.

use capstan_store::Store;
use std::{
    collections::HashMap,
    sync::{Arc, Mutex},
    time::Duration,
};
use tokio::sync::Notify;
use tokio_util::sync::CancellationToken;
use tracing::warn;

pub const CHANNEL: &str = "capstan_agent_channel_jobs";

/// The nodes claims are waiting for.
#[derive(Default)]
pub struct Wake {
    waiting: Mutex<HashMap<i64, Arc<Notify>>>,
}

impl Wake {
    /// The bell of `node_id`; arm its `notified()` before looking for a job, then await it.
    pub fn bell(&self, node_id: i64) -> Arc<Notify> {
        let mut waiting = self.waiting.lock().expect("the wake map is never poisoned");
        waiting.entry(node_id).or_default().clone()
    }

    pub fn ring(&self, node_id: i64) {
        let bell = self
            .waiting
            .lock()
            .expect("the wake map is never poisoned")
            .get(&node_id)
            .cloned();
        if let Some(bell) = bell {
            bell.notify_waiters();
        }
    }

    /// Forgets bells nobody holds.
    pub fn prune(&self) {
        self.waiting
            .lock()
            .expect("the wake map is never poisoned")
            .retain(|_, bell| Arc::strong_count(bell) > 1);
    }

    /// Listens for queued jobs until `shutdown`, reconnecting when the connection drops.
    pub async fn listen(
        self: Arc<Self>,
        store: Store,
        shutdown: CancellationToken,
    ) -> anyhow::Result<()> {
        while !shutdown.is_cancelled() {
            let mut listener = match sqlx::postgres::PgListener::connect_with(store.pool()).await {
                Ok(listener) => listener,
                Err(error) => {
                    warn!(%error, "job wake-up listener cannot connect, retrying");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            if let Err(error) = listener.listen(CHANNEL).await {
                warn!(%error, "job wake-up listener cannot listen, retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
                continue;
            }
            loop {
                let notification = tokio::select! {
                    _ = shutdown.cancelled() => return Ok(()),
                    notification = listener.recv() => notification,
                };
                match notification {
                    Ok(notification) => {
                        if let Ok(node_id) = notification.payload().parse::<i64>() {
                            self.ring(node_id);
                        }
                    }
                    Err(error) => {
                        warn!(%error, "job wake-up listener lost its connection");
                        break;
                    }
                }
            }
        }
        Ok(())
    }
}
