//! The `internal` preset: the address ranges that SSRF filters block, the
//! ones that lead into the host itself or the private network around it.
//!
//! A rule with the host `internal` matches them (`--deny internal`,
//! `--allow internal:*`), and a wildcard allow (`*`, `*.suffix`) does not
//! reach them (see [`crate::Policy`]). An address counts as internal when
//! any of its [`crate::equivalents`] falls in a range, so the IPv4-mapped,
//! IPv4-compatible and NAT64 spellings of these ranges are internal too.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// One range of the preset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InternalRange {
    /// The range in CIDR notation, e.g. `127.0.0.0/8`.
    pub cidr: &'static str,
    /// What it is, e.g. `loopback`.
    pub what: &'static str,
    addr: IpAddr,
    prefix: u8,
}

const fn v4(
    a: u8,
    b: u8,
    c: u8,
    d: u8,
    prefix: u8,
    cidr: &'static str,
    what: &'static str,
) -> InternalRange {
    InternalRange {
        cidr,
        what,
        addr: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
    }
}

const fn v6(first: u16, prefix: u8, cidr: &'static str, what: &'static str) -> InternalRange {
    InternalRange {
        cidr,
        what,
        addr: IpAddr::V6(Ipv6Addr::new(first, 0, 0, 0, 0, 0, 0, 0)),
        prefix,
    }
}

/// The preset, in the order it is checked.
pub const INTERNAL_RANGES: &[InternalRange] = &[
    v4(
        0,
        0,
        0,
        0,
        8,
        "0.0.0.0/8",
        "unspecified / this network (RFC 1122)",
    ),
    v4(10, 0, 0, 0, 8, "10.0.0.0/8", "private (RFC 1918)"),
    v4(
        100,
        64,
        0,
        0,
        10,
        "100.64.0.0/10",
        "shared address space, carrier-grade NAT (RFC 6598)",
    ),
    v4(127, 0, 0, 0, 8, "127.0.0.0/8", "loopback"),
    v4(
        169,
        254,
        0,
        0,
        16,
        "169.254.0.0/16",
        "link-local, cloud metadata 169.254.169.254 (RFC 3927)",
    ),
    v4(172, 16, 0, 0, 12, "172.16.0.0/12", "private (RFC 1918)"),
    v4(192, 168, 0, 0, 16, "192.168.0.0/16", "private (RFC 1918)"),
    v4(224, 0, 0, 0, 4, "224.0.0.0/4", "multicast"),
    v4(255, 255, 255, 255, 32, "255.255.255.255/32", "broadcast"),
    v6(0, 128, "::/128", "unspecified"),
    InternalRange {
        cidr: "::1/128",
        what: "loopback",
        addr: IpAddr::V6(Ipv6Addr::LOCALHOST),
        prefix: 128,
    },
    v6(0xfc00, 7, "fc00::/7", "unique local (RFC 4193)"),
    v6(0xfe80, 10, "fe80::/10", "link-local"),
    v6(0xfec0, 10, "fec0::/10", "site-local (deprecated, RFC 3879)"),
    v6(0xff00, 8, "ff00::/8", "multicast"),
];

/// Whether `ip` lies in the `prefix`-bit block of `net` (same family only).
pub(crate) fn in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            let mask = u32::MAX.checked_shl(32 - u32::from(prefix)).unwrap_or(0);
            (u32::from(a) & mask) == (u32::from(b) & mask)
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => {
            let mask = u128::MAX.checked_shl(128 - u32::from(prefix)).unwrap_or(0);
            (u128::from(a) & mask) == (u128::from(b) & mask)
        }
        _ => false,
    }
}

/// The internal range `addr` (or one of its [`crate::equivalents`]) falls
/// in, if any.
pub fn internal_range(addr: IpAddr) -> Option<&'static InternalRange> {
    crate::equivalents(addr)
        .into_iter()
        .find_map(|a| INTERNAL_RANGES.iter().find(|r| in_net(a, r.addr, r.prefix)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_preset_covers_what_ssrf_filters_block() {
        for (addr, cidr) in [
            ("127.0.0.1", "127.0.0.0/8"),
            ("0.0.0.0", "0.0.0.0/8"),
            ("::", "::/128"),
            ("::1", "::1/128"),
            ("10.1.2.3", "10.0.0.0/8"),
            ("172.31.255.255", "172.16.0.0/12"),
            ("192.168.1.1", "192.168.0.0/16"),
            ("100.100.100.200", "100.64.0.0/10"),
            ("169.254.169.254", "169.254.0.0/16"),
            ("fd00:ec2::254", "fc00::/7"),
            ("fe80::1", "fe80::/10"),
            ("ff02::1", "ff00::/8"),
            ("239.255.255.250", "224.0.0.0/4"),
            ("255.255.255.255", "255.255.255.255/32"),
            ("::ffff:169.254.169.254", "169.254.0.0/16"),
            ("::ffff:10.0.0.1", "10.0.0.0/8"),
            ("64:ff9b::a9fe:a9fe", "169.254.0.0/16"),
            ("::192.168.0.1", "192.168.0.0/16"),
        ] {
            let got = internal_range(addr.parse().unwrap()).map(|r| r.cidr);
            assert_eq!(got, Some(cidr), "{addr}");
        }
        for public in [
            "1.1.1.1",
            "172.32.0.1",
            "100.128.0.1",
            "2606:4700::1111",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
        ] {
            assert_eq!(internal_range(public.parse().unwrap()), None, "{public}");
        }
    }
}
