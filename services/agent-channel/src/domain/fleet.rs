//! How the fleet is drawn: each node's health dot from its latest `check_status` (MO-07), and
//! where it sits — a Docker host, a container placed on one, or a machine of its own (PV-15).
//!
//! The inventory gives health dots to `monitor` once it consumes `job_finished`; until then the
//! agent channel, which holds the results, judges them here. The rule is the same either way.

use capstan_events::agent_channel::{
    rpc::{Health, HealthDot, Placement},
    JobOutcome,
};
use serde_json::Value;
use std::collections::HashMap;

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

/// What placement needs of one node: its id, the container name its agent reported (an agent
/// inside a container), and the result of its latest completed `host_report`.
pub struct PlacementInput<'a> {
    pub id: i64,
    pub container: Option<&'a str>,
    pub host_report: Option<&'a Value>,
}

/// Where each node sits (PV-15). A node whose latest host report says Docker is installed is a
/// host; a node naming a container is placed under the host whose latest report lists a
/// container of that name (the lowest node id when several do); every other node, including a
/// container whose host is not known here, is a machine of its own.
pub fn placements(nodes: &[PlacementInput<'_>]) -> HashMap<i64, Placement> {
    let is_host = |report: Option<&Value>| {
        report
            .and_then(|report| report.get("docker"))
            .and_then(Value::as_str)
            == Some("installed")
    };
    let mut host_of_container: HashMap<&str, i64> = HashMap::new();
    let mut hosts: Vec<&PlacementInput<'_>> = nodes
        .iter()
        .filter(|node| is_host(node.host_report))
        .collect();
    hosts.sort_by_key(|node| node.id);
    for host in hosts {
        let listed = host
            .host_report
            .and_then(|report| report.get("containers"))
            .and_then(Value::as_array);
        for container in listed.into_iter().flatten() {
            if let Some(name) = container.get("name").and_then(Value::as_str) {
                host_of_container.entry(name).or_insert(host.id);
            }
        }
    }
    nodes
        .iter()
        .map(|node| {
            let placed = node
                .container
                .and_then(|name| host_of_container.get(name))
                .filter(|host_id| **host_id != node.id);
            let placement = match placed {
                Some(host_id) => Placement::Container {
                    host_node_id: *host_id,
                },
                None if is_host(node.host_report) => Placement::Host,
                None => Placement::Machine,
            };
            (node.id, placement)
        })
        .collect()
}

/// The container a node's agent runs in: its claims' latest word when one reported
/// `container` (a name, or `null` for none), else the name its join gave.
pub fn container_named<'a>(
    joined: Option<&'a str>,
    facts: &'a serde_json::Map<String, Value>,
) -> Option<&'a str> {
    match facts.get("container") {
        Some(reported) => reported.as_str(),
        None => joined,
    }
}

/// The Docker host a placement puts a node under, if any: what `placement_changed` announces.
pub fn docker_host(placement: Placement) -> Option<i64> {
    match placement {
        Placement::Container { host_node_id } => Some(host_node_id),
        Placement::Host | Placement::Machine => None,
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

    #[test]
    fn pv_15_a_docker_box_is_a_host_and_its_containers_sit_under_it() {
        let host =
            json!({"docker": "installed", "containers": [{"name": "shop", "state": "running"}]});
        let bare = json!({"docker": "absent"});
        let nodes = [
            PlacementInput {
                id: 1,
                container: None,
                host_report: Some(&host),
            },
            PlacementInput {
                id: 2,
                container: Some("shop"),
                host_report: None,
            },
            PlacementInput {
                id: 3,
                container: None,
                host_report: Some(&bare),
            },
            PlacementInput {
                id: 4,
                container: None,
                host_report: None,
            },
        ];
        let placed = placements(&nodes);
        assert_eq!(placed[&1], Placement::Host);
        assert_eq!(placed[&2], Placement::Container { host_node_id: 1 });
        assert_eq!(placed[&3], Placement::Machine);
        assert_eq!(placed[&4], Placement::Machine);
    }

    #[test]
    fn pv_15_a_nodes_container_is_its_claims_latest_word_else_its_joins() {
        let none = serde_json::Map::new();
        assert_eq!(container_named(Some("shop"), &none), Some("shop"));
        let named = json!({"container": "blog"});
        assert_eq!(
            container_named(Some("shop"), named.as_object().unwrap()),
            Some("blog")
        );
        let left = json!({"container": null});
        assert_eq!(
            container_named(Some("shop"), left.as_object().unwrap()),
            None
        );
        assert_eq!(container_named(None, &none), None);
    }

    #[test]
    fn pv_15_only_a_container_placement_names_a_docker_host() {
        assert_eq!(
            docker_host(Placement::Container { host_node_id: 4 }),
            Some(4)
        );
        assert_eq!(docker_host(Placement::Host), None);
        assert_eq!(docker_host(Placement::Machine), None);
    }

    #[test]
    fn pv_15_a_container_whose_host_is_not_known_is_listed_as_a_machine() {
        let nodes = [PlacementInput {
            id: 7,
            container: Some("orphan"),
            host_report: None,
        }];
        assert_eq!(placements(&nodes)[&7], Placement::Machine);
    }

    #[test]
    fn pv_15_two_hosts_listing_one_container_name_place_it_under_the_older_node() {
        let report = json!({"docker": "installed", "containers": [{"name": "shop"}]});
        let nodes = [
            PlacementInput {
                id: 9,
                container: None,
                host_report: Some(&report),
            },
            PlacementInput {
                id: 5,
                container: None,
                host_report: Some(&report),
            },
            PlacementInput {
                id: 6,
                container: Some("shop"),
                host_report: None,
            },
        ];
        assert_eq!(
            placements(&nodes)[&6],
            Placement::Container { host_node_id: 5 }
        );
    }

    #[test]
    fn pv_15_odd_host_reports_never_panic() {
        let odd = json!({"docker": "installed", "containers": "many"});
        let odder = json!({"docker": 3, "containers": [1, {"name": 2}]});
        let nodes = [
            PlacementInput {
                id: 1,
                container: Some("x"),
                host_report: Some(&odd),
            },
            PlacementInput {
                id: 2,
                container: None,
                host_report: Some(&odder),
            },
        ];
        let placed = placements(&nodes);
        assert_eq!(placed[&1], Placement::Host);
        assert_eq!(placed[&2], Placement::Machine);
    }
}
