//! Hosts and placement (PV-14..PV-17): a Docker host's placement record, the link to the host's
//! own node, its soft delete, and where host-scope work goes.
//!
//! PV-14: a record holds "address, container count vs `mgh_max_sites`, provisioning-enabled
//! flag, and the host's own node, set by host-join approval, by each host report (a live link
//! is never re-pointed), or by hand". PV-16: "host delete (soft): refused while any container
//! site names the host or while its own agent node is live." PV-17: "host-scope work goes
//! container → host record → the host's node → job on the host's agent."

use super::NodeId;

/// A placement record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    pub id: i64,
    pub address: String,
    pub max_sites: u32,
    pub provisioning_enabled: bool,
    /// The host's own node (its host agent).
    pub node: Option<NodeId>,
    pub deleted: bool,
}

/// A node as placement sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacedNode {
    pub id: NodeId,
    /// The placement record its container names.
    pub host: Option<i64>,
    /// Whether it is live (exists, not retired or left).
    pub live: bool,
}

/// Why a placement act is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementRefusal {
    #[error("host {host} still has {count} container site(s) placed on it")]
    HasContainers { host: i64, count: usize },
    #[error("host {host}'s own agent node {node} is live")]
    HostNodeLive { host: i64, node: NodeId },
    #[error(
        "host {host} is already linked to live node {linked}; a live link is never re-pointed"
    )]
    LiveLink { host: i64, linked: NodeId },
    #[error("node {0} names no host")]
    NotPlaced(NodeId),
    #[error("node {node}'s host {host} is not on record (or was deleted)")]
    NoHost { node: NodeId, host: i64 },
    #[error("host {0} has no node of its own yet: pair the host's agent")]
    HostUnpaired(i64),
}

fn live(nodes: &[PlacedNode], id: NodeId) -> bool {
    nodes.iter().any(|node| node.id == id && node.live)
}

/// The containers placed on `host` (siblings are found by the host id only, PV-17).
pub fn containers(host: &Host, nodes: &[PlacedNode]) -> usize {
    nodes
        .iter()
        .filter(|node| node.host == Some(host.id) && node.live && Some(node.id) != host.node)
        .count()
}

/// Whether the host has room for one more site and may be chosen by provisioning.
pub fn has_room(host: &Host, nodes: &[PlacedNode]) -> bool {
    !host.deleted && host.provisioning_enabled && containers(host, nodes) < host.max_sites as usize
}

/// PV-14: links the host's own node; a live link to another node is never re-pointed.
pub fn link_host_node(
    host: &Host,
    node: NodeId,
    nodes: &[PlacedNode],
) -> Result<Host, PlacementRefusal> {
    if let Some(linked) = host.node {
        if linked != node && live(nodes, linked) {
            return Err(PlacementRefusal::LiveLink {
                host: host.id,
                linked,
            });
        }
    }
    Ok(Host {
        node: Some(node),
        ..host.clone()
    })
}

/// PV-16: the soft delete, refused while anything lives on the host.
pub fn delete(host: &Host, nodes: &[PlacedNode]) -> Result<Host, PlacementRefusal> {
    let count = containers(host, nodes);
    if count > 0 {
        return Err(PlacementRefusal::HasContainers {
            host: host.id,
            count,
        });
    }
    if let Some(node) = host.node.filter(|node| live(nodes, *node)) {
        return Err(PlacementRefusal::HostNodeLive {
            host: host.id,
            node,
        });
    }
    Ok(Host {
        deleted: true,
        ..host.clone()
    })
}

/// PV-17: the node whose agent runs host-scope work for `container`.
pub fn route_host_work(container: &PlacedNode, hosts: &[Host]) -> Result<NodeId, PlacementRefusal> {
    let host_id = container
        .host
        .ok_or(PlacementRefusal::NotPlaced(container.id))?;
    let host = hosts
        .iter()
        .find(|host| host.id == host_id && !host.deleted)
        .ok_or(PlacementRefusal::NoHost {
            node: container.id,
            host: host_id,
        })?;
    host.node.ok_or(PlacementRefusal::HostUnpaired(host.id))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn host() -> Host {
        Host {
            id: 3,
            address: "203.0.113.20".into(),
            max_sites: 2,
            provisioning_enabled: true,
            node: Some(NodeId(30)),
            deleted: false,
        }
    }

    fn placed(id: i64, host: Option<i64>, live: bool) -> PlacedNode {
        PlacedNode {
            id: NodeId(id),
            host,
            live,
        }
    }

    #[test]
    fn pv_14_the_host_agent_is_not_counted_as_a_site_and_room_follows_max_sites() {
        let nodes = [placed(30, Some(3), true), placed(31, Some(3), true)];
        assert_eq!(containers(&host(), &nodes), 1);
        assert!(has_room(&host(), &nodes));
        let full = [
            nodes[0].clone(),
            nodes[1].clone(),
            placed(32, Some(3), true),
        ];
        assert!(!has_room(&host(), &full));
        let closed = Host {
            provisioning_enabled: false,
            ..host()
        };
        assert!(!has_room(&closed, &nodes));
    }

    #[test]
    fn pv_14_a_live_link_is_never_re_pointed_but_a_dead_one_is() {
        let refused = link_host_node(&host(), NodeId(40), &[placed(30, Some(3), true)]);
        assert_eq!(
            refused,
            Err(PlacementRefusal::LiveLink {
                host: 3,
                linked: NodeId(30)
            })
        );
        let relinked = link_host_node(&host(), NodeId(40), &[placed(30, Some(3), false)]).unwrap();
        assert_eq!(relinked.node, Some(NodeId(40)));
        let unlinked = Host {
            node: None,
            ..host()
        };
        assert_eq!(
            link_host_node(&unlinked, NodeId(40), &[]).unwrap().node,
            Some(NodeId(40))
        );
    }

    #[test]
    fn pv_16_a_host_is_not_deleted_while_a_container_or_its_own_node_lives() {
        assert_eq!(
            delete(&host(), &[placed(31, Some(3), true)]),
            Err(PlacementRefusal::HasContainers { host: 3, count: 1 })
        );
        assert_eq!(
            delete(&host(), &[placed(30, Some(3), true)]),
            Err(PlacementRefusal::HostNodeLive {
                host: 3,
                node: NodeId(30)
            })
        );
        let gone = delete(
            &host(),
            &[placed(30, Some(3), false), placed(31, Some(3), false)],
        );
        assert!(gone.unwrap().deleted);
    }

    #[test]
    fn pv_17_host_scope_work_goes_to_the_hosts_own_agent() {
        let container = placed(31, Some(3), true);
        assert_eq!(route_host_work(&container, &[host()]), Ok(NodeId(30)));
        assert_eq!(
            route_host_work(&placed(50, None, true), &[host()]),
            Err(PlacementRefusal::NotPlaced(NodeId(50)))
        );
        let deleted = Host {
            deleted: true,
            ..host()
        };
        assert!(matches!(
            route_host_work(&container, &[deleted]),
            Err(PlacementRefusal::NoHost { .. })
        ));
        let unpaired = Host {
            node: None,
            ..host()
        };
        assert_eq!(
            route_host_work(&container, &[unpaired]),
            Err(PlacementRefusal::HostUnpaired(3))
        );
    }
}
