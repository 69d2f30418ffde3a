//! Periodic work, run by one replica per tick (a transaction-scoped advisory lock): joins that
//! expired or whose rejection is over a day old, claims past their budget, old nonces.

use capstan_store::{Store, StoreError};
use std::{sync::Arc, time::Duration};
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::{actions, domain::jobs::lost, rpc::Limits, store, wake::Wake};

/// How often the sweep runs (AC-29 also runs it on every poll of the node concerned).
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(30);

pub async fn run(
    store: Store,
    limits: Arc<Limits>,
    wake: Arc<Wake>,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(SWEEP_INTERVAL, "agent channel sweep", shutdown, || {
        limits.prune();
        wake.prune();
        sweep(&store)
    })
    .await
}

/// One sweep, if no other replica is sweeping now.
pub async fn sweep(store: &Store) -> Result<(), StoreError> {
    let mut transaction = store.begin().await?;
    let leader: bool = sqlx::query_scalar(
        "SELECT pg_try_advisory_xact_lock(hashtext('capstan-agent-channel-sweep'))",
    )
    .fetch_one(&mut *transaction)
    .await?;
    if !leader {
        return Ok(());
    }
    let (expired, retired) = store::sweep_joins(&mut transaction).await?;
    let stale = store::lose_stale(&mut transaction, None, lost::BUDGET).await?;
    actions::announce_all_finished(&mut transaction, &stale).await?;
    let nonces = store::prune_nonces(
        &mut transaction,
        chrono::Utc::now(),
        crate::domain::NONCE_WINDOW,
    )
    .await?;
    transaction.commit().await?;
    if expired + retired + stale.len() as u64 > 0 {
        info!(
            expired,
            retired,
            lost = stale.len(),
            nonces,
            "agent channel sweep"
        );
    }
    Ok(())
}
