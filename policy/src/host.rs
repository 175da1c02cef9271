//! Host spellings: what a destination string really names, and every
//! address a socket to an IP address can reach.
//!
//! - [`parse_host`] turns what a guest or a peer wrote (`0x7f.1`,
//!   `[::ffff:7f00:1]`, `LOCALHOST.`, `[fe80::1%eth0]`) into one canonical
//!   [`Host`]: an IP address, or a lower-case ASCII name without the
//!   trailing dot. IPv4 is parsed the way `inet_aton` (glibc's
//!   `getaddrinfo`) and the WHATWG URL standard parse it, so a spelling the
//!   resolver would turn into an address is an address here too, and is
//!   dialled without any resolver.
//! - [`equivalents`] lists the addresses an IP address stands for: itself,
//!   its IPv4 / IPv4-mapped IPv6 twin, the IPv4 address embedded in an
//!   IPv4-compatible or NAT64 (64:ff9b::/96, RFC 6052) address, and for the
//!   unspecified address (0.0.0.0, ::), which Linux connects to the local
//!   host, the loopback address.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// A destination host, canonical (see [`parse_host`]).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Host {
    /// An IP address.
    Ip {
        /// The address.
        addr: IpAddr,
        /// The IPv6 zone (scope) id written after `%` (`eth0`, `2`), if
        /// any; only on IPv6 literals. It picks the interface, not the
        /// address: rules match `addr` alone.
        zone: Option<String>,
    },
    /// A DNS name: ASCII letters, digits, `-` and `_` in dot-separated
    /// labels, lower case, without a trailing dot.
    Name(String),
}

impl Host {
    /// The address, for an IP host.
    pub fn ip(&self) -> Option<IpAddr> {
        match self {
            Host::Ip { addr, .. } => Some(*addr),
            Host::Name(_) => None,
        }
    }
}

impl fmt::Display for Host {
    /// An IP as `127.0.0.1` or `[::1]` (with `%zone`), a name as is: the
    /// form that goes before `:PORT`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Host::Ip {
                addr: IpAddr::V4(a),
                ..
            } => write!(f, "{a}"),
            Host::Ip {
                addr: IpAddr::V6(a),
                zone,
            } => match zone {
                Some(z) => write!(f, "[{a}%{z}]"),
                None => write!(f, "[{a}]"),
            },
            Host::Name(n) => f.write_str(n),
        }
    }
}

/// Why a host could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid host `{host}`: {reason}")]
pub struct HostError {
    /// The host as given.
    pub host: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

/// Longest DNS name, in bytes, without the trailing dot (RFC 1035 section
/// 2.3.4).
pub const MAX_NAME_BYTES: usize = 253;

/// Longest DNS label, in bytes (RFC 1035 section 2.3.4).
pub const MAX_LABEL_BYTES: usize = 63;

/// Parses a host as a guest or a peer wrote it, brackets optional.
///
/// - IPv6: `::1`, `[::1]`, `[::ffff:127.0.0.1]`, with an optional zone id
///   `[fe80::1%eth0]` (an interface name or number).
/// - IPv4 in every form `inet_aton` accepts: one to four parts, each
///   decimal, octal (leading `0`) or hex (`0x`), the last part filling the
///   remaining bytes (`2130706433`, `0177.0.0.1`, `0x7f.1`, `127.1`), and
///   one trailing dot (`127.0.0.1.`, as the WHATWG URL standard reads it).
///   A host whose last label is a number is an IPv4 address or an error,
///   never a name (WHATWG "ends in a number").
/// - Otherwise a DNS name: lower-cased, one trailing dot dropped, labels of
///   ASCII letters, digits, `-` and `_`, at most [`MAX_LABEL_BYTES`] each
///   and [`MAX_NAME_BYTES`] in all. Write an internationalised name in its
///   `xn--` form (`ws://` URLs are converted by the URL parser).
///
/// Errors: [`HostError`] naming the host and the reason (empty, bad IPv6,
/// bad zone id, an IPv4 part out of range, a character a DNS name cannot
/// hold, a label or name too long).
pub fn parse_host(text: &str) -> Result<Host, HostError> {
    let err = |reason| HostError {
        host: text.to_owned(),
        reason,
    };
    let (bare, bracketed) = match text.strip_prefix('[') {
        Some(rest) => (
            rest.strip_suffix(']')
                .ok_or_else(|| err("`[` without `]`"))?,
            true,
        ),
        None => (text, false),
    };
    if bare.is_empty() {
        return Err(err("empty host"));
    }
    if bracketed || bare.contains(':') {
        let (addr, zone) = match bare.split_once('%') {
            Some((a, z)) => (a, Some(z)),
            None => (bare, None),
        };
        let addr: Ipv6Addr = addr.parse().map_err(|_| err("not an IPv6 address"))?;
        if let Some(z) = zone {
            let ok = !z.is_empty()
                && z.len() <= 64
                && z.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
            if !ok {
                return Err(err("bad IPv6 zone id"));
            }
        }
        return Ok(Host::Ip {
            addr: IpAddr::V6(addr),
            zone: zone.map(str::to_owned),
        });
    }
    if let Some(v4) = parse_ipv4(bare).map_err(err)? {
        return Ok(Host::Ip {
            addr: IpAddr::V4(v4),
            zone: None,
        });
    }
    let name = bare.strip_suffix('.').unwrap_or(bare);
    if name.len() > MAX_NAME_BYTES {
        return Err(err("name longer than 253 bytes"));
    }
    for label in name.split('.') {
        if label.is_empty() {
            return Err(err("empty label"));
        }
        if label.len() > MAX_LABEL_BYTES {
            return Err(err("label longer than 63 bytes"));
        }
        if !label
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        {
            return Err(err(
                "a name holds only ASCII letters, digits, `-`, `_` and dots (write IDNs as xn--)",
            ));
        }
    }
    Ok(Host::Name(name.to_ascii_lowercase()))
}

/// Whether `part` is a number in the sense of the WHATWG URL standard's
/// "ends in a number": all decimal digits, or `0x` followed by hex digits.
fn is_number(part: &str) -> bool {
    if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
        return true;
    }
    match part.get(..2) {
        Some(p) if p.eq_ignore_ascii_case("0x") => part[2..].bytes().all(|b| b.is_ascii_hexdigit()),
        _ => false,
    }
}

/// One IPv4 part: `0x` hex, leading-`0` octal or decimal. `None` when the
/// digits do not fit the radix or the value exceeds `u32`.
fn ipv4_part(part: &str) -> Option<u64> {
    let (digits, radix) = match part.get(..2) {
        Some(p) if p.eq_ignore_ascii_case("0x") => (&part[2..], 16),
        _ if part.len() > 1 && part.starts_with('0') => (&part[1..], 8),
        _ => (part, 10),
    };
    if digits.is_empty() {
        // `0x` alone is 0 (WHATWG); `0` alone took the decimal branch.
        return Some(0);
    }
    // Leading zeros never change the value; skip them so a long run of
    // them does not overflow.
    let digits = digits.trim_start_matches('0');
    if digits.is_empty() {
        return Some(0);
    }
    u64::from_str_radix(digits, radix)
        .ok()
        .filter(|v| *v <= u64::from(u32::MAX))
}

/// Parses the IPv4 forms of [`parse_host`]. `Ok(None)`: not an IPv4
/// spelling (its last label is not a number), so a name.
fn parse_ipv4(text: &str) -> Result<Option<Ipv4Addr>, &'static str> {
    let text = text.strip_suffix('.').unwrap_or(text);
    let parts: Vec<&str> = text.split('.').collect();
    if !parts.last().is_some_and(|p| is_number(p)) {
        return Ok(None);
    }
    if parts.len() > 4 {
        return Err("an IPv4 address has at most four parts");
    }
    let mut values = Vec::with_capacity(parts.len());
    for part in &parts {
        if part.is_empty() {
            return Err("empty IPv4 part");
        }
        values.push(ipv4_part(part).ok_or("not a valid IPv4 part")?);
    }
    let (last, init) = values.split_last().expect("at least one part");
    if init.iter().any(|v| *v > 255) {
        return Err("an IPv4 part before the last is above 255");
    }
    let room = 8 * (5 - values.len() as u32);
    if room < 32 && *last >= 1u64 << room {
        return Err("the last IPv4 part is too large for the bytes left");
    }
    let mut addr = *last;
    for (i, v) in init.iter().enumerate() {
        addr |= v << (24 - 8 * i as u32);
    }
    Ok(Some(Ipv4Addr::from(addr as u32)))
}

/// The NAT64 well-known prefix 64:ff9b::/96 (RFC 6052 section 2.1).
const NAT64_PREFIX: u128 = 0x0064_ff9b_u128 << 96;

/// The IPv4 address an IPv6 address carries: IPv4-mapped
/// (`::ffff:a.b.c.d`), IPv4-compatible (`::a.b.c.d`, deprecated by RFC 4291
/// section 2.5.5.1; not `::` and `::1`) or NAT64 (`64:ff9b::a.b.c.d`).
pub fn embedded_ipv4(addr: Ipv6Addr) -> Option<Ipv4Addr> {
    if let Some(v4) = addr.to_ipv4_mapped() {
        return Some(v4);
    }
    let bits = u128::from(addr);
    let low = Ipv4Addr::from(bits as u32);
    if bits >> 32 == 0 && bits > 1 {
        return Some(low);
    }
    if bits >> 32 == NAT64_PREFIX >> 32 {
        return Some(low);
    }
    None
}

/// Every address `addr` stands for, `addr` first: its IPv4-mapped twin (for
/// IPv4) or the IPv4 address it embeds ([`embedded_ipv4`]) and that
/// address's mapped form; and, for an unspecified address (`0.0.0.0`, `::`,
/// `::ffff:0.0.0.0`), the loopback address the kernel connects it to
/// (`127.0.0.1` and `::ffff:127.0.0.1`, or `::1`). A deny rule that
/// matches any of them denies `addr`; an allow rule that matches any of
/// them admits it.
pub fn equivalents(addr: IpAddr) -> Vec<IpAddr> {
    let mut out = twins(addr);
    if out.contains(&IpAddr::V4(Ipv4Addr::UNSPECIFIED)) {
        out.extend(twins(IpAddr::V4(Ipv4Addr::LOCALHOST)));
    }
    if addr == IpAddr::V6(Ipv6Addr::UNSPECIFIED) {
        out.push(IpAddr::V6(Ipv6Addr::LOCALHOST));
    }
    out
}

/// `addr`, and the same host in the other family's spelling (no loopback
/// aliasing): what a bind address stands for.
pub fn twins(addr: IpAddr) -> Vec<IpAddr> {
    let v4 = match addr {
        IpAddr::V4(a) => Some(a),
        IpAddr::V6(a) => embedded_ipv4(a),
    };
    let mut out = vec![addr];
    if let Some(v4) = v4 {
        for twin in [IpAddr::V4(v4), IpAddr::V6(v4.to_ipv6_mapped())] {
            if !out.contains(&twin) {
                out.push(twin);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        match parse_host(text) {
            Ok(Host::Ip { addr, .. }) => addr,
            other => panic!("{text}: {other:?}"),
        }
    }

    #[test]
    fn ipv4_forms_as_inet_aton_reads_them() {
        for text in [
            "127.0.0.1",
            "2130706433",
            "0177.0.0.1",
            "0x7f.1",
            "0X7F.0.0.1",
            "127.1",
            "127.0.1",
            "0x7f000001",
            "017700000001",
            "127.0.0.1.",
            "0177.0.0.01",
            "0x00007f.1",
        ] {
            assert_eq!(ip(text), IpAddr::V4(Ipv4Addr::LOCALHOST), "{text}");
        }
        assert_eq!(ip("0"), IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(ip("0x"), IpAddr::V4(Ipv4Addr::UNSPECIFIED));
        assert_eq!(
            ip("10.0x10.0377.255"),
            "10.16.255.255".parse::<IpAddr>().unwrap()
        );
        assert_eq!(ip("1.65535"), "1.0.255.255".parse::<IpAddr>().unwrap());
        for bad in [
            "256.0.0.1",
            "1.2.3.256",
            "1.65536.1",
            "4294967296",
            "1.2.3.4.5",
            "09.0.0.1",
            "1..1",
            "x.1",
            "0x1g.1",
        ] {
            assert!(parse_host(bad).is_err(), "{bad}: {:?}", parse_host(bad));
        }
    }

    #[test]
    fn ipv6_forms_brackets_and_zones() {
        assert_eq!(ip("::1"), ip("[0:0:0:0:0:0:0:1]"));
        assert_eq!(ip("[::FFFF:7F00:1]"), ip("::ffff:127.0.0.1"));
        assert_eq!(
            parse_host("[fe80::1%eth0]").unwrap(),
            Host::Ip {
                addr: "fe80::1".parse().unwrap(),
                zone: Some("eth0".into())
            }
        );
        assert_eq!(
            parse_host("[fe80::1%eth0]").unwrap().to_string(),
            "[fe80::1%eth0]"
        );
        for bad in [
            "[::1",
            "[127.0.0.1]",
            "[::1%]",
            "::1%a b",
            ":::",
            "[]",
            "[x]",
        ] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn names_are_lower_case_without_the_trailing_dot() {
        for text in ["LocalHost", "localhost.", "LOCALHOST."] {
            assert_eq!(parse_host(text).unwrap(), Host::Name("localhost".into()));
        }
        assert_eq!(
            parse_host("_srv.Example.COM").unwrap(),
            Host::Name("_srv.example.com".into())
        );
        // Digits in a label that is not the last keep it a name.
        assert_eq!(
            parse_host("1.2.3.4.nip.io").unwrap(),
            Host::Name("1.2.3.4.nip.io".into())
        );
        for bad in [
            "",
            ".",
            "a..b",
            "exa mple",
            "a/b",
            "bücher.example",
            "%6cocalhost",
            "a*b",
            "localhost..",
        ] {
            assert!(parse_host(bad).is_err(), "{bad}");
        }
        assert!(parse_host(&"a".repeat(64)).is_err());
        assert!(parse_host(&["a"; 128].join(".")).is_err());
    }

    #[test]
    fn equivalents_follow_what_the_kernel_connects() {
        let eq = |t: &str| equivalents(ip(t));
        let has = |t: &str, a: &str| eq(t).contains(&a.parse::<IpAddr>().unwrap());
        assert!(has("0.0.0.0", "127.0.0.1"));
        assert!(has("::", "::1"));
        assert!(has("::ffff:0.0.0.0", "127.0.0.1"));
        assert!(has("127.0.0.1", "::ffff:127.0.0.1"));
        assert!(has("::ffff:7f00:1", "127.0.0.1"));
        assert!(has("::127.0.0.1", "127.0.0.1"));
        assert!(has("64:ff9b::7f00:1", "127.0.0.1"));
        assert!(!has("::1", "0.0.0.1"));
        assert_eq!(eq("2001:db8::1"), vec![ip("2001:db8::1")]);
        assert!(!has("10.0.0.1", "127.0.0.1"));
    }
}
