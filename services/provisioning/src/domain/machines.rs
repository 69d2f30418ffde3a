//! Machines: adopting a cloud server for a node (PV-52), the inventory of managed nodes and of
//! servers in our accounts with no node (PV-53), and the inventory's colours (PV-54).
//!
//! PV-52: "match by address (host beats join). Adopt only when exactly one server is at the
//! strongest match, it is the one the panel showed, and no other node's provision records it.
//! Otherwise adopt nothing and name the candidates."

use std::fmt;
use std::net::IpAddr;

use capstan_events::provisioning::{AccountFlag, InstallState};
use chrono::{DateTime, Duration, NaiveDate, Utc};

use super::install::NodeInstall;
use super::NodeId;

/// A written-down machine unconfirmed this long is amber (PV-54's 90 days).
pub const UNCONFIRMED_AFTER_DAYS: i64 = 90;

/// When Ubuntu's standard support ends for each LTS release (`UBUNTU_SUPPORT_ENDS`, PV-54):
/// Canonical's published end of standard support, the last day of the month named.
pub const UBUNTU_SUPPORT_ENDS: &[(&str, (i32, u32, u32))] = &[
    ("14.04", (2019, 4, 30)),
    ("16.04", (2021, 4, 30)),
    ("18.04", (2023, 5, 31)),
    ("20.04", (2025, 5, 31)),
    ("22.04", (2027, 6, 30)),
    ("24.04", (2029, 6, 30)),
];

/// A server in one of our accounts, as its provider lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CloudServer {
    pub account_id: i64,
    pub flag: AccountFlag,
    pub instance_id: String,
    pub addresses: Vec<IpAddr>,
    pub region: String,
    /// The image it was made from (a release may be read from it).
    pub image: String,
}

/// What a node offers to match by.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeAddresses {
    pub node_id: NodeId,
    /// The node's own host address (the strongest match).
    pub host: Option<IpAddr>,
    /// The addresses its agent reported at its join.
    pub joined_from: Vec<IpAddr>,
}

/// Why nothing was adopted; each names the candidates.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdoptRefusal {
    #[error("no server in our accounts is at this node's addresses")]
    NoMatch,
    #[error("{} servers match equally; adopt nothing until one is named: {}", .0.len(), .0.join(", "))]
    Several(Vec<String>),
    #[error("the matching server is {found}, not {shown}, which the page showed")]
    NotTheOneShown { found: String, shown: String },
    #[error("server {instance} is already recorded by node {node}'s provision")]
    RecordedByOther { instance: String, node: NodeId },
}

/// PV-52: the server to adopt for `node`, given every held account's servers, the one the
/// panel showed, and which instances other nodes' provisions record.
pub fn adopt<'a>(
    node: &NodeAddresses,
    servers: &'a [CloudServer],
    shown: &str,
    recorded: &[(String, NodeId)],
) -> Result<&'a CloudServer, AdoptRefusal> {
    let at = |address: &IpAddr| -> Vec<&'a CloudServer> {
        servers
            .iter()
            .filter(|server| server.addresses.contains(address))
            .collect()
    };
    // Host beats join: the join's addresses are asked only when the host's matches nothing.
    let mut candidates = node.host.as_ref().map(at).unwrap_or_default();
    if candidates.is_empty() {
        for address in &node.joined_from {
            for server in at(address) {
                if !candidates.contains(&server) {
                    candidates.push(server);
                }
            }
        }
    }
    let found = match candidates.as_slice() {
        [] => return Err(AdoptRefusal::NoMatch),
        [one] => *one,
        several => {
            return Err(AdoptRefusal::Several(
                several
                    .iter()
                    .map(|server| format!("{} (account {})", server.instance_id, server.account_id))
                    .collect(),
            ))
        }
    };
    if found.instance_id != shown {
        return Err(AdoptRefusal::NotTheOneShown {
            found: found.instance_id.clone(),
            shown: shown.to_string(),
        });
    }
    if let Some((_, other)) = recorded
        .iter()
        .find(|(instance, other)| *instance == found.instance_id && *other != node.node_id)
    {
        return Err(AdoptRefusal::RecordedByOther {
            instance: found.instance_id.clone(),
            node: *other,
        });
    }
    Ok(found)
}

/// What is written down about a machine (PV-53's "purpose, owner, what it serves, release,
/// retire-by"), and when it was last confirmed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Note {
    pub purpose: String,
    pub owner: String,
    pub serves: String,
    pub release: String,
    pub retire_by: Option<NaiveDate>,
    pub confirmed_at: Option<DateTime<Utc>>,
}

impl Note {
    fn is_empty(&self) -> bool {
        self.purpose.trim().is_empty()
            && self.owner.trim().is_empty()
            && self.serves.trim().is_empty()
            && self.release.trim().is_empty()
            && self.retire_by.is_none()
    }
}

/// A node as the inventory sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedNode {
    pub node_id: NodeId,
    pub addresses: Vec<IpAddr>,
    /// A container site is not a machine (PV-53).
    pub container: bool,
    pub has_agent: bool,
    pub install: NodeInstall,
    /// The OS its host report names (`Ubuntu 22.04.4 LTS`).
    pub os: Option<String>,
    pub note: Option<Note>,
}

/// One line of the inventory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Machine<'a> {
    Managed(&'a ManagedNode),
    NotManaged(&'a CloudServer),
}

/// PV-53: every node that is not a container site (any install state), then every server in
/// our main accounts with no node at its addresses (the test account is left out).
pub fn inventory<'a>(nodes: &'a [ManagedNode], servers: &'a [CloudServer]) -> Vec<Machine<'a>> {
    let mut machines: Vec<Machine<'a>> = nodes
        .iter()
        .filter(|node| !node.container)
        .map(Machine::Managed)
        .collect();
    for server in servers {
        let has_node = nodes.iter().any(|node| {
            node.addresses
                .iter()
                .any(|address| server.addresses.contains(address))
        });
        if server.flag == AccountFlag::Main && !has_node {
            machines.push(Machine::NotManaged(server));
        }
    }
    machines
}

/// PV-54's colours.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Colour {
    Red,
    Amber,
    Plain,
}

impl fmt::Display for Colour {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(match self {
            Colour::Red => "red",
            Colour::Amber => "amber",
            Colour::Plain => "plain",
        })
    }
}

/// Whether `os` names an Ubuntu release past its standard support on `today`.
pub fn ubuntu_unsupported(os: &str, today: NaiveDate) -> bool {
    let Some(rest) = os.trim().strip_prefix("Ubuntu ") else {
        return false;
    };
    let version: String = rest.chars().take(5).collect();
    UBUNTU_SUPPORT_ENDS
        .iter()
        .find(|(release, _)| *release == version)
        .and_then(|(_, (year, month, day))| NaiveDate::from_ymd_opt(*year, *month, *day))
        .is_some_and(|ends| today > ends)
}

fn note_colour(note: &Note, now: DateTime<Utc>) -> Colour {
    if note.retire_by.is_some_and(|by| now.date_naive() > by) {
        return Colour::Red;
    }
    let unconfirmed = note
        .confirmed_at
        .is_none_or(|at| now - at > Duration::days(UNCONFIRMED_AFTER_DAYS));
    let serves_nothing = note.serves.trim().is_empty() && note.retire_by.is_none();
    if unconfirmed || serves_nothing {
        Colour::Amber
    } else {
        Colour::Plain
    }
}

/// PV-54 for a server with no node: amber while nothing is written about it, else as what is
/// written says (a retire-by passed is red; unconfirmed for 90 days, or serving nothing with no
/// retire-by, is amber).
pub fn server_colour(note: Option<&Note>, now: DateTime<Utc>) -> Colour {
    match note.filter(|note| !note.is_empty()) {
        None => Colour::Amber,
        Some(note) => note_colour(note, now),
    }
}

/// How the inventory names a machine (the `{id}` of `PUT /api/v1/machines/{id}`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MachineId {
    /// `node-<id>`: a managed node.
    Node(NodeId),
    /// `server-<account id>-<instance id>`: a server in one of our accounts with no node.
    Server {
        account_id: i64,
        instance_id: String,
    },
}

impl MachineId {
    /// Reads `node-17` or `server-3-12345`, or says what a machine's id looks like.
    pub fn parse(text: &str) -> Result<MachineId, String> {
        let wrong = || {
            format!(
                "{text:?} is not a machine's id: node-<node id> or server-<account id>-<instance id>"
            )
        };
        if let Some(node) = text.strip_prefix("node-") {
            let id: i64 = node.parse().map_err(|_| wrong())?;
            if id <= 0 {
                return Err(wrong());
            }
            return Ok(MachineId::Node(NodeId(id)));
        }
        let rest = text.strip_prefix("server-").ok_or_else(wrong)?;
        let (account, instance) = rest.split_once('-').ok_or_else(wrong)?;
        let account_id: i64 = account.parse().map_err(|_| wrong())?;
        let instance_ok = !instance.is_empty()
            && instance.len() <= 100
            && instance
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
        if account_id <= 0 || !instance_ok {
            return Err(wrong());
        }
        Ok(MachineId::Server {
            account_id,
            instance_id: instance.to_string(),
        })
    }
}

impl fmt::Display for MachineId {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            MachineId::Node(node) => write!(formatter, "node-{node}"),
            MachineId::Server {
                account_id,
                instance_id,
            } => write!(formatter, "server-{account_id}-{instance_id}"),
        }
    }
}

/// PV-54: red for an Ubuntu past standard support or a retire-by passed; amber for nothing
/// written (an unmanaged server, an agentless node), a note unconfirmed for 90 days, a note
/// that serves nothing and has no retire-by, a retired source, a failed install.
pub fn colour(machine: &Machine<'_>, now: DateTime<Utc>) -> Colour {
    match machine {
        Machine::NotManaged(_) => Colour::Amber,
        Machine::Managed(node) => {
            if node
                .os
                .as_deref()
                .is_some_and(|os| ubuntu_unsupported(os, now.date_naive()))
            {
                return Colour::Red;
            }
            let note = node.note.as_ref().filter(|note| !note.is_empty());
            let from_note = note.map(|note| note_colour(note, now));
            if from_note == Some(Colour::Red) {
                return Colour::Red;
            }
            let failed_or_retired = matches!(
                node.install,
                NodeInstall::State(InstallState::InstallFailed | InstallState::Retired)
            );
            if failed_or_retired
                || (!node.has_agent && note.is_none())
                || from_note == Some(Colour::Amber)
            {
                Colour::Amber
            } else {
                Colour::Plain
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn server(id: &str, account: i64, address: &str) -> CloudServer {
        CloudServer {
            account_id: account,
            flag: AccountFlag::Main,
            instance_id: id.into(),
            addresses: vec![ip(address)],
            region: "us-east".into(),
            image: "linode/ubuntu24.04".into(),
        }
    }

    fn node() -> NodeAddresses {
        NodeAddresses {
            node_id: NodeId(7),
            host: Some(ip("203.0.113.5")),
            joined_from: vec![ip("203.0.113.6")],
        }
    }

    #[test]
    fn pv_52_the_host_address_beats_the_join_address() {
        let servers = [
            server("at-join", 1, "203.0.113.6"),
            server("at-host", 2, "203.0.113.5"),
        ];
        assert_eq!(
            adopt(&node(), &servers, "at-host", &[]).map(|s| s.instance_id.as_str()),
            Ok("at-host")
        );
        // With nothing at the host address, the join's address is matched.
        let only_join = [server("at-join", 1, "203.0.113.6")];
        assert_eq!(
            adopt(&node(), &only_join, "at-join", &[]).map(|s| s.instance_id.as_str()),
            Ok("at-join")
        );
    }

    #[test]
    fn pv_52_two_servers_at_the_strongest_match_adopt_nothing_and_are_named() {
        let servers = [server("a", 1, "203.0.113.5"), server("b", 2, "203.0.113.5")];
        let refused = adopt(&node(), &servers, "a", &[]).unwrap_err();
        assert_eq!(
            refused.to_string(),
            "2 servers match equally; adopt nothing until one is named: a (account 1), b (account 2)"
        );
        assert_eq!(adopt(&node(), &[], "a", &[]), Err(AdoptRefusal::NoMatch));
    }

    #[test]
    fn pv_52_only_the_server_the_panel_showed_and_not_recorded_by_another_node() {
        let servers = [server("a", 1, "203.0.113.5")];
        assert_eq!(
            adopt(&node(), &servers, "z", &[]),
            Err(AdoptRefusal::NotTheOneShown {
                found: "a".into(),
                shown: "z".into()
            })
        );
        assert_eq!(
            adopt(&node(), &servers, "a", &[("a".into(), NodeId(9))]),
            Err(AdoptRefusal::RecordedByOther {
                instance: "a".into(),
                node: NodeId(9)
            })
        );
        // Its own provision recording it is no refusal.
        assert!(adopt(&node(), &servers, "a", &[("a".into(), NodeId(7))]).is_ok());
    }

    fn now() -> DateTime<Utc> {
        Utc.with_ymd_and_hms(2026, 12, 7, 12, 0, 0).unwrap()
    }

    fn managed(id: i64, address: &str) -> ManagedNode {
        ManagedNode {
            node_id: NodeId(id),
            addresses: vec![ip(address)],
            container: false,
            has_agent: true,
            install: NodeInstall::Operational,
            os: Some("Ubuntu 24.04.1 LTS".into()),
            note: None,
        }
    }

    #[test]
    fn pv_53_containers_are_not_machines_and_only_main_account_servers_without_a_node_are_listed() {
        let container = ManagedNode {
            container: true,
            ..managed(2, "203.0.113.1")
        };
        let nodes = [managed(1, "203.0.113.1"), container];
        let mut test = server("t", 3, "203.0.113.9");
        test.flag = AccountFlag::Test;
        let servers = [
            server("has-node", 1, "203.0.113.1"),
            server("loose", 1, "203.0.113.2"),
            test,
        ];
        let listed = inventory(&nodes, &servers);
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0], Machine::Managed(&nodes[0]));
        assert_eq!(listed[1], Machine::NotManaged(&servers[1]));
    }

    #[test]
    fn pv_54_a_server_with_no_node_is_amber_until_something_is_written_then_as_written() {
        assert_eq!(server_colour(None, now()), Colour::Amber);
        assert_eq!(server_colour(Some(&Note::default()), now()), Colour::Amber);
        let written = Note {
            serves: "the mail relay".into(),
            confirmed_at: Some(now() - Duration::days(3)),
            ..Note::default()
        };
        assert_eq!(server_colour(Some(&written), now()), Colour::Plain);
        let past = Note {
            retire_by: NaiveDate::from_ymd_opt(2026, 1, 1),
            ..written
        };
        assert_eq!(server_colour(Some(&past), now()), Colour::Red);
    }

    #[test]
    fn pv_53_a_machine_id_names_a_node_or_a_server_in_an_account_and_nothing_else() {
        assert_eq!(MachineId::parse("node-17"), Ok(MachineId::Node(NodeId(17))));
        let server = MachineId::parse("server-3-12345").unwrap();
        assert_eq!(
            server,
            MachineId::Server {
                account_id: 3,
                instance_id: "12345".into()
            }
        );
        assert_eq!(server.to_string(), "server-3-12345");
        for bad in [
            "",
            "node-",
            "node-0",
            "node-x",
            "server-3",
            "server-x-1",
            "server-3-",
            "host-1",
            "server-3-a b",
        ] {
            assert!(MachineId::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn pv_54_red_for_ubuntu_past_support_or_a_retire_by_passed() {
        let old = ManagedNode {
            os: Some("Ubuntu 20.04.6 LTS".into()),
            ..managed(1, "203.0.113.1")
        };
        assert_eq!(colour(&Machine::Managed(&old), now()), Colour::Red);
        assert!(!ubuntu_unsupported(
            "Debian GNU/Linux 12",
            now().date_naive()
        ));
        let retiring = ManagedNode {
            note: Some(Note {
                serves: "mail".into(),
                retire_by: NaiveDate::from_ymd_opt(2026, 12, 1),
                confirmed_at: Some(now()),
                ..Note::default()
            }),
            ..managed(1, "203.0.113.1")
        };
        assert_eq!(colour(&Machine::Managed(&retiring), now()), Colour::Red);
    }

    #[test]
    fn pv_54_amber_for_nothing_written_unconfirmed_serving_nothing_failed_or_retired() {
        let loose = server("loose", 1, "203.0.113.2");
        assert_eq!(colour(&Machine::NotManaged(&loose), now()), Colour::Amber);
        let agentless = ManagedNode {
            has_agent: false,
            ..managed(1, "203.0.113.1")
        };
        assert_eq!(colour(&Machine::Managed(&agentless), now()), Colour::Amber);
        let confirmed = Note {
            serves: "the shop".into(),
            confirmed_at: Some(now() - Duration::days(10)),
            ..Note::default()
        };
        let written = ManagedNode {
            note: Some(confirmed.clone()),
            ..agentless.clone()
        };
        assert_eq!(colour(&Machine::Managed(&written), now()), Colour::Plain);
        let stale = ManagedNode {
            note: Some(Note {
                confirmed_at: Some(now() - Duration::days(91)),
                ..confirmed.clone()
            }),
            ..agentless.clone()
        };
        assert_eq!(colour(&Machine::Managed(&stale), now()), Colour::Amber);
        let serves_nothing = ManagedNode {
            note: Some(Note {
                serves: String::new(),
                ..confirmed
            }),
            ..agentless
        };
        assert_eq!(
            colour(&Machine::Managed(&serves_nothing), now()),
            Colour::Amber
        );
        for state in [InstallState::InstallFailed, InstallState::Retired] {
            let node = ManagedNode {
                install: NodeInstall::State(state),
                ..managed(1, "203.0.113.1")
            };
            assert_eq!(colour(&Machine::Managed(&node), now()), Colour::Amber);
        }
        assert_eq!(
            colour(&Machine::Managed(&managed(1, "203.0.113.1")), now()),
            Colour::Plain
        );
    }
}
