//! Where the plane may connect on someone else's word: the one address policy for every
//! outbound connection to an address a node reported or an operator typed (webhooks, uptime
//! checks, the edge probe's direct legs, certificate reads). Only a public unicast address is
//! dialled; loopback, private, link-local, shared, documentation, benchmarking, reserved and
//! multicast ranges — and IPv6 forms that embed such an IPv4 address (mapped, NAT64, 6to4) —
//! are refused, after the IANA IPv4 and IPv6 Special-Purpose Address Registries. The one
//! setting `CAPSTAN__OUTBOUND__ALLOW_PRIVATE` lifts the refusal for labs and tests.
//!
//! The caller resolves a name once, checks every address with [`Outbound::check`], and
//! connects only to an address it checked, keeping the name for `Host` and SNI; so a name
//! cannot resolve to a public address for the check and an inside one for the connection.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use capstan_settings::Settings;

/// The environment variable of the one setting, for messages that tell a person what to set.
pub const ALLOW_PRIVATE_VARIABLE: &str = "CAPSTAN__OUTBOUND__ALLOW_PRIVATE";

/// A range the plane does not dial, and why.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Range {
    /// The network as written in the registry (`127.0.0.0/8`).
    pub network: &'static str,
    /// What the range is (`loopback`).
    pub what: &'static str,
}

/// An address refused by the policy: the address and the range it falls in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    pub address: IpAddr,
    pub range: Range,
}

impl fmt::Display for Refused {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            formatter,
            "{} is not a public address ({}, {}): the plane does not connect there \
             (address not allowed; {ALLOW_PRIVATE_VARIABLE}=true allows it in a lab)",
            self.address, self.range.what, self.range.network
        )
    }
}

impl std::error::Error for Refused {}

impl Refused {
    /// The refusal of an address `name` resolved to, for a person: `name resolves to
    /// 127.0.0.1, which is not a public address (...)`.
    pub fn of_name(&self, name: &str) -> String {
        let said = self.to_string();
        let rest = said
            .strip_prefix(&self.address.to_string())
            .unwrap_or(&said)
            .trim_start_matches(" is ");
        format!("{name} resolves to {}, which is {rest}", self.address)
    }
}

/// The policy as set: refuse non-public addresses, or allow everything.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Outbound {
    allow_private: bool,
}

impl Outbound {
    /// Refuses every address that is not public (the default).
    pub const fn public_only() -> Outbound {
        Outbound {
            allow_private: false,
        }
    }

    /// Allows every address (labs and tests).
    pub const fn allowing_private() -> Outbound {
        Outbound {
            allow_private: true,
        }
    }

    /// The policy `settings` ask for: `outbound.allow_private`.
    pub fn from_settings(settings: &Settings) -> Outbound {
        Outbound {
            allow_private: settings.outbound.allow_private,
        }
    }

    /// Whether private targets are allowed.
    pub fn allows_private(&self) -> bool {
        self.allow_private
    }

    /// Whether the plane may connect to `address`.
    pub fn check(&self, address: IpAddr) -> Result<(), Refused> {
        if self.allow_private {
            return Ok(());
        }
        match refused_range(address) {
            Some(range) => Err(Refused { address, range }),
            None => Ok(()),
        }
    }

    /// Checks every one of `addresses` (a name's whole answer): the first refused, if any.
    pub fn check_all(&self, addresses: &[IpAddr]) -> Result<(), Refused> {
        addresses
            .iter()
            .try_for_each(|address| self.check(*address))
    }
}

/// The refused range `address` falls in, or `None` for a public unicast address: the pure
/// rule, without the setting.
pub fn refused_range(address: IpAddr) -> Option<Range> {
    match address {
        IpAddr::V4(v4) => refused_v4(v4),
        IpAddr::V6(v6) => refused_v6(v6),
    }
}

const fn range(network: &'static str, what: &'static str) -> Range {
    Range { network, what }
}

/// IPv4 ranges not dialled: (first address, prefix length, range). 224.0.0.0/4 multicast is
/// not in the special-purpose registry but is no unicast target; the registry's globally
/// reachable entries inside 192.0.0.0/24 (192.0.0.9, 192.0.0.10) are refused with the block,
/// since no web server lives there.
const V4_REFUSED: &[([u8; 4], u8, Range)] = &[
    ([0, 0, 0, 0], 8, range("0.0.0.0/8", "this network")),
    ([10, 0, 0, 0], 8, range("10.0.0.0/8", "private")),
    (
        [100, 64, 0, 0],
        10,
        range("100.64.0.0/10", "shared address space"),
    ),
    ([127, 0, 0, 0], 8, range("127.0.0.0/8", "loopback")),
    ([169, 254, 0, 0], 16, range("169.254.0.0/16", "link-local")),
    ([172, 16, 0, 0], 12, range("172.16.0.0/12", "private")),
    (
        [192, 0, 0, 0],
        24,
        range("192.0.0.0/24", "IETF protocol assignments"),
    ),
    ([192, 0, 2, 0], 24, range("192.0.2.0/24", "documentation")),
    (
        [192, 88, 99, 0],
        24,
        range("192.88.99.0/24", "deprecated 6to4 relay anycast"),
    ),
    ([192, 168, 0, 0], 16, range("192.168.0.0/16", "private")),
    ([198, 18, 0, 0], 15, range("198.18.0.0/15", "benchmarking")),
    (
        [198, 51, 100, 0],
        24,
        range("198.51.100.0/24", "documentation"),
    ),
    (
        [203, 0, 113, 0],
        24,
        range("203.0.113.0/24", "documentation"),
    ),
    ([224, 0, 0, 0], 4, range("224.0.0.0/4", "multicast")),
    ([240, 0, 0, 0], 4, range("240.0.0.0/4", "reserved")),
];

fn refused_v4(address: Ipv4Addr) -> Option<Range> {
    let bits = u32::from(address);
    V4_REFUSED
        .iter()
        .find(|(first, prefix, _)| {
            let mask = u32::MAX << (32 - u32::from(*prefix));
            bits & mask == u32::from(Ipv4Addr::from(*first))
        })
        .map(|(_, _, range)| *range)
}

/// IPv6 ranges inside 2000::/3 (global unicast) that are not dialled.
const V6_REFUSED: &[([u16; 8], u8, Range)] = &[
    (
        [0x2001, 0, 0, 0, 0, 0, 0, 0],
        23,
        range("2001::/23", "IETF protocol assignments (Teredo included)"),
    ),
    (
        [0x2001, 0xdb8, 0, 0, 0, 0, 0, 0],
        32,
        range("2001:db8::/32", "documentation"),
    ),
    (
        [0x3fff, 0, 0, 0, 0, 0, 0, 0],
        20,
        range("3fff::/20", "documentation"),
    ),
];

fn in_v6(address: Ipv6Addr, first: [u16; 8], prefix: u8) -> bool {
    let mask = u128::MAX << (128 - u32::from(prefix));
    u128::from(address) & mask == u128::from(Ipv6Addr::from(first))
}

fn refused_v6(address: Ipv6Addr) -> Option<Range> {
    // Forms that carry an IPv4 address are judged by that address.
    if let Some(v4) = address.to_ipv4_mapped() {
        return refused_v4(v4); // ::ffff:0:0/96
    }
    let segments = address.segments();
    let embedded = |high: u16, low: u16| Ipv4Addr::from((u32::from(high) << 16) | u32::from(low));
    if in_v6(address, [0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96) {
        // 64:ff9b::/96, NAT64's well-known prefix: the IPv4 address in the last 32 bits.
        return refused_v4(embedded(segments[6], segments[7]));
    }
    if in_v6(address, [0x2002, 0, 0, 0, 0, 0, 0, 0], 16) {
        // 2002::/16, 6to4: the IPv4 address in bits 16..48.
        return refused_v4(embedded(segments[1], segments[2]));
    }
    if address.is_unspecified() {
        return Some(range("::/128", "unspecified"));
    }
    if address.is_loopback() {
        return Some(range("::1/128", "loopback"));
    }
    // Everything outside 2000::/3 is not global unicast: ::/96 IPv4-compatible (deprecated),
    // 64:ff9b:1::/48 local NAT64, 100::/64 discard-only, 5f00::/16 SRv6, fc00::/7 unique local,
    // fe80::/10 link-local, fec0::/10 site-local (deprecated), ff00::/8 multicast.
    if !in_v6(address, [0x2000, 0, 0, 0, 0, 0, 0, 0], 3) {
        let what = if in_v6(address, [0xfc00, 0, 0, 0, 0, 0, 0, 0], 7) {
            range("fc00::/7", "unique local")
        } else if in_v6(address, [0xfe80, 0, 0, 0, 0, 0, 0, 0], 10) {
            range("fe80::/10", "link-local")
        } else if in_v6(address, [0xfec0, 0, 0, 0, 0, 0, 0, 0], 10) {
            range("fec0::/10", "site-local")
        } else if in_v6(address, [0xff00, 0, 0, 0, 0, 0, 0, 0], 8) {
            range("ff00::/8", "multicast")
        } else {
            range("outside 2000::/3", "not global unicast")
        };
        return Some(what);
    }
    V6_REFUSED
        .iter()
        .find(|(first, prefix, _)| in_v6(address, *first, *prefix))
        .map(|(_, _, range)| *range)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn refused(text: &str) -> Option<&'static str> {
        refused_range(text.parse().unwrap()).map(|range| range.network)
    }

    #[test]
    fn every_special_purpose_ipv4_range_is_refused_at_both_ends() {
        for (first, last, network) in [
            ("0.0.0.0", "0.255.255.255", "0.0.0.0/8"),
            ("10.0.0.0", "10.255.255.255", "10.0.0.0/8"),
            ("100.64.0.0", "100.127.255.255", "100.64.0.0/10"),
            ("127.0.0.0", "127.255.255.255", "127.0.0.0/8"),
            ("169.254.0.0", "169.254.255.255", "169.254.0.0/16"),
            ("172.16.0.0", "172.31.255.255", "172.16.0.0/12"),
            ("192.0.0.0", "192.0.0.255", "192.0.0.0/24"),
            ("192.0.2.0", "192.0.2.255", "192.0.2.0/24"),
            ("192.88.99.0", "192.88.99.255", "192.88.99.0/24"),
            ("192.168.0.0", "192.168.255.255", "192.168.0.0/16"),
            ("198.18.0.0", "198.19.255.255", "198.18.0.0/15"),
            ("198.51.100.0", "198.51.100.255", "198.51.100.0/24"),
            ("203.0.113.0", "203.0.113.255", "203.0.113.0/24"),
            ("224.0.0.0", "239.255.255.255", "224.0.0.0/4"),
            ("240.0.0.0", "255.255.255.255", "240.0.0.0/4"),
        ] {
            assert_eq!(refused(first), Some(network), "{first}");
            assert_eq!(refused(last), Some(network), "{last}");
        }
    }

    #[test]
    fn the_cloud_metadata_address_is_link_local_and_refused() {
        assert_eq!(refused("169.254.169.254"), Some("169.254.0.0/16"));
    }

    #[test]
    fn public_ipv4_addresses_just_outside_each_range_are_allowed() {
        for public in [
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "100.63.255.255",
            "100.128.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "169.253.255.255",
            "169.255.0.0",
            "172.15.255.255",
            "172.32.0.0",
            "192.0.1.0",
            "192.0.3.0",
            "192.88.98.255",
            "192.88.100.0",
            "192.167.255.255",
            "192.169.0.0",
            "198.17.255.255",
            "198.20.0.0",
            "198.51.99.255",
            "198.51.101.0",
            "203.0.112.255",
            "203.0.114.0",
            "223.255.255.255",
            "8.8.8.8",
            "93.184.215.14",
        ] {
            assert_eq!(refused(public), None, "{public}");
        }
    }

    #[test]
    fn special_purpose_ipv6_ranges_are_refused() {
        for (address, network) in [
            ("::", "::/128"),
            ("::1", "::1/128"),
            ("::7f00:1", "outside 2000::/3"),
            ("64:ff9b:1::1", "outside 2000::/3"),
            ("100::1", "outside 2000::/3"),
            ("5f00::1", "outside 2000::/3"),
            ("fc00::1", "fc00::/7"),
            ("fdff:ffff::1", "fc00::/7"),
            ("fe80::1", "fe80::/10"),
            ("febf::1", "fe80::/10"),
            ("fec0::1", "fec0::/10"),
            ("feff::1", "fec0::/10"),
            ("ff02::1", "ff00::/8"),
            ("2001::1", "2001::/23"),
            ("2001:0:4136:e378:8000:63bf:3fff:fdd2", "2001::/23"),
            ("2001:1ff::1", "2001::/23"),
            ("2001:db8::1", "2001:db8::/32"),
            ("2001:db8:ffff::1", "2001:db8::/32"),
            ("3fff::1", "3fff::/20"),
            ("3fff:fff::1", "3fff::/20"),
        ] {
            assert_eq!(refused(address), Some(network), "{address}");
        }
    }

    #[test]
    fn ipv6_forms_embedding_an_ipv4_address_are_judged_by_it() {
        // IPv4-mapped, NAT64's well-known prefix, 6to4.
        for (address, network) in [
            ("::ffff:127.0.0.1", Some("127.0.0.0/8")),
            ("::ffff:10.1.2.3", Some("10.0.0.0/8")),
            ("::ffff:8.8.8.8", None),
            ("64:ff9b::127.0.0.1", Some("127.0.0.0/8")),
            ("64:ff9b::169.254.169.254", Some("169.254.0.0/16")),
            ("64:ff9b::192.168.1.1", Some("192.168.0.0/16")),
            ("64:ff9b::8.8.8.8", None),
            ("2002:7f00:1::1", Some("127.0.0.0/8")),
            ("2002:c0a8:101::1", Some("192.168.0.0/16")),
            ("2002:a9fe:a9fe::", Some("169.254.0.0/16")),
            ("2002:808:808::1", None),
        ] {
            assert_eq!(refused(address), network, "{address}");
        }
    }

    #[test]
    fn global_unicast_ipv6_is_allowed() {
        for public in [
            "2000::1",
            "2001:200::1",
            "2001:4860:4860::8888",
            "2606:4700::1111",
            "2a00:1450:4001::1",
            "3ffe::1",
            "3fff:1000::1",
        ] {
            assert_eq!(refused(public), None, "{public}");
        }
    }

    #[test]
    fn allowing_private_targets_lets_every_address_through() {
        let lab = Outbound::allowing_private();
        let production = Outbound::public_only();
        for address in ["127.0.0.1", "169.254.169.254", "::1", "fc00::1", "8.8.8.8"] {
            let address: IpAddr = address.parse().unwrap();
            assert_eq!(lab.check(address), Ok(()), "{address}");
        }
        assert!(production.check("8.8.8.8".parse().unwrap()).is_ok());
        let refused = production.check("127.0.0.1".parse().unwrap()).unwrap_err();
        let said = refused.to_string();
        assert!(said.contains("127.0.0.1 is not a public address (loopback, 127.0.0.0/8)"));
        assert!(said.contains(ALLOW_PRIVATE_VARIABLE), "{said}");
    }

    #[test]
    fn a_refused_name_says_what_it_resolved_to() {
        let refused = Outbound::public_only()
            .check("169.254.169.254".parse().unwrap())
            .unwrap_err();
        assert!(refused.of_name("metadata.internal").starts_with(
            "metadata.internal resolves to 169.254.169.254, which is not a public address \
             (link-local, 169.254.0.0/16)"
        ));
    }

    #[test]
    fn one_refused_address_among_a_names_answers_refuses_the_name() {
        let answers: Vec<IpAddr> = vec!["8.8.8.8".parse().unwrap(), "10.0.0.1".parse().unwrap()];
        let refused = Outbound::public_only().check_all(&answers).unwrap_err();
        assert_eq!(refused.address, answers[1]);
        assert!(Outbound::public_only().check_all(&answers[..1]).is_ok());
    }
}
