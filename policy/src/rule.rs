//! One `HOST:PORT` rule: parsing and matching.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::host::{Host, equivalents, parse_host};
use crate::internal::{in_net, internal_range};

/// Why a rule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid rule `{rule}`: {reason} (expected HOST:PORT, e.g. `example.com:443`, `*.example.com:*`, `127.0.0.1:8000-8999`, `[::1]:*`, `10.0.0.0/8:*`, `internal:*`)"
)]
pub struct RuleError {
    /// The rule as given.
    pub rule: String,
    /// What is wrong with it.
    pub reason: String,
}

/// The host half of a rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum HostPattern {
    /// `*`: any host (a wildcard: it does not reach internal addresses in
    /// an allow rule).
    Any,
    /// `internal`: the [`crate::INTERNAL_RANGES`] preset.
    Internal,
    /// An exact name (canonical, see [`crate::parse_host`]).
    Exact(String),
    /// `*.suffix`: names ending in `.suffix` (stored with the dot), not
    /// `suffix` itself. A wildcard.
    Suffix(String),
    /// An IP address (`prefix` = its full length) or a CIDR block.
    Net {
        /// The address as written; bits past `prefix` are ignored.
        addr: IpAddr,
        /// Prefix length in bits (0-32 for IPv4, 0-128 for IPv6).
        prefix: u8,
    },
}

/// An inclusive port range.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PortRange {
    /// Lowest port.
    pub lo: u16,
    /// Highest port.
    pub hi: u16,
}

impl PortRange {
    /// Whether `port` is in the range.
    pub fn contains(&self, port: u16) -> bool {
        (self.lo..=self.hi).contains(&port)
    }
}

/// One `HOST:PORT` rule (see the crate docs for the grammar).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    host: HostPattern,
    ports: PortRange,
    text: String,
}

/// The host keyword of the [`crate::INTERNAL_RANGES`] preset.
pub const INTERNAL_KEYWORD: &str = "internal";

impl FromStr for Rule {
    type Err = RuleError;

    /// Parses `HOST:PORT`; the bare keyword `internal` means
    /// `internal:*`.
    ///
    /// Errors: [`RuleError`] naming the rule and the reason.
    fn from_str(text: &str) -> Result<Rule, RuleError> {
        let err = |reason: &str| RuleError {
            rule: text.to_string(),
            reason: reason.to_string(),
        };
        let (host, port) = if text.eq_ignore_ascii_case(INTERNAL_KEYWORD) {
            (text, "*")
        } else {
            text.rsplit_once(':')
                .ok_or_else(|| err("missing `:PORT`"))?
        };
        let ports = parse_ports(port).map_err(err)?;
        let (host, prefix) = match host.split_once('/') {
            Some((h, p)) => (
                h,
                Some(p.parse::<u8>().map_err(|_| err("bad CIDR prefix"))?),
            ),
            None => (host, None),
        };
        let host = if host == "*" && prefix.is_none() {
            HostPattern::Any
        } else if host.eq_ignore_ascii_case(INTERNAL_KEYWORD) && prefix.is_none() {
            HostPattern::Internal
        } else if let Some(suffix) = host.strip_prefix("*.") {
            if prefix.is_some() {
                return Err(err("a CIDR block needs an IP address"));
            }
            match parse_host(suffix) {
                Ok(Host::Name(name)) => HostPattern::Suffix(format!(".{name}")),
                Ok(Host::Ip { .. }) => return Err(err("a wildcard suffix is a name, not an IP")),
                Err(e) => return Err(err(&format!("bad wildcard suffix: {}", e.reason))),
            }
        } else {
            match parse_host(host) {
                Ok(Host::Ip { zone: Some(_), .. }) => {
                    return Err(err(
                        "a rule matches addresses on every interface: drop the zone id",
                    ));
                }
                Ok(Host::Ip { addr, zone: None }) => {
                    let max = if addr.is_ipv4() { 32 } else { 128 };
                    let prefix = prefix.unwrap_or(max);
                    if prefix > max {
                        return Err(err("CIDR prefix too long"));
                    }
                    HostPattern::Net { addr, prefix }
                }
                Ok(Host::Name(_)) if prefix.is_some() => {
                    return Err(err("a CIDR block needs an IP address"));
                }
                // Every spelling of the name `internal` (`internal.`,
                // `INTERNAL.`) is the preset, as the bare keyword is: a
                // spelling that the resolver treats alike never means
                // something else in a rule.
                Ok(Host::Name(name)) if name == INTERNAL_KEYWORD => HostPattern::Internal,
                Ok(Host::Name(name)) => HostPattern::Exact(name),
                Err(e) => return Err(err(&format!("bad host pattern: {}", e.reason))),
            }
        };
        Ok(Rule {
            host,
            ports,
            text: text.to_string(),
        })
    }
}

fn parse_ports(port: &str) -> Result<PortRange, &'static str> {
    let num = |p: &str| -> Result<u16, &'static str> {
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return Err("bad port");
        }
        p.parse().map_err(|_| "port above 65535")
    };
    if port == "*" {
        return Ok(PortRange {
            lo: 0,
            hi: u16::MAX,
        });
    }
    if let Some((lo, hi)) = port.split_once('-') {
        let (lo, hi) = (num(lo)?, num(hi)?);
        if lo > hi {
            return Err("port range is reversed");
        }
        return Ok(PortRange { lo, hi });
    }
    let p = num(port)?;
    Ok(PortRange { lo: p, hi: p })
}

impl fmt::Display for Rule {
    /// The rule as it was written.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Rule {
    /// The host half.
    pub fn host(&self) -> &HostPattern {
        &self.host
    }

    /// The port half.
    pub fn ports(&self) -> PortRange {
        self.ports
    }

    /// Whether the host part is an IP, a CIDR block or `*`: the only rules
    /// that can match a bind address (`--listen`), which is never a name.
    pub fn is_address_rule(&self) -> bool {
        matches!(self.host, HostPattern::Any | HostPattern::Net { .. })
    }

    /// Whether the rule is a wildcard (`*` or `*.suffix`): an allow rule of
    /// that kind does not reach internal addresses.
    pub fn is_wildcard(&self) -> bool {
        matches!(self.host, HostPattern::Any | HostPattern::Suffix(_))
    }

    /// Whether the rule names addresses (an IP, a CIDR block or
    /// `internal`): an allow rule of that kind reaches the internal
    /// addresses it covers.
    pub fn names_addresses(&self) -> bool {
        matches!(self.host, HostPattern::Internal | HostPattern::Net { .. })
    }

    /// Whether the rule matches `host` on `port`: for a name, the name
    /// rules and `*`; for an address, `*`, `internal` and IP/CIDR rules,
    /// tried against every one of its [`crate::equivalents`]. This is the
    /// bare pattern match; [`crate::Policy`] adds what a wildcard may
    /// reach.
    pub fn matches(&self, host: &Host, port: u16) -> bool {
        match host {
            Host::Ip { addr, .. } => self.matches_ip(*addr, port),
            Host::Name(name) => self.matches_name(name, port),
        }
    }

    /// [`Rule::matches`] for an address.
    pub fn matches_ip(&self, addr: IpAddr, port: u16) -> bool {
        self.ports.contains(port) && self.matched_equivalent(addr).is_some()
    }

    /// The equivalent of `addr` that the host pattern matches (ports not
    /// checked), if any.
    pub(crate) fn matched_equivalent(&self, addr: IpAddr) -> Option<IpAddr> {
        match &self.host {
            HostPattern::Any => Some(addr),
            HostPattern::Internal => internal_range(addr).map(|_| addr),
            HostPattern::Net { addr: net, prefix } => equivalents(addr)
                .into_iter()
                .find(|a| in_net(*a, *net, *prefix)),
            HostPattern::Exact(_) | HostPattern::Suffix(_) => None,
        }
    }

    /// [`Rule::matches`] for a canonical name (lower case, no trailing
    /// dot: what [`crate::parse_host`] returns).
    pub fn matches_name(&self, name: &str, port: u16) -> bool {
        if !self.ports.contains(port) {
            return false;
        }
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Exact(e) => e == name,
            HostPattern::Suffix(s) => name.ends_with(s.as_str()),
            HostPattern::Internal | HostPattern::Net { .. } => false,
        }
    }

    /// Whether a `--listen` rule matches the bind address `addr`: `*`, or
    /// an IP/CIDR rule containing `addr` in either family's spelling
    /// (`::ffff:127.0.0.1` binds 127.0.0.1). No loopback aliasing: binding
    /// 0.0.0.0 listens on every interface, and only a rule covering
    /// 0.0.0.0 allows it. An IPv6 rule covers IPv4 binds only when it lies
    /// inside the IPv4-mapped range (`::ffff:0:0/96`): `[::]/0` is a rule
    /// for IPv6, and does not allow binding 0.0.0.0 (though it contains
    /// `::ffff:0.0.0.0`). IPv4-compatible and NAT64 addresses bind as
    /// IPv6 and meet IPv6 rules only.
    pub fn matches_bind(&self, addr: IpAddr, port: u16) -> bool {
        if !self.ports.contains(port) {
            return false;
        }
        let HostPattern::Net { addr: net, prefix } = &self.host else {
            return matches!(self.host, HostPattern::Any);
        };
        let v4 = match addr {
            IpAddr::V4(a) => Some(a),
            IpAddr::V6(a) => a.to_ipv4_mapped(),
        };
        match (v4, net) {
            (Some(a), IpAddr::V4(_)) => in_net(IpAddr::V4(a), *net, *prefix),
            (Some(a), IpAddr::V6(n)) => {
                *prefix >= 96
                    && n.to_ipv4_mapped().is_some()
                    && in_net(IpAddr::V6(a.to_ipv6_mapped()), *net, *prefix)
            }
            (None, IpAddr::V6(_)) => in_net(addr, *net, *prefix),
            (None, IpAddr::V4(_)) => false,
        }
    }
}
