//! The fleet security view (MO-16, MO-17): one row per machine from its latest `host_report`
//! (OS, security fixes waiting, what runs replaced code, a reboot owed, the last automatic
//! update run, packages left half done), coloured by the spec's rules, red rows first.
//!
//! * Red: old code serving (PHP-FPM, Apache or PostgreSQL among what runs replaced code), a
//!   critical fix waiting (PHP, Apache, OpenSSL, PostgreSQL), or a critical package left half
//!   done.
//! * Amber: other fixes waiting; a kernel fix waiting (the night, then a person's reboot); a
//!   reboot owed over a day; no report passed in two hours; another service on replaced code; a
//!   package run left half done.
//! * Grey: nothing reported to judge by.
//!
//! A fact the report could not measure (null) is no evidence either way.

use capstan_events::agent_channel::JobOutcome;
use capstan_events::monitor::rpc::{SecurityColour, SecurityRow};
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;

use super::NodeId;

/// No report passed for this long is amber (MO-17).
pub const NO_CHECK_HOURS: i64 = 2;
/// A reboot owed for longer than this is amber (MO-17).
pub const REBOOT_OWED_DAYS: i64 = 1;

/// The packages whose fixes are critical (MO-17): PHP, Apache, OpenSSL, PostgreSQL.
pub fn critical(package: &str) -> bool {
    [
        "php",
        "libapache2-mod-php",
        "apache2",
        "openssl",
        "libssl",
        "postgresql",
        "libpq",
    ]
    .iter()
    .any(|prefix| package.starts_with(prefix))
}

/// A kernel package: its fix needs a reboot.
pub fn kernel(package: &str) -> bool {
    package.starts_with("linux-image")
}

/// A service whose replaced code counts as old code serving (`plane:old_code_serving`):
/// PHP-FPM, Apache or PostgreSQL.
pub fn serving(service: &str) -> bool {
    (service.starts_with("php") && service.contains("fpm"))
        || service.starts_with("apache2")
        || service.starts_with("postgresql")
}

/// One node as the view reads it.
pub struct Machine<'a> {
    pub node_id: NodeId,
    pub name: &'a str,
    /// Its latest finished `host_report`: outcome, result, when it finished.
    pub report: Option<(JobOutcome, Option<&'a Value>, DateTime<Utc>)>,
}

fn names(value: Option<&Value>) -> Option<Vec<String>> {
    value.and_then(Value::as_array).map(|items| {
        items
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect()
    })
}

fn time(value: Option<&Value>) -> Option<DateTime<Utc>> {
    value
        .and_then(Value::as_str)
        .and_then(|text| DateTime::parse_from_rfc3339(text).ok())
        .map(|at| at.to_utc())
}

/// The machine's row at `now`, judged (MO-16, MO-17).
pub fn row(machine: &Machine<'_>, now: DateTime<Utc>) -> SecurityRow {
    let mut row = SecurityRow {
        node_id: machine.node_id,
        name: machine.name.to_string(),
        colour: SecurityColour::Grey,
        reasons: Vec::new(),
        os: None,
        security_pending: None,
        security_packages: None,
        services_needing_restart: None,
        reboot_owed: None,
        reboot_owed_since: None,
        last_auto_update: None,
        dpkg_unfinished: None,
        reported_at: None,
    };
    let Some((outcome, result, finished_at)) = machine.report else {
        row.reasons.push("nothing reported yet".to_string());
        return row;
    };
    row.reported_at = Some(finished_at);
    let report = result.filter(|_| outcome == JobOutcome::Completed);
    let report = report.filter(|report| report.is_object());
    if let Some(report) = report {
        row.os = report
            .pointer("/os/pretty_name")
            .and_then(Value::as_str)
            .map(str::to_string);
        row.security_pending = report
            .get("security_pending")
            .and_then(Value::as_u64)
            .and_then(|count| u32::try_from(count).ok());
        row.security_packages = names(report.get("security_packages"));
        row.services_needing_restart = names(report.get("services_needing_restart"));
        row.reboot_owed = report
            .pointer("/reboot_required/owed")
            .and_then(Value::as_bool);
        row.reboot_owed_since = time(report.pointer("/reboot_required/since"));
        row.last_auto_update = time(report.get("last_auto_update"));
        row.dpkg_unfinished = names(report.get("dpkg_unfinished"));
    }
    let measured = row.security_pending.is_some()
        || row.services_needing_restart.is_some()
        || row.reboot_owed.is_some()
        || row.dpkg_unfinished.is_some();
    let mut red = Vec::new();
    let mut amber = Vec::new();
    if now - finished_at > Duration::hours(NO_CHECK_HOURS) || report.is_none() {
        amber.push(format!("no report has passed in {NO_CHECK_HOURS} h"));
    }
    if let Some(services) = &row.services_needing_restart {
        let (old, other): (Vec<&String>, Vec<&String>) =
            services.iter().partition(|service| serving(service));
        if !old.is_empty() {
            red.push(format!("old code is serving: {}", join(&old)));
        }
        if !other.is_empty() {
            amber.push(format!(
                "runs replaced code until restarted: {}",
                join(&other)
            ));
        }
    }
    if let Some(packages) = &row.security_packages {
        let critical_fixes: Vec<&String> = packages.iter().filter(|p| critical(p)).collect();
        let kernel_fixes: Vec<&String> = packages.iter().filter(|p| kernel(p)).collect();
        let others: Vec<&String> = packages
            .iter()
            .filter(|p| !critical(p) && !kernel(p))
            .collect();
        if !critical_fixes.is_empty() {
            red.push(format!("a critical fix waits: {}", join(&critical_fixes)));
        }
        if !kernel_fixes.is_empty() {
            amber.push(format!(
                "a kernel fix waits for the night, then a reboot: {}",
                join(&kernel_fixes)
            ));
        }
        if !others.is_empty() {
            amber.push(format!(
                "{} other fixes wait for the next run",
                others.len()
            ));
        }
    } else if let Some(count) = row.security_pending.filter(|count| *count > 0) {
        amber.push(format!("{count} fixes wait for the next run"));
    }
    if let Some(unfinished) = &row.dpkg_unfinished {
        let (critical_left, other_left): (Vec<&String>, Vec<&String>) =
            unfinished.iter().partition(|package| critical(package));
        if !critical_left.is_empty() {
            red.push(format!(
                "a critical fix was left half done: {}",
                join(&critical_left)
            ));
        }
        if !other_left.is_empty() {
            amber.push(format!(
                "a package run was left half done: {} (Install security updates now finishes it)",
                join(&other_left)
            ));
        }
    }
    if row.reboot_owed == Some(true) {
        let over_a_day = row
            .reboot_owed_since
            .is_some_and(|since| now - since > Duration::days(REBOOT_OWED_DAYS));
        if over_a_day {
            amber.push(format!(
                "a reboot has been owed over {REBOOT_OWED_DAYS} day"
            ));
        }
    }
    if !red.is_empty() {
        row.colour = SecurityColour::Red;
        red.extend(amber);
        row.reasons = red;
    } else if !amber.is_empty() {
        row.colour = SecurityColour::Amber;
        row.reasons = amber;
    } else if !measured {
        row.colour = SecurityColour::Grey;
        row.reasons = vec!["the last report measured no patching facts".to_string()];
    } else {
        row.colour = SecurityColour::Green;
    }
    row
}

fn join(items: &[&String]) -> String {
    items
        .iter()
        .map(|item| item.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows in the view's order: red first, then amber, grey and green; by name within each.
pub fn sort(rows: &mut [SecurityRow]) {
    let rank = |colour: SecurityColour| match colour {
        SecurityColour::Red => 0,
        SecurityColour::Amber => 1,
        SecurityColour::Grey => 2,
        SecurityColour::Green => 3,
    };
    rows.sort_by(|a, b| {
        rank(a.colour)
            .cmp(&rank(b.colour))
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| a.node_id.cmp(&b.node_id))
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn now() -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000, 0).unwrap()
    }

    fn judged(report: Value) -> SecurityRow {
        row(
            &Machine {
                node_id: 1,
                name: "web-1",
                report: Some((JobOutcome::Completed, Some(&report), now())),
            },
            now(),
        )
    }

    fn clean() -> Value {
        json!({"os": {"pretty_name": "Debian GNU/Linux 12 (bookworm)"},
               "security_pending": 0, "security_packages": [],
               "services_needing_restart": [], "dpkg_unfinished": [],
               "reboot_required": {"owed": false, "since": null, "packages": []},
               "last_auto_update": "2026-12-01T06:31:02+00:00"})
    }

    fn with(field: &str, value: Value) -> Value {
        let mut report = clean();
        report[field] = value;
        report
    }

    #[test]
    fn mo_16_a_patched_machine_is_green_with_its_facts() {
        let row = judged(clean());
        assert_eq!(row.colour, SecurityColour::Green, "{:?}", row.reasons);
        assert_eq!(row.os.as_deref(), Some("Debian GNU/Linux 12 (bookworm)"));
        assert_eq!(row.security_pending, Some(0));
        assert_eq!(row.reboot_owed, Some(false));
        assert_eq!(
            row.last_auto_update.unwrap().to_rfc3339(),
            "2026-12-01T06:31:02+00:00"
        );
        assert!(row.reasons.is_empty());
    }

    #[test]
    fn mo_17_nothing_reported_is_grey() {
        let row = row(
            &Machine {
                node_id: 1,
                name: "relay",
                report: None,
            },
            now(),
        );
        assert_eq!(row.colour, SecurityColour::Grey);
        assert_eq!(row.reasons, ["nothing reported yet"]);
        // a report that measured none of the facts (an old agent) is grey too
        assert_eq!(
            judged(json!({"os": {"pretty_name": "x"}})).colour,
            SecurityColour::Grey
        );
    }

    #[test]
    fn mo_17_old_code_serving_is_red_and_another_service_amber() {
        let row = judged(with(
            "services_needing_restart",
            json!(["php8.2-fpm", "cron"]),
        ));
        assert_eq!(row.colour, SecurityColour::Red);
        assert_eq!(row.reasons[0], "old code is serving: php8.2-fpm");
        assert!(row.reasons[1].contains("cron"), "{:?}", row.reasons);
        for service in ["apache2", "postgresql@15-main"] {
            let row = judged(with("services_needing_restart", json!([service])));
            assert_eq!(row.colour, SecurityColour::Red, "{service}");
        }
        let row = judged(with("services_needing_restart", json!(["cron"])));
        assert_eq!(row.colour, SecurityColour::Amber);
    }

    #[test]
    fn mo_17_a_critical_fix_waiting_is_red_other_fixes_and_the_kernel_amber() {
        for package in [
            "php8.2-fpm",
            "apache2-bin",
            "libssl3",
            "openssl",
            "postgresql-15",
        ] {
            let mut report = with("security_packages", json!([package]));
            report["security_pending"] = json!(1);
            assert_eq!(judged(report).colour, SecurityColour::Red, "{package}");
        }
        let mut report = with("security_packages", json!(["zstd", "unzip"]));
        report["security_pending"] = json!(2);
        let row = judged(report);
        assert_eq!(row.colour, SecurityColour::Amber);
        assert_eq!(row.reasons, ["2 other fixes wait for the next run"]);
        let row = judged(with(
            "security_packages",
            json!(["linux-image-6.1.0-21-amd64"]),
        ));
        assert_eq!(row.colour, SecurityColour::Amber);
        assert!(row.reasons[0].starts_with("a kernel fix waits"));
    }

    #[test]
    fn mo_17_a_critical_package_left_half_done_is_red_another_amber() {
        let row = judged(with("dpkg_unfinished", json!(["libssl3"])));
        assert_eq!(row.colour, SecurityColour::Red);
        let row = judged(with("dpkg_unfinished", json!(["tzdata"])));
        assert_eq!(row.colour, SecurityColour::Amber);
        assert!(row.reasons[0].contains("Install security updates now"));
    }

    #[test]
    fn mo_17_a_reboot_owed_over_a_day_is_amber_and_under_a_day_not() {
        let since = |hours: i64| (now() - Duration::hours(hours)).to_rfc3339();
        let owed = |hours| {
            with(
                "reboot_required",
                json!({"owed": true, "since": since(hours), "packages": []}),
            )
        };
        assert_eq!(judged(owed(25)).colour, SecurityColour::Amber);
        assert_eq!(judged(owed(23)).colour, SecurityColour::Green);
        assert_eq!(judged(owed(23)).reboot_owed, Some(true));
    }

    #[test]
    fn mo_17_no_report_passed_in_two_hours_is_amber() {
        let report = clean();
        let stale = row(
            &Machine {
                node_id: 1,
                name: "web-1",
                report: Some((
                    JobOutcome::Completed,
                    Some(&report),
                    now() - Duration::minutes(121),
                )),
            },
            now(),
        );
        assert_eq!(stale.colour, SecurityColour::Amber);
        assert_eq!(stale.reasons, ["no report has passed in 2 h"]);
        let failed = row(
            &Machine {
                node_id: 1,
                name: "web-1",
                report: Some((JobOutcome::Failed, None, now())),
            },
            now(),
        );
        assert_eq!(failed.colour, SecurityColour::Amber);
    }

    #[test]
    fn mo_17_unmeasured_facts_are_no_evidence_and_odd_reports_never_panic() {
        let mut report = clean();
        report["services_needing_restart"] = Value::Null;
        report["reboot_required"] = Value::Null;
        assert_eq!(judged(report).colour, SecurityColour::Green);
        for odd in [
            json!("text"),
            json!({"security_pending": -3, "security_packages": "many",
                   "dpkg_unfinished": [1, null], "reboot_required": {"owed": "yes"}}),
        ] {
            let _ = judged(odd);
        }
    }

    #[test]
    fn mo_16_rows_are_red_first_then_amber_grey_green() {
        let mut rows = vec![
            judged(clean()),
            judged(with("dpkg_unfinished", json!(["tzdata"]))),
            row(
                &Machine {
                    node_id: 3,
                    name: "a-relay",
                    report: None,
                },
                now(),
            ),
            judged(with("services_needing_restart", json!(["apache2"]))),
        ];
        sort(&mut rows);
        let colours: Vec<SecurityColour> = rows.iter().map(|row| row.colour).collect();
        assert_eq!(
            colours,
            [
                SecurityColour::Red,
                SecurityColour::Amber,
                SecurityColour::Grey,
                SecurityColour::Green
            ]
        );
    }
}
