//! Reading what the package system says about patching, for `host_report`'s security facts
//! (MO-16): upgrades waiting and which of them come from a security origin (`apt-get -s
//! upgrade`), packages a package run left half done (`/var/lib/dpkg/status`), what still runs
//! replaced code (`needrestart -b`), and when automatic updates last ran (the
//! unattended-upgrades log). Pure text in, facts out; the word reads the sources.

use chrono::{DateTime, NaiveDateTime, Utc};

/// The most package or service names one fact lists.
pub const MAX_NAMES: usize = 500;

/// The upgrades a simulated `apt-get upgrade` would install.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Upgrades {
    /// Every package it would upgrade.
    pub pending: usize,
    /// Those whose new version comes from a security origin (`Debian-Security:…`,
    /// `…-security`), by name.
    pub security: Vec<String>,
}

/// Reads `apt-get -s upgrade`'s `Inst` lines: `Inst name [old] (new Origin:release/suite
/// [arch])`; an upgrade is a security fix when one of its origins names security.
pub fn upgrades(simulated: &str) -> Upgrades {
    let mut found = Upgrades::default();
    for line in simulated.lines() {
        let Some(rest) = line.strip_prefix("Inst ") else {
            continue;
        };
        let Some(name) = rest.split_whitespace().next() else {
            continue;
        };
        found.pending += 1;
        let origins = rest.split_once('(').map_or("", |(_, origins)| origins);
        if origins.to_ascii_lowercase().contains("security") && found.security.len() < MAX_NAMES {
            found.security.push(name.to_string());
        }
    }
    found
}

/// The state of apt and dpkg a simulated upgrade depends on: each source's path with its
/// modification time (nanoseconds since the epoch), or `-` when it cannot be read. apt's
/// package lists are replaced by rename on every `apt-get update`, which changes the lists
/// directory's time; every package run rewrites dpkg's status file.
pub fn apt_state_key(sources: &[(&str, Option<i128>)]) -> String {
    sources
        .iter()
        .map(|(path, modified)| match modified {
            Some(nanos) => format!("{path}@{nanos}"),
            None => format!("{path}@-"),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The last simulated upgrade, kept with the apt and dpkg state it was made in, so an
/// unchanged machine answers `host_report` without running `apt-get -s upgrade` (about five
/// seconds of CPU) again.
#[derive(Debug, Clone, Default)]
pub struct UpgradeCache {
    kept: Option<(String, Upgrades, DateTime<Utc>)>,
}

impl UpgradeCache {
    /// An empty cache.
    pub const fn new() -> UpgradeCache {
        UpgradeCache { kept: None }
    }

    /// The answer kept for `key` and when it was simulated; none when the state changed.
    pub fn answer(&self, key: &str) -> Option<(&Upgrades, DateTime<Utc>)> {
        self.kept
            .as_ref()
            .filter(|(kept_key, _, _)| kept_key == key)
            .map(|(_, upgrades, at)| (upgrades, *at))
    }

    /// Keeps `upgrades`, simulated at `at` in the state `key` (read before the simulation,
    /// so a change during it makes the next call simulate again).
    pub fn keep(&mut self, key: String, upgrades: Upgrades, at: DateTime<Utc>) {
        self.kept = Some((key, upgrades, at));
    }
}

/// The packages `/var/lib/dpkg/status` shows neither installed nor removed: a package run left
/// them half done (unpacked, half-configured, half-installed, awaiting triggers).
pub fn unfinished(status: &str) -> Vec<String> {
    let mut names = Vec::new();
    for stanza in status.split("\n\n") {
        let mut name = None;
        let mut state = None;
        for line in stanza.lines() {
            if let Some(value) = line.strip_prefix("Package: ") {
                name = Some(value.trim());
            } else if let Some(value) = line.strip_prefix("Status: ") {
                // "want flag status"
                state = value.split_whitespace().nth(2);
            }
        }
        if let (Some(name), Some(state)) = (name, state) {
            let settled = matches!(state, "installed" | "not-installed" | "config-files");
            if !settled && names.len() < MAX_NAMES {
                names.push(name.to_string());
            }
        }
    }
    names
}

/// What `needrestart -b` (batch mode) reports.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Restarts {
    /// Services running replaced code (`NEEDRESTART-SVC:`), without the `.service` suffix.
    pub services: Vec<String>,
    /// The kernel: `NEEDRESTART-KSTA:` 2 or 3 means a newer kernel is installed than runs;
    /// `None` when it did not say.
    pub kernel_pending: Option<bool>,
}

pub fn restarts(batch: &str) -> Restarts {
    let mut found = Restarts::default();
    for line in batch.lines() {
        if let Some(service) = line.strip_prefix("NEEDRESTART-SVC:") {
            let service = service.trim();
            let service = service.strip_suffix(".service").unwrap_or(service);
            if !service.is_empty() && found.services.len() < MAX_NAMES {
                found.services.push(service.to_string());
            }
        } else if let Some(status) = line.strip_prefix("NEEDRESTART-KSTA:") {
            found.kernel_pending = match status.trim() {
                "1" => Some(false),
                "2" | "3" => Some(true),
                _ => None,
            };
        }
    }
    found
}

/// The time of the last line of the unattended-upgrades log (`2026-12-01 06:25:14,123 INFO …`),
/// read as UTC (the log writes the machine's local time; the machines run in UTC).
pub fn last_unattended_run(log: &str) -> Option<DateTime<Utc>> {
    log.lines().rev().find_map(|line| {
        let stamp = line.get(..19)?;
        NaiveDateTime::parse_from_str(stamp, "%Y-%m-%d %H:%M:%S")
            .ok()
            .map(|moment| moment.and_utc())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mo_16_security_upgrades_are_those_from_a_security_origin() {
        let simulated = "NOTE: This is only a simulation!
Reading package lists...
Inst libssl3 [3.0.15-1~deb12u1] (3.0.17-1~deb12u2 Debian-Security:12/oldstable-security [amd64])
Inst tzdata [2024a-0+deb12u1] (2025b-0+deb12u1 Debian:12.11/oldstable [all])
Inst python3-jwt [2.6.0-1] (2.6.0-1+deb12u1 Debian:12.15/oldstable, Debian-Security:12/oldstable-security [all])
Inst php8.2-fpm [8.2.7-1] (8.2.29-1 focal-security [amd64])
Conf libssl3 (3.0.17-1~deb12u2 Debian-Security:12/oldstable-security [amd64])
";
        let found = upgrades(simulated);
        assert_eq!(found.pending, 4);
        assert_eq!(found.security, ["libssl3", "python3-jwt", "php8.2-fpm"]);
        assert_eq!(
            upgrades("0 upgraded, 0 newly installed"),
            Upgrades::default()
        );
    }

    #[test]
    fn mo_16_packages_left_half_done_are_named() {
        let status = "Package: apache2
Status: install ok installed
Version: 2.4.62

Package: php8.2-fpm
Status: install ok half-configured
Version: 8.2.29

Package: old-thing
Status: deinstall ok config-files

Package: libssl3
Status: install reinstreq unpacked

Package: gone
Status: purge ok not-installed
";
        assert_eq!(unfinished(status), ["php8.2-fpm", "libssl3"]);
        assert!(unfinished("").is_empty());
        assert!(unfinished("garbage\nwithout: stanzas").is_empty());
    }

    #[test]
    fn mo_16_needrestart_names_services_and_the_kernel() {
        let batch = "NEEDRESTART-VER: 3.6
NEEDRESTART-KCUR: 6.1.0-18-amd64
NEEDRESTART-KEXP: 6.1.0-21-amd64
NEEDRESTART-KSTA: 3
NEEDRESTART-SVC: apache2.service
NEEDRESTART-SVC: php8.2-fpm.service
";
        let found = restarts(batch);
        assert_eq!(found.services, ["apache2", "php8.2-fpm"]);
        assert_eq!(found.kernel_pending, Some(true));
        assert_eq!(
            restarts("NEEDRESTART-KSTA: 1\n").kernel_pending,
            Some(false)
        );
        assert_eq!(restarts("").kernel_pending, None);
    }

    #[test]
    fn mo_16_the_last_automatic_update_run_is_the_logs_last_stamp() {
        let log = "2026-11-30 06:25:14,123 INFO Starting unattended upgrades script
2026-11-30 06:25:20,001 INFO No packages found that can be upgraded unattended
  a continuation line
2026-12-01 06:31:02,456 INFO Packages that will be upgraded: libssl3
traceback without a stamp
";
        assert_eq!(
            last_unattended_run(log).unwrap().to_rfc3339(),
            "2026-12-01T06:31:02+00:00"
        );
        assert_eq!(last_unattended_run(""), None);
        assert_eq!(last_unattended_run("é€ short"), None);
    }

    #[test]
    fn mo_16_an_unchanged_apt_and_dpkg_state_answers_from_the_cache_and_a_change_does_not() {
        let key = |lists: i128, status: Option<i128>| {
            apt_state_key(&[
                ("/var/lib/apt/lists", Some(lists)),
                ("/var/lib/dpkg/status", status),
            ])
        };
        let mut cache = UpgradeCache::default();
        assert!(cache.answer(&key(1, Some(2))).is_none());
        let found = Upgrades {
            pending: 3,
            security: vec!["libssl3".into()],
        };
        let at = DateTime::from_timestamp(1_800_000_000, 0).unwrap();
        cache.keep(key(1, Some(2)), found.clone(), at);
        assert_eq!(cache.answer(&key(1, Some(2))), Some((&found, at)));
        // an apt-get update (the lists), a package run (dpkg's status) or a source that can no
        // longer be read is another state
        assert!(cache.answer(&key(9, Some(2))).is_none());
        assert!(cache.answer(&key(1, Some(3))).is_none());
        assert!(cache.answer(&key(1, None)).is_none());
    }
}
