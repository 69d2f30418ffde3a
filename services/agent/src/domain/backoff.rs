//! How long to wait before asking the plane again: exponential backoff with jitter, capped,
//! while the plane cannot be reached, and exactly what `Retry-After` says on a `429`.

use std::time::Duration;

/// The first wait after a failure.
pub const BACKOFF_BASE: Duration = Duration::from_secs(1);
/// The longest wait between attempts while the plane is unreachable.
pub const BACKOFF_CAP: Duration = Duration::from_secs(5 * 60);
/// The longest `Retry-After` the agent honours; a larger one is read as this.
pub const RETRY_AFTER_CAP: Duration = Duration::from_secs(60 * 60);
/// The wait on a `429` without a readable `Retry-After`.
pub const RETRY_AFTER_DEFAULT: Duration = Duration::from_secs(60);

/// The wait before attempt `failures + 1`, after `failures` failures in a row (at least one).
/// `jitter` is a number in `0.0..=1.0` from the caller's randomness: the wait is between half
/// and all of the exponential step ("equal jitter"), so a fleet that lost its plane at the same
/// moment does not come back at the same moment.
pub fn delay(failures: u32, jitter: f64) -> Duration {
    let step = capstan_telemetry::backoff::doubling(BACKOFF_BASE, failures, BACKOFF_CAP);
    let jitter = jitter.clamp(0.0, 1.0);
    step / 2 + step.mul_f64(jitter) / 2
}

/// Reads `Retry-After` as delay-seconds (RFC 9110 §10.2.3); an HTTP date or garbage gets the
/// default, a zero at least a second, and a huge value the cap.
pub fn retry_after(header: Option<&str>) -> Duration {
    let Some(seconds) = header.and_then(|value| value.trim().parse::<u64>().ok()) else {
        return RETRY_AFTER_DEFAULT;
    };
    Duration::from_secs(seconds.max(1)).min(RETRY_AFTER_CAP)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_wait_doubles_with_each_failure_and_stops_at_the_cap() {
        let waits: Vec<u64> = (1..=12)
            .map(|failures| delay(failures, 1.0).as_secs())
            .collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(delay(u32::MAX, 1.0), BACKOFF_CAP);
    }

    #[test]
    fn jitter_keeps_the_wait_between_half_and_all_of_the_step() {
        assert_eq!(delay(4, 0.0), Duration::from_secs(4));
        assert_eq!(delay(4, 0.5), Duration::from_secs(6));
        assert_eq!(delay(4, 1.0), Duration::from_secs(8));
        assert_eq!(delay(4, 7.0), Duration::from_secs(8), "jitter is clamped");
    }

    #[test]
    fn retry_after_is_honoured_in_seconds_within_bounds() {
        assert_eq!(retry_after(Some("17")), Duration::from_secs(17));
        assert_eq!(retry_after(Some(" 3 ")), Duration::from_secs(3));
        assert_eq!(retry_after(Some("0")), Duration::from_secs(1));
        assert_eq!(retry_after(Some("999999")), RETRY_AFTER_CAP);
        assert_eq!(
            retry_after(Some("Wed, 21 Oct 2015 07:28:00 GMT")),
            RETRY_AFTER_DEFAULT
        );
        assert_eq!(retry_after(None), RETRY_AFTER_DEFAULT);
    }
}
