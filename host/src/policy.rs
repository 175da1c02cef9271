//! Capability checks: which destinations a guest may dial and where it may
//! listen. Deny by default.
//!
//! A rule is `HOST:PORT`:
//! - `HOST` is an exact name (`example.com`), a suffix wildcard
//!   (`*.example.com`, which does not match `example.com` itself), `*` for
//!   any host, an IP literal (`127.0.0.1`, `[::1]`) or a CIDR block
//!   (`10.0.0.0/8`, `[fd00::]/8`).
//! - `PORT` is a number, an inclusive range `8000-8999`, or `*`.
//!
//! Dialling is allowed when an `allow` rule matches and no `deny` rule does.
//! Names are checked twice: the name itself before DNS, and every address
//! it resolves to after DNS, so `--allow '*:443' --deny 10.0.0.0/8:*` cannot
//! be bypassed by a name that resolves into 10/8, and an IP-only allow list
//! admits a name only through the addresses it resolves to.

use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::str::FromStr;

/// Why a rule could not be parsed.
#[derive(Debug, thiserror::Error)]
#[error(
    "invalid rule `{rule}`: {reason} (expected HOST:PORT, e.g. `example.com:443`, `*.example.com:*`, `127.0.0.1:8000-8999`, `[::1]:*`, `10.0.0.0/8:*`)"
)]
pub struct RuleError {
    rule: String,
    reason: &'static str,
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

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PortRange {
    lo: u16,
    hi: u16,
}

/// One `HOST:PORT` pattern.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    host: HostPattern,
    ports: PortRange,
    text: String,
}

impl FromStr for Rule {
    type Err = RuleError;

    fn from_str(text: &str) -> Result<Rule, RuleError> {
        let err = |reason| RuleError {
            rule: text.to_string(),
            reason,
        };
        let (host, port) = text
            .rsplit_once(':')
            .ok_or_else(|| err("missing `:PORT`"))?;
        let ports = if port == "*" {
            PortRange {
                lo: 0,
                hi: u16::MAX,
            }
        } else if let Some((lo, hi)) = port.split_once('-') {
            let lo = lo.parse().map_err(|_| err("bad port range"))?;
            let hi = hi.parse().map_err(|_| err("bad port range"))?;
            if lo > hi {
                return Err(err("port range is reversed"));
            }
            PortRange { lo, hi }
        } else {
            let p = port.parse().map_err(|_| err("bad port"))?;
            PortRange { lo: p, hi: p }
        };
        let (host, prefix) = match host.split_once('/') {
            Some((h, p)) => (
                h,
                Some(p.parse::<u8>().map_err(|_| err("bad CIDR prefix"))?),
            ),
            None => (host, None),
        };
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        let host = if bare == "*" {
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
            if suffix.is_empty() {
                return Err(err("empty wildcard suffix"));
            }
            // A trailing dot is the same name (`*.example.com.`).
            let suffix = suffix.trim_end_matches('.');
            if suffix.is_empty() {
                return Err(err("empty wildcard suffix"));
            }
            HostPattern::Suffix(format!(".{}", suffix.to_ascii_lowercase()))
        } else if bare.is_empty() || bare.contains('*') {
            return Err(err("bad host pattern"));
        } else {
            HostPattern::Exact(bare.trim_end_matches('.').to_ascii_lowercase())
        };
        Ok(Rule {
            host,
            ports,
            text: text.to_string(),
        })
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// Whether `ip` is in the block `net/prefix`. Both are compared as IPv6,
/// an IPv4 address as its IPv4-mapped form (`::ffff:a.b.c.d`, an IPv4
/// prefix + 96), so a destination and a rule match alike whichever of the
/// two forms each is written in.
fn ip_in_net(ip: IpAddr, net: IpAddr, prefix: u8) -> bool {
    let as_v6 = |a: IpAddr| match a {
        IpAddr::V4(v4) => v4.to_ipv6_mapped(),
        IpAddr::V6(v6) => v6,
    };
    let prefix = if net.is_ipv4() { prefix + 96 } else { prefix };
    let mask = if prefix == 0 {
        0
    } else {
        u128::MAX << (128 - u32::from(prefix))
    };
    (u128::from(as_v6(ip)) & mask) == (u128::from(as_v6(net)) & mask)
}

impl Rule {
    /// Whether the host part is an IP, a CIDR block or `*`: the only rules
    /// that can match a bind address (`--listen`), which is never a name.
    pub fn is_address_rule(&self) -> bool {
        matches!(self.host, HostPattern::Any | HostPattern::Net { .. })
    }

    fn port_ok(&self, port: u16) -> bool {
        (self.ports.lo..=self.ports.hi).contains(&port)
    }

    /// Does the rule match the name (or IP literal) `host` on `port`?
    fn matches_name(&self, host: &str, port: u16) -> bool {
        if !self.port_ok(port) {
            return false;
        }
        let bare = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .unwrap_or(host);
        if let Ok(ip) = bare.parse::<IpAddr>() {
            return self.matches_addr(SocketAddr::new(ip, port));
        }
        let name = bare.trim_end_matches('.').to_ascii_lowercase();
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Exact(e) => *e == name,
            HostPattern::Suffix(s) => name.ends_with(s.as_str()),
            HostPattern::Net { .. } => false,
        }
    }

    /// Does the rule match the resolved address?
    fn matches_addr(&self, addr: SocketAddr) -> bool {
        if !self.port_ok(addr.port()) {
            return false;
        }
        match &self.host {
            HostPattern::Any => true,
            HostPattern::Net { addr: net, prefix } => ip_in_net(addr.ip(), *net, *prefix),
            HostPattern::Exact(_) | HostPattern::Suffix(_) => false,
        }
    }
}

/// The outcome of checking a name before it is resolved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameCheck {
    /// A name rule allows it; resolved addresses still face the deny rules.
    Allowed,
    /// No name rule allows it, but an address rule might: resolve, then
    /// keep only the addresses [`Policy::check_resolved`] admits.
    NeedsAddress,
}

/// The destinations and bind addresses a guest may use. Empty means
/// nothing is allowed.
#[derive(Clone, Debug, Default)]
pub struct Policy {
    /// Destinations a guest may dial (`--allow`).
    pub allow: Vec<Rule>,
    /// Destinations a guest may never dial, even when allowed (`--deny`).
    pub deny: Vec<Rule>,
    /// Addresses a guest may bind listeners to (`--listen`).
    pub listen: Vec<Rule>,
}

impl Policy {
    /// A policy that lets a guest dial anything and listen anywhere; for
    /// trusted guests and demos only.
    pub fn allow_all() -> Policy {
        let any: Rule = "*:*".parse().expect("valid rule");
        Policy {
            allow: vec![any.clone()],
            deny: Vec::new(),
            listen: vec![any],
        }
    }

    /// Checks `host:port` before DNS.
    ///
    /// Errors: a human-readable reason when a deny rule matches or no allow
    /// rule could ever match.
    pub fn check_name(&self, host: &str, port: u16) -> Result<NameCheck, String> {
        if let Some(rule) = self.deny.iter().find(|r| r.matches_name(host, port)) {
            return Err(format!("{host}:{port} is denied by rule `{rule}`"));
        }
        if self.allow.iter().any(|r| r.matches_name(host, port)) {
            return Ok(NameCheck::Allowed);
        }
        let is_ip = host
            .trim_matches(|c| c == '[' || c == ']')
            .parse::<IpAddr>()
            .is_ok();
        let address_rules = self
            .allow
            .iter()
            .any(|r| matches!(r.host, HostPattern::Net { .. }) && r.port_ok(port));
        if !is_ip && address_rules {
            return Ok(NameCheck::NeedsAddress);
        }
        Err(format!(
            "{host}:{port} is not allowed (no --allow rule matches)"
        ))
    }

    /// Keeps the resolved addresses of a name the guest may dial.
    ///
    /// `check` is what [`Policy::check_name`] said. Errors when no address
    /// is left, naming the addresses that were refused.
    pub fn check_resolved(
        &self,
        host: &str,
        check: NameCheck,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, String> {
        let all = addrs.clone();
        let kept: Vec<SocketAddr> = addrs
            .into_iter()
            .filter(|a| !self.deny.iter().any(|r| r.matches_addr(*a)))
            .filter(|a| {
                check == NameCheck::Allowed || self.allow.iter().any(|r| r.matches_addr(*a))
            })
            .collect();
        if kept.is_empty() {
            let list: Vec<String> = all.iter().map(|a| a.to_string()).collect();
            return Err(format!(
                "{host} resolves only to addresses that are not allowed: {}",
                list.join(", ")
            ));
        }
        Ok(kept)
    }

    /// Checks a bind address for a listener (`--listen` rules).
    pub fn check_listen(&self, addr: SocketAddr) -> Result<(), String> {
        if self
            .listen
            .iter()
            .any(|r| r.matches_addr(addr) || r.matches_name(&addr.ip().to_string(), addr.port()))
        {
            Ok(())
        } else {
            Err(format!(
                "listening on {addr} is not allowed (no --listen rule matches)"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policy(allow: &[&str], deny: &[&str]) -> Policy {
        Policy {
            allow: allow.iter().map(|r| r.parse().unwrap()).collect(),
            deny: deny.iter().map(|r| r.parse().unwrap()).collect(),
            listen: vec!["127.0.0.1:*".parse().unwrap()],
        }
    }

    #[test]
    fn deny_by_default() {
        let p = Policy::default();
        assert!(p.check_name("example.com", 443).is_err());
        assert!(p.check_name("127.0.0.1", 80).is_err());
        assert!(p.check_listen("127.0.0.1:0".parse().unwrap()).is_err());
    }

    #[test]
    fn names_suffixes_and_ports() {
        let p = policy(&["example.com:443", "*.corp.net:8000-8999"], &[]);
        assert_eq!(p.check_name("EXAMPLE.com", 443), Ok(NameCheck::Allowed));
        assert!(p.check_name("example.com", 80).is_err());
        assert_eq!(p.check_name("a.b.corp.net", 8080), Ok(NameCheck::Allowed));
        assert!(p.check_name("corp.net", 8080).is_err());
        assert!(p.check_name("a.corp.net", 9000).is_err());
    }

    #[test]
    fn ip_rules_and_cidr() {
        let p = policy(&["127.0.0.0/8:*", "[::1]:22"], &[]);
        assert_eq!(p.check_name("127.1.2.3", 5), Ok(NameCheck::Allowed));
        assert_eq!(p.check_name("[::1]", 22), Ok(NameCheck::Allowed));
        assert!(p.check_name("::1", 23).is_err());
        assert!(p.check_name("10.0.0.1", 5).is_err());
        // A name is admitted only through its addresses.
        assert_eq!(p.check_name("localhost", 5), Ok(NameCheck::NeedsAddress));
        let ok = p.check_resolved(
            "localhost",
            NameCheck::NeedsAddress,
            vec![
                "127.0.0.1:5".parse().unwrap(),
                "10.1.1.1:5".parse().unwrap(),
            ],
        );
        assert_eq!(
            ok.unwrap(),
            vec!["127.0.0.1:5".parse::<SocketAddr>().unwrap()]
        );
        assert!(
            p.check_resolved(
                "evil",
                NameCheck::NeedsAddress,
                vec!["10.1.1.1:5".parse().unwrap()]
            )
            .is_err()
        );
    }

    #[test]
    fn deny_wins_on_names_and_resolved_addresses() {
        let p = policy(&["*:*"], &["10.0.0.0/8:*", "secret.example:*"]);
        assert!(p.check_name("secret.example", 1).is_err());
        assert!(p.check_name("10.2.3.4", 1).is_err());
        let check = p.check_name("rebind.example", 443).unwrap();
        assert!(
            p.check_resolved(
                "rebind.example",
                check,
                vec!["10.9.9.9:443".parse().unwrap()]
            )
            .is_err()
        );
        // IPv4-mapped IPv6 cannot sneak past an IPv4 deny rule.
        assert!(
            p.check_resolved("m", check, vec!["[::ffff:10.0.0.1]:443".parse().unwrap()])
                .is_err()
        );
    }

    /// Found by the `policy` fuzz target: a rule in IPv4-mapped IPv6 form
    /// did not match the IPv4 destination it names (nor an IPv6 rule the
    /// IPv4 form of a mapped destination), and `*.suffix.` with a
    /// trailing dot matched nothing.
    #[test]
    fn a_rule_matches_alike_in_every_spelling() {
        for deny in [
            "[::ffff:10.0.0.0]/104:*",
            "10.0.0.0/8:*",
            "[::ffff:10.1.2.3]:*",
        ] {
            let p = policy(&["*:*"], &[deny]);
            for dest in ["10.1.2.3", "::ffff:10.1.2.3", "[::ffff:a01:203]"] {
                assert!(p.check_name(dest, 1).is_err(), "{deny} let {dest} through");
            }
            assert!(
                p.check_name("11.1.2.3", 1).is_ok(),
                "{deny} denied 11.1.2.3"
            );
        }
        for allow in ["*.example.com.:1", "*.EXAMPLE.com:1"] {
            let p = policy(&[allow], &[]);
            assert_eq!(p.check_name("a.example.com", 1), Ok(NameCheck::Allowed));
            assert_eq!(p.check_name("A.Example.COM.", 1), Ok(NameCheck::Allowed));
        }
        assert!("*..:1".parse::<Rule>().is_err());
    }

    #[test]
    fn bad_rules_are_rejected_with_a_reason() {
        for bad in [
            "example.com",
            "x:99999",
            "x:9-1",
            "1.2.3.4/40:1",
            "name/8:1",
            "a*b:1",
            "*.:1",
        ] {
            let e = bad.parse::<Rule>().unwrap_err().to_string();
            assert!(e.contains(bad), "{e}");
        }
    }
}
