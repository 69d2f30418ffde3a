//! How the fleet is drawn: where each node sits — a Docker host, a container placed on one, or
//! a machine of its own (PV-15). Its health dot is the monitor's (MO-07, its `domain/health.rs`).

use capstan_events::agent_channel::rpc::Placement;
use capstan_events::NodeId;
use serde_json::Value;
use std::collections::HashMap;

/// What placement needs of one node: its id, the container name its agent reported (an agent
/// inside a container), and the result of its latest completed `host_report`.
pub struct PlacementInput<'a> {
    pub id: NodeId,
    pub container: Option<&'a str>,
    pub host_report: Option<&'a Value>,
}

/// Where each node sits (PV-15). A node whose latest host report says Docker is installed is a
/// host; a node naming a container is placed under a host whose latest report lists a
/// container of that name and whose kernel the node's own latest host report shares (the lowest
/// node id when several do); every other node, including a container whose host is not known
/// here, is a machine of its own.
///
/// Issue 27: container names are global and a host's report is only its own word, so a node
/// listing another node's container does not place it: the contained node must corroborate it.
/// Its own `host_report` carries the kernel's boot id, which a container reads from its host
/// (`/proc/sys/kernel/random/boot_id` is not namespaced) and no other machine shares; a random
/// value a node cannot learn from the plane. No protocol field is added for it.
pub fn placements(nodes: &[PlacementInput<'_>]) -> HashMap<NodeId, Placement> {
    let is_host = |report: Option<&Value>| {
        report
            .and_then(|report| report.get("docker"))
            .and_then(Value::as_str)
            == Some("installed")
    };
    let mut hosts_of_container: HashMap<&str, Vec<&PlacementInput<'_>>> = HashMap::new();
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
                let listing = hosts_of_container.entry(name).or_default();
                if !listing.iter().any(|listed| listed.id == host.id) {
                    listing.push(host);
                }
            }
        }
    }
    nodes
        .iter()
        .map(|node| {
            // The oldest host listing the name on the node's own kernel, unless that is itself.
            let placed = node
                .container
                .and_then(|name| hosts_of_container.get(name))
                .and_then(|hosts| hosts.iter().find(|host| corroborates(node, host)))
                .filter(|host| host.id != node.id);
            let placement = match placed {
                Some(host) => Placement::Container {
                    host_node_id: host.id,
                },
                None if is_host(node.host_report) => Placement::Host,
                None => Placement::Machine,
            };
            (node.id, placement)
        })
        .collect()
}

/// The kernel boot id a host report carries (a non-empty string), when it carries one.
fn boot_id(report: Option<&Value>) -> Option<&str> {
    report?.get("boot_id")?.as_str().filter(|id| !id.is_empty())
}

/// Issue 27: `contained` runs on `host`'s kernel by its own word: its latest host report's
/// boot id is the host's.
fn corroborates(contained: &PlacementInput<'_>, host: &PlacementInput<'_>) -> bool {
    match (boot_id(contained.host_report), boot_id(host.host_report)) {
        (Some(own), Some(hosts)) => own == hosts,
        _ => false,
    }
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

/// Whether approving a join as a new node can move a placement (PV-15). A new node has no host
/// report yet, so no container is placed under it; it is placed under a host only when its
/// join names a container that a host lists. A plain machine's approval moves nothing, so it
/// neither takes the placements lock nor reads the fleet: ten thousand approvals used to
/// queue on that lock, each reading every node's container.
pub fn approval_can_move_placements(container: Option<&str>) -> bool {
    container.is_some()
}

/// The Docker host a placement puts a node under, if any: what `placement_changed` announces.
pub fn docker_host(placement: Placement) -> Option<NodeId> {
    match placement {
        Placement::Container { host_node_id } => Some(host_node_id),
        Placement::Host | Placement::Machine => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// What a contained node's own host report says: the kernel it runs on.
    fn inside(boot: &str) -> Value {
        json!({"docker": "absent", "boot_id": boot})
    }

    #[test]
    fn approving_a_new_machine_moves_no_placement_and_approving_a_container_may() {
        assert!(!approval_can_move_placements(None));
        assert!(approval_can_move_placements(Some("web-1")));
        // What the rule stands on: a new node with no container and no host report is a
        // machine of its own, whatever the rest of the fleet reports.
        let report = json!({"docker": "installed", "containers": [{"name": "web-1"}]});
        let placed = placements(&[
            PlacementInput {
                id: NodeId(1),
                container: None,
                host_report: Some(&report),
            },
            PlacementInput {
                id: NodeId(2),
                container: None,
                host_report: None,
            },
        ]);
        assert_eq!(placed[&NodeId(2)], Placement::Machine);
    }

    #[test]
    fn pv_15_a_docker_box_is_a_host_and_its_containers_sit_under_it() {
        let host = json!({"docker": "installed", "boot_id": "boot-a",
                          "containers": [{"name": "shop", "state": "running"}]});
        let bare = json!({"docker": "absent"});
        let shop = inside("boot-a");
        let nodes = [
            PlacementInput {
                id: NodeId(1),
                container: None,
                host_report: Some(&host),
            },
            PlacementInput {
                id: NodeId(2),
                container: Some("shop"),
                host_report: Some(&shop),
            },
            PlacementInput {
                id: NodeId(3),
                container: None,
                host_report: Some(&bare),
            },
            PlacementInput {
                id: NodeId(4),
                container: None,
                host_report: None,
            },
        ];
        let placed = placements(&nodes);
        assert_eq!(placed[&NodeId(1)], Placement::Host);
        assert_eq!(
            placed[&NodeId(2)],
            Placement::Container {
                host_node_id: NodeId(1)
            }
        );
        assert_eq!(placed[&NodeId(3)], Placement::Machine);
        assert_eq!(placed[&NodeId(4)], Placement::Machine);
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
            docker_host(Placement::Container {
                host_node_id: NodeId(4)
            }),
            Some(NodeId(4))
        );
        assert_eq!(docker_host(Placement::Host), None);
        assert_eq!(docker_host(Placement::Machine), None);
    }

    #[test]
    fn pv_15_a_container_whose_host_is_not_known_is_listed_as_a_machine() {
        let nodes = [PlacementInput {
            id: NodeId(7),
            container: Some("orphan"),
            host_report: None,
        }];
        assert_eq!(placements(&nodes)[&NodeId(7)], Placement::Machine);
    }

    #[test]
    fn pv_15_two_hosts_listing_one_container_name_place_it_under_the_older_node() {
        let report =
            json!({"docker": "installed", "boot_id": "boot-a", "containers": [{"name": "shop"}]});
        let shop = inside("boot-a");
        let nodes = [
            PlacementInput {
                id: NodeId(9),
                container: None,
                host_report: Some(&report),
            },
            PlacementInput {
                id: NodeId(5),
                container: None,
                host_report: Some(&report),
            },
            PlacementInput {
                id: NodeId(6),
                container: Some("shop"),
                host_report: Some(&shop),
            },
        ];
        assert_eq!(
            placements(&nodes)[&NodeId(6)],
            Placement::Container {
                host_node_id: NodeId(5)
            }
        );
    }

    #[test]
    fn issue_27_a_host_listing_another_nodes_container_does_not_place_it_without_its_word() {
        let real = json!({"docker": "installed", "boot_id": "boot-real",
                          "containers": [{"name": "shop"}]});
        // An older node lists the same container name: by name alone it would win.
        let claimer = json!({"docker": "installed", "boot_id": "boot-claimer",
                             "containers": [{"name": "shop"}]});
        let place_shop = |shop_report: Option<&Value>| {
            let nodes = [
                PlacementInput {
                    id: NodeId(2),
                    container: None,
                    host_report: Some(&claimer),
                },
                PlacementInput {
                    id: NodeId(8),
                    container: None,
                    host_report: Some(&real),
                },
                PlacementInput {
                    id: NodeId(5),
                    container: Some("shop"),
                    host_report: shop_report,
                },
            ];
            let placed = placements(&nodes);
            assert_eq!(placed[&NodeId(2)], Placement::Host);
            placed[&NodeId(5)]
        };
        // The contained node's own report shares the real host's kernel: placed there, not
        // under the older node that claims it.
        assert_eq!(
            place_shop(Some(&inside("boot-real"))),
            Placement::Container {
                host_node_id: NodeId(8)
            }
        );
        // Without its own report, with a report of another kernel, or of none: no host.
        assert_eq!(place_shop(None), Placement::Machine);
        assert_eq!(place_shop(Some(&inside("boot-other"))), Placement::Machine);
        assert_eq!(
            place_shop(Some(&json!({"boot_id": null}))),
            Placement::Machine
        );
        let blank_host =
            json!({"docker": "installed", "boot_id": "", "containers": [{"name": "shop"}]});
        let blank = inside("");
        let both_blank = [
            PlacementInput {
                id: NodeId(1),
                container: None,
                host_report: Some(&blank_host),
            },
            PlacementInput {
                id: NodeId(5),
                container: Some("shop"),
                host_report: Some(&blank),
            },
        ];
        assert_eq!(placements(&both_blank)[&NodeId(5)], Placement::Machine);
    }

    #[test]
    fn pv_15_odd_host_reports_never_panic() {
        let odd = json!({"docker": "installed", "containers": "many"});
        let odder = json!({"docker": 3, "containers": [1, {"name": 2}]});
        let nodes = [
            PlacementInput {
                id: NodeId(1),
                container: Some("x"),
                host_report: Some(&odd),
            },
            PlacementInput {
                id: NodeId(2),
                container: None,
                host_report: Some(&odder),
            },
        ];
        let placed = placements(&nodes);
        assert_eq!(placed[&NodeId(1)], Placement::Host);
        assert_eq!(placed[&NodeId(2)], Placement::Machine);
    }
}
