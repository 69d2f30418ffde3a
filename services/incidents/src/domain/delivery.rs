//! Delivering a signal: each mail, webhook or bell is an outbox row retried with backoff until
//! delivered or given up a day after its first attempt; and which scheme a webhook may use —
//! never plain `http://` unless private targets are allowed. Where it may be sent is the
//! plane's one address policy (`capstan_runtime::outbound`), checked at creation and again at
//! each delivery, on the addresses the host resolves to then, so DNS cannot reach inside.

use chrono::{DateTime, Duration, Utc};

use super::InvalidInput;

/// The wait after the first failed attempt; each further failure doubles it.
pub const FIRST_RETRY_GAP: Duration = Duration::seconds(10);
/// The longest wait between two attempts.
pub const LONGEST_RETRY_GAP: Duration = Duration::hours(2);
/// A delivery not made this long after its first attempt is given up.
pub const GIVE_UP_AFTER: Duration = Duration::hours(24);

/// A retry schedule: doubling gaps from `first_gap`, capped at `longest_gap`, given up
/// `give_up_after` the first attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    first_gap: Duration,
    longest_gap: Duration,
    give_up_after: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            first_gap: FIRST_RETRY_GAP,
            longest_gap: LONGEST_RETRY_GAP,
            give_up_after: GIVE_UP_AFTER,
        }
    }
}

/// What follows a failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Next {
    RetryAt(DateTime<Utc>),
    GiveUp,
}

impl Backoff {
    /// A schedule other than the default (tests use short gaps); every span must be positive
    /// and the first gap no longer than the longest.
    pub fn new(
        first_gap: Duration,
        longest_gap: Duration,
        give_up_after: Duration,
    ) -> Result<Backoff, InvalidInput> {
        if first_gap <= Duration::zero()
            || longest_gap < first_gap
            || give_up_after <= Duration::zero()
        {
            return Err(InvalidInput::new(
                "retry",
                "the gaps and the give-up span must be positive, the first gap no longer than the longest",
            ));
        }
        Ok(Backoff {
            first_gap,
            longest_gap,
            give_up_after,
        })
    }

    /// The wait after the `failures`-th failed attempt (1 for the first).
    pub fn gap(&self, failures: u32) -> Duration {
        let (Ok(first), Ok(longest)) = (self.first_gap.to_std(), self.longest_gap.to_std()) else {
            return self.longest_gap;
        };
        let gap = capstan_runtime::backoff::doubling(first, failures, longest);
        Duration::from_std(gap).unwrap_or(self.longest_gap)
    }

    /// After the `failures`-th failed attempt, at `now`, of a delivery first attempted at
    /// `first_attempt_at`: when to try again, or give up when that would fall past the day.
    pub fn after_failure(
        &self,
        first_attempt_at: DateTime<Utc>,
        failures: u32,
        now: DateTime<Utc>,
    ) -> Next {
        let next = now + self.gap(failures);
        if next - first_attempt_at > self.give_up_after {
            Next::GiveUp
        } else {
            Next::RetryAt(next)
        }
    }
}

/// Whether a webhook URL's scheme may be used: `https`, or `http` when private targets are
/// allowed (`CAPSTAN__OUTBOUND__ALLOW_PRIVATE`, or the older
/// `CAPSTAN__INCIDENTS__WEBHOOK_ALLOW_PRIVATE`).
pub fn scheme_allowed(scheme: &str, allow_private: bool) -> Result<(), InvalidInput> {
    match scheme {
        "https" => Ok(()),
        "http" if allow_private => Ok(()),
        "http" => Err(InvalidInput::new(
            "url",
            "must use https (plain http is allowed only with CAPSTAN__OUTBOUND__ALLOW_PRIVATE)",
        )),
        _ => Err(InvalidInput::new("url", "must be an https URL")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::domain::record::tests::at;

    #[test]
    fn the_gap_doubles_from_ten_seconds_to_at_most_two_hours() {
        let backoff = Backoff::default();
        let gaps: Vec<i64> = (1..=4).map(|n| backoff.gap(n).num_seconds()).collect();
        assert_eq!(gaps, [10, 20, 40, 80]);
        assert_eq!(backoff.gap(30), LONGEST_RETRY_GAP);
        assert_eq!(backoff.gap(u32::MAX), LONGEST_RETRY_GAP);
    }

    #[test]
    fn a_delivery_that_keeps_failing_is_retried_until_a_day_after_its_first_attempt_then_given_up()
    {
        let backoff = Backoff::default();
        let first = at(0);
        let mut now = first;
        let mut failures = 0;
        loop {
            failures += 1;
            match backoff.after_failure(first, failures, now) {
                Next::RetryAt(next) => {
                    assert!(next > now);
                    now = next;
                }
                Next::GiveUp => break,
            }
        }
        assert!(now - first <= GIVE_UP_AFTER, "no attempt after the day");
        assert!(
            now - first > GIVE_UP_AFTER - LONGEST_RETRY_GAP,
            "retried through the day"
        );
        // ten doubling gaps (2 h 50 min), then every two hours: 21 attempts in the day
        assert_eq!(failures, 21);
    }

    #[test]
    fn a_schedule_with_a_zero_or_inverted_gap_is_refused() {
        let second = Duration::seconds(1);
        assert!(Backoff::new(Duration::zero(), second, second).is_err());
        assert!(Backoff::new(second * 2, second, second).is_err());
        assert!(Backoff::new(second, second, Duration::zero()).is_err());
        assert!(Backoff::new(Duration::milliseconds(100), second, second).is_ok());
    }

    #[test]
    fn plain_http_is_allowed_only_with_the_private_switch() {
        assert!(scheme_allowed("https", false).is_ok());
        assert_eq!(scheme_allowed("http", false).unwrap_err().field, "url");
        assert!(scheme_allowed("http", true).is_ok());
        assert!(scheme_allowed("ftp", true).is_err());
    }
}
