//! The provisions' running work: the provisions in flight ([`provisions`]), woken by a request
//! or a retry and looking again every [`TICK`]; the auto-approval pass ([`approval`]), every
//! minute and on each join or finished install.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use tokio::sync::{Notify, Semaphore};
use tokio_util::sync::CancellationToken;

use crate::app::{approval, workflow::Workflow};
use crate::store;

/// How often the provisions in flight are looked at without a wake-up.
pub const TICK: Duration = Duration::from_secs(5);

/// Runs the provisions in flight whose lease is free, at most `concurrency` at once.
pub async fn provisions(
    workflow: Workflow,
    wake: Arc<Notify>,
    concurrency: usize,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    let permits = Arc::new(Semaphore::new(concurrency));
    let running: Arc<Mutex<HashSet<i64>>> = Arc::default();
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = wake.notified() => {}
            _ = tokio::time::sleep(TICK) => {}
        }
        let due = match workflow.store.acquire().await {
            Ok(mut connection) => store::due(&mut connection, Utc::now()).await,
            Err(error) => Err(error),
        };
        let due = match due {
            Ok(due) => due,
            Err(error) => {
                tracing::warn!(%error, "the provisions in flight could not be read");
                continue;
            }
        };
        for id in due {
            if !running
                .lock()
                .map(|mut set| set.insert(id))
                .unwrap_or(false)
            {
                continue;
            }
            let Ok(permit) = permits.clone().try_acquire_owned() else {
                if let Ok(mut set) = running.lock() {
                    set.remove(&id);
                }
                break;
            };
            let (workflow, running, wake) = (workflow.clone(), running.clone(), wake.clone());
            tokio::spawn(async move {
                if let Err(error) = workflow.run(id).await {
                    tracing::warn!(provision_id = id, %error, "a provision's run stopped");
                }
                if let Ok(mut set) = running.lock() {
                    set.remove(&id);
                }
                drop(permit);
                // A slot came free: the next waiting provision need not wait for the tick.
                wake.notify_one();
            });
        }
    }
}

/// AC-08's pass every minute, and at once when `judge` is woken (a join heard, a key recorded).
pub async fn approval(
    workflow: Workflow,
    judge: Arc<Notify>,
    stop: CancellationToken,
) -> anyhow::Result<()> {
    loop {
        let wait = match approval::judge(&workflow).await {
            Ok(Some(pass)) if pass.again_soon => approval::SOON,
            Ok(_) => approval::EVERY,
            Err(error) => {
                tracing::warn!(%error, "auto-approval's pass failed; tried again");
                approval::SOON
            }
        };
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = judge.notified() => {}
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
