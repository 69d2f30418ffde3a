//! The monitor's section of the configuration (`[monitor]`, `CAPSTAN__MONITOR__*`): its uptime
//! and certificate checks and its status pass.

use capstan_settings::{all_within, Problem, Section};
use serde::Deserialize;
use std::time::Duration;

#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct MonitorSettings {
    /// The shortest interval a node's uptime check may be set to (the default is 60 s).
    pub min_interval_secs: u32,
    /// The DNS server the checks resolve names with (`ip` or `ip:port`, port 53 when absent);
    /// the system's resolver when unset.
    pub resolver: Option<String>,
    /// The port the origin's served certificate is read on.
    pub tls_port: u16,
    /// Seconds a check may take before it fails as a stall.
    pub timeout_secs: u32,
    /// Seconds between two reads of a node's served certificate.
    pub cert_interval_secs: u32,
    /// A certificate expiring within this many days is a problem (MO-09's reason 2).
    pub cert_warn_days: u32,
    /// Milliseconds between two looks for checks that are due.
    pub tick_ms: u64,
    /// Checks run at once, at most.
    pub concurrency: u32,
    /// Seconds between two status passes, each asking stale nodes for `check_status` and
    /// `host_report` (MO-05, MO-06).
    pub status_pass_secs: u32,
    /// The status window: a node with no such job completed (or queued, running, or asked for)
    /// inside it is asked for one (`STATUS_REFRESH_SECONDS`).
    pub status_refresh_secs: u32,
    /// host_report's window while a node's data root is being encrypted, decrypted or re-keyed
    /// (`DATA_ROOT_RUN_REFRESH_SECONDS`, MO-06).
    pub data_root_refresh_secs: u32,
    /// host_report's window after a reboot was asked, until a report carries a new boot id
    /// (`REBOOT_REFRESH_SECONDS`, MO-06).
    pub reboot_refresh_secs: u32,
}

impl Default for MonitorSettings {
    fn default() -> MonitorSettings {
        MonitorSettings {
            min_interval_secs: 30,
            resolver: None,
            tls_port: 443,
            timeout_secs: 10,
            cert_interval_secs: 3600,
            cert_warn_days: 21,
            tick_ms: 1000,
            concurrency: 256,
            status_pass_secs: 900,
            status_refresh_secs: 3600,
            data_root_refresh_secs: 300,
            reboot_refresh_secs: 120,
        }
    }
}

impl MonitorSettings {
    pub fn tick(&self) -> Duration {
        Duration::from_millis(self.tick_ms)
    }
    pub fn timeout(&self) -> Duration {
        Duration::from_secs(u64::from(self.timeout_secs))
    }

    fn bound_problems(&self) -> Vec<Problem> {
        let day = 86_400;
        all_within(&[
            (
                "monitor.min_interval_secs",
                self.min_interval_secs.into(),
                1,
                3600,
            ),
            ("monitor.timeout_secs", self.timeout_secs.into(), 1, 60),
            (
                "monitor.cert_interval_secs",
                self.cert_interval_secs.into(),
                1,
                day,
            ),
            ("monitor.cert_warn_days", self.cert_warn_days.into(), 1, 365),
            ("monitor.tick_ms", self.tick_ms, 10, 60_000),
            ("monitor.concurrency", self.concurrency.into(), 1, 10_000),
            ("monitor.tls_port", self.tls_port.into(), 1, 65_535),
            (
                "monitor.status_pass_secs",
                self.status_pass_secs.into(),
                1,
                day,
            ),
            (
                "monitor.status_refresh_secs",
                self.status_refresh_secs.into(),
                1,
                day,
            ),
            (
                "monitor.data_root_refresh_secs",
                self.data_root_refresh_secs.into(),
                1,
                day,
            ),
            (
                "monitor.reboot_refresh_secs",
                self.reboot_refresh_secs.into(),
                1,
                day,
            ),
        ])
    }
}

impl Section for MonitorSettings {
    const KEY: &'static str = "monitor";

    fn validate(&self) -> Vec<Problem> {
        let mut problems = self.bound_problems();
        if let Some(resolver) = &self.resolver {
            if resolver.parse::<std::net::IpAddr>().is_err()
                && resolver.parse::<std::net::SocketAddr>().is_err()
            {
                problems.push(Problem::new(
                    "monitor.resolver",
                    "must be an IP address, with or without a port",
                ));
            }
        }
        problems
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(pairs: &[(&str, &str)]) -> Result<MonitorSettings, String> {
        let environment = pairs
            .iter()
            .map(|(key, value)| (key.to_string(), value.to_string()));
        capstan_settings::load_from::<MonitorSettings>(None, environment)
            .map(|(_, own)| own)
            .map_err(|error| error.to_string())
    }

    #[test]
    fn with_nothing_set_the_checks_run_at_the_documented_pace() {
        let monitor = load(&[]).unwrap();
        assert_eq!(monitor.tick(), Duration::from_secs(1));
        assert_eq!(monitor.timeout(), Duration::from_secs(10));
        assert_eq!((monitor.min_interval_secs, monitor.tls_port), (30, 443));
        assert_eq!((monitor.cert_warn_days, monitor.concurrency), (21, 256));
        assert_eq!(monitor.resolver, None);
    }

    #[test]
    fn every_bad_monitor_key_is_named_at_once() {
        let error = load(&[
            ("CAPSTAN__MONITOR__TICK_MS", "1"),
            ("CAPSTAN__MONITOR__RESOLVER", "dns.example"),
            ("CAPSTAN__MONITOR__TIMEOUT_SECS", "0"),
        ])
        .unwrap_err();
        for named in [
            "monitor.tick_ms",
            "CAPSTAN__MONITOR__TICK_MS",
            "monitor.resolver",
            "monitor.timeout_secs",
        ] {
            assert!(error.contains(named), "{error}");
        }
    }

    #[test]
    fn a_resolver_may_carry_a_port() {
        let monitor = load(&[("CAPSTAN__MONITOR__RESOLVER", "127.0.0.1:5353")]).unwrap();
        assert_eq!(monitor.resolver.as_deref(), Some("127.0.0.1:5353"));
    }
}
