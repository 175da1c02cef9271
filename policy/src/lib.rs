//! Tether's destination policy, sans-IO: which destinations a guest may
//! dial and where it may listen. Deny by default.
//!
//! A rule is `HOST:PORT`:
//! - `HOST` is an exact name (`example.com`), a suffix wildcard
//!   (`*.example.com`, which does not match `example.com` itself), `*` for
//!   any host, an IP literal (`127.0.0.1`, `[::1]`, or any spelling
//!   [`parse_host`] accepts), a CIDR block (`10.0.0.0/8`, `[fd00::]/8`), or
//!   `internal`, the ranges SSRF filters block ([`INTERNAL_RANGES`]). The
//!   bare word `internal` means `internal:*`.
//! - `PORT` is a number, an inclusive range `8000-8999`, or `*`.
//!
//! How a destination is decided ([`Policy::check_name`], then
//! [`Policy::check_resolved`] on what DNS returned):
//! 1. The host is parsed into its canonical form ([`parse_host`]): every
//!    spelling of an address is that address, every spelling of a name is
//!    that name.
//! 2. An address is matched together with its [`equivalents`]
//!    (`0.0.0.0` is also `127.0.0.1`, `::ffff:10.0.0.1` is also
//!    `10.0.0.1`, ...). A deny rule that matches any of them denies it.
//! 3. It is allowed when an allow rule matches, except that a wildcard
//!    (`*`, `*.suffix`) does not reach an internal address: that needs an
//!    IP/CIDR rule covering it, `internal`, or an exact-name rule for the
//!    name that was dialled.
//! 4. Names are checked before DNS (name rules) and every address they
//!    resolve to after DNS, and the host dials exactly the addresses that
//!    passed (no second resolution, so DNS rebinding cannot slip past).

mod host;
mod internal;
mod rule;
pub mod spellings;

use std::net::{IpAddr, SocketAddr};

pub use host::{
    Host, HostError, MAX_LABEL_BYTES, MAX_NAME_BYTES, embedded_ipv4, equivalents, parse_host, twins,
};
pub use internal::{INTERNAL_RANGES, InternalRange, internal_range};
pub use rule::{HostPattern, INTERNAL_KEYWORD, PortRange, Rule, RuleError};

/// What the allow rules said about a name before DNS; the resolved
/// addresses go through [`Policy::check_resolved`] with it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NameCheck {
    /// An exact-name allow rule matches: the resolved addresses face the
    /// deny rules only (internal ones included: the name was allowed by
    /// name).
    Named,
    /// A wildcard allow rule (`*`, `*.suffix`) matches: the resolved
    /// addresses face the deny rules, and an internal one also needs an
    /// allow rule that names addresses (IP, CIDR, `internal`).
    Wildcard,
    /// No name rule matches, or the host is an IP address: every address
    /// needs an allow rule that admits it.
    NeedsAddress,
}

/// The destinations and bind addresses a guest may use. Empty means
/// nothing is allowed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Policy {
    /// Destinations a guest may dial (`--allow`).
    pub allow: Vec<Rule>,
    /// Destinations a guest may never dial, even when allowed (`--deny`).
    pub deny: Vec<Rule>,
    /// Addresses a guest may bind listeners to (`--listen`).
    pub listen: Vec<Rule>,
}

impl Policy {
    /// A policy that lets a guest dial anything, internal addresses
    /// included (`*:*` and `internal:*`), and listen anywhere; for trusted
    /// guests and demos only.
    pub fn allow_all() -> Policy {
        let any: Rule = "*:*".parse().expect("valid rule");
        let internal: Rule = "internal:*".parse().expect("valid rule");
        Policy {
            allow: vec![any.clone(), internal],
            deny: Vec::new(),
            listen: vec![any],
        }
    }

    /// Checks `host:port` before DNS. An IP address is decided here in
    /// full (and [`Policy::check_resolved`] decides it the same way).
    ///
    /// Errors: a human-readable reason naming the deny rule that matched,
    /// or saying that no allow rule does (and, for an internal address
    /// that only a wildcard matches, why that is not enough).
    pub fn check_name(&self, host: &Host, port: u16) -> Result<NameCheck, String> {
        match host {
            Host::Ip { addr, .. } => {
                self.check_ip(*addr, port, NameCheck::NeedsAddress)?;
                Ok(NameCheck::NeedsAddress)
            }
            Host::Name(name) => {
                if let Some(rule) = self.deny.iter().find(|r| r.matches_name(name, port)) {
                    return Err(format!("{name}:{port} is denied by rule `{rule}`"));
                }
                let allowed = |pick: fn(&Rule) -> bool| {
                    self.allow
                        .iter()
                        .any(|r| pick(r) && r.matches_name(name, port))
                };
                if allowed(|r| !r.is_wildcard()) {
                    return Ok(NameCheck::Named);
                }
                if allowed(Rule::is_wildcard) {
                    return Ok(NameCheck::Wildcard);
                }
                if self
                    .allow
                    .iter()
                    .any(|r| r.names_addresses() && r.ports().contains(port))
                {
                    return Ok(NameCheck::NeedsAddress);
                }
                Err(format!(
                    "{name}:{port} is not allowed (no --allow rule matches)"
                ))
            }
        }
    }

    /// Decides one address: the deny rules (on every equivalent), then the
    /// allow rules as `check` says.
    ///
    /// Errors: the reason, naming the deny rule or the internal range.
    pub fn check_ip(&self, addr: IpAddr, port: u16, check: NameCheck) -> Result<(), String> {
        let dest = SocketAddr::new(addr, port);
        for rule in &self.deny {
            if !rule.ports().contains(port) {
                continue;
            }
            if let Some(hit) = rule.matched_equivalent(addr) {
                let via = if hit == addr {
                    String::new()
                } else {
                    format!(" ({addr} reaches {hit})")
                };
                return Err(format!("{dest} is denied by rule `{rule}`{via}"));
            }
        }
        if check == NameCheck::Named {
            return Ok(());
        }
        if self
            .allow
            .iter()
            .any(|r| r.names_addresses() && r.matches_ip(addr, port))
        {
            return Ok(());
        }
        let wildcard = check == NameCheck::Wildcard
            || self
                .allow
                .iter()
                .any(|r| *r.host() == HostPattern::Any && r.ports().contains(port));
        match internal_range(addr) {
            None if wildcard => Ok(()),
            Some(range) if wildcard => Err(format!(
                "{dest} is internal ({}: {}): a wildcard --allow does not reach internal addresses; allow it by address, CIDR block or `internal`",
                range.cidr, range.what
            )),
            _ => Err(format!("{dest} is not allowed (no --allow rule matches)")),
        }
    }

    /// Keeps the resolved addresses of `host` that the guest may dial, in
    /// order; dial exactly these.
    ///
    /// `check` is what [`Policy::check_name`] said. Errors when no address
    /// is left, giving each refused address its reason.
    pub fn check_resolved(
        &self,
        host: &Host,
        check: NameCheck,
        addrs: Vec<SocketAddr>,
    ) -> Result<Vec<SocketAddr>, String> {
        let mut refused = Vec::new();
        let mut kept = Vec::new();
        for a in addrs {
            match self.check_ip(a.ip(), a.port(), check) {
                Ok(()) => kept.push(a),
                Err(why) => refused.push(why),
            }
        }
        if kept.is_empty() {
            return Err(match (host, refused.len()) {
                (_, 0) => format!("{host} has no addresses"),
                (Host::Ip { .. }, _) | (_, 1) => refused.join("; "),
                _ => format!(
                    "{host} resolves only to addresses that are not allowed: {}",
                    refused.join("; ")
                ),
            });
        }
        Ok(kept)
    }

    /// Checks a bind address for a listener (`--listen` rules, see
    /// [`Rule::matches_bind`]).
    ///
    /// Errors: no `--listen` rule matches.
    pub fn check_listen(&self, addr: SocketAddr) -> Result<(), String> {
        if self
            .listen
            .iter()
            .any(|r| r.matches_bind(addr.ip(), addr.port()))
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
mod tests;
