//! Request meters (PROTOCOL.md "Limits") on `governor`, and the network a source address is
//! counted as. The clock is passed in, so the rules are tested without waiting.

use governor::clock::{Clock, MonotonicClock, Reference};
use governor::middleware::NoOpMiddleware;
use governor::nanos::Nanos;
use governor::state::StateStore;
use governor::{Quota, RateLimiter};
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, PoisonError};
use std::{collections::HashMap, hash::Hash, net::IpAddr, time::Duration};

/// The network a request from `address` is counted against: an IPv4 address alone, an IPv6
/// address by its /64 (`2001:db8:1:2::/64`; one subscriber is routinely given a whole /64, so
/// counting single IPv6 addresses would let one machine count as billions). An IPv4 address
/// written as IPv6 (`::ffff:192.0.2.1`) is the IPv4 address. Anything that is not an address
/// (the gateway could not tell) is counted as itself.
pub fn source_network(address: &str) -> String {
    match address.trim().parse::<IpAddr>().map(|ip| ip.to_canonical()) {
        Ok(IpAddr::V4(v4)) => v4.to_string(),
        Ok(IpAddr::V6(v6)) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            format!("{}/64", std::net::Ipv6Addr::from(prefix))
        }
        Err(_) => address.to_string(),
    }
}

/// Request meters, one per key: `per_minute` requests, replenished evenly over the minute, all
/// of them available to start with. The arithmetic is `governor`'s (GCRA, which behaves as a
/// token bucket); what is ours is a look that counts nothing ([`Meters::check`]), and pruning
/// at the moment a key's meter is full again. The clock is passed in, so the rules are tested
/// with governor's `FakeRelativeClock` without waiting.
pub struct Meters<K: Hash + Eq + Clone, C: Clock = MonotonicClock> {
    limiter: RateLimiter<Asked<K>, Arrivals<K>, C, NoOpMiddleware<C::Instant>>,
    /// The limiter's map, for pruning and counting.
    arrivals: Arrivals<K>,
    clock: C,
    /// The clock when the meters were made: governor's times are counted from then (read just
    /// before the limiter reads its own, so at most a few nanoseconds early).
    start: C::Instant,
}

/// A key as the meters are asked about it: to count a request, or only to look.
#[derive(Clone, PartialEq, Eq, Hash)]
struct Asked<K> {
    key: K,
    counts: bool,
}

/// Governor's state per key (its "theoretical arrival time", counted from the meters'
/// start), written only when a request is counted: a look runs the same decision on the stored
/// state and leaves it as it was.
#[derive(Clone)]
struct Arrivals<K> {
    arrivals: Arc<Mutex<HashMap<K, Nanos>>>,
}

impl<K> Arrivals<K> {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<K, Nanos>> {
        // A panic elsewhere while holding the lock leaves a map that is still whole.
        self.arrivals.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl<K: Hash + Eq + Clone> StateStore for Arrivals<K> {
    type Key = Asked<K>;

    fn measure_and_replace<T, F, E>(&self, asked: &Asked<K>, decide: F) -> Result<T, E>
    where
        F: Fn(Option<Nanos>) -> Result<(T, Nanos), E>,
    {
        let mut arrivals = self.map();
        let (answer, next) = decide(arrivals.get(&asked.key).copied())?;
        if asked.counts {
            arrivals.insert(asked.key.clone(), next);
        }
        Ok(answer)
    }
}

impl<K: Hash + Eq + Clone> Meters<K> {
    /// Meters on the monotonic clock. `per_minute` 0, which the settings refuse, counts as 1.
    pub fn new(per_minute: u32) -> Meters<K> {
        Meters::with_clock(per_minute, MonotonicClock)
    }
}

impl<K: Hash + Eq + Clone, C: Clock + Clone> Meters<K, C> {
    pub fn with_clock(per_minute: u32, clock: C) -> Meters<K, C> {
        let quota = Quota::per_minute(NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN));
        let arrivals = Arrivals {
            arrivals: Arc::new(Mutex::new(HashMap::new())),
        };
        let start = clock.now();
        Meters {
            limiter: RateLimiter::new(quota, arrivals.clone(), clock.clone()),
            arrivals,
            clock,
            start,
        }
    }

    fn ask(&self, key: &K, counts: bool) -> Result<(), Duration> {
        let asked = Asked {
            key: key.clone(),
            counts,
        };
        self.limiter.check_key(&asked).map_err(|refused| {
            refused
                .wait_time_from(self.clock.now())
                .max(Duration::from_secs(1))
        })
    }

    /// Whether `key` may make a request now, without counting it; when not, how long until it
    /// may (the `Retry-After`, at least a second).
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.ask(key, false)
    }

    /// Counts one request of `key` when it may make one now; when not, counts nothing and
    /// answers as [`Meters::check`] does.
    pub fn take(&self, key: &K) -> Result<(), Duration> {
        self.ask(key, true)
    }

    /// Forgets meters that are full again (the next arrival is not after now: as good as never
    /// counted), so the map does not grow forever. Governor's own `retain_recent` keeps a key
    /// one interval longer than that.
    pub fn prune(&self) {
        let now = self.clock.now().duration_since(self.start);
        let mut arrivals = self.arrivals.map();
        arrivals.retain(|_, next| *next > now);
        arrivals.shrink_to_fit();
    }

    /// How many keys have a meter that is not full (or was not when last pruned).
    pub fn tracked(&self) -> usize {
        self.arrivals.map().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use governor::clock::FakeRelativeClock;

    #[test]
    fn an_ipv6_source_counts_as_its_64_and_an_ipv4_source_as_itself() {
        assert_eq!(source_network("2001:db8::1"), "2001:db8::/64");
        assert_eq!(source_network("2001:db8::7d"), "2001:db8::/64");
        assert_eq!(
            source_network("2001:db8:0:0:ffff:ffff:ffff:ffff"),
            "2001:db8::/64"
        );
        assert_eq!(source_network("2001:db8:0:1::1"), "2001:db8:0:1::/64");
        assert_eq!(source_network("203.0.113.7"), "203.0.113.7");
        assert_eq!(source_network("203.0.113.8"), "203.0.113.8");
        assert_eq!(source_network("::ffff:203.0.113.7"), "203.0.113.7");
        assert_eq!(source_network("unknown"), "unknown");
    }

    #[test]
    fn a_bucket_allows_its_quota_then_asks_the_caller_to_wait() {
        let clock = FakeRelativeClock::default();
        let buckets = Meters::with_clock(120, clock.clone());
        for _ in 0..120 {
            assert!(buckets.check(&"10.0.0.1").is_ok());
            assert!(buckets.take(&"10.0.0.1").is_ok());
        }
        let wait = buckets.check(&"10.0.0.1").unwrap_err();
        assert_eq!(wait, Duration::from_secs(1), "two tokens a second refill");
        assert_eq!(
            buckets.take(&"10.0.0.1"),
            Err(wait),
            "a refused take counts nothing"
        );
        clock.advance(Duration::from_millis(600));
        assert!(buckets.check(&"10.0.0.1").is_ok());
    }

    #[test]
    fn one_key_running_dry_leaves_the_others_alone() {
        let buckets = Meters::with_clock(2, FakeRelativeClock::default());
        assert!(buckets.take(&"flood").is_ok());
        assert!(buckets.take(&"flood").is_ok());
        assert!(buckets.check(&"flood").is_err());
        assert!(buckets.check(&"node-7").is_ok());
    }

    #[test]
    fn checking_does_not_count_and_full_buckets_are_pruned() {
        let clock = FakeRelativeClock::default();
        let buckets = Meters::with_clock(1, clock.clone());
        for _ in 0..10 {
            assert!(buckets.check(&1).is_ok());
        }
        assert_eq!(buckets.tracked(), 0, "a look keeps no meter");
        assert!(buckets.take(&1).is_ok());
        assert_eq!(buckets.tracked(), 1);
        assert!(buckets.check(&1).is_err(), "the one request was counted");
        clock.advance(Duration::from_secs(59));
        buckets.prune();
        assert_eq!(buckets.tracked(), 1, "not full yet");
        clock.advance(Duration::from_secs(2));
        buckets.prune();
        assert_eq!(buckets.tracked(), 0);
    }
}
