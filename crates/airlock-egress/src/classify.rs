//! Address classification as data (NET-5).
//!
//! Every address the proxy might dial (each DNS answer, each IP literal) is classified here
//! before any connection is made. The special-purpose ranges live once, as data, in
//! [`V4_TABLE`] and [`V6_TABLE`]; [`classify`] is a longest-prefix match over them (the most
//! specific row wins, so `169.254.169.254/32` is `Metadata` inside the `LinkLocal` /16).
//!
//! IPv6 forms that carry an IPv4 address (mapped, compatible, translated, NAT64, 6to4, Teredo)
//! are unwrapped by their table row and the embedded address is classified and reported, so
//! `::ffff:127.0.0.1` or `64:ff9b::a9fe:a9fe` can never pass as "some IPv6 address". This does
//! not rely on `Ipv6Addr::to_canonical`, which only knows the mapped form.
//!
//! This module does no I/O and knows nothing about policy: it says what an address *is*. The
//! caller decides; only [`AddrClass::Public`] may be dialled without an explicit CIDR rule.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// What an address is. Everything except `Public` is denied by default (NET-5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum AddrClass {
    /// Globally routable unicast.
    Public,
    /// `0.0.0.0`, `::`: connecting to it reaches the local host.
    Unspecified,
    /// `0.0.0.0/8` other than `0.0.0.0` ("this network"; Linux routes it locally).
    ThisNetwork,
    Loopback,
    /// RFC 1918 and local-use NAT64 (`64:ff9b:1::/48`).
    Private,
    /// `100.64.0.0/10`, carrier-grade NAT shared space.
    SharedCgnat,
    LinkLocal,
    /// Cloud instance metadata and platform endpoints (credentials live there).
    Metadata,
    Multicast,
    Broadcast,
    /// Reserved or not globally routable, including everything outside `2000::/3`.
    Reserved,
    Benchmarking,
    Documentation,
    /// `192.0.0.0/24` and `2001::/23`: IETF protocol assignments.
    ProtocolAssignments,
    /// `100::/64`, the IPv6 discard-only prefix.
    Discard,
    /// `fc00::/7`.
    UniqueLocal,
    /// `fec0::/10` (deprecated, still routed by some stacks).
    SiteLocal,
    /// 6to4 (`2002::/16`, relay anycast `192.88.99.0/24`) and Teredo (`2001::/32`): packets go
    /// through a relay to an address we cannot vet.
    Tunnel,
}

impl AddrClass {
    /// Every class, for exhaustive tests and documentation.
    pub const ALL: [AddrClass; 18] = [
        AddrClass::Public,
        AddrClass::Unspecified,
        AddrClass::ThisNetwork,
        AddrClass::Loopback,
        AddrClass::Private,
        AddrClass::SharedCgnat,
        AddrClass::LinkLocal,
        AddrClass::Metadata,
        AddrClass::Multicast,
        AddrClass::Broadcast,
        AddrClass::Reserved,
        AddrClass::Benchmarking,
        AddrClass::Documentation,
        AddrClass::ProtocolAssignments,
        AddrClass::Discard,
        AddrClass::UniqueLocal,
        AddrClass::SiteLocal,
        AddrClass::Tunnel,
    ];

    /// A stable, machine-readable reason code (used in deny responses and logs).
    pub fn reason(self) -> &'static str {
        match self {
            AddrClass::Public => "public",
            AddrClass::Unspecified => "unspecified_address",
            AddrClass::ThisNetwork => "this_network_address",
            AddrClass::Loopback => "loopback_address",
            AddrClass::Private => "private_address",
            AddrClass::SharedCgnat => "cgnat_address",
            AddrClass::LinkLocal => "link_local_address",
            AddrClass::Metadata => "metadata_address",
            AddrClass::Multicast => "multicast_address",
            AddrClass::Broadcast => "broadcast_address",
            AddrClass::Reserved => "reserved_address",
            AddrClass::Benchmarking => "benchmarking_address",
            AddrClass::Documentation => "documentation_address",
            AddrClass::ProtocolAssignments => "protocol_assignment_address",
            AddrClass::Discard => "discard_address",
            AddrClass::UniqueLocal => "unique_local_address",
            AddrClass::SiteLocal => "site_local_address",
            AddrClass::Tunnel => "tunnel_address",
        }
    }
}

/// An IPv4 prefix: `base/len`. `base` has no bits set below the prefix (a test checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net4 {
    pub base: u32,
    pub len: u8,
}

impl Net4 {
    const fn new(a: u8, b: u8, c: u8, d: u8, len: u8) -> Self {
        Net4 {
            base: Ipv4Addr::new(a, b, c, d).to_bits(),
            len,
        }
    }

    /// The network mask (`len` leading one bits; a `len` above 32 counts as 32).
    pub fn mask(self) -> u32 {
        u32::MAX
            .checked_shl(32u32.saturating_sub(u32::from(self.len)))
            .unwrap_or(0)
    }

    pub fn contains(self, addr: u32) -> bool {
        (addr ^ self.base) & self.mask() == 0
    }
}

/// An IPv6 prefix: `base/len`. `base` has no bits set below the prefix (a test checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Net6 {
    pub base: u128,
    pub len: u8,
}

impl Net6 {
    const fn new(s: [u16; 8], len: u8) -> Self {
        Net6 {
            base: Ipv6Addr::new(s[0], s[1], s[2], s[3], s[4], s[5], s[6], s[7]).to_bits(),
            len,
        }
    }

    /// The network mask (`len` leading one bits; a `len` above 128 counts as 128).
    pub fn mask(self) -> u128 {
        u128::MAX
            .checked_shl(128u32.saturating_sub(u32::from(self.len)))
            .unwrap_or(0)
    }

    pub fn contains(self, addr: u128) -> bool {
        (addr ^ self.base) & self.mask() == 0
    }
}

/// The IPv4 special-purpose ranges (IANA registry, RFC 6890 and successors) plus cloud
/// metadata endpoints. Longest prefix wins; the `/0` row makes the table total.
pub const V4_TABLE: &[(Net4, AddrClass)] = &[
    (Net4::new(0, 0, 0, 0, 0), AddrClass::Public),
    (Net4::new(0, 0, 0, 0, 8), AddrClass::ThisNetwork),
    (Net4::new(0, 0, 0, 0, 32), AddrClass::Unspecified),
    (Net4::new(10, 0, 0, 0, 8), AddrClass::Private),
    (Net4::new(100, 64, 0, 0, 10), AddrClass::SharedCgnat),
    // Alibaba Cloud metadata.
    (Net4::new(100, 100, 100, 200, 32), AddrClass::Metadata),
    (Net4::new(127, 0, 0, 0, 8), AddrClass::Loopback),
    // Azure WireServer (platform endpoint that hands out certificates and extension config).
    (Net4::new(168, 63, 129, 16, 32), AddrClass::Metadata),
    (Net4::new(169, 254, 0, 0, 16), AddrClass::LinkLocal),
    // AWS, GCP, Azure, OCI, DigitalOcean instance metadata.
    (Net4::new(169, 254, 169, 254, 32), AddrClass::Metadata),
    // AWS ECS task metadata and credentials.
    (Net4::new(169, 254, 170, 2, 32), AddrClass::Metadata),
    (Net4::new(172, 16, 0, 0, 12), AddrClass::Private),
    // Includes the few anycast services IANA marks global (192.0.0.9, .10): nothing an agent
    // needs lives there, so the whole /24 is denied.
    (Net4::new(192, 0, 0, 0, 24), AddrClass::ProtocolAssignments),
    (Net4::new(192, 0, 2, 0, 24), AddrClass::Documentation),
    // 6to4 relay anycast (deprecated by RFC 7526).
    (Net4::new(192, 88, 99, 0, 24), AddrClass::Tunnel),
    (Net4::new(192, 168, 0, 0, 16), AddrClass::Private),
    (Net4::new(198, 18, 0, 0, 15), AddrClass::Benchmarking),
    (Net4::new(198, 51, 100, 0, 24), AddrClass::Documentation),
    (Net4::new(203, 0, 113, 0, 24), AddrClass::Documentation),
    (Net4::new(224, 0, 0, 0, 4), AddrClass::Multicast),
    (Net4::new(240, 0, 0, 0, 4), AddrClass::Reserved),
    (Net4::new(255, 255, 255, 255, 32), AddrClass::Broadcast),
];

/// An IPv6 form that carries an IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Embedding {
    /// `::ffff:a.b.c.d` (RFC 4291): a dual-stack socket reaches `a.b.c.d` itself.
    Mapped,
    /// `::ffff:0:a.b.c.d` (SIIT, RFC 2765, obsolete).
    Translated,
    /// `::a.b.c.d` (RFC 4291, deprecated).
    Compatible,
    /// `64:ff9b::a.b.c.d` (RFC 6052 well-known prefix): a NAT64 gateway reaches `a.b.c.d`.
    Nat64,
    /// `2002:AABB:CCDD::/48` (RFC 3056): the 6to4 router at `AA.BB.CC.DD`.
    SixToFour,
    /// `2001:0:SSSS:SSSS:flags:port:CCCC:CCCC` (RFC 4380): the client is the bitwise NOT of the
    /// low 32 bits (the server address in bits 32..64 is not reported).
    Teredo,
}

impl Embedding {
    /// The embedded IPv4 address. Truncating casts are the point: they select bit fields.
    fn extract(self, bits: u128) -> Ipv4Addr {
        let v4 = match self {
            Embedding::Mapped
            | Embedding::Translated
            | Embedding::Compatible
            | Embedding::Nat64 => bits as u32,
            Embedding::SixToFour => (bits >> 80) as u32,
            Embedding::Teredo => !(bits as u32),
        };
        Ipv4Addr::from_bits(v4)
    }

    /// The class of the IPv6 address given the class of the embedded one. Forms that reach
    /// the embedded address directly take its class; obsolete forms are never public; tunnels
    /// are always `Tunnel` (the relay path cannot be vetted even when the endpoint could).
    fn class(self, embedded: AddrClass) -> AddrClass {
        match self {
            Embedding::Mapped | Embedding::Nat64 => embedded,
            Embedding::Compatible | Embedding::Translated => match embedded {
                AddrClass::Public => AddrClass::Reserved,
                other => other,
            },
            Embedding::SixToFour | Embedding::Teredo => AddrClass::Tunnel,
        }
    }
}

/// What a [`V6_TABLE`] row says about the addresses it covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum V6Rule {
    /// A fixed class.
    Class(AddrClass),
    /// The class comes from the embedded IPv4 address (see [`Embedding`]).
    Embeds(Embedding),
}

const fn c(class: AddrClass) -> V6Rule {
    V6Rule::Class(class)
}

const fn e(embedding: Embedding) -> V6Rule {
    V6Rule::Embeds(embedding)
}

/// The IPv6 special-purpose ranges (IANA registry) plus metadata endpoints and embeddings.
/// Longest prefix wins; `::/0` is `Reserved` and `2000::/3` `Public`, so anything outside
/// global unicast is reserved unless a more specific row says otherwise.
pub const V6_TABLE: &[(Net6, V6Rule)] = &[
    (
        Net6::new([0, 0, 0, 0, 0, 0, 0, 0], 0),
        c(AddrClass::Reserved),
    ),
    (
        Net6::new([0, 0, 0, 0, 0, 0, 0, 0], 128),
        c(AddrClass::Unspecified),
    ),
    (
        Net6::new([0, 0, 0, 0, 0, 0, 0, 1], 128),
        c(AddrClass::Loopback),
    ),
    (
        Net6::new([0, 0, 0, 0, 0, 0, 0, 0], 96),
        e(Embedding::Compatible),
    ),
    (
        Net6::new([0, 0, 0, 0, 0, 0xffff, 0, 0], 96),
        e(Embedding::Mapped),
    ),
    (
        Net6::new([0, 0, 0, 0, 0xffff, 0, 0, 0], 96),
        e(Embedding::Translated),
    ),
    (
        Net6::new([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96),
        e(Embedding::Nat64),
    ),
    // Local-use NAT64 (RFC 8215): the translator and the IPv4 side are private by definition,
    // and the embedded address's position depends on a prefix length we cannot know.
    (
        Net6::new([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48),
        c(AddrClass::Private),
    ),
    (
        Net6::new([0x100, 0, 0, 0, 0, 0, 0, 0], 64),
        c(AddrClass::Discard),
    ),
    (
        Net6::new([0x2000, 0, 0, 0, 0, 0, 0, 0], 3),
        c(AddrClass::Public),
    ),
    // Includes the sub-allocations IANA marks global (PCP/TURN anycast, AMT, AS112, DETs):
    // none of them is an egress destination, so the whole /23 is denied.
    (
        Net6::new([0x2001, 0, 0, 0, 0, 0, 0, 0], 23),
        c(AddrClass::ProtocolAssignments),
    ),
    (
        Net6::new([0x2001, 0, 0, 0, 0, 0, 0, 0], 32),
        e(Embedding::Teredo),
    ),
    (
        Net6::new([0x2001, 2, 0, 0, 0, 0, 0, 0], 48),
        c(AddrClass::Benchmarking),
    ),
    // ORCHID (deprecated) and ORCHIDv2: overlay identifiers, not routable locators.
    (
        Net6::new([0x2001, 0x10, 0, 0, 0, 0, 0, 0], 28),
        c(AddrClass::Reserved),
    ),
    (
        Net6::new([0x2001, 0x20, 0, 0, 0, 0, 0, 0], 28),
        c(AddrClass::Reserved),
    ),
    (
        Net6::new([0x2001, 0xdb8, 0, 0, 0, 0, 0, 0], 32),
        c(AddrClass::Documentation),
    ),
    (
        Net6::new([0x2002, 0, 0, 0, 0, 0, 0, 0], 16),
        e(Embedding::SixToFour),
    ),
    (
        Net6::new([0x3fff, 0, 0, 0, 0, 0, 0, 0], 20),
        c(AddrClass::Documentation),
    ),
    (
        Net6::new([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        c(AddrClass::UniqueLocal),
    ),
    // AWS instance metadata over IPv6.
    (
        Net6::new([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128),
        c(AddrClass::Metadata),
    ),
    (
        Net6::new([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10),
        c(AddrClass::LinkLocal),
    ),
    (
        Net6::new([0xfec0, 0, 0, 0, 0, 0, 0, 0], 10),
        c(AddrClass::SiteLocal),
    ),
    (
        Net6::new([0xff00, 0, 0, 0, 0, 0, 0, 0], 8),
        c(AddrClass::Multicast),
    ),
];

/// The result of classifying one address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Classification {
    pub class: AddrClass,
    /// The IPv4 address carried by an IPv6 embedding (for Teredo: the client), for logs.
    pub embedded: Option<Ipv4Addr>,
}

/// Classifies an address. Total: every input has a class; nothing panics.
pub fn classify(ip: IpAddr) -> Classification {
    match ip {
        IpAddr::V4(v4) => Classification {
            class: classify_v4(v4),
            embedded: None,
        },
        IpAddr::V6(v6) => classify_v6(v6),
    }
}

/// Whether `ip` may be dialled without an explicit CIDR rule.
pub fn is_public(ip: IpAddr) -> bool {
    classify(ip).class == AddrClass::Public
}

/// The class of an IPv4 address (longest-prefix match over [`V4_TABLE`]).
pub fn classify_v4(ip: Ipv4Addr) -> AddrClass {
    let bits = ip.to_bits();
    let mut best: Option<(u8, AddrClass)> = None;
    for &(net, class) in V4_TABLE {
        if net.contains(bits) && best.is_none_or(|(len, _)| net.len > len) {
            best = Some((net.len, class));
        }
    }
    // The /0 row makes the table total; should it ever be removed, fail closed.
    best.map_or(AddrClass::Reserved, |(_, class)| class)
}

/// The classification of an IPv6 address (longest-prefix match over [`V6_TABLE`], then the
/// embedded IPv4 address if the row is an embedding).
pub fn classify_v6(ip: Ipv6Addr) -> Classification {
    let bits = ip.to_bits();
    let mut best: Option<(u8, V6Rule)> = None;
    for &(net, rule) in V6_TABLE {
        if net.contains(bits) && best.is_none_or(|(len, _)| net.len > len) {
            best = Some((net.len, rule));
        }
    }
    match best.map(|(_, rule)| rule) {
        Some(V6Rule::Class(class)) => Classification {
            class,
            embedded: None,
        },
        Some(V6Rule::Embeds(embedding)) => {
            let v4 = embedding.extract(bits);
            Classification {
                class: embedding.class(classify_v4(v4)),
                embedded: Some(v4),
            }
        }
        None => Classification {
            class: AddrClass::Reserved,
            embedded: None,
        },
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::str::FromStr;

    use proptest::prelude::*;

    use super::*;
    use AddrClass::*;

    fn v4(s: &str) -> Ipv4Addr {
        Ipv4Addr::from_str(s).unwrap()
    }

    fn v6(s: &str) -> Ipv6Addr {
        Ipv6Addr::from_str(s).unwrap()
    }

    /// First, last and just-outside addresses of every IPv4 row, plus well-known examples.
    const V4_KNOWN: &[(&str, AddrClass)] = &[
        ("0.0.0.0", Unspecified),
        ("0.0.0.1", ThisNetwork),
        ("0.255.255.255", ThisNetwork),
        ("1.0.0.0", Public),
        ("1.1.1.1", Public),
        ("8.8.8.8", Public),
        ("9.255.255.255", Public),
        ("10.0.0.0", Private),
        ("10.0.0.1", Private),
        ("10.255.255.255", Private),
        ("11.0.0.0", Public),
        ("100.63.255.255", Public),
        ("100.64.0.0", SharedCgnat),
        ("100.100.100.199", SharedCgnat),
        ("100.100.100.200", Metadata),
        ("100.100.100.201", SharedCgnat),
        ("100.127.255.255", SharedCgnat),
        ("100.128.0.0", Public),
        ("126.255.255.255", Public),
        ("127.0.0.0", Loopback),
        ("127.0.0.1", Loopback),
        ("127.255.255.255", Loopback),
        ("128.0.0.0", Public),
        ("168.63.129.15", Public),
        ("168.63.129.16", Metadata),
        ("168.63.129.17", Public),
        ("169.253.255.255", Public),
        ("169.254.0.0", LinkLocal),
        ("169.254.169.253", LinkLocal),
        ("169.254.169.254", Metadata),
        ("169.254.169.255", LinkLocal),
        ("169.254.170.1", LinkLocal),
        ("169.254.170.2", Metadata),
        ("169.254.170.3", LinkLocal),
        ("169.254.255.255", LinkLocal),
        ("169.255.0.0", Public),
        ("172.15.255.255", Public),
        ("172.16.0.0", Private),
        ("172.31.255.255", Private),
        ("172.32.0.0", Public),
        ("191.255.255.255", Public),
        ("192.0.0.0", ProtocolAssignments),
        ("192.0.0.9", ProtocolAssignments),
        ("192.0.0.255", ProtocolAssignments),
        ("192.0.1.0", Public),
        ("192.0.1.255", Public),
        ("192.0.2.0", Documentation),
        ("192.0.2.255", Documentation),
        ("192.0.3.0", Public),
        ("192.88.98.255", Public),
        ("192.88.99.0", Tunnel),
        ("192.88.99.255", Tunnel),
        ("192.88.100.0", Public),
        ("192.167.255.255", Public),
        ("192.168.0.0", Private),
        ("192.168.255.255", Private),
        ("192.169.0.0", Public),
        ("198.17.255.255", Public),
        ("198.18.0.0", Benchmarking),
        ("198.19.255.255", Benchmarking),
        ("198.20.0.0", Public),
        ("198.51.99.255", Public),
        ("198.51.100.0", Documentation),
        ("198.51.100.255", Documentation),
        ("198.51.101.0", Public),
        ("203.0.112.255", Public),
        ("203.0.113.0", Documentation),
        ("203.0.113.255", Documentation),
        ("203.0.114.0", Public),
        ("223.255.255.255", Public),
        ("224.0.0.0", Multicast),
        ("239.255.255.255", Multicast),
        ("240.0.0.0", Reserved),
        ("255.255.255.254", Reserved),
        ("255.255.255.255", Broadcast),
    ];

    /// First, last and just-outside addresses of every IPv6 row: (address, class, embedded).
    const V6_KNOWN: &[(&str, AddrClass, Option<&str>)] = &[
        ("::", Unspecified, None),
        ("::1", Loopback, None),
        ("::2", ThisNetwork, Some("0.0.0.2")),
        ("::ffff:ffff", Broadcast, Some("255.255.255.255")),
        ("::1:0:0", Reserved, None),
        ("::fffe:ffff:ffff", Reserved, None),
        ("::ffff:0:0", Unspecified, Some("0.0.0.0")),
        ("::ffff:ffff:ffff", Broadcast, Some("255.255.255.255")),
        ("::1:0:0:0", Reserved, None),
        ("::fffe:ffff:ffff:ffff", Reserved, None),
        ("::ffff:0:0:0", Unspecified, Some("0.0.0.0")),
        ("::ffff:0:ffff:ffff", Broadcast, Some("255.255.255.255")),
        ("::ffff:1:0:0", Reserved, None),
        ("64:ff9a:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("64:ff9b::", Unspecified, Some("0.0.0.0")),
        ("64:ff9b::ffff:ffff", Broadcast, Some("255.255.255.255")),
        ("64:ff9b::1:0:0", Reserved, None),
        ("64:ff9b:0:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("64:ff9b:1::", Private, None),
        ("64:ff9b:1:ffff:ffff:ffff:ffff:ffff", Private, None),
        ("64:ff9b:2::", Reserved, None),
        ("ff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("100::", Discard, None),
        ("100::ffff:ffff:ffff:ffff", Discard, None),
        ("100:0:0:1::", Reserved, None),
        ("1fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("2000::", Public, None),
        ("2000:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public, None),
        ("2001::", Tunnel, Some("255.255.255.255")),
        (
            "2001:0:ffff:ffff:ffff:ffff:ffff:ffff",
            Tunnel,
            Some("0.0.0.0"),
        ),
        ("2001:1::", ProtocolAssignments, None),
        ("2001:1::1", ProtocolAssignments, None),
        (
            "2001:1:ffff:ffff:ffff:ffff:ffff:ffff",
            ProtocolAssignments,
            None,
        ),
        ("2001:2::", Benchmarking, None),
        ("2001:2:0:ffff:ffff:ffff:ffff:ffff", Benchmarking, None),
        ("2001:2:1::", ProtocolAssignments, None),
        (
            "2001:f:ffff:ffff:ffff:ffff:ffff:ffff",
            ProtocolAssignments,
            None,
        ),
        ("2001:10::", Reserved, None),
        ("2001:1f:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("2001:20::", Reserved, None),
        ("2001:2f:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("2001:30::", ProtocolAssignments, None),
        (
            "2001:1ff:ffff:ffff:ffff:ffff:ffff:ffff",
            ProtocolAssignments,
            None,
        ),
        ("2001:200::", Public, None),
        ("2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", Public, None),
        ("2001:db8::", Documentation, None),
        (
            "2001:db8:ffff:ffff:ffff:ffff:ffff:ffff",
            Documentation,
            None,
        ),
        ("2001:db9::", Public, None),
        ("2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public, None),
        ("2002::", Tunnel, Some("0.0.0.0")),
        (
            "2002:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            Tunnel,
            Some("255.255.255.255"),
        ),
        ("2003::", Public, None),
        ("2606:4700:4700::1111", Public, None),
        ("3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public, None),
        ("3fff::", Documentation, None),
        (
            "3fff:fff:ffff:ffff:ffff:ffff:ffff:ffff",
            Documentation,
            None,
        ),
        ("3fff:1000::", Public, None),
        ("3fff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Public, None),
        ("4000::", Reserved, None),
        ("fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("fc00::", UniqueLocal, None),
        ("fd00:ec2::253", UniqueLocal, None),
        ("fd00:ec2::254", Metadata, None),
        ("fd00:ec2::255", UniqueLocal, None),
        ("fdff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", UniqueLocal, None),
        ("fe00::", Reserved, None),
        ("fe7f:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Reserved, None),
        ("fe80::", LinkLocal, None),
        ("febf:ffff:ffff:ffff:ffff:ffff:ffff:ffff", LinkLocal, None),
        ("fec0::", SiteLocal, None),
        ("feff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", SiteLocal, None),
        ("ff00::", Multicast, None),
        ("ff02::1", Multicast, None),
        ("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", Multicast, None),
    ];

    #[test]
    fn net_5_known_ipv4_examples_at_every_boundary() {
        for &(addr, want) in V4_KNOWN {
            let got = classify(IpAddr::V4(v4(addr)));
            assert_eq!(
                got,
                Classification {
                    class: want,
                    embedded: None
                },
                "{addr}"
            );
        }
    }

    #[test]
    fn net_5_known_ipv6_examples_at_every_boundary() {
        for &(addr, want, embedded) in V6_KNOWN {
            let got = classify(IpAddr::V6(v6(addr)));
            let want = Classification {
                class: want,
                embedded: embedded.map(v4),
            };
            assert_eq!(got, want, "{addr}");
        }
    }

    /// Adding a table row without boundary examples fails here.
    #[test]
    fn net_5_every_table_row_has_first_and_last_address_examples() {
        let known4: HashSet<u32> = V4_KNOWN.iter().map(|(a, _)| v4(a).to_bits()).collect();
        for &(net, class) in V4_TABLE {
            for addr in [net.base, net.base | !net.mask()] {
                assert!(
                    known4.contains(&addr),
                    "{net:?} ({class:?}): no example for {}",
                    Ipv4Addr::from_bits(addr)
                );
            }
        }
        let known6: HashSet<u128> = V6_KNOWN.iter().map(|(a, _, _)| v6(a).to_bits()).collect();
        for &(net, rule) in V6_TABLE {
            for addr in [net.base, net.base | !net.mask()] {
                assert!(
                    known6.contains(&addr),
                    "{net:?} ({rule:?}): no example for {}",
                    Ipv6Addr::from_bits(addr)
                );
            }
        }
    }

    #[test]
    fn net_5_tables_are_well_formed() {
        let mut seen4 = HashSet::new();
        for &(net, _) in V4_TABLE {
            assert!(net.len <= 32, "{net:?}");
            assert_eq!(net.base & !net.mask(), 0, "host bits set in {net:?}");
            assert!(seen4.insert(net), "duplicate row {net:?}");
        }
        let mut seen6 = HashSet::new();
        for &(net, _) in V6_TABLE {
            assert!(net.len <= 128, "{net:?}");
            assert_eq!(net.base & !net.mask(), 0, "host bits set in {net:?}");
            assert!(seen6.insert(net), "duplicate row {net:?}");
        }
    }

    /// Every embedding form carrying a loopback, private, metadata and public address.
    #[test]
    fn net_5_embedded_ipv4_is_unwrapped_in_every_form() {
        let rows: &[(&str, AddrClass, Option<&str>)] = &[
            // IPv4-mapped: the embedded class, public stays public.
            ("::ffff:127.0.0.1", Loopback, Some("127.0.0.1")),
            ("::ffff:7f00:1", Loopback, Some("127.0.0.1")),
            ("::ffff:10.0.0.1", Private, Some("10.0.0.1")),
            ("::ffff:169.254.169.254", Metadata, Some("169.254.169.254")),
            ("::ffff:8.8.8.8", Public, Some("8.8.8.8")),
            // IPv4-compatible: the embedded class, but never public.
            ("::127.0.0.1", Loopback, Some("127.0.0.1")),
            ("::a00:1", Private, Some("10.0.0.1")),
            ("::a9fe:a9fe", Metadata, Some("169.254.169.254")),
            ("::8.8.8.8", Reserved, Some("8.8.8.8")),
            // IPv4-translated: the embedded class, but never public.
            ("::ffff:0:127.0.0.1", Loopback, Some("127.0.0.1")),
            ("::ffff:0:a00:1", Private, Some("10.0.0.1")),
            ("::ffff:0:a9fe:a9fe", Metadata, Some("169.254.169.254")),
            ("::ffff:0:808:808", Reserved, Some("8.8.8.8")),
            // NAT64 well-known prefix: the embedded class, public stays public.
            ("64:ff9b::7f00:1", Loopback, Some("127.0.0.1")),
            ("64:ff9b::10.0.0.1", Private, Some("10.0.0.1")),
            ("64:ff9b::a9fe:a9fe", Metadata, Some("169.254.169.254")),
            ("64:ff9b::808:808", Public, Some("8.8.8.8")),
            // NAT64 local-use: never public, whatever it carries.
            ("64:ff9b:1::7f00:1", Private, None),
            ("64:ff9b:1::a00:1", Private, None),
            ("64:ff9b:1::a9fe:a9fe", Private, None),
            ("64:ff9b:1::808:808", Private, None),
            // 6to4: always a tunnel, the router address reported.
            ("2002:7f00:1::", Tunnel, Some("127.0.0.1")),
            ("2002:a00:1::", Tunnel, Some("10.0.0.1")),
            ("2002:a9fe:a9fe::", Tunnel, Some("169.254.169.254")),
            ("2002:808:808::1", Tunnel, Some("8.8.8.8")),
            // Teredo (server 65.54.227.120): always a tunnel, the client address reported.
            (
                "2001:0:4136:e378:8000:63bf:80ff:fffe",
                Tunnel,
                Some("127.0.0.1"),
            ),
            (
                "2001:0:4136:e378:8000:63bf:f5ff:fffe",
                Tunnel,
                Some("10.0.0.1"),
            ),
            (
                "2001:0:4136:e378:8000:63bf:5601:5601",
                Tunnel,
                Some("169.254.169.254"),
            ),
            (
                "2001:0:4136:e378:8000:63bf:f7f7:f7f7",
                Tunnel,
                Some("8.8.8.8"),
            ),
        ];
        for &(addr, class, embedded) in rows {
            let want = Classification {
                class,
                embedded: embedded.map(v4),
            };
            assert_eq!(classify(IpAddr::V6(v6(addr))), want, "{addr}");
        }
    }

    #[test]
    fn net_5_is_public_has_a_positive_control() {
        assert!(is_public(IpAddr::V4(v4("93.184.215.14"))));
        assert!(is_public(IpAddr::V6(v6("2606:4700:4700::1111"))));
        assert!(!is_public(IpAddr::V4(v4("127.0.0.1"))));
        assert!(!is_public(IpAddr::V6(v6("::ffff:127.0.0.1"))));
    }

    #[test]
    fn net_5_reason_codes_are_distinct_snake_case() {
        let mut seen = HashSet::new();
        for class in AddrClass::ALL {
            let reason = class.reason();
            assert!(seen.insert(reason), "duplicate reason {reason}");
            assert!(
                reason.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{reason}"
            );
        }
        assert_eq!(AddrClass::Metadata.reason(), "metadata_address");
        assert_eq!(AddrClass::Public.reason(), "public");
    }

    #[test]
    fn net_5_classification_serialises_as_snake_case() {
        let got = serde_json::to_value(classify(IpAddr::V6(v6("::ffff:100.64.0.1")))).unwrap();
        assert_eq!(
            got,
            serde_json::json!({"class": "shared_cgnat", "embedded": "100.64.0.1"})
        );
    }

    /// What `std` already knows about must never come out public.
    #[test]
    fn net_5_agrees_with_std_predicates() {
        for &(addr, _) in V4_KNOWN {
            let ip = v4(addr);
            if ip.is_private()
                || ip.is_loopback()
                || ip.is_link_local()
                || ip.is_multicast()
                || ip.is_broadcast()
                || ip.is_documentation()
                || ip.is_unspecified()
            {
                assert!(!is_public(IpAddr::V4(ip)), "{addr}");
            }
        }
    }

    /// Whether a row more specific than `len` covers `addr` (then that row decides).
    fn covered_by_longer_v4(addr: u32, len: u8) -> bool {
        V4_TABLE
            .iter()
            .any(|&(net, _)| net.len > len && net.contains(addr))
    }

    fn covered_by_longer_v6(addr: u128, len: u8) -> bool {
        V6_TABLE
            .iter()
            .any(|&(net, _)| net.len > len && net.contains(addr))
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]

        #[test]
        fn net_5_prop_mapped_and_nat64_forms_classify_like_ipv4(bits in any::<u32>()) {
            let ip = Ipv4Addr::from_bits(bits);
            let class = classify_v4(ip);
            for prefix in [0xffff_u128 << 32, 0x64_ff9b_u128 << 96] {
                let got = classify(IpAddr::V6(Ipv6Addr::from_bits(prefix | u128::from(bits))));
                prop_assert_eq!(got, Classification { class, embedded: Some(ip) });
                prop_assert_eq!(got.class == Public, is_public(IpAddr::V4(ip)));
            }
        }

        #[test]
        fn net_5_prop_v4_addresses_inside_a_row_get_its_class(
            row in 0..V4_TABLE.len(),
            offset in any::<u32>(),
        ) {
            let (net, class) = V4_TABLE[row];
            let addr = net.base | (offset & !net.mask());
            prop_assert!(net.contains(addr));
            if !covered_by_longer_v4(addr, net.len) {
                prop_assert_eq!(classify_v4(Ipv4Addr::from_bits(addr)), class);
            }
        }

        #[test]
        fn net_5_prop_v6_addresses_inside_a_row_get_its_class(
            row in 0..V6_TABLE.len(),
            offset in any::<u128>(),
        ) {
            let (net, rule) = V6_TABLE[row];
            let addr = net.base | (offset & !net.mask());
            prop_assert!(net.contains(addr));
            if !covered_by_longer_v6(addr, net.len) {
                let got = classify_v6(Ipv6Addr::from_bits(addr));
                let want = match rule {
                    V6Rule::Class(class) => Classification { class, embedded: None },
                    V6Rule::Embeds(embedding) => {
                        let inner = embedding.extract(addr);
                        Classification {
                            class: embedding.class(classify_v4(inner)),
                            embedded: Some(inner),
                        }
                    }
                };
                prop_assert_eq!(got, want);
            }
        }

        /// Total on every input; and only global unicast, or a form that reaches a public
        /// IPv4 address directly, is ever public.
        #[test]
        fn net_5_prop_classify_is_total_and_public_only_where_routable(bits in any::<u128>()) {
            let got = classify(IpAddr::V6(Ipv6Addr::from_bits(bits)));
            if got.class == Public {
                let global = bits >> 125 == 1;
                let mapped = bits >> 32 == 0xffff;
                let nat64 = bits >> 32 == 0x64_ff9b_u128 << 64;
                prop_assert!(global || mapped || nat64, "{:x}", bits);
                if !global {
                    prop_assert!(got.embedded.is_some_and(|e| classify_v4(e) == Public));
                }
            }
            let _ = classify(IpAddr::V4(Ipv4Addr::from_bits(bits as u32)));
        }
    }
}
