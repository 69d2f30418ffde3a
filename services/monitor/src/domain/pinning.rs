//! MO-03: which address a check connects to. A node is checked as itself — pinned to its own
//! address, with the name kept for SNI and `Host` — only when that address is an IP literal
//! that appears among the name's public A/AAAA records. Otherwise (a node behind an edge such
//! as Cloudflare, or a name that does not list the node) it is checked through the public name,
//! so an origin's fallback certificate never reports a false down.

use std::net::IpAddr;

/// Where a check's connection goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// Straight to the node's own address.
    Pinned(IpAddr),
    /// To the addresses the public name resolves to, in order.
    ThroughName,
}

/// An address as the agent reports it (`203.0.113.7`, `2001:db8::7`, possibly with a
/// `/prefix`), if it is an IP literal.
pub fn literal(address: &str) -> Option<IpAddr> {
    let bare = address.split('/').next().unwrap_or(address).trim();
    bare.trim_start_matches('[')
        .trim_end_matches(']')
        .parse()
        .ok()
}

/// The node's own address: the first it reported that is an IP literal.
pub fn own_address(addresses: &[String]) -> Option<IpAddr> {
    addresses.iter().find_map(|address| literal(address))
}

/// MO-03: pinned to the first of the node's reported addresses that the name's public records
/// list; through the name when none is (or the node reported no IP literal at all).
pub fn route(addresses: &[String], public_records: &[IpAddr]) -> Route {
    addresses
        .iter()
        .filter_map(|address| literal(address))
        .find(|address| public_records.contains(address))
        .map_or(Route::ThroughName, Route::Pinned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn mo_03_a_node_whose_address_is_in_the_names_records_is_checked_as_itself() {
        // two DNS servers sharing one name: each is checked at its own address
        let records = [ip("198.51.100.1"), ip("198.51.100.2")];
        assert_eq!(
            route(&["198.51.100.2".into()], &records),
            Route::Pinned(ip("198.51.100.2"))
        );
        assert_eq!(
            route(&["198.51.100.1".into()], &records),
            Route::Pinned(ip("198.51.100.1"))
        );
    }

    #[test]
    fn mo_03_an_ipv6_address_in_the_aaaa_records_pins_too() {
        let records = [ip("2001:db8::7")];
        assert_eq!(
            route(&["10.0.0.5".into(), "2001:db8::7/64".into()], &records),
            Route::Pinned(ip("2001:db8::7"))
        );
    }

    #[test]
    fn mo_03_a_fronted_node_is_never_pinned_to_its_origin() {
        // the name resolves to the edge's addresses, not the node's
        let edge = [ip("104.16.1.1"), ip("104.16.2.2")];
        assert_eq!(route(&["203.0.113.9".into()], &edge), Route::ThroughName);
    }

    #[test]
    fn mo_03_a_node_without_an_ip_literal_is_checked_through_the_name() {
        let records = [ip("203.0.113.9")];
        assert_eq!(
            route(&["web1.example.com".into()], &records),
            Route::ThroughName
        );
        assert_eq!(route(&[], &records), Route::ThroughName);
        assert_eq!(route(&["203.0.113.9".into()], &[]), Route::ThroughName);
    }

    #[test]
    fn the_own_address_is_the_first_ip_literal_reported() {
        assert_eq!(
            own_address(&[
                "host.example".into(),
                "203.0.113.9".into(),
                "2001:db8::1".into()
            ]),
            Some(ip("203.0.113.9"))
        );
        assert_eq!(own_address(&["host.example".into()]), None);
    }
}
