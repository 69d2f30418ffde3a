//! How the UI writes values for a person: times as "3 min ago" with the exact time beside,
//! fingerprints in groups of four, sizes and durations, and what a node reported, whatever
//! its shape ("not reported" for what is missing or odd, never a crash).

use chrono::{DateTime, Utc};
use serde_json::Value;

/// A moment: how long ago, and exactly when (for a `title` and a `<time datetime>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ago {
    pub text: String,
    pub exact: String,
    pub iso: String,
}

pub fn ago(at: DateTime<Utc>) -> Ago {
    ago_from(at, Utc::now())
}

pub fn ago_from(at: DateTime<Utc>, now: DateTime<Utc>) -> Ago {
    let seconds = (now - at).num_seconds();
    let text = if seconds < -60 {
        "in the future".to_string()
    } else if seconds < 60 {
        "just now".to_string()
    } else if seconds < 3600 {
        format!("{} min ago", seconds / 60)
    } else if seconds < 48 * 3600 {
        format!("{} h ago", seconds / 3600)
    } else {
        format!("{} days ago", seconds / 86_400)
    };
    Ago {
        text,
        exact: at.format("%Y-%m-%d %H:%M:%S UTC").to_string(),
        iso: at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
    }
}

/// `SHA256:abcdEFGH...` as `SHA256: abcd EFGH ...`: groups of four characters, easy to compare
/// by eye with what the node shows.
pub fn fingerprint_groups(fingerprint: &str) -> String {
    let (prefix, rest) = match fingerprint.split_once(':') {
        Some((prefix, rest)) => (format!("{prefix}: "), rest),
        None => (String::new(), fingerprint),
    };
    let characters: Vec<char> = rest.chars().collect();
    let groups: Vec<String> = characters
        .chunks(4)
        .map(|chunk| chunk.iter().collect())
        .collect();
    format!("{prefix}{}", groups.join(" "))
}

/// Bytes in binary units: `1.5 GiB`.
pub fn bytes(count: u64) -> String {
    const UNITS: [&str; 6] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let mut value = count as f64;
    let mut unit = 0;
    while value >= 1024.0 && unit < UNITS.len() - 1 {
        value /= 1024.0;
        unit += 1;
    }
    if unit == 0 {
        format!("{count} B")
    } else {
        format!("{value:.1} {}", UNITS[unit])
    }
}

/// Seconds as `3 d 4 h`, `5 h 12 min`, `42 min`.
pub fn duration(seconds: u64) -> String {
    let days = seconds / 86_400;
    let hours = seconds % 86_400 / 3600;
    let minutes = seconds % 3600 / 60;
    if days > 0 {
        format!("{days} d {hours} h")
    } else if hours > 0 {
        format!("{hours} h {minutes} min")
    } else {
        format!("{minutes} min")
    }
}

/// A short, single-line rendering of any JSON value a node sent (strings unquoted).
pub fn plain(value: &Value) -> String {
    let text = match value {
        Value::String(text) => text.clone(),
        Value::Null => "not reported".to_string(),
        other => other.to_string(),
    };
    clip(&text, 300)
}

/// At most `limit` characters, with an ellipsis when cut.
pub fn clip(text: &str, limit: usize) -> String {
    if text.chars().count() <= limit {
        text.to_string()
    } else {
        let mut clipped: String = text.chars().take(limit).collect();
        clipped.push('…');
        clipped
    }
}

/// One fact of the node's Overview: a label and what was reported (or "not reported").
#[derive(Debug, Clone, PartialEq)]
pub struct Fact {
    /// For `data-test=fact-<key>`.
    pub key: &'static str,
    pub label: &'static str,
    pub value: String,
    pub reported: bool,
    /// Extra lines (certificates, failed units, containers).
    pub items: Vec<String>,
}

fn fact(key: &'static str, label: &'static str, value: Option<String>) -> Fact {
    Fact {
        key,
        label,
        reported: value.is_some(),
        value: value.unwrap_or_else(|| "not reported".into()),
        items: Vec::new(),
    }
}

fn list_fact(
    key: &'static str,
    label: &'static str,
    items: Option<Vec<String>>,
    empty: &str,
) -> Fact {
    match items {
        Some(items) if items.is_empty() => fact(key, label, Some(empty.to_string())),
        Some(items) => Fact {
            value: format!("{}", items.len()),
            items,
            ..fact(key, label, Some(String::new()))
        },
        None => fact(key, label, None),
    }
}

fn number(value: Option<&Value>) -> Option<f64> {
    value?.as_f64().filter(|number| number.is_finite())
}

fn whole(value: Option<&Value>) -> Option<u64> {
    value?.as_u64()
}

fn text(value: Option<&Value>) -> Option<String> {
    value?.as_str().map(|text| clip(text, 200))
}

/// The facts of a node's Overview, from its latest `check_status` and `host_report` results
/// (either may be missing or of any shape).
pub fn overview_facts(check: Option<&Value>, report: Option<&Value>) -> Vec<Fact> {
    let check = check.filter(|value| value.is_object());
    let report = report.filter(|value| value.is_object());
    let in_check = |key: &str| check.and_then(|check| check.get(key));
    let in_report = |key: &str| report.and_then(|report| report.get(key));
    let certificates = in_check("certificates")
        .and_then(Value::as_array)
        .map(|lineages| lineages.iter().take(200).map(certificate_line).collect());
    let failed_units = in_report("failed_units")
        .and_then(Value::as_array)
        .map(|units| units.iter().take(500).map(plain).collect());
    let containers = in_report("containers")
        .and_then(Value::as_array)
        .map(|containers| containers.iter().take(500).map(container_line).collect());
    vec![
        fact(
            "agent-version",
            "Agent version",
            text(in_check("agent_version")),
        ),
        fact(
            "uptime",
            "Uptime",
            whole(in_check("uptime_s")).map(duration),
        ),
        fact("load", "Load", in_check("load").and_then(load_words)),
        fact(
            "memory",
            "Memory",
            in_check("memory").and_then(memory_words),
        ),
        fact(
            "disk",
            "Disk",
            in_check("disk")
                .or_else(|| in_report("disk"))
                .and_then(disk_words),
        ),
        fact(
            "postgresql",
            "PostgreSQL",
            in_check("postgresql").and_then(postgres_words),
        ),
        list_fact("certificates", "Certificates", certificates, "none found"),
        fact("os", "Operating system", in_report("os").and_then(os_words)),
        fact("kernel", "Kernel", text(in_report("kernel"))),
        list_fact("failed-units", "Failed units", failed_units, "none"),
        list_fact("containers", "Containers", containers, "none"),
    ]
}

/// `check_status`'s `load`: the three averages.
fn load_words(load: &Value) -> Option<String> {
    let one = number(load.get("1m"))?;
    let five = number(load.get("5m"))?;
    let fifteen = number(load.get("15m"))?;
    Some(format!(
        "{one:.2} · {five:.2} · {fifteen:.2} (1, 5, 15 min)"
    ))
}

/// `check_status`'s `memory`: used of total.
fn memory_words(memory: &Value) -> Option<String> {
    let total = whole(memory.get("total_bytes"))?;
    let available = whole(memory.get("available_bytes"))?;
    let used = total.saturating_sub(available);
    let percent = if total == 0 {
        0.0
    } else {
        used as f64 * 100.0 / total as f64
    };
    Some(format!(
        "{} of {} used ({percent:.0} %)",
        bytes(used),
        bytes(total)
    ))
}

/// `check_status`'s (or `host_report`'s) `disk`: used, free of total, and where.
fn disk_words(disk: &Value) -> Option<String> {
    let total = whole(disk.get("total_bytes"))?;
    let available = whole(disk.get("avail_bytes"))?;
    let used = total.saturating_sub(available);
    let percent = number(disk.get("used_percent")).unwrap_or(if total == 0 {
        0.0
    } else {
        used as f64 * 100.0 / total as f64
    });
    let path = text(disk.get("path")).unwrap_or_default();
    Some(format!(
        "{percent:.1} % used — {} free of {} on {path}",
        bytes(available),
        bytes(total)
    ))
}

/// `check_status`'s `postgresql`: answering, or why not.
fn postgres_words(postgres: &Value) -> Option<String> {
    let detail = text(postgres.get("detail"));
    match postgres.get("answers").and_then(Value::as_bool) {
        Some(true) => Some("accepting connections".to_string()),
        Some(false) | None => detail.or(Some("not answering".into())),
    }
}

/// One certificate lineage of `check_status`: the days it has left, or why not known.
fn certificate_line(lineage: &Value) -> String {
    let name = text(lineage.get("lineage")).unwrap_or_else(|| "(unnamed)".into());
    match (
        whole(lineage.get("days_left")),
        lineage.get("days_left").and_then(Value::as_i64),
    ) {
        (Some(days), _) => format!("{name}: {days} days left"),
        (None, Some(days)) => format!("{name}: expired {} days ago", -days),
        _ => format!(
            "{name}: {}",
            text(lineage.get("why")).unwrap_or_else(|| "expiry not reported".into())
        ),
    }
}

/// `host_report`'s `os`: its pretty name, else its id and version.
fn os_words(os: &Value) -> Option<String> {
    text(os.get("pretty_name")).or_else(|| {
        let id = text(os.get("id"))?;
        Some(format!(
            "{id} {}",
            text(os.get("version_id")).unwrap_or_default()
        ))
    })
}

/// One container of `host_report`: its name and status.
fn container_line(container: &Value) -> String {
    let name = text(container.get("name")).unwrap_or_else(|| plain(container));
    match text(container.get("status")).or_else(|| text(container.get("state"))) {
        Some(status) => format!("{name}: {status}"),
        None => name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn fingerprints_are_grouped_by_four_after_their_prefix() {
        assert_eq!(
            fingerprint_groups("SHA256:abcdEFGHijkl12"),
            "SHA256: abcd EFGH ijkl 12"
        );
        assert_eq!(fingerprint_groups("abcdef"), "abcd ef");
    }

    #[test]
    fn moments_read_as_how_long_ago_with_the_exact_time() {
        let now = Utc::now();
        assert_eq!(ago_from(now, now).text, "just now");
        assert_eq!(
            ago_from(now - chrono::Duration::minutes(3), now).text,
            "3 min ago"
        );
        assert_eq!(
            ago_from(now - chrono::Duration::hours(5), now).text,
            "5 h ago"
        );
        assert_eq!(
            ago_from(now - chrono::Duration::days(4), now).text,
            "4 days ago"
        );
        assert!(ago_from(now, now).exact.ends_with("UTC"));
    }

    #[test]
    fn sizes_and_durations_read_plainly() {
        assert_eq!(bytes(512), "512 B");
        assert_eq!(bytes(1536), "1.5 KiB");
        assert_eq!(bytes(10 * 1024 * 1024 * 1024), "10.0 GiB");
        assert_eq!(duration(90_000), "1 d 1 h");
        assert_eq!(duration(3_700), "1 h 1 min");
    }

    #[test]
    fn the_overview_reads_the_agents_shapes() {
        let check = json!({
            "agent_version": "1.50.0", "uptime_s": 90061,
            "load": {"1m": 0.5, "5m": 0.25, "15m": 0.1},
            "memory": {"total_bytes": 4_294_967_296u64, "available_bytes": 1_073_741_824u64},
            "disk": {"path": "/", "total_bytes": 100, "avail_bytes": 10, "used_percent": 90.0},
            "postgresql": {"answers": true, "detail": "accepting connections"},
            "certificates": [{"lineage": "example.org", "days_left": 40}]
        });
        let report = json!({
            "os": {"pretty_name": "Debian GNU/Linux 12"}, "kernel": "6.1.0",
            "failed_units": ["nginx.service"], "containers": [{"name": "web", "status": "Up 3 days"}]
        });
        let facts = overview_facts(Some(&check), Some(&report));
        let value = |key: &str| facts.iter().find(|fact| fact.key == key).unwrap().clone();
        assert_eq!(value("agent-version").value, "1.50.0");
        assert_eq!(value("uptime").value, "1 d 1 h");
        assert!(
            value("memory").value.contains("75 %"),
            "{:?}",
            value("memory")
        );
        assert!(value("disk").value.starts_with("90.0 % used"));
        assert_eq!(value("postgresql").value, "accepting connections");
        assert_eq!(
            value("certificates").items,
            vec!["example.org: 40 days left"]
        );
        assert_eq!(value("failed-units").items, vec!["nginx.service"]);
        assert_eq!(value("containers").items, vec!["web: Up 3 days"]);
        assert_eq!(value("os").value, "Debian GNU/Linux 12");
    }

    #[test]
    fn missing_and_odd_shapes_read_as_not_reported_and_never_panic() {
        for check in [
            None,
            Some(json!(null)),
            Some(json!([1, 2])),
            Some(json!("x")),
        ] {
            let facts = overview_facts(check.as_ref(), None);
            assert!(facts
                .iter()
                .all(|fact| !fact.reported && fact.value == "not reported"));
        }
        let odd = json!({
            "agent_version": 5, "uptime_s": -1, "load": {"1m": "high"}, "memory": [],
            "disk": {"total_bytes": "many"}, "postgresql": "yes", "certificates": {"a": 1},
        });
        let facts = overview_facts(
            Some(&odd),
            Some(&json!({"failed_units": "none", "containers": [7]})),
        );
        let value = |key: &str| facts.iter().find(|fact| fact.key == key).unwrap().clone();
        assert!(!value("load").reported);
        assert!(!value("disk").reported);
        assert!(!value("certificates").reported);
        assert!(!value("failed-units").reported);
        assert_eq!(value("containers").items, vec!["7"]);
    }
}
