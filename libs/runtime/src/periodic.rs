//! Periodic work (sweeps, expiries): a tick every interval until the service stops. A tick
//! that fails is logged and tried again at the next; one replica per tick is the tick's own
//! business (a transaction-scoped advisory lock).

use std::{future::Future, time::Duration};
use tokio_util::sync::CancellationToken;
use tracing::warn;

/// Runs `tick` at once and then every `interval` until `stop`; `what` names the work in the
/// log line of a failed tick.
pub async fn every<F, Fut, E>(
    interval: Duration,
    what: &'static str,
    stop: CancellationToken,
    mut tick: F,
) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<(), E>>,
    E: std::fmt::Display,
{
    let mut ticks = tokio::time::interval(interval);
    loop {
        tokio::select! {
            _ = stop.cancelled() => return Ok(()),
            _ = ticks.tick() => {}
        }
        if let Err(error) = tick().await {
            warn!(%error, what, "periodic work failed; trying again next tick");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failing_tick_is_tried_again_and_a_stop_ends_the_loop() {
        let stop = CancellationToken::new();
        let (ticked, mut ticks) = tokio::sync::mpsc::unbounded_channel();
        let mut count = 0u32;
        let running = tokio::spawn(every(
            Duration::from_millis(5),
            "test",
            stop.clone(),
            move || {
                count += 1;
                let _ = ticked.send(count);
                let outcome = if count == 1 {
                    Err("the first tick fails")
                } else {
                    Ok(())
                };
                async move { outcome }
            },
        ));
        // The first tick failed and the loop went on to a second and a third.
        assert_eq!(ticks.recv().await, Some(1));
        assert_eq!(ticks.recv().await, Some(2));
        assert_eq!(ticks.recv().await, Some(3));
        stop.cancel();
        running.await.unwrap().unwrap();
    }
}
