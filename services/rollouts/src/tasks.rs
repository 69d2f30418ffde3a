//! Periodic work: every tick, one replica advances each rollout under way (RO-13), which is
//! what judges the time limits (a readiness check or a round of page checks past 15 minutes)
//! and ends a soak. A job's end advances its rollout at once (`consumers.rs`); the tick is for
//! what time alone changes. Each rollout is advanced in a transaction of its own, under the
//! tick's lock, so a crash loses at most the rollout it was on, which the next tick redoes.

use std::time::Duration;

use capstan_store::{Store, StoreError};
use chrono::Utc;
use tokio_util::sync::CancellationToken;

use crate::store::staged;

/// The lock that makes one replica advance the rollouts each tick.
pub const ADVANCE_LOCK: &str = "capstan-rollouts-advance";
/// How often rollouts are advanced by the clock.
pub const ADVANCE_EVERY: Duration = Duration::from_secs(2);

/// Advances every rollout under way, each tick, until `stop`.
pub async fn advance(store: Store, every: Duration, stop: CancellationToken) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(every, "advancing rollouts", stop, || {
        let store = store.clone();
        async move { tick(&store).await }
    })
    .await
}

async fn tick(store: &Store) -> Result<(), StoreError> {
    let ids = {
        let Some(mut transaction) = store.lead_tick(ADVANCE_LOCK).await? else {
            return Ok(());
        };
        let ids = staged::under_way(&mut transaction).await?;
        transaction.commit().await?;
        ids
    };
    for id in ids {
        let mut transaction = store.begin().await?;
        staged::advance(&mut transaction, id, Utc::now()).await?;
        transaction.commit().await?;
    }
    // RO-23: a publish's deploy to all that waited for another rollout (RO-16) starts once
    // that one ends, within the window.
    crate::rpc::site_releases::decide_deploy_all(store, Utc::now()).await?;
    Ok(())
}
