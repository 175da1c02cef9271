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
        self.check_name_on(host, port, &[])
    }

    /// [`Policy::check_name`] on a machine whose interfaces have the
    /// addresses `local` (see [`Policy::check_ip_on`]).
    ///
    /// Errors: as [`Policy::check_name`].
    pub fn check_name_on(
        &self,
        host: &Host,
        port: u16,
        local: &[IpAddr],
    ) -> Result<NameCheck, String> {
        match host {
            Host::Ip { addr, .. } => {
                self.check_ip_on(*addr, port, NameCheck::NeedsAddress, local)?;
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
        self.check_ip_on(addr, port, check, &[])
    }

    /// [`Policy::check_ip`] on a machine whose interfaces have the
    /// addresses `local` (a host's `getifaddrs`; empty where unknown, as in
    /// a guest). A connect to one of them reaches this machine just as
    /// loopback does, so such an address also meets the rules of the
    /// loopback address of its family (`127.0.0.1`, `::1`) on the deny
    /// side: a deny rule or `internal` that matches loopback denies it, and
    /// a wildcard allow does not reach it (it is internal). It is admitted
    /// by an allow rule for the address itself (IP or CIDR) or by
    /// `internal`, not by one for loopback (that would open services bound
    /// only to the other interfaces). Without this, `--allow '*:*'
    /// --deny internal` let a guest reach services bound to `0.0.0.0` on
    /// the host through its public address (the red team of 2026-12-03,
    /// third round).
    ///
    /// Errors: as [`Policy::check_ip`].
    pub fn check_ip_on(
        &self,
        addr: IpAddr,
        port: u16,
        check: NameCheck,
        local: &[IpAddr],
    ) -> Result<(), String> {
        let dest = SocketAddr::new(addr, port);
        let own = own_loopback(addr, local);
        for rule in &self.deny {
            if !rule.ports().contains(port) {
                continue;
            }
            let hit = rule
                .matched_equivalent(addr)
                .or_else(|| own.and_then(|lo| rule.matched_equivalent(lo)));
            if let Some(hit) = hit {
                let via = match own {
                    Some(lo) if hit == lo => {
                        format!(" ({addr} is an address of this host: it reaches {lo})")
                    }
                    _ if hit == addr => String::new(),
                    _ => format!(" ({addr} reaches {hit})"),
                };
                return Err(format!("{dest} is denied by rule `{rule}`{via}"));
            }
        }
        if check == NameCheck::Named {
            return Ok(());
        }
        // An own address is admitted by a rule for the address itself or
        // by `internal`, not by a loopback rule: `--allow 127.0.0.1:8080`
        // must not open the services bound to the machine's other
        // interfaces.
        if self.allow.iter().any(|r| {
            r.names_addresses()
                && (r.matches_ip(addr, port)
                    || (own.is_some()
                        && *r.host() == HostPattern::Internal
                        && r.ports().contains(port)))
        }) {
            return Ok(());
        }
        let wildcard = check == NameCheck::Wildcard
            || self
                .allow
                .iter()
                .any(|r| *r.host() == HostPattern::Any && r.ports().contains(port));
        match (internal_range(addr), own) {
            (None, None) if wildcard => Ok(()),
            (Some(range), _) if wildcard => Err(format!(
                "{dest} is internal ({}: {}): a wildcard --allow does not reach internal addresses; allow it by address, CIDR block or `internal`",
                range.cidr, range.what
            )),
            (None, Some(lo)) if wildcard => Err(format!(
                "{dest} is an address of this host (it reaches the local host, like {lo}): a wildcard --allow does not reach it; allow it by address, CIDR block or `internal`"
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
        self.check_resolved_on(host, check, addrs, &[])
    }

    /// [`Policy::check_resolved`] on a machine whose interfaces have the
    /// addresses `local` (see [`Policy::check_ip_on`]).
    ///
    /// Errors: as [`Policy::check_resolved`].
    pub fn check_resolved_on(
        &self,
        host: &Host,
        check: NameCheck,
        addrs: Vec<SocketAddr>,
        local: &[IpAddr],
    ) -> Result<Vec<SocketAddr>, String> {
        let mut refused = Vec::new();
        let mut kept = Vec::new();
        for a in addrs {
            match self.check_ip_on(a.ip(), a.port(), check, local) {
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

/// The loopback address (`127.0.0.1` or `::1`, by the family of what
/// `addr` reaches) when `addr` or one of its [`equivalents`] is among
/// `local`, this machine's interface addresses, and is not loopback or
/// unspecified already (those have their rules).
fn own_loopback(addr: IpAddr, local: &[IpAddr]) -> Option<IpAddr> {
    if local.is_empty() {
        return None;
    }
    let eq = equivalents(addr);
    if eq.iter().any(|a| a.is_loopback() || a.is_unspecified()) {
        return None;
    }
    let hit = eq
        .into_iter()
        .find(|a| local.iter().any(|l| twins(*l).contains(a)))?;
    Some(match hit {
        IpAddr::V6(v6) if v6.to_ipv4_mapped().is_none() => {
            IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
        }
        _ => IpAddr::V4(std::net::Ipv4Addr::LOCALHOST),
    })
}
