//! Token buckets for request metering (PROTOCOL.md "Limits"), and the network a source
//! address is counted as. Time is passed in, so the rules are tested without waiting.

use std::{collections::HashMap, hash::Hash, net::IpAddr, time::Duration};
use tokio::time::Instant;

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

/// One bucket per key: `per_minute` tokens, refilled continuously, full to start with.
pub struct Buckets<K> {
    per_minute: f64,
    buckets: HashMap<K, (f64, Instant)>,
}

impl<K: Hash + Eq + Clone> Buckets<K> {
    pub fn new(per_minute: u32) -> Buckets<K> {
        Buckets {
            per_minute: f64::from(per_minute),
            buckets: HashMap::new(),
        }
    }

    fn level(&self, key: &K, now: Instant) -> f64 {
        match self.buckets.get(key) {
            None => self.per_minute,
            Some((tokens, at)) => {
                let refill =
                    now.saturating_duration_since(*at).as_secs_f64() * self.per_minute / 60.0;
                (tokens + refill).min(self.per_minute)
            }
        }
    }

    /// Whether `key` may make a request now, without counting it; when not, how long until it
    /// may (the `Retry-After`).
    pub fn check(&self, key: &K, now: Instant) -> Result<(), Duration> {
        let level = self.level(key, now);
        if level >= 1.0 {
            return Ok(());
        }
        let seconds = (1.0 - level) * 60.0 / self.per_minute;
        Err(Duration::from_secs_f64(seconds.max(0.0)).max(Duration::from_secs(1)))
    }

    /// Counts one request of `key`.
    pub fn take(&mut self, key: &K, now: Instant) {
        let level = self.level(key, now);
        self.buckets
            .insert(key.clone(), ((level - 1.0).max(0.0), now));
    }

    /// Forgets buckets that have refilled completely, so the map does not grow forever.
    pub fn prune(&mut self, now: Instant) {
        let per_minute = self.per_minute;
        self.buckets.retain(|_, (tokens, at)| {
            *tokens + now.saturating_duration_since(*at).as_secs_f64() * per_minute / 60.0
                < per_minute
        });
    }

    /// How many keys have a bucket that is not full.
    pub fn tracked(&self) -> usize {
        self.buckets.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let now = Instant::now();
        let mut buckets = Buckets::new(120);
        for _ in 0..120 {
            assert!(buckets.check(&"10.0.0.1", now).is_ok());
            buckets.take(&"10.0.0.1", now);
        }
        let wait = buckets.check(&"10.0.0.1", now).unwrap_err();
        assert_eq!(wait, Duration::from_secs(1), "two tokens a second refill");
        assert!(buckets
            .check(&"10.0.0.1", now + Duration::from_millis(600))
            .is_ok());
    }

    #[test]
    fn one_key_running_dry_leaves_the_others_alone() {
        let now = Instant::now();
        let mut buckets = Buckets::new(2);
        buckets.take(&"flood", now);
        buckets.take(&"flood", now);
        assert!(buckets.check(&"flood", now).is_err());
        assert!(buckets.check(&"node-7", now).is_ok());
    }

    #[test]
    fn checking_does_not_count_and_full_buckets_are_pruned() {
        let now = Instant::now();
        let mut buckets = Buckets::new(1);
        for _ in 0..10 {
            assert!(buckets.check(&1, now).is_ok());
        }
        buckets.take(&1, now);
        assert_eq!(buckets.tracked(), 1);
        buckets.prune(now + Duration::from_secs(61));
        assert_eq!(buckets.tracked(), 0);
    }
}
