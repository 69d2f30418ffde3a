//! The one backoff rule: a wait that doubles with each failure in a row, from a first wait to
//! a longest. The agent adds its jitter to it; the services' loops and retry schedules use it
//! as it is.

use std::time::Duration;

/// The wait after the `failures`-th failure in a row (1 for the first, which waits `first`;
/// 0 counts as 1): `first` doubled for each failure after the first, never past `longest`.
pub fn doubling(first: Duration, failures: u32, longest: Duration) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    first
        .checked_mul(1u32 << doublings)
        .map_or(longest, |wait| wait.min(longest))
}

/// The waits of a retry loop: `first`, then each twice the one before, never past `longest`.
#[derive(Debug, Clone)]
pub struct Doubling {
    first: Duration,
    longest: Duration,
    failures: u32,
}

impl Doubling {
    pub fn new(first: Duration, longest: Duration) -> Doubling {
        Doubling {
            first,
            longest,
            failures: 0,
        }
    }
}

impl Iterator for Doubling {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        self.failures = self.failures.saturating_add(1);
        Some(doubling(self.first, self.failures, self.longest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn the_wait_doubles_with_each_failure_and_stops_at_the_longest() {
        let longest = Duration::from_secs(300);
        let waits: Vec<u64> = (1..=12)
            .map(|failures| doubling(SECOND, failures, longest).as_secs())
            .collect();
        assert_eq!(waits, vec![1, 2, 4, 8, 16, 32, 64, 128, 256, 300, 300, 300]);
        assert_eq!(
            doubling(SECOND, 0, longest),
            SECOND,
            "0 counts as the first"
        );
        assert_eq!(doubling(SECOND, u32::MAX, longest), longest);
        assert_eq!(
            doubling(Duration::MAX / 2, 3, Duration::MAX),
            Duration::MAX,
            "an overflow is the longest"
        );
    }

    #[test]
    fn a_loop_s_waits_double_up_to_the_longest() {
        let waits: Vec<Duration> = Doubling::new(Duration::from_millis(200), 10 * SECOND)
            .take(8)
            .collect();
        let millis: Vec<u128> = waits.iter().map(Duration::as_millis).collect();
        assert_eq!(millis, vec![200, 400, 800, 1600, 3200, 6400, 10000, 10000]);
    }
}
