//! Guest-side target filter: which destinations an accepting JMUX proxy
//! opens (`--allow-all` or `--allow RULE...`). Deny by default, like
//! `jetsocat jmux-proxy` without `--allow-all`.
//!
//! This filter comes on top of the host's policy (which also checks the
//! resolved addresses): a target must pass both.
//!
//! A rule is `HOST:PORT`, the host's `--allow` rule, parsed and matched by
//! the same code (`tether-policy`):
//! - `HOST`: an exact name (`example.com`, case-insensitive, trailing dot
//!   ignored), a suffix wildcard (`*.example.com`, which does not match
//!   `example.com` itself), `*` for any host, an IP literal in any
//!   spelling (`127.0.0.1`, `0x7f.1`, `[::1]`, `[::ffff:7f00:1]`), a CIDR
//!   block (`10.0.0.0/8`, `[fd00::]/8`) or `internal` (the ranges SSRF
//!   filters block);
//! - `PORT`: a number, an inclusive range `8000-8999`, or `*`.
//!
//! A destination is parsed the way the host parses it, so every spelling
//! of an address meets the rules of that address. Names are matched as the
//! opener sent them (no DNS here): a CIDR rule admits a name only through
//! the host, which checks the addresses it resolves to. As on the host, a
//! wildcard (`*`, `*.suffix`) does not reach an internal IP address;
//! `--allow-all` does.

use tether_policy::{Policy, parse_host};

pub use tether_policy::{Rule as AllowRule, RuleError};

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
    /// Whether `host:port` may be opened: `host` is what the opener sent
    /// (a name, or an IP literal in any spelling, brackets optional). A
    /// host that does not parse is refused here (under `--allow-all` it
    /// is left to the host, which refuses it).
    pub fn allows(&self, host: &str, port: u16) -> bool {
        match self {
            TargetFilter::DenyAll => false,
            TargetFilter::AllowAll => true,
            TargetFilter::Rules(rules) => {
                let Ok(host) = parse_host(host) else {
                    return false;
                };
                let policy = Policy {
                    allow: rules.clone(),
                    ..Policy::default()
                };
                // An address is decided here in full; a name's addresses
                // are the host's to check after DNS.
                policy.check_name(&host, port).is_ok()
            }
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
        let allows =
            |r: &str, host: &str, port: u16| TargetFilter::Rules(vec![rule(r)]).allows(host, port);
        assert!(allows("example.com:443", "EXAMPLE.com.", 443));
        assert!(!allows("example.com:443", "example.com", 80));
        assert!(allows("*.example.com:*", "a.b.example.com", 1));
        assert!(!allows("*.example.com:*", "example.com", 1));
        assert!(allows("*:8000-8999", "anything", 8500));
        assert!(!allows("*:8000-8999", "anything", 9000));
        assert!(allows("127.0.0.1:*", "127.0.0.1", 5));
        assert!(allows("10.0.0.0/8:*", "10.1.2.3", 5));
        assert!(!allows("10.0.0.0/8:*", "11.1.2.3", 5));
        assert!(allows("[::1]:22", "::1", 22));
        assert!(allows("[::1]:22", "[::1]", 22));
        assert!(allows("[fd00::]/8:*", "fd12::1", 1));
        assert!(allows("0.0.0.0/0:*", "1.2.3.4", 1));
        // A name passes an address rule only to have its addresses
        // checked by the host after DNS.
        assert!(allows("127.0.0.1:*", "localhost", 5));
    }

    #[test]
    fn every_spelling_of_an_address_meets_its_rules() {
        let loopback = TargetFilter::Rules(vec![rule("127.0.0.1:*"), rule("[::1]:*")]);
        let wildcard = TargetFilter::Rules(vec![rule("*:*")]);
        let internal = TargetFilter::Rules(vec![rule("*:*"), rule("internal")]);
        for s in tether_policy::spellings::LOOPBACK
            .iter()
            .filter(|s| s.in_tcp)
        {
            let host = s
                .text
                .strip_prefix('[')
                .and_then(|h| h.strip_suffix(']'))
                .unwrap_or(s.text);
            assert!(loopback.allows(host, 80), "{}", s.text);
            assert!(internal.allows(host, 80), "{}", s.text);
            // A wildcard does not reach an internal address; a name goes
            // on to the host, which checks what it resolves to.
            let is_name = tether_policy::parse_host(host).unwrap().ip().is_none();
            assert_eq!(wildcard.allows(host, 80), is_name, "{}", s.text);
        }
        assert!(wildcard.allows("93.184.215.14", 80));
        assert!(!wildcard.allows("[::ffff:169.254.169.254]", 80));
        assert!(!loopback.allows("%31%32%37.0.0.1", 80));
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
