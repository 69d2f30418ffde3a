//! Auto-approval of a provisioned machine's join (AC-08..AC-13), as one pure function over the
//! join, the provisions, what the provider reports now and the nodes.
//!
//! AC-08: "approves a pending join only when all five hold. (1) Its source IPv4/IPv6 belongs to
//! a provision in state installing or done. (2) Its claimed name is exactly the provision's site
//! name (site agent) or `<site>-host` (host agent). (3) Its key equals the expected key and has
//! not been used. (4) The cloud provider reports the instance running at that address. (5) The
//! site node has no agent yet, or no host agent is paired on the machine. ... Joins from machines
//! the plane did not provision are never auto-approved."
//! AC-09: a join that matches a provision but fails stays pending with its reasons; "a key that
//! differs from the install's is shown red". AC-11: "A second join from that address after the
//! node's agent is admitted is refused and logged as an alarm."

use std::fmt;
use std::net::IpAddr;

use capstan_events::provisioning::{AccountFlag, InstallKind, ProvisionStep};

use super::NodeId;

/// The suffix of a Docker host's own agent's name (AC-12, PV-09).
pub const HOST_SUFFIX: &str = "-host";

/// A pending join as the agent channel holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Join {
    pub id: uuid::Uuid,
    pub name: String,
    pub address: IpAddr,
    pub fingerprint: String,
}

/// A provision as this service holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision {
    pub id: i64,
    pub name: String,
    pub kind: InstallKind,
    pub step: ProvisionStep,
    pub flag: AccountFlag,
    /// Every address the provider gave the instance (IPv4 and IPv6).
    pub addresses: Vec<IpAddr>,
    /// The key fingerprint the install printed (AC-10), for the agent this kind joins with.
    pub expected_key: Option<String>,
    /// The node registered for it, which its agent's join is bound to.
    pub node_id: Option<NodeId>,
}

/// What the provider says about the provision's instance now (AC-08 (4)).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProviderReport {
    Running {
        addresses: Vec<IpAddr>,
    },
    NotRunning {
        status: String,
    },
    Gone,
    /// The provider could not be asked (a timeout, a refusal): nothing is approved on silence.
    Unanswered {
        why: String,
    },
}

/// A node as the plane knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub addresses: Vec<IpAddr>,
    /// The fingerprint of the key it was approved with (empty when none).
    pub fingerprint: String,
    /// Whether an agent is paired with it now.
    pub paired: bool,
}

/// Why a join that matches a provision stays pending (AC-09's words).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reason {
    ProvisionNotInstalling { step: ProvisionStep },
    WrongName { claimed: String, expected: String },
    NoKeyRecorded,
    KeyDiffers,
    KeyUsed { node: NodeId },
    ProviderNotRunning { status: String },
    ProviderElsewhere,
    ProviderGone,
    ProviderUnanswered { why: String },
    AlreadyHasAgent { node: NodeId },
}

impl fmt::Display for Reason {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Reason::ProvisionNotInstalling { step } => write!(
                formatter,
                "the provision at this address is {step}, not installing or done"
            ),
            Reason::WrongName { claimed, expected } => write!(
                formatter,
                "the join is named {claimed:?}; this provision's agent is {expected:?}"
            ),
            Reason::NoKeyRecorded => {
                formatter.write_str("no key was recorded from this provision's install")
            }
            Reason::KeyDiffers => {
                formatter.write_str("the key does not match the one the install showed")
            }
            Reason::KeyUsed { node } => {
                write!(formatter, "the key was already used by node {node}")
            }
            Reason::ProviderNotRunning { status } => write!(
                formatter,
                "the provider reports the instance {status}, not running"
            ),
            Reason::ProviderElsewhere => {
                formatter.write_str("the provider reports the instance running at other addresses")
            }
            Reason::ProviderGone => formatter.write_str("the provider has no such instance"),
            Reason::ProviderUnanswered { why } => {
                write!(formatter, "the provider could not be asked: {why}")
            }
            Reason::AlreadyHasAgent { node } => {
                write!(
                    formatter,
                    "node {node} already has an agent on this machine"
                )
            }
        }
    }
}

impl Reason {
    /// A reason that may pass without anyone acting (the provider did not answer; the install's
    /// key is not recorded yet): the join is judged again within seconds rather than at the next
    /// minute's pass (AC-08: "every minute and on each join").
    pub fn may_pass_by_itself(&self) -> bool {
        matches!(
            self,
            Reason::ProviderUnanswered { .. } | Reason::NoKeyRecorded
        )
    }
}

/// The verdict on one pending join.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// No provision has this address: never auto-approved, nothing to explain (AC-08).
    NotProvisioned,
    /// All five hold.
    Approve { provision_id: i64 },
    /// It matches a provision but fails these (AC-09); `key_differs` is shown red.
    Pending {
        provision_id: i64,
        reasons: Vec<Reason>,
        key_differs: bool,
    },
}

/// The name the provision's agent joins with: `<name>-host` for a Docker host (AC-12).
pub fn expected_name(provision: &Provision) -> String {
    match provision.kind {
        InstallKind::DockerHost => format!("{}{HOST_SUFFIX}", provision.name),
        InstallKind::Agent | InstallKind::Site => provision.name.clone(),
    }
}

fn counts(step: ProvisionStep) -> bool {
    matches!(step, ProvisionStep::Installing | ProvisionStep::Done)
}

/// The provision the join's address belongs to: one installing or done before any other.
pub fn matching<'a>(join: &Join, provisions: &'a [Provision]) -> Option<&'a Provision> {
    let at_address = provisions
        .iter()
        .filter(|provision| provision.addresses.contains(&join.address));
    let mut first = None;
    for provision in at_address {
        if counts(provision.step) {
            return Some(provision);
        }
        first.get_or_insert(provision);
    }
    first
}

/// AC-08's verdict on `join`. `report` is the provider's word on the matching provision's
/// instance (asked only when one matches).
pub fn verdict(
    join: &Join,
    provisions: &[Provision],
    report: &ProviderReport,
    nodes: &[Node],
) -> Verdict {
    let Some(provision) = matching(join, provisions) else {
        return Verdict::NotProvisioned;
    };
    let mut reasons = Vec::new();
    // (1) installing or done.
    if !counts(provision.step) {
        reasons.push(Reason::ProvisionNotInstalling {
            step: provision.step,
        });
    }
    // (2) exactly the provision's name (or `<name>-host`).
    let expected = expected_name(provision);
    if join.name != expected {
        reasons.push(Reason::WrongName {
            claimed: join.name.clone(),
            expected: expected.clone(),
        });
    }
    // (3) the expected key, unused.
    let key_differs = match &provision.expected_key {
        None => {
            reasons.push(Reason::NoKeyRecorded);
            false
        }
        Some(key) if *key != join.fingerprint => {
            reasons.push(Reason::KeyDiffers);
            true
        }
        Some(_) => false,
    };
    if let Some(user) = nodes
        .iter()
        .find(|node| !node.fingerprint.is_empty() && node.fingerprint == join.fingerprint)
    {
        reasons.push(Reason::KeyUsed { node: user.id });
    }
    // (4) the provider reports it running at this address, now.
    match report {
        ProviderReport::Running { addresses } if addresses.contains(&join.address) => {}
        ProviderReport::Running { .. } => reasons.push(Reason::ProviderElsewhere),
        ProviderReport::NotRunning { status } => reasons.push(Reason::ProviderNotRunning {
            status: status.clone(),
        }),
        ProviderReport::Gone => reasons.push(Reason::ProviderGone),
        ProviderReport::Unanswered { why } => {
            reasons.push(Reason::ProviderUnanswered { why: why.clone() })
        }
    }
    // (5) no agent yet for this machine's node of that name.
    if let Some(admitted) = admitted(provision, &expected, nodes) {
        reasons.push(Reason::AlreadyHasAgent { node: admitted });
    }
    if reasons.is_empty() {
        Verdict::Approve {
            provision_id: provision.id,
        }
    } else {
        Verdict::Pending {
            provision_id: provision.id,
            reasons,
            key_differs,
        }
    }
}

/// The paired node of the provision's machine, if its agent is admitted: the provision's own
/// node, or a node of the agent's name at one of the machine's addresses.
fn admitted(provision: &Provision, name: &str, nodes: &[Node]) -> Option<NodeId> {
    nodes
        .iter()
        .find(|node| {
            node.paired && Some(node.id) == provision.node_id
                || node.paired
                    && node.name == name
                    && node
                        .addresses
                        .iter()
                        .any(|address| provision.addresses.contains(address))
        })
        .map(|node| node.id)
}

/// AC-11's alarm: a join from a provision's address after that machine's agent was admitted.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SecondJoin {
    pub provision_id: i64,
    pub admitted: NodeId,
    pub address: IpAddr,
}

/// A second join from a provision's address once its agent is admitted: refused and alarmed.
pub fn second_join(join: &Join, provisions: &[Provision], nodes: &[Node]) -> Option<SecondJoin> {
    let provision = matching(join, provisions)?;
    let admitted = admitted(provision, &expected_name(provision), nodes)?;
    Some(SecondJoin {
        provision_id: provision.id,
        admitted,
        address: join.address,
    })
}

/// AC-13: the account tab a join shows on: its provision's flag, or `None` (both tabs) for an
/// address no provision has.
pub fn join_account(join: &Join, provisions: &[Provision]) -> Option<AccountFlag> {
    matching(join, provisions).map(|provision| provision.flag)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V4: &str = "203.0.113.10";
    const V6: &str = "2001:db8::10";

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn provision() -> Provision {
        Provision {
            id: 5,
            name: "shop".into(),
            kind: InstallKind::Site,
            step: ProvisionStep::Installing,
            flag: AccountFlag::Main,
            addresses: vec![ip(V4), ip(V6)],
            expected_key: Some("SHA256:good".into()),
            node_id: None,
        }
    }

    fn join() -> Join {
        Join {
            id: uuid::Uuid::from_u128(40),
            name: "shop".into(),
            address: ip(V4),
            fingerprint: "SHA256:good".into(),
        }
    }

    fn running() -> ProviderReport {
        ProviderReport::Running {
            addresses: vec![ip(V4), ip(V6)],
        }
    }

    fn pending(verdict: Verdict) -> (Vec<String>, bool) {
        match verdict {
            Verdict::Pending {
                reasons,
                key_differs,
                provision_id: 5,
            } => (
                reasons.iter().map(ToString::to_string).collect(),
                key_differs,
            ),
            other => panic!("not pending: {other:?}"),
        }
    }

    #[test]
    fn ac_08_a_join_meeting_all_five_is_approved_from_either_address_family() {
        let nodes = [];
        assert_eq!(
            verdict(&join(), &[provision()], &running(), &nodes),
            Verdict::Approve { provision_id: 5 }
        );
        let from_v6 = Join {
            address: ip(V6),
            ..join()
        };
        let done = Provision {
            step: ProvisionStep::Done,
            ..provision()
        };
        assert_eq!(
            verdict(&from_v6, &[done], &running(), &nodes),
            Verdict::Approve { provision_id: 5 }
        );
    }

    #[test]
    fn ac_08_a_join_from_an_address_no_provision_has_is_never_auto_approved() {
        let stranger = Join {
            address: ip("198.51.100.7"),
            ..join()
        };
        assert_eq!(
            verdict(&stranger, &[provision()], &running(), &[]),
            Verdict::NotProvisioned
        );
    }

    #[test]
    fn ac_08_1_a_provision_neither_installing_nor_done_holds_the_join() {
        let booting = Provision {
            step: ProvisionStep::Booting,
            ..provision()
        };
        let (reasons, _) = pending(verdict(&join(), &[booting], &running(), &[]));
        assert_eq!(
            reasons,
            ["the provision at this address is booting, not installing or done"]
        );
    }

    #[test]
    fn ac_08_2_the_name_must_be_exactly_the_provisions_or_name_host_for_a_docker_host() {
        let other = Join {
            name: "shop2".into(),
            ..join()
        };
        let (reasons, _) = pending(verdict(&other, &[provision()], &running(), &[]));
        assert_eq!(
            reasons,
            ["the join is named \"shop2\"; this provision's agent is \"shop\""]
        );
        let host = Provision {
            kind: InstallKind::DockerHost,
            ..provision()
        };
        let host_join = Join {
            name: "shop-host".into(),
            ..join()
        };
        assert_eq!(
            verdict(&host_join, std::slice::from_ref(&host), &running(), &[]),
            Verdict::Approve { provision_id: 5 }
        );
        assert!(matches!(
            verdict(&join(), &[host], &running(), &[]),
            Verdict::Pending { .. }
        ));
    }

    #[test]
    fn ac_09_no_recorded_key_and_a_differing_key_are_explained_and_a_differing_key_is_red() {
        let unrecorded = Provision {
            expected_key: None,
            ..provision()
        };
        let (reasons, red) = pending(verdict(&join(), &[unrecorded], &running(), &[]));
        assert_eq!(
            reasons,
            ["no key was recorded from this provision's install"]
        );
        assert!(!red);
        let other_key = Join {
            fingerprint: "SHA256:evil".into(),
            ..join()
        };
        let (reasons, red) = pending(verdict(&other_key, &[provision()], &running(), &[]));
        assert_eq!(
            reasons,
            ["the key does not match the one the install showed"]
        );
        assert!(red);
    }

    #[test]
    fn ac_08_3_a_key_already_used_by_a_node_holds_the_join() {
        let user = Node {
            id: NodeId(9),
            name: "elsewhere".into(),
            addresses: vec![ip("198.51.100.9")],
            fingerprint: "SHA256:good".into(),
            paired: false,
        };
        let (reasons, _) = pending(verdict(&join(), &[provision()], &running(), &[user]));
        assert_eq!(reasons, ["the key was already used by node 9"]);
    }

    #[test]
    fn ac_08_4_the_provider_must_report_the_instance_running_at_that_address_now() {
        let cases = [
            (
                ProviderReport::NotRunning {
                    status: "offline".into(),
                },
                "the provider reports the instance offline, not running",
            ),
            (
                ProviderReport::Running {
                    addresses: vec![ip("198.51.100.1")],
                },
                "the provider reports the instance running at other addresses",
            ),
            (ProviderReport::Gone, "the provider has no such instance"),
            (
                ProviderReport::Unanswered {
                    why: "timed out".into(),
                },
                "the provider could not be asked: timed out",
            ),
        ];
        for (report, said) in cases {
            let (reasons, _) = pending(verdict(&join(), &[provision()], &report, &[]));
            assert_eq!(reasons, [said]);
        }
    }

    #[test]
    fn ac_08_5_and_ac_11_a_second_join_after_the_agent_is_admitted_is_held_and_alarmed() {
        let admitted = Node {
            id: NodeId(12),
            name: "shop".into(),
            addresses: vec![ip(V4)],
            fingerprint: "SHA256:first".into(),
            paired: true,
        };
        let second = Join {
            fingerprint: "SHA256:good".into(),
            ..join()
        };
        let (reasons, _) = pending(verdict(
            &second,
            &[provision()],
            &running(),
            std::slice::from_ref(&admitted),
        ));
        assert_eq!(reasons, ["node 12 already has an agent on this machine"]);
        assert_eq!(
            second_join(&second, &[provision()], std::slice::from_ref(&admitted)),
            Some(SecondJoin {
                provision_id: 5,
                admitted: NodeId(12),
                address: ip(V4)
            })
        );
        // Before the agent is admitted (the node exists, unpaired) there is no alarm.
        let unpaired = Node {
            paired: false,
            fingerprint: String::new(),
            ..admitted.clone()
        };
        assert_eq!(
            second_join(&join(), &[provision()], std::slice::from_ref(&unpaired)),
            None
        );
        // The provision's own node, paired, is its admitted agent wherever it says it is.
        let own = Provision {
            node_id: Some(NodeId(12)),
            ..provision()
        };
        let elsewhere = Node {
            addresses: vec![ip("198.51.100.1")],
            ..admitted
        };
        assert_eq!(
            second_join(&second, &[own], &[elsewhere]).map(|alarm| alarm.admitted),
            Some(NodeId(12))
        );
    }

    #[test]
    fn ac_08_only_a_silent_provider_or_an_unrecorded_key_is_judged_again_soon() {
        assert!(Reason::NoKeyRecorded.may_pass_by_itself());
        assert!(Reason::ProviderUnanswered {
            why: "timeout".into()
        }
        .may_pass_by_itself());
        for lasting in [
            Reason::KeyDiffers,
            Reason::ProviderGone,
            Reason::WrongName {
                claimed: "a".into(),
                expected: "b".into(),
            },
            Reason::AlreadyHasAgent { node: NodeId(1) },
        ] {
            assert!(!lasting.may_pass_by_itself(), "{lasting}");
        }
    }

    #[test]
    fn ac_08_every_failing_condition_is_named_at_once() {
        let bad = Join {
            name: "x".into(),
            fingerprint: "SHA256:other".into(),
            ..join()
        };
        let failed = Provision {
            step: ProvisionStep::InstallFailed,
            ..provision()
        };
        let (reasons, red) = pending(verdict(&bad, &[failed], &ProviderReport::Gone, &[]));
        assert_eq!(reasons.len(), 4, "{reasons:?}");
        assert!(red);
    }

    #[test]
    fn ac_13_a_join_shows_on_its_provisions_tab_and_an_unknown_address_on_both() {
        let test = Provision {
            flag: AccountFlag::Test,
            ..provision()
        };
        assert_eq!(join_account(&join(), &[test]), Some(AccountFlag::Test));
        assert_eq!(join_account(&join(), &[]), None);
    }

    #[test]
    fn ac_08_of_two_provisions_at_one_address_the_one_installing_is_matched() {
        let old = Provision {
            id: 2,
            step: ProvisionStep::InstallFailed,
            ..provision()
        };
        assert_eq!(
            matching(&join(), &[old.clone(), provision()]).map(|p| p.id),
            Some(5)
        );
        assert_eq!(matching(&join(), &[old]).map(|p| p.id), Some(2));
    }
}
