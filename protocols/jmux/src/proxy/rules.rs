//! Guest-side target filter: which destinations an accepting JMUX proxy
//! opens (`--allow-all` or `--allow RULE...`). Deny by default, like
//! `jetsocat jmux-proxy` without `--allow-all`.
//!
//! This filter comes on top of the host's policy (which also checks the
//! resolved addresses): a target must pass both.
//!
//! A rule is `HOST:PORT`, the syntax of the host's `--allow`:
//! - `HOST`: an exact name (`example.com`, case-insensitive, trailing dot
//!   ignored), a suffix wildcard (`*.example.com`, which does not match
//!   `example.com` itself), `*` for any host, an IP literal (`127.0.0.1`,
//!   `[::1]`) or a CIDR block (`10.0.0.0/8`, `[fd00::]/8`);
//! - `PORT`: a number, an inclusive range `8000-8999`, or `*`.
//!
//! Names are matched as the opener sent them (no DNS here): a CIDR rule
//! matches IP-literal destinations only.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Why a rule could not be parsed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "invalid rule `{rule}`: {reason} (expected HOST:PORT, e.g. `example.com:443`, `*.example.com:*`, `127.0.0.1:8000-8999`, `[::1]:*`, `10.0.0.0/8:*`)"
)]
pub struct RuleError {
    /// The rule as given.
    pub rule: String,
    /// What is wrong with it.
    pub reason: &'static str,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum HostPattern {
    Any,
    Exact(String),
    /// `*.suffix`: stores `.suffix`.
    Suffix(String),
    Net {
        addr: IpAddr,
        prefix: u8,
    },
}

/// One `HOST:PORT` pattern (see the module docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct AllowRule {
    host: HostPattern,
    lo: u16,
    hi: u16,
    text: String,
}

impl FromStr for AllowRule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Self, RuleError> {
        let err = |reason| RuleError {
            rule: text.to_owned(),
            reason,
        };
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| err("missing `:PORT`"))?;
        let (lo, hi) = if port == "*" {
            (0, u16::MAX)
        } else if let Some((lo, hi)) = port.split_once('-') {
            let lo: u16 = lo.parse().map_err(|_| err("bad port range"))?;
            let hi: u16 = hi.parse().map_err(|_| err("bad port range"))?;
            if lo > hi {
                return Err(err("port range is reversed"));
            }
            (lo, hi)
        } else {
            let p = port.parse().map_err(|_| err("bad port"))?;
            (p, p)
        };
        let (host, prefix) = match host.split_once('/') {
            Some((h, p)) => (
                h,
                Some(p.parse::<u8>().map_err(|_| err("bad CIDR prefix"))?),
            ),
            None => (host, None),
        };
        let bare = strip_brackets(host);
        let host = if bare == "*" && prefix.is_none() {
            HostPattern::Any
        } else if let Ok(addr) = bare.parse::<IpAddr>() {
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix = prefix.unwrap_or(max);
            if prefix > max {
                return Err(err("CIDR prefix too long"));
            }
            HostPattern::Net { addr, prefix }
        } else if prefix.is_some() {
            return Err(err("a CIDR block needs an IP address"));
        } else if let Some(suffix) = bare.strip_prefix("*.") {
            if suffix.is_empty() || suffix.contains('*') {
                return Err(err("bad wildcard suffix"));
            }
            HostPattern::Suffix(format!(".{}", suffix.to_ascii_lowercase()))
        } else if bare.is_empty() || bare.contains('*') {
            return Err(err("bad host pattern"));
        } else {
            HostPattern::Exact(bare.trim_end_matches('.').to_ascii_lowercase())
        };
        Ok(Self {
            host,
            lo,
            hi,
            text: text.to_owned(),
        })
    }
}

impl fmt::Display for AllowRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

fn strip_brackets(host: &str) -> &str {
    host.strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host)
}

fn ip_in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let ip = match (ip, net) {
        (IpAddr::V6(v6), IpAddr::V4(_)) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => return false,
        },
        _ => ip,
    };
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

impl AllowRule {
    /// Whether the rule admits `host` (a name or an IP literal, brackets
    /// optional) on `port`.
    pub fn matches(&self, host: &str, port: u16) -> bool {
        if !(self.lo..=self.hi).contains(&port) {
            return false;
        }
        let bare = strip_brackets(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return match &self.host {
                HostPattern::Any => true,
                HostPattern::Net { addr, prefix } => ip_in_net(ip, *addr, *prefix),
                _ => false,
            };
        }
        let name = bare.trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Exact(e) => *e == name,
            HostPattern::Suffix(s) => name.ends_with(s.as_str()),
            HostPattern::Net { .. } => false,
        }
    }
}

/// Which targets the accepting side opens.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum TargetFilter {
    /// Nothing (the default, like jetsocat without `--allow-all`): every
    /// OPEN is answered with reason 2, not allowed by rule set.
    #[default]
    DenyAll,
    /// `--allow-all`: any target the host's policy admits.
    AllowAll,
    /// `--allow RULE...`: targets matching one of the rules.
    Rules(Vec<AllowRule>),
}

impl TargetFilter {
    /// Whether `host:port` may be opened.
    pub fn allows(&self, host: &str, port: u16) -> bool {
        match self {
            TargetFilter::DenyAll => false,
            TargetFilter::AllowAll => true,
            TargetFilter::Rules(rules) => rules.iter().any(|r| r.matches(host, port)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(s: &str) -> AllowRule {
        s.parse().unwrap()
    }

    #[test]
    fn names_wildcards_ips_and_ports() {
        assert!(rule("example.com:443").matches("EXAMPLE.com.", 443));
        assert!(!rule("example.com:443").matches("example.com", 80));
        assert!(rule("*.example.com:*").matches("a.b.example.com", 1));
        assert!(!rule("*.example.com:*").matches("example.com", 1));
        assert!(rule("*:8000-8999").matches("anything", 8500));
        assert!(!rule("*:8000-8999").matches("anything", 9000));
        assert!(rule("127.0.0.1:*").matches("127.0.0.1", 5));
        assert!(!rule("127.0.0.1:*").matches("localhost", 5));
        assert!(rule("10.0.0.0/8:*").matches("10.1.2.3", 5));
        assert!(!rule("10.0.0.0/8:*").matches("11.1.2.3", 5));
        assert!(rule("[::1]:22").matches("::1", 22));
        assert!(rule("[::1]:22").matches("[::1]", 22));
        assert!(rule("[fd00::]/8:*").matches("fd12::1", 1));
        assert!(rule("0.0.0.0/0:*").matches("1.2.3.4", 1));
    }

    #[test]
    fn bad_rules_are_refused_with_a_reason() {
        for bad in [
            "nohost",
            "a:b",
            "a:9-1",
            "*.:1",
            "a*b:1",
            "host/8:1",
            "1.2.3.4/33:1",
            ":1",
        ] {
            let e = bad.parse::<AllowRule>().unwrap_err();
            assert!(e.to_string().contains(bad), "{e}");
        }
    }

    #[test]
    fn filter_defaults_to_deny() {
        assert!(!TargetFilter::default().allows("127.0.0.1", 80));
        assert!(TargetFilter::AllowAll.allows("x", 1));
        let f = TargetFilter::Rules(vec![rule("localhost:80")]);
        assert!(f.allows("localhost", 80));
        assert!(!f.allows("localhost", 81));
    }
}
