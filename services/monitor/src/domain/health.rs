//! A node's health dot (MO-07): judged from its latest finished `check_status` (the monitor's
//! projection of the agent channel's `job_finished`). This is the one definition of the rule;
//! the dashboard and the node listing show what the monitor's `health_changed` told them.

use capstan_events::agent_channel::JobOutcome;
use capstan_events::monitor::{Health, HealthDot};
use serde_json::Value;

/// Disk use above this is red (MO-07).
pub const DISK_RED_PERCENT: f64 = 90.0;
/// Disk use above this is yellow (MO-07).
pub const DISK_YELLOW_PERCENT: f64 = 80.0;
/// A one-minute load average above this is yellow (MO-07).
pub const LOAD_YELLOW: f64 = 5.0;

/// The dot of a node whose latest finished `check_status` ended with `outcome` and `result`
/// (`None`: never checked). A field the check did not report is no evidence either way; a
/// check that reported nothing usable at all is gray ("no data").
pub fn health(last_check: Option<(JobOutcome, Option<&Value>)>) -> Health {
    let Some((outcome, result)) = last_check else {
        return Health {
            dot: HealthDot::Gray,
            reasons: vec!["never checked".to_string()],
        };
    };
    if outcome != JobOutcome::Completed {
        let word = match outcome {
            JobOutcome::Failed => "failed",
            JobOutcome::Refused => "was refused",
            JobOutcome::Lost => "was lost",
            JobOutcome::Withdrawn => "was withdrawn",
            JobOutcome::Completed => unreachable!("handled above"),
        };
        return Health {
            dot: HealthDot::Red,
            reasons: vec![format!("the last check {word}")],
        };
    }
    let Some(result) = result.filter(|result| result.is_object()) else {
        return Health {
            dot: HealthDot::Gray,
            reasons: vec!["the last check reported no data".to_string()],
        };
    };
    let disk = result
        .pointer("/disk/used_percent")
        .and_then(Value::as_f64)
        .filter(|percent| percent.is_finite());
    let load = result
        .pointer("/load/1m")
        .and_then(Value::as_f64)
        .filter(|load| load.is_finite());
    let postgres = result
        .pointer("/postgresql/answers")
        .and_then(Value::as_bool);
    if disk.is_none() && load.is_none() && postgres.is_none() {
        return Health {
            dot: HealthDot::Gray,
            reasons: vec!["the last check reported no disk, load or PostgreSQL".to_string()],
        };
    }
    let mut red = Vec::new();
    let mut yellow = Vec::new();
    if let Some(percent) = disk {
        if percent > DISK_RED_PERCENT {
            red.push(format!(
                "disk {percent:.1}% full (over {DISK_RED_PERCENT}%)"
            ));
        } else if percent > DISK_YELLOW_PERCENT {
            yellow.push(format!(
                "disk {percent:.1}% full (over {DISK_YELLOW_PERCENT}%)"
            ));
        }
    }
    if postgres == Some(false) {
        red.push("PostgreSQL is not accepting connections".to_string());
    }
    if let Some(load) = load.filter(|load| *load > LOAD_YELLOW) {
        yellow.push(format!("load average {load:.2} (over {LOAD_YELLOW})"));
    }
    if !red.is_empty() {
        red.extend(yellow);
        Health {
            dot: HealthDot::Red,
            reasons: red,
        }
    } else if !yellow.is_empty() {
        Health {
            dot: HealthDot::Yellow,
            reasons: yellow,
        }
    } else {
        Health {
            dot: HealthDot::Green,
            reasons: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(result: Value) -> Health {
        health(Some((JobOutcome::Completed, Some(&result))))
    }

    #[test]
    fn mo_07_a_node_never_checked_is_gray() {
        assert_eq!(health(None).dot, HealthDot::Gray);
    }

    #[test]
    fn mo_07_a_check_with_no_data_is_gray() {
        assert_eq!(check(json!({})).dot, HealthDot::Gray);
        assert_eq!(
            health(Some((JobOutcome::Completed, None))).dot,
            HealthDot::Gray
        );
        assert_eq!(check(json!("odd")).dot, HealthDot::Gray);
    }

    #[test]
    fn mo_07_the_last_check_failing_is_red() {
        for outcome in [JobOutcome::Failed, JobOutcome::Refused, JobOutcome::Lost] {
            let health = health(Some((outcome, None)));
            assert_eq!(health.dot, HealthDot::Red, "{outcome:?}");
            assert!(health.reasons[0].starts_with("the last check"));
        }
    }

    #[test]
    fn mo_07_disk_over_90_percent_is_red_and_over_80_yellow() {
        let red = check(json!({"disk": {"used_percent": 90.5}}));
        assert_eq!(red.dot, HealthDot::Red);
        assert_eq!(red.reasons, ["disk 90.5% full (over 90%)"]);
        assert_eq!(
            check(json!({"disk": {"used_percent": 90.0}})).dot,
            HealthDot::Yellow
        );
        assert_eq!(
            check(json!({"disk": {"used_percent": 80.0}})).dot,
            HealthDot::Green
        );
    }

    #[test]
    fn mo_07_postgresql_not_accepting_connections_is_red_and_unknown_is_no_evidence() {
        let red = check(json!({"postgresql": {"answers": false}, "disk": {"used_percent": 10}}));
        assert_eq!(red.dot, HealthDot::Red);
        assert_eq!(red.reasons, ["PostgreSQL is not accepting connections"]);
        assert_eq!(
            check(json!({"postgresql": {"answers": null}, "disk": {"used_percent": 10}})).dot,
            HealthDot::Green
        );
    }

    #[test]
    fn mo_07_load_over_5_is_yellow() {
        let yellow = check(json!({"load": {"1m": 5.5}}));
        assert_eq!(yellow.dot, HealthDot::Yellow);
        assert_eq!(yellow.reasons, ["load average 5.50 (over 5)"]);
        assert_eq!(check(json!({"load": {"1m": 5.0}})).dot, HealthDot::Green);
    }

    #[test]
    fn mo_07_red_names_every_reason_including_the_yellow_ones() {
        let health = check(json!({"disk": {"used_percent": 95.0}, "load": {"1m": 9.0},
                                  "postgresql": {"answers": false}}));
        assert_eq!(health.dot, HealthDot::Red);
        assert_eq!(health.reasons.len(), 3);
    }

    #[test]
    fn mo_07_all_metrics_healthy_is_green() {
        let health = check(json!({"disk": {"used_percent": 41.2}, "load": {"1m": 0.3},
                                  "postgresql": {"answers": true}}));
        assert_eq!(health.dot, HealthDot::Green);
        assert!(health.reasons.is_empty());
    }
}
