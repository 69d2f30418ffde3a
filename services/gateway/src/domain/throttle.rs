//! The sign-in throttle. A hard stop per (name, address) and per address: an operator name that
//! failed `account_failures` times from one address, or an address that failed
//! `address_failures` times, within `window` is refused from there until the oldest of those
//! failures leaves the window. Per name alone only a growing delay ([`name_delay`]): a
//! stranger failing under an operator's name slows every try of that name down, but cannot
//! stop the operator signing in from their own address. Counting per address stops one address
//! trying many names; the delay stops many addresses guessing one name quickly.

use chrono::{DateTime, Duration, Utc};

/// The limits, from the gateway's settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Failures of one name from one address before that pair is stopped; also how many
    /// failures of a name from anywhere pass before its tries are delayed.
    pub account_failures: u32,
    pub address_failures: u32,
    pub window: Duration,
}

/// The first delay of a name that failed `account_failures` times from anywhere; it doubles
/// with each further failure up to [`NAME_DELAY_MAX`].
pub const NAME_DELAY_FIRST: std::time::Duration = std::time::Duration::from_millis(250);
/// The longest a try of a name under attack waits: long enough that guessing is slow, short
/// enough that the operator still signs in.
pub const NAME_DELAY_MAX: std::time::Duration = std::time::Duration::from_secs(5);

/// How long a try of a name that failed `failures` times within the window (from any address)
/// waits before its password is checked.
pub fn name_delay(failures: i64, limits: Limits) -> std::time::Duration {
    let free = i64::from(limits.account_failures.max(1));
    if failures < free {
        return std::time::Duration::ZERO;
    }
    let nth = u32::try_from(failures - free + 1).unwrap_or(u32::MAX);
    capstan_runtime::backoff::doubling(NAME_DELAY_FIRST, nth, NAME_DELAY_MAX)
}

impl Default for Limits {
    /// 5 failures per operator name and address, and 20 per address, within 15 minutes.
    fn default() -> Limits {
        Limits {
            account_failures: 5,
            address_failures: 20,
            window: Duration::minutes(15),
        }
    }
}

/// Whether a sign-in may be tried now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Allowed,
    /// Too many failures for this operator name from this address; try again after
    /// `retry_after`.
    AccountThrottled {
        retry_after: Duration,
    },
    /// Too many failures from this address.
    AddressThrottled {
        retry_after: Duration,
    },
}

impl Verdict {
    /// The sentence a person reads; the same whichever name was tried, so it tells nobody
    /// whether the name exists.
    pub fn sentence(self) -> Option<String> {
        let (whom, retry_after) = match self {
            Verdict::Allowed => return None,
            Verdict::AccountThrottled { retry_after } => {
                ("for this operator name from your address", retry_after)
            }
            Verdict::AddressThrottled { retry_after } => ("from your address", retry_after),
        };
        let minutes = (retry_after.num_seconds() + 59) / 60;
        let minutes = minutes.max(1);
        let unit = if minutes == 1 { "minute" } else { "minutes" };
        Some(format!(
            "Too many failed sign-ins {whom}. Wait {minutes} {unit} and try again."
        ))
    }

    /// Whole seconds until a sign-in may be tried again, for `Retry-After`.
    pub fn retry_after_secs(self) -> Option<u64> {
        match self {
            Verdict::Allowed => None,
            Verdict::AccountThrottled { retry_after }
            | Verdict::AddressThrottled { retry_after } => {
                Some(retry_after.num_seconds().max(1) as u64)
            }
        }
    }
}

/// Decides from the failure times of the operator name from this address and of the address
/// (any order; only those within the window count).
pub fn verdict(
    now: DateTime<Utc>,
    account_failures: &[DateTime<Utc>],
    address_failures: &[DateTime<Utc>],
    limits: Limits,
) -> Verdict {
    let account = throttled_until(
        now,
        account_failures,
        limits.account_failures,
        limits.window,
    );
    let address = throttled_until(
        now,
        address_failures,
        limits.address_failures,
        limits.window,
    );
    match (account, address) {
        (Some(account), Some(address)) if address > account => Verdict::AddressThrottled {
            retry_after: address - now,
        },
        (Some(account), _) => Verdict::AccountThrottled {
            retry_after: account - now,
        },
        (None, Some(address)) => Verdict::AddressThrottled {
            retry_after: address - now,
        },
        (None, None) => Verdict::Allowed,
    }
}

/// When `failures` within the window stop reaching `limit`, if they reach it now.
fn throttled_until(
    now: DateTime<Utc>,
    failures: &[DateTime<Utc>],
    limit: u32,
    window: Duration,
) -> Option<DateTime<Utc>> {
    let since = now - window;
    let mut recent: Vec<DateTime<Utc>> = failures
        .iter()
        .copied()
        .filter(|at| *at > since && *at <= now)
        .collect();
    let limit = limit.max(1) as usize;
    if recent.len() < limit {
        return None;
    }
    // Newest first: a sign-in is allowed again once fewer than `limit` remain in the window,
    // that is when the limit-th newest failure leaves it.
    recent.sort_unstable_by(|a, b| b.cmp(a));
    Some(recent[limit - 1] + window)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(now: DateTime<Utc>, minutes_ago: i64) -> DateTime<Utc> {
        now - Duration::minutes(minutes_ago)
    }

    #[test]
    fn four_failures_of_one_name_still_allow_a_fifth_try_and_five_throttle_it() {
        let now = Utc::now();
        let four: Vec<_> = (1..=4).map(|minutes| at(now, minutes)).collect();
        assert_eq!(
            verdict(now, &four, &four, Limits::default()),
            Verdict::Allowed
        );
        let five: Vec<_> = (1..=5).map(|minutes| at(now, minutes)).collect();
        assert_eq!(
            verdict(now, &five, &[], Limits::default()),
            Verdict::AccountThrottled {
                // The fifth newest failure was 5 minutes ago: 10 more minutes.
                retry_after: Duration::minutes(10)
            }
        );
    }

    #[test]
    fn failures_older_than_the_window_do_not_count() {
        let now = Utc::now();
        let old: Vec<_> = (15..=40).map(|minutes| at(now, minutes)).collect();
        assert_eq!(
            verdict(now, &old, &old, Limits::default()),
            Verdict::Allowed
        );
    }

    #[test]
    fn twenty_failures_from_one_address_throttle_it_whatever_the_names() {
        let now = Utc::now();
        let nineteen: Vec<_> = (0..19)
            .map(|seconds| now - Duration::seconds(seconds * 30))
            .collect();
        assert_eq!(
            verdict(now, &[], &nineteen, Limits::default()),
            Verdict::Allowed
        );
        let mut twenty = nineteen.clone();
        twenty.push(at(now, 12));
        let throttled = verdict(now, &[], &twenty, Limits::default());
        assert_eq!(
            throttled,
            Verdict::AddressThrottled {
                retry_after: Duration::minutes(3)
            }
        );
        assert_eq!(throttled.retry_after_secs(), Some(180));
    }

    #[test]
    fn when_both_are_throttled_the_later_release_is_the_answer() {
        let now = Utc::now();
        let limits = Limits {
            account_failures: 1,
            address_failures: 1,
            window: Duration::minutes(15),
        };
        assert_eq!(
            verdict(now, &[at(now, 10)], &[at(now, 1)], limits),
            Verdict::AddressThrottled {
                retry_after: Duration::minutes(14)
            }
        );
        assert_eq!(
            verdict(now, &[at(now, 1)], &[at(now, 10)], limits),
            Verdict::AccountThrottled {
                retry_after: Duration::minutes(14)
            }
        );
    }

    #[test]
    fn a_name_failing_from_anywhere_is_only_delayed_growing_to_a_bound() {
        let limits = Limits::default();
        assert_eq!(name_delay(0, limits), std::time::Duration::ZERO);
        assert_eq!(name_delay(4, limits), std::time::Duration::ZERO);
        assert_eq!(name_delay(5, limits), NAME_DELAY_FIRST);
        assert_eq!(name_delay(6, limits), NAME_DELAY_FIRST * 2);
        assert_eq!(name_delay(7, limits), NAME_DELAY_FIRST * 4);
        assert_eq!(name_delay(50, limits), NAME_DELAY_MAX);
        assert_eq!(name_delay(i64::MAX, limits), NAME_DELAY_MAX);
        // A delay is never a refusal: whatever strangers did, the verdict for the operator's
        // own address reads only that address's failures.
        let now = Utc::now();
        assert_eq!(verdict(now, &[], &[], limits), Verdict::Allowed);
    }

    #[test]
    fn the_sentence_says_what_to_do_and_never_whether_the_name_exists() {
        let sentence = Verdict::AccountThrottled {
            retry_after: Duration::seconds(61),
        }
        .sentence()
        .unwrap();
        assert_eq!(
            sentence,
            "Too many failed sign-ins for this operator name from your address. Wait 2 minutes \
             and try again."
        );
        assert_eq!(Verdict::Allowed.sentence(), None);
        assert!(Verdict::AddressThrottled {
            retry_after: Duration::seconds(5)
        }
        .sentence()
        .unwrap()
        .contains("Wait 1 minute and"));
    }
}
