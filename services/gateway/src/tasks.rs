//! Periodic work of the gateway, run by one replica per tick (a transaction-scoped advisory
//! lock): sessions past their idle timeout or lifetime, and sign-in failures older than any
//! throttling window, are deleted even when nobody signs in to sweep them on the way.

use capstan_store::{Store, StoreError};
use std::time::Duration;
use tokio_util::sync::CancellationToken;
use tracing::info;

use crate::store;

/// How often the sweep runs.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(5 * 60);
/// The advisory lock one replica holds for a sweep ([`Store::lead_tick`]).
pub const SWEEP_LOCK: &str = "capstan-gateway-sweep";

pub async fn run(
    store: Store,
    idle: Duration,
    lifetime: Duration,
    shutdown: CancellationToken,
) -> anyhow::Result<()> {
    capstan_runtime::periodic::every(SWEEP_INTERVAL, "gateway sweep", shutdown, || async {
        sweep(&store, idle, lifetime).await.map(|_| ())
    })
    .await
}

/// One sweep, if no other replica is sweeping now: (sessions, sign-in failures) deleted.
pub async fn sweep(
    store: &Store,
    idle: Duration,
    lifetime: Duration,
) -> Result<(u64, u64), StoreError> {
    let Some(mut transaction) = store.lead_tick(SWEEP_LOCK).await? else {
        return Ok((0, 0));
    };
    let swept = store::sweep_sessions_and_failures(&mut transaction, idle, lifetime).await?;
    transaction.commit().await?;
    if swept.0 + swept.1 > 0 {
        info!(
            sessions = swept.0,
            sign_in_failures = swept.1,
            "gateway sweep"
        );
    }
    Ok(swept)
}
