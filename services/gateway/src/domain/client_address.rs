//! Which address a request comes from (GW-07). The TCP peer is the only address the gateway can
//! vouch for; behind a load balancer or an edge (Cloudflare, a relay) every request's peer is
//! that proxy, so the client's own address is read from a header the proxy sets, and only when
//! the peer is a proxy the operator named as trusted. Anyone can send the header; a header from
//! anywhere else is ignored.
//!
//! The header may hold a list (`X-Forwarded-For: client, proxy1, proxy2`), each proxy
//! appending the address it saw. Reading from the right, the first address that is not a
//! trusted proxy is the client: what lies left of it was written by the client itself and
//! proves nothing. A value that is not an address stops the walk at the last trusted hop.

use ipnet::IpNet;
use std::net::IpAddr;

/// The client address of a request whose TCP peer is `peer`, given the values of the client
/// address header (in the order they arrived) and the trusted proxies.
pub fn client_address(peer: IpAddr, header_values: &[&str], trusted: &[IpNet]) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |address: &IpAddr| trusted.iter().any(|net| net.contains(address));
    if !is_trusted(&peer) {
        return peer;
    }
    let mut client = peer;
    let hops = header_values
        .iter()
        .flat_map(|value| value.split(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty())
        .collect::<Vec<_>>();
    for hop in hops.iter().rev() {
        let Some(address) = parse_hop(hop) else {
            return client;
        };
        client = address;
        if !is_trusted(&address) {
            return address;
        }
    }
    client
}

/// An address as proxies write it: `203.0.113.7`, `2001:db8::1`, `[2001:db8::1]`, with an
/// optional port (`203.0.113.7:443`, `[2001:db8::1]:443`).
fn parse_hop(hop: &str) -> Option<IpAddr> {
    if let Ok(address) = hop.parse::<IpAddr>() {
        return Some(address.to_canonical());
    }
    if let Some(rest) = hop.strip_prefix('[') {
        let (inside, _) = rest.split_once(']')?;
        return inside
            .parse::<IpAddr>()
            .ok()
            .map(|address| address.to_canonical());
    }
    let (host, port) = hop.rsplit_once(':')?;
    port.parse::<u16>().ok()?;
    host.parse::<IpAddr>()
        .ok()
        .map(|address| address.to_canonical())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|net| net.parse().unwrap()).collect()
    }

    #[test]
    fn gw_07_without_trusted_proxies_the_peer_is_the_client_whatever_the_header_says() {
        assert_eq!(
            client_address(ip("198.51.100.9"), &["203.0.113.7"], &[]),
            ip("198.51.100.9")
        );
    }

    #[test]
    fn gw_07_a_header_from_a_peer_that_is_not_a_trusted_proxy_is_ignored() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_address(ip("198.51.100.9"), &["203.0.113.7"], &trusted),
            ip("198.51.100.9")
        );
    }

    #[test]
    fn gw_07_behind_a_trusted_proxy_the_header_names_the_client() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_address(ip("10.1.2.3"), &["203.0.113.7"], &trusted),
            ip("203.0.113.7")
        );
        // No header: the proxy itself is all there is to go on.
        assert_eq!(
            client_address(ip("10.1.2.3"), &[], &trusted),
            ip("10.1.2.3")
        );
    }

    #[test]
    fn gw_07_the_rightmost_untrusted_hop_is_the_client_and_what_the_client_wrote_is_not() {
        let trusted = nets(&["10.0.0.0/8", "192.0.2.0/24"]);
        // The client sent "X-Forwarded-For: 1.1.1.1" to pass for someone else; the edge
        // (192.0.2.5) appended the real address, the balancer (10.0.0.2) the edge's.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                &["1.1.1.1, 203.0.113.7, 192.0.2.5"],
                &trusted
            ),
            ip("203.0.113.7")
        );
        // Several header lines are one list, in order.
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                &["1.1.1.1", "203.0.113.7, 192.0.2.5"],
                &trusted
            ),
            ip("203.0.113.7")
        );
        // Every hop trusted: the leftmost is the client.
        assert_eq!(
            client_address(ip("10.0.0.2"), &["10.9.9.9, 192.0.2.5"], &trusted),
            ip("10.9.9.9")
        );
    }

    #[test]
    fn gw_07_a_hop_that_is_not_an_address_stops_the_walk_at_the_last_trusted_hop() {
        let trusted = nets(&["10.0.0.0/8"]);
        assert_eq!(
            client_address(
                ip("10.0.0.2"),
                &["203.0.113.7, unknown, 10.0.0.9"],
                &trusted
            ),
            ip("10.0.0.9")
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), &["<script>"], &trusted),
            ip("10.0.0.2")
        );
    }

    #[test]
    fn gw_07_ports_brackets_and_mapped_ipv4_are_read_as_proxies_write_them() {
        let trusted = nets(&["10.0.0.0/8", "2001:db8:ffff::/48"]);
        assert_eq!(
            client_address(ip("10.0.0.2"), &["203.0.113.7:51234"], &trusted),
            ip("203.0.113.7")
        );
        assert_eq!(
            client_address(ip("10.0.0.2"), &["[2001:db8::1]:443"], &trusted),
            ip("2001:db8::1")
        );
        assert_eq!(
            client_address(ip("::ffff:10.0.0.2"), &["::ffff:203.0.113.7"], &trusted),
            ip("203.0.113.7")
        );
        assert_eq!(
            client_address(ip("2001:db8:ffff::1"), &["2001:db8::1"], &trusted),
            ip("2001:db8::1")
        );
    }
}
