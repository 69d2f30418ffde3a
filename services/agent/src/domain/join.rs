//! The node's side of a join (PROTOCOL.md "join", "join_status"; AG-06, AG-07, AG-11): where a
//! pairing stands, when to ask the plane again, and what each answer changes.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::{JOIN_RENEW_AFTER, JOIN_STATUS_EVERY, REJECTED_REASK};

/// Where this node's pairing stands; kept in the identity file beside the key.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum Pairing {
    /// Asked to join; waiting for an operator.
    Pending {
        request_id: Uuid,
        asked_at: DateTime<Utc>,
    },
    /// The plane rejected the key; it is kept and the node asks again every five minutes
    /// (an operator may reopen the request within a day).
    Rejected {
        request_id: Uuid,
        asked_at: DateTime<Utc>,
    },
    /// Approved: the plane knows this key as node `node_id`.
    Paired {
        node_id: i64,
        paired_at: DateTime<Utc>,
    },
    /// The plane no longer knows the key (`401 unknown_key` after pairing): the node takes no
    /// work until it joins again.
    Disconnected {
        since: DateTime<Utc>,
        reason: String,
    },
}

impl Pairing {
    pub fn describe(&self) -> String {
        match self {
            Pairing::Pending { request_id, asked_at } => {
                format!("pending (request {request_id}, asked {})", asked_at.to_rfc3339())
            }
            Pairing::Rejected { request_id, asked_at } => format!(
                "rejected (request {request_id}; the key is kept and asks again every five minutes, last {})",
                asked_at.to_rfc3339()
            ),
            Pairing::Paired { node_id, paired_at } => {
                format!("paired (node {node_id}, since {})", paired_at.to_rfc3339())
            }
            Pairing::Disconnected { since, reason } => format!(
                "disconnected since {}: {reason}; run `capstan-agent join` to pair again",
                since.to_rfc3339()
            ),
        }
    }
}

/// What to do next about a staged join.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JoinStep {
    /// Send `join` again: a renewal before the hour runs out, or a rejected key's re-ask.
    AskAgain,
    /// Ask `join_status` whether the request was answered.
    AskStatus,
    Wait,
}

fn at_least(since: DateTime<Utc>, now: DateTime<Utc>, wait: std::time::Duration) -> bool {
    now.signed_duration_since(since)
        .to_std()
        .is_ok_and(|elapsed| elapsed >= wait)
}

/// The next step for `pairing`, given when `join_status` was last asked.
pub fn next_step(
    pairing: &Pairing,
    last_status_check: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> JoinStep {
    match pairing {
        Pairing::Pending { asked_at, .. } => {
            if at_least(*asked_at, now, JOIN_RENEW_AFTER) {
                JoinStep::AskAgain
            } else if last_status_check.is_none_or(|last| at_least(last, now, JOIN_STATUS_EVERY)) {
                JoinStep::AskStatus
            } else {
                JoinStep::Wait
            }
        }
        Pairing::Rejected { asked_at, .. } if at_least(*asked_at, now, REJECTED_REASK) => {
            JoinStep::AskAgain
        }
        _ => JoinStep::Wait,
    }
}

/// What a `join_status` answer changes.
#[derive(Debug, Clone, PartialEq)]
pub enum StatusOutcome {
    Stay,
    Become(Pairing),
    /// The request expired unrenewed: ask again at once (the plane renews the same request).
    AskAgain,
}

/// Reads a `join_status` answer for the pending or rejected `pairing`.
pub fn after_status(
    pairing: &Pairing,
    state: &str,
    node_id: Option<i64>,
    now: DateTime<Utc>,
) -> StatusOutcome {
    let request_id = match pairing {
        Pairing::Pending { request_id, .. } | Pairing::Rejected { request_id, .. } => *request_id,
        _ => return StatusOutcome::Stay,
    };
    match (state, node_id) {
        ("approved", Some(node_id)) => StatusOutcome::Become(Pairing::Paired {
            node_id,
            paired_at: now,
        }),
        ("rejected", _) if matches!(pairing, Pairing::Pending { .. }) => {
            StatusOutcome::Become(Pairing::Rejected {
                request_id,
                asked_at: now,
            })
        }
        ("expired", _) => StatusOutcome::AskAgain,
        _ => StatusOutcome::Stay,
    }
}

/// What a `join` answer (`202`) changes: `pending` or `rejected`, with the request it names.
pub fn after_join(state: &str, request_id: Uuid, now: DateTime<Utc>) -> Option<Pairing> {
    match state {
        "pending" => Some(Pairing::Pending {
            request_id,
            asked_at: now,
        }),
        "rejected" => Some(Pairing::Rejected {
            request_id,
            asked_at: now,
        }),
        _ => None,
    }
}

/// The name a machine asks under when `--name` is not given: its hostname, lowered and with
/// every character the plane does not take made a `-` (`^[a-z0-9][a-z0-9._-]{0,63}$`).
pub fn name_from_hostname(hostname: &str) -> String {
    let mut name: String = hostname
        .trim()
        .to_ascii_lowercase()
        .chars()
        .map(|c| {
            if c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .take(64)
        .collect();
    while name.starts_with(['.', '_', '-']) {
        name.remove(0);
    }
    if name.is_empty() {
        "node".to_string()
    } else {
        name
    }
}

/// Whether `name` is one the plane takes.
pub fn valid_name(name: &str) -> bool {
    let mut chars = name.chars();
    matches!(chars.next(), Some(first) if first.is_ascii_lowercase() || first.is_ascii_digit())
        && name.len() <= 64
        && chars
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, '.' | '_' | '-'))
}

super::refusal!(
    /// `CAPSTAN_AGENT_LOCAL_ADDRESS` refused, the fault named.
    BadLocalAddress
);

/// The local address the agent's connections to the plane are made from
/// (`CAPSTAN_AGENT_LOCAL_ADDRESS`): one IP address of this machine, IPv4 or IPv6, written bare
/// (no port, no brackets). The plane sees it as the join's source address, which a provisioned
/// machine's auto-approval compares with its instance's (AC-08's first condition), so a machine
/// with several addresses says which one it speaks from. An address no socket can be bound to
/// for connecting (unspecified, multicast, broadcast) is refused rather than left to the
/// system's choice, which would hide the mistake.
pub fn local_address(text: &str) -> Result<std::net::IpAddr, BadLocalAddress> {
    let setting = "CAPSTAN_AGENT_LOCAL_ADDRESS (--local-address)";
    let address: std::net::IpAddr = text.trim().parse().map_err(|_| {
        format!("{setting} must be an IP address of this machine such as 203.0.113.7 or 2001:db8::7, not {text:?}")
    })?;
    let unusable = address.is_unspecified()
        || address.is_multicast()
        || matches!(address, std::net::IpAddr::V4(v4) if v4.is_broadcast());
    if unusable {
        return Err(format!(
            "{setting} must be an address this machine connects from, not {address} (unspecified, multicast or broadcast); leave it unset for the system's choice"
        )
        .into());
    }
    Ok(address)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(seconds: i64) -> DateTime<Utc> {
        DateTime::from_timestamp(1_800_000_000 + seconds, 0).unwrap()
    }

    fn pending(asked: i64) -> Pairing {
        Pairing::Pending {
            request_id: Uuid::nil(),
            asked_at: at(asked),
        }
    }

    #[test]
    fn a_pending_join_asks_its_status_every_few_seconds() {
        assert_eq!(next_step(&pending(0), None, at(1)), JoinStep::AskStatus);
        assert_eq!(next_step(&pending(0), Some(at(1)), at(2)), JoinStep::Wait);
        assert_eq!(
            next_step(&pending(0), Some(at(1)), at(4)),
            JoinStep::AskStatus
        );
    }

    #[test]
    fn a_pending_join_is_renewed_before_its_hour_runs_out() {
        let renew = JOIN_RENEW_AFTER.as_secs() as i64;
        assert_eq!(
            next_step(&pending(0), Some(at(renew - 1)), at(renew - 1)),
            JoinStep::Wait
        );
        assert_eq!(
            next_step(&pending(0), Some(at(renew)), at(renew)),
            JoinStep::AskAgain
        );
        assert!(JOIN_RENEW_AFTER < std::time::Duration::from_secs(3600));
    }

    #[test]
    fn ag_11_a_rejected_key_asks_again_every_five_minutes() {
        let rejected = Pairing::Rejected {
            request_id: Uuid::nil(),
            asked_at: at(0),
        };
        assert_eq!(next_step(&rejected, None, at(299)), JoinStep::Wait);
        assert_eq!(next_step(&rejected, None, at(300)), JoinStep::AskAgain);
    }

    #[test]
    fn a_paired_or_disconnected_node_has_no_join_to_advance() {
        let paired = Pairing::Paired {
            node_id: 3,
            paired_at: at(0),
        };
        assert_eq!(next_step(&paired, None, at(10_000)), JoinStep::Wait);
    }

    #[test]
    fn ag_07_an_approved_status_pairs_the_node_with_its_id() {
        assert_eq!(
            after_status(&pending(0), "approved", Some(17), at(5)),
            StatusOutcome::Become(Pairing::Paired {
                node_id: 17,
                paired_at: at(5)
            })
        );
        assert_eq!(
            after_status(&pending(0), "pending", None, at(5)),
            StatusOutcome::Stay
        );
        assert_eq!(
            after_status(&pending(0), "expired", None, at(5)),
            StatusOutcome::AskAgain
        );
    }

    #[test]
    fn a_rejection_keeps_the_request_and_starts_the_five_minute_clock() {
        assert_eq!(
            after_status(&pending(0), "rejected", None, at(60)),
            StatusOutcome::Become(Pairing::Rejected {
                request_id: Uuid::nil(),
                asked_at: at(60)
            })
        );
        // A reopened request answered `pending` again is taken from the next join answer.
        assert_eq!(
            after_join("pending", Uuid::nil(), at(400)),
            Some(pending(400))
        );
    }

    #[test]
    fn the_default_name_is_the_hostname_made_acceptable() {
        assert_eq!(
            name_from_hostname("Web-1.Example.COM\n"),
            "web-1.example.com"
        );
        assert_eq!(name_from_hostname("my host!"), "my-host-");
        assert_eq!(name_from_hostname("_x"), "x");
        assert_eq!(name_from_hostname(""), "node");
        assert_eq!(name_from_hostname(&"a".repeat(100)).len(), 64);
        for hostname in ["Web-1", "my host!", "_x", "", "localhost"] {
            assert!(valid_name(&name_from_hostname(hostname)), "{hostname}");
        }
    }

    #[test]
    fn names_the_plane_refuses_are_refused_here_first() {
        assert!(valid_name("web-1"));
        assert!(!valid_name("Web-1"));
        assert!(!valid_name("-web"));
        assert!(!valid_name(&"a".repeat(65)));
    }

    // PV-09, AC-08: a provisioned machine's agent joins from its instance's address, which the
    // setting names; anything but one usable IP address is refused with the setting named.
    #[test]
    fn pv_09_the_local_address_is_one_usable_ip_address() {
        assert_eq!(
            local_address("127.0.0.7").unwrap(),
            "127.0.0.7".parse::<std::net::IpAddr>().unwrap()
        );
        assert_eq!(
            local_address(" 2001:db8::7 ").unwrap(),
            "2001:db8::7".parse::<std::net::IpAddr>().unwrap()
        );
        for bad in [
            "",
            "web-1",
            "127.0.0.7:80",
            "[::1]",
            "203.0.113.300",
            "0.0.0.0",
            "::",
            "224.0.0.1",
            "255.255.255.255",
            "ff02::1",
        ] {
            let refused = local_address(bad).unwrap_err();
            assert!(
                refused.contains("CAPSTAN_AGENT_LOCAL_ADDRESS"),
                "{bad}: {refused}"
            );
        }
    }
}
