//! The daily transfer watch (PV-53, issue 29): "a daily watch raises `plane:machine_transfer`
//! when an instance of ours leaves the account or changes address". An instance of ours is
//! one a finished provision made or an adoption recorded; it is judged against its account's
//! listing now, and not at all when the account could not be listed (no guess either way).

use std::net::IpAddr;

use super::NodeId;

/// An instance of ours, as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub node_id: NodeId,
    pub account_id: i64,
    pub instance_id: String,
    /// The addresses recorded for it.
    pub addresses: Vec<IpAddr>,
}

/// What the watch says of one instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Seen {
    /// In its account, at the addresses recorded.
    Stays,
    /// It left the account (the account no longer lists it).
    Left,
    /// It is in the account at other addresses.
    Moved { now: Vec<IpAddr> },
    /// Its account could not be listed: nothing is judged.
    Unknown,
}

/// Judges `watched` against its account's listing (`None`: not listed just now): each entry is
/// an instance id and its addresses now.
pub fn seen(watched: &Watched, listing: Option<&[(String, Vec<IpAddr>)]>) -> Seen {
    let Some(listing) = listing else {
        return Seen::Unknown;
    };
    let Some((_, now)) = listing.iter().find(|(id, _)| *id == watched.instance_id) else {
        return Seen::Left;
    };
    // Every recorded address must still be the instance's; a new one added beside them is no
    // transfer.
    if watched
        .addresses
        .iter()
        .all(|address| now.contains(address))
    {
        Seen::Stays
    } else {
        Seen::Moved { now: now.clone() }
    }
}

/// The evidence of a transfer, or `None` when the instance stays.
pub fn evidence(watched: &Watched, seen: &Seen) -> Option<String> {
    let recorded = || {
        watched
            .addresses
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ")
    };
    match seen {
        Seen::Stays | Seen::Unknown => None,
        Seen::Left => Some(format!(
            "instance {} (recorded at {}) is no longer in cloud account {}",
            watched.instance_id,
            recorded(),
            watched.account_id
        )),
        Seen::Moved { now } => Some(format!(
            "instance {} in cloud account {} was at {} and is now at {}",
            watched.instance_id,
            watched.account_id,
            recorded(),
            now.iter()
                .map(IpAddr::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn watched() -> Watched {
        Watched {
            node_id: NodeId(4),
            account_id: 2,
            instance_id: "901".into(),
            addresses: vec![ip("203.0.113.9")],
        }
    }

    #[test]
    fn pv_53_an_instance_that_left_its_account_is_a_transfer() {
        let listing = vec![("902".to_string(), vec![ip("203.0.113.9")])];
        let seen = seen(&watched(), Some(&listing));
        assert_eq!(seen, Seen::Left);
        assert_eq!(
            evidence(&watched(), &seen).unwrap(),
            "instance 901 (recorded at 203.0.113.9) is no longer in cloud account 2"
        );
    }

    #[test]
    fn pv_53_an_instance_at_another_address_is_a_transfer_but_an_added_address_is_not() {
        let moved = vec![("901".to_string(), vec![ip("198.51.100.1")])];
        assert!(matches!(seen(&watched(), Some(&moved)), Seen::Moved { .. }));
        let added = vec![(
            "901".to_string(),
            vec![ip("203.0.113.9"), ip("2001:db8::9")],
        )];
        assert_eq!(seen(&watched(), Some(&added)), Seen::Stays);
        assert_eq!(evidence(&watched(), &Seen::Stays), None);
    }

    #[test]
    fn pv_53_an_account_not_listed_judges_nothing() {
        assert_eq!(seen(&watched(), None), Seen::Unknown);
        assert_eq!(evidence(&watched(), &Seen::Unknown), None);
    }
}
