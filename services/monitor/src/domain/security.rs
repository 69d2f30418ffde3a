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
use capstan_events::monitor::rpc::{ContainerRow, SecurityColour, SecurityRow};
use chrono::{DateTime, Duration, Utc};
use serde_json::Value;
use std::collections::HashMap;

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
        containers: Vec::new(),
    };
    let Some((outcome, result, finished_at)) = machine.report else {
        row.reasons.push("nothing reported yet".to_string());
        return row;
    };
    row.reported_at = Some(finished_at);
    let report = result.filter(|_| outcome == JobOutcome::Completed);
    let report = report.filter(|report| report.is_object());
    if let Some(report) = report {
        read_facts(&mut row, report);
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
    replaced_code(&row, &mut red, &mut amber);
    fixes_waiting(&row, &mut red, &mut amber);
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
    (row.colour, row.reasons) = coloured(
        red,
        amber,
        measured,
        "the last report measured no patching facts",
    );
    row
}

/// The facts a completed report measured (null: not measured).
fn read_facts(row: &mut SecurityRow, report: &Value) {
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

/// MO-17: old code serving (PHP-FPM, Apache, PostgreSQL on replaced code) is red; another
/// service on replaced code is amber.
fn replaced_code(row: &SecurityRow, red: &mut Vec<String>, amber: &mut Vec<String>) {
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
}

/// MO-17: a critical fix waiting is red; a kernel fix and other fixes waiting are amber.
fn fixes_waiting(row: &SecurityRow, red: &mut Vec<String>, amber: &mut Vec<String>) {
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
}

/// MO-17's colour from the reasons found: red first (with the amber reasons after it), then
/// amber; with none, grey (saying `unmeasured`) when nothing was measured, else green.
fn coloured(
    mut red: Vec<String>,
    amber: Vec<String>,
    measured: bool,
    unmeasured: &str,
) -> (SecurityColour, Vec<String>) {
    if !red.is_empty() {
        red.extend(amber);
        (SecurityColour::Red, red)
    } else if !amber.is_empty() {
        (SecurityColour::Amber, amber)
    } else if !measured {
        (SecurityColour::Grey, vec![unmeasured.to_string()])
    } else {
        (SecurityColour::Green, Vec::new())
    }
}

/// The paired nodes whose site runs in a container, by container name: (node id, name).
pub type SiteNodes = HashMap<String, (NodeId, String)>;

/// A Docker host's site containers as rows under it (MO-16), from its report's `containers`:
/// an entry with a site label, or one a paired node runs in, is a site container (the host's
/// own helpers are not). A site container runs its host's base, so the fixes it waits for are
/// the ones its host's report found: a critical one (PHP, Apache, OpenSSL, PostgreSQL) is
/// red, others amber (a kernel fix is the host's alone); a report older than two hours or
/// that measured no fixes leaves it amber or grey, as its host. Each entry is read as text and
/// listed once; an odd entry is skipped, never a panic.
pub fn container_rows(
    machine: &Machine<'_>,
    host: &SecurityRow,
    site_nodes: &SiteNodes,
    now: DateTime<Utc>,
) -> Vec<ContainerRow> {
    let Some((outcome, Some(report), finished_at)) = machine.report else {
        return Vec::new();
    };
    if outcome != JobOutcome::Completed {
        return Vec::new();
    }
    let Some(entries) = report.get("containers").and_then(Value::as_array) else {
        return Vec::new();
    };
    let mut rows: Vec<ContainerRow> = Vec::new();
    for entry in entries {
        let Some(name) = entry.get("name").and_then(Value::as_str) else {
            continue;
        };
        let site = entry
            .get("site")
            .and_then(Value::as_str)
            .filter(|site| !site.is_empty());
        let node = site_nodes.get(name);
        if name.is_empty() || (site.is_none() && node.is_none()) {
            continue;
        }
        if rows.iter().any(|row| row.name == name) {
            continue;
        }
        let mut row = ContainerRow {
            name: name.to_string(),
            site: site.map(str::to_string),
            node_id: node.map(|(id, _)| *id),
            node_name: node.map(|(_, name)| name.clone()),
            state: entry
                .get("state")
                .and_then(Value::as_str)
                .map(str::to_string),
            colour: SecurityColour::Grey,
            reasons: Vec::new(),
            security_pending: host.security_pending,
            security_packages: host.security_packages.as_ref().map(|packages| {
                packages
                    .iter()
                    .filter(|package| !kernel(package))
                    .cloned()
                    .collect()
            }),
        };
        (row.colour, row.reasons) = container_colour(&row, now - finished_at);
        rows.push(row);
    }
    rows.sort_by(|a, b| {
        rank(a.colour)
            .cmp(&rank(b.colour))
            .then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// MO-16: a site container's colour from its host's fixes and the report's age.
fn container_colour(row: &ContainerRow, age: Duration) -> (SecurityColour, Vec<String>) {
    let mut red = Vec::new();
    let mut amber = Vec::new();
    if age > Duration::hours(NO_CHECK_HOURS) {
        amber.push(format!("its host's report is over {NO_CHECK_HOURS} h old"));
    }
    if let Some(packages) = &row.security_packages {
        let critical_fixes: Vec<&String> = packages.iter().filter(|p| critical(p)).collect();
        let others = packages.len() - critical_fixes.len();
        if !critical_fixes.is_empty() {
            red.push(format!(
                "a critical fix waits for its base: {}",
                join(&critical_fixes)
            ));
        }
        if others > 0 {
            amber.push(format!("{others} other fixes wait for its base"));
        }
    } else if let Some(count) = row.security_pending.filter(|count| *count > 0) {
        amber.push(format!("{count} fixes wait for its base"));
    }
    let measured = row.security_pending.is_some() || row.security_packages.is_some();
    coloured(red, amber, measured, "its host's report measured no fixes")
}

fn rank(colour: SecurityColour) -> u8 {
    match colour {
        SecurityColour::Red => 0,
        SecurityColour::Amber => 1,
        SecurityColour::Grey => 2,
        SecurityColour::Green => 3,
    }
}

fn join(items: &[&String]) -> String {
    items
        .iter()
        .map(|item| item.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The rows in the view's order: red first, then amber, grey and green (a host ranks by the
/// worst of its own row and its containers'); by name within each.
pub fn sort(rows: &mut [SecurityRow]) {
    let worst = |row: &SecurityRow| {
        row.containers
            .iter()
            .map(|container| rank(container.colour))
            .chain([rank(row.colour)])
            .min()
            .unwrap_or(3)
    };
    rows.sort_by(|a, b| {
        worst(a)
            .cmp(&worst(b))
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
                node_id: NodeId(1),
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
                node_id: NodeId(1),
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
                node_id: NodeId(1),
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
                node_id: NodeId(1),
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
                    node_id: NodeId(3),
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

    fn docker_host(packages: Value, containers: Value) -> Value {
        let mut report = with("security_packages", packages.clone());
        report["security_pending"] = json!(packages.as_array().map_or(0, Vec::len));
        report["containers"] = containers;
        report
    }

    fn containers_of(
        report: &Value,
        site_nodes: &SiteNodes,
        at: DateTime<Utc>,
    ) -> Vec<ContainerRow> {
        let machine = Machine {
            node_id: NodeId(1),
            name: "docker-1",
            report: Some((JobOutcome::Completed, Some(report), at)),
        };
        let host = row(&machine, now());
        container_rows(&machine, &host, site_nodes, now())
    }

    #[test]
    fn mo_16_a_docker_hosts_site_containers_are_rows_under_it_with_the_fixes_they_wait_for() {
        let report = docker_host(
            json!(["libssl3", "zstd", "linux-image-6.1.0-21-amd64"]),
            json!([
                {"name": "shop", "state": "running", "status": "Up 2 days", "site": "shop.example"},
                {"name": "blog", "state": "exited", "status": "Exited (0)", "site": ""},
                {"name": "buildkit", "state": "running", "status": "Up", "site": ""},
                {"name": "shop", "state": "running", "status": "Up", "site": "shop.example"},
                {"state": "running"},
                "odd"
            ]),
        );
        let mut nodes = SiteNodes::new();
        nodes.insert("blog".into(), (NodeId(42), "blog.example".into()));
        let rows = containers_of(&report, &nodes, now());
        // the labelled container and the one a paired node runs in; never the host's helper,
        // never twice
        let names: Vec<&str> = rows.iter().map(|row| row.name.as_str()).collect();
        assert_eq!(names, ["blog", "shop"]);
        let shop = &rows[1];
        assert_eq!(shop.site.as_deref(), Some("shop.example"));
        assert_eq!(shop.node_id, None);
        assert_eq!(shop.state.as_deref(), Some("running"));
        // the host's fixes, less the kernel (the host's own)
        assert_eq!(shop.security_pending, Some(3));
        assert_eq!(
            shop.security_packages.as_deref(),
            Some(&["libssl3".to_string(), "zstd".to_string()][..])
        );
        assert_eq!(shop.colour, SecurityColour::Red);
        assert_eq!(
            shop.reasons,
            [
                "a critical fix waits for its base: libssl3",
                "1 other fixes wait for its base"
            ]
        );
        let blog = &rows[0];
        assert_eq!(blog.node_id, Some(NodeId(42)));
        assert_eq!(blog.node_name.as_deref(), Some("blog.example"));
        assert_eq!(blog.state.as_deref(), Some("exited"));
    }

    #[test]
    fn mo_17_a_containers_colour_follows_its_hosts_fixes_and_report_age() {
        let site = json!([{"name": "shop", "state": "running", "site": "shop.example"}]);
        let none = SiteNodes::new();
        let rows = containers_of(&docker_host(json!([]), site.clone()), &none, now());
        assert_eq!(rows[0].colour, SecurityColour::Green);
        assert!(rows[0].reasons.is_empty());
        let rows = containers_of(&docker_host(json!(["zstd"]), site.clone()), &none, now());
        assert_eq!(rows[0].colour, SecurityColour::Amber);
        // a kernel fix waits for the host's reboot, not the container's
        let kernel = docker_host(json!(["linux-image-6.1.0-21-amd64"]), site.clone());
        assert_eq!(
            containers_of(&kernel, &none, now())[0].colour,
            SecurityColour::Green
        );
        let stale = containers_of(
            &docker_host(json!([]), site.clone()),
            &none,
            now() - Duration::minutes(121),
        );
        assert_eq!(stale[0].colour, SecurityColour::Amber);
        assert_eq!(stale[0].reasons, ["its host's report is over 2 h old"]);
        // a host that measured no fixes leaves its containers grey
        let mut unmeasured = clean();
        unmeasured["security_pending"] = Value::Null;
        unmeasured["security_packages"] = Value::Null;
        unmeasured["containers"] = site;
        let rows = containers_of(&unmeasured, &none, now());
        assert_eq!(rows[0].colour, SecurityColour::Grey);
        // a machine without containers, or whose report failed, has no container rows
        assert!(containers_of(&clean(), &none, now()).is_empty());
        let failed = Machine {
            node_id: NodeId(1),
            name: "docker-1",
            report: Some((JobOutcome::Failed, None, now())),
        };
        let host = row(&failed, now());
        assert!(container_rows(&failed, &host, &none, now()).is_empty());
    }

    #[test]
    fn mo_16_a_host_ranks_by_its_worst_container() {
        let site = json!([{"name": "shop", "state": "running", "site": "shop.example"}]);
        let report = docker_host(json!(["openssl"]), site);
        let machine = Machine {
            node_id: NodeId(2),
            name: "z-docker",
            report: Some((JobOutcome::Completed, Some(&report), now())),
        };
        let mut host = row(&machine, now());
        host.containers = container_rows(&machine, &host, &SiteNodes::new(), now());
        host.colour = SecurityColour::Amber;
        let mut rows = vec![judged(with("dpkg_unfinished", json!(["tzdata"]))), host];
        rows[0].name = "a-machine".into();
        sort(&mut rows);
        assert_eq!(rows[0].name, "z-docker");
    }
}
