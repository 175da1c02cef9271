//! The checks behind the `tether-host` fuzz targets, one function per
//! target: each takes the fuzzer's bytes and panics when a property fails.
#![allow(dead_code)] // each fuzz target uses one check
//!
//! Shared by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the
//! corpus replay test (`tests/fuzz_corpus.rs`, stable), both through
//! `#[path]`, so CI replays every committed input through exactly the
//! check the fuzzer ran. Both crate roots provide what this file takes
//! from `crate::`: the `policy` and `ws_url` modules of tether-host (the
//! targets build those files alone, without wasmtime), `ServerName` and
//! `IntoClientRequest`.
//!
//! The policy API is used in two small adapters only ([`parse_rule`] and
//! [`decide`]); the spellings that must be decided alike are listed by
//! [`dest_spellings`] and [`rule_spellings`]: extend those two lists when
//! the policy learns a new equivalence.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use arbitrary::{Result, Unstructured};

use crate::policy::{NameCheck, Policy, Rule};
use crate::ws_url::parse as parse_ws_url;
use crate::{IntoClientRequest, ServerName};

/// The target names, as the corpus folders are named.
pub const TARGETS: &[&str] = &["policy", "ws_url"];

/// Runs the check of target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "policy" => policy(data),
        "ws_url" => ws_url(data),
        other => panic!("no fuzz target `{other}`"),
    }
}

// ----- policy ---------------------------------------------------------------

/// What the policy says about a destination before DNS.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Decision {
    /// A deny rule matches, or no allow rule can.
    Refused,
    /// Allowed as it is (resolved addresses still face the deny rules).
    Allowed,
    /// Only the addresses the name resolves to can be allowed.
    NeedsAddress,
}

/// Adapter: parses one rule.
pub fn parse_rule(text: &str) -> Result<Rule, String> {
    text.parse::<Rule>().map_err(|e| e.to_string())
}

/// Adapter: the policy's decision on `host:port` before DNS.
pub fn decide(policy: &Policy, host: &str, port: u16) -> Decision {
    let Ok(host) = crate::policy::parse_host(host) else {
        return Decision::Refused;
    };
    match policy.check_name(&host, port) {
        Ok(NameCheck::Named | NameCheck::Wildcard) => Decision::Allowed,
        Ok(NameCheck::NeedsAddress) => Decision::NeedsAddress,
        Err(_) => Decision::Refused,
    }
}

/// A host made of a few labels from a small alphabet, so rules and
/// destinations meet often.
#[derive(Debug, Clone)]
pub struct Name(Vec<u8>);

const LABELS: &[&str] = &["a", "b", "example", "com", "corp", "internal", "x-1"];

impl Name {
    fn text(&self) -> String {
        let labels: Vec<&str> = self
            .0
            .iter()
            .take(4)
            .map(|b| LABELS[usize::from(*b) % LABELS.len()])
            .collect();
        if labels.is_empty() {
            "example".to_owned()
        } else {
            labels.join(".")
        }
    }
}

/// A destination host.
#[derive(Debug, Clone)]
pub enum DestHost {
    V4([u8; 4]),
    V6([u8; 16]),
    /// An IPv4-mapped IPv6 address `::ffff:a.b.c.d`.
    Mapped([u8; 4]),
    Name(Name),
}

/// The host part of a rule.
#[derive(Debug, Clone)]
pub enum RuleHost {
    Any,
    V4([u8; 4], Option<u8>),
    V6([u8; 16], Option<u8>),
    Name(Name),
    Suffix(Name),
}

/// The port part of a rule.
#[derive(Debug, Clone)]
pub enum RulePorts {
    Any,
    One(u16),
    Range(u16, u16),
}

#[derive(Debug, Clone)]
pub struct RuleInput {
    deny: bool,
    host: RuleHost,
    ports: RulePorts,
}

#[derive(Debug)]
struct PolicyInput {
    rules: Vec<RuleInput>,
    dest: DestHost,
    port: u16,
    /// Parsed on its own: any text parses or errors, never panics.
    raw_rule: String,
}

impl PolicyInput {
    /// The input from the fuzzer's bytes (`arbitrary` without its derive,
    /// whose feature would rebuild wasmtime, see Cargo.toml).
    fn read(data: &[u8]) -> Result<PolicyInput> {
        let mut u = Unstructured::new(data);
        let name = |u: &mut Unstructured| -> Result<Name> { Ok(Name(u.arbitrary()?)) };
        let mut rules = Vec::new();
        for _ in 0..u.int_in_range(0..=6)? {
            let deny = u.arbitrary()?;
            let host = match u.choose_index(5)? {
                0 => RuleHost::Any,
                1 => RuleHost::V4(u.arbitrary()?, u.arbitrary()?),
                2 => RuleHost::V6(u.arbitrary()?, u.arbitrary()?),
                3 => RuleHost::Name(name(&mut u)?),
                _ => RuleHost::Suffix(name(&mut u)?),
            };
            let ports = match u.choose_index(3)? {
                0 => RulePorts::Any,
                1 => RulePorts::One(u.arbitrary()?),
                _ => RulePorts::Range(u.arbitrary()?, u.arbitrary()?),
            };
            rules.push(RuleInput { deny, host, ports });
        }
        let dest = match u.choose_index(4)? {
            0 => DestHost::V4(u.arbitrary()?),
            1 => DestHost::V6(u.arbitrary()?),
            2 => DestHost::Mapped(u.arbitrary()?),
            _ => DestHost::Name(name(&mut u)?),
        };
        Ok(PolicyInput {
            rules,
            dest,
            port: u.arbitrary()?,
            raw_rule: <String as arbitrary::Arbitrary>::arbitrary_take_rest(u)?,
        })
    }
}

fn mapped(o: [u8; 4]) -> Ipv6Addr {
    Ipv4Addr::from(o).to_ipv6_mapped()
}

/// Every spelling of a destination host that must be decided alike; the
/// first is the canonical one.
pub fn dest_spellings(h: &DestHost) -> Vec<String> {
    match h {
        DestHost::V4(o) | DestHost::Mapped(o) => {
            let v4 = Ipv4Addr::from(*o);
            let v6 = mapped(*o);
            let [.., a, b] = v6.segments();
            let mut all = vec![
                v4.to_string(),
                format!("::ffff:{v4}"),
                format!("[::ffff:{v4}]"),
                format!("[::ffff:{a:x}:{b:x}]"),
                format!("0:0:0:0:0:ffff:{a:X}:{b:X}"),
            ];
            if matches!(h, DestHost::Mapped(_)) {
                all.rotate_left(1);
            }
            all
        }
        DestHost::V6(o) => {
            let ip = Ipv6Addr::from(*o);
            let s = ip.segments();
            let full = s
                .iter()
                .map(|x| format!("{x:04x}"))
                .collect::<Vec<_>>()
                .join(":");
            let mut all = vec![ip.to_string(), format!("[{ip}]"), full.to_uppercase()];
            if let Some(v4) = ip.to_ipv4_mapped() {
                all.push(v4.to_string());
            }
            all
        }
        DestHost::Name(n) => {
            let t = n.text();
            vec![
                t.clone(),
                t.to_uppercase(),
                capitalized(&t),
                format!("{t}."),
                format!("{}.", t.to_uppercase()),
            ]
        }
    }
}

fn capitalized(t: &str) -> String {
    t.split('.')
        .map(|l| {
            let mut c = l.chars();
            c.next()
                .map(|f| f.to_uppercase().chain(c).collect::<String>())
                .unwrap_or_default()
        })
        .collect::<Vec<_>>()
        .join(".")
}

fn ports_text(p: &RulePorts) -> String {
    match p {
        RulePorts::Any => "*".to_owned(),
        RulePorts::One(x) => x.to_string(),
        RulePorts::Range(a, b) => format!("{}-{}", a.min(b), a.max(b)),
    }
}

/// Every spelling of a rule that must match alike; the first is the
/// canonical one.
pub fn rule_spellings(r: &RuleInput) -> Vec<String> {
    let port = ports_text(&r.ports);
    let hosts: Vec<String> = match &r.host {
        RuleHost::Any => vec!["*".to_owned()],
        RuleHost::V4(o, prefix) => {
            let v4 = Ipv4Addr::from(*o);
            match prefix.map(|p| p % 33) {
                None => vec![v4.to_string(), format!("[::ffff:{v4}]")],
                Some(p) => vec![
                    format!("{v4}/{p}"),
                    format!("[::ffff:{v4}]/{}", u16::from(p) + 96),
                ],
            }
        }
        RuleHost::V6(o, prefix) => {
            let ip = Ipv6Addr::from(*o);
            let mut all = match prefix.map(|p| p % 129) {
                None => vec![format!("[{ip}]")],
                Some(p) => vec![format!("[{ip}]/{p}")],
            };
            if let Some(v4) = ip.to_ipv4_mapped() {
                match prefix.map(|p| p % 129) {
                    None => all.push(v4.to_string()),
                    Some(p) if p >= 96 => all.push(format!("{v4}/{}", p - 96)),
                    Some(_) => {}
                }
            }
            all
        }
        RuleHost::Name(n) => {
            let t = n.text();
            vec![t.clone(), t.to_uppercase(), format!("{t}.")]
        }
        RuleHost::Suffix(n) => {
            let t = n.text();
            vec![
                format!("*.{t}"),
                format!("*.{}", t.to_uppercase()),
                format!("*.{t}."),
            ]
        }
    };
    hosts.into_iter().map(|h| format!("{h}:{port}")).collect()
}

fn build(rules: &[(bool, Rule)]) -> Policy {
    let mut p = Policy::default();
    for (deny, r) in rules {
        if *deny {
            p.deny.push(r.clone());
        } else {
            p.allow.push(r.clone());
        }
    }
    p
}

/// `policy`: a random rule text parses or errors (naming the text), never
/// panics, and a rule that parses prints as its text; then random allow
/// and deny rules and a random destination: the destination gets the same
/// decision under every spelling in [`dest_spellings`], and every rule
/// matches alike under every spelling in [`rule_spellings`].
pub fn policy(data: &[u8]) {
    let Ok(input) = PolicyInput::read(data) else {
        return;
    };
    match parse_rule(&input.raw_rule) {
        Ok(rule) => assert_eq!(rule.to_string(), input.raw_rule),
        Err(e) => assert!(
            e.contains(&input.raw_rule),
            "error {e:?} does not name the rule"
        ),
    }

    let spellings: Vec<Vec<String>> = input.rules.iter().map(rule_spellings).collect();
    let canonical: Vec<(bool, Rule)> = input
        .rules
        .iter()
        .zip(&spellings)
        .map(|(r, s)| {
            let rule = parse_rule(&s[0]).unwrap_or_else(|e| panic!("{e}"));
            (r.deny, rule)
        })
        .collect();
    let base = build(&canonical);
    let dests = dest_spellings(&input.dest);
    let want = decide(&base, &dests[0], input.port);
    for d in &dests[1..] {
        assert_eq!(
            decide(&base, d, input.port),
            want,
            "`{d}` is decided unlike `{}` under {base:?}",
            dests[0]
        );
    }
    for (i, alts) in spellings.iter().enumerate() {
        for alt in &alts[1..] {
            let mut rules = canonical.clone();
            rules[i].1 = parse_rule(alt).unwrap_or_else(|e| panic!("{e}"));
            let p = build(&rules);
            assert_eq!(
                decide(&p, &dests[0], input.port),
                want,
                "rule `{alt}` matches `{}:{}` unlike `{}`",
                dests[0],
                input.port,
                alts[0]
            );
        }
    }
}

// ----- ws_url ---------------------------------------------------------------

const SCHEMES: &[&str] = &["ws://", "wss://", "WS://", "wSs://", "http://", "ws:", ""];

/// `ws_url`: text (after a first byte that picks a scheme prefix) through
/// the WebSocket URL parser. No panic; an error names the text; a
/// URL it accepts has a ws/wss scheme that says whether TLS is used, a
/// non-empty host without brackets, an IP host in its canonical form, the
/// scheme's default port when none is given, and no fragment; the URL as
/// printed parses to the same target; and whatever it accepts is also
/// accepted by the later stages of a connect (the WebSocket client request
/// and, for `wss://`, the TLS server name), so a guest never gets a TCP
/// connection made for a URL that then turns out invalid.
pub fn ws_url(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let Ok(rest) = std::str::from_utf8(rest) else {
        return;
    };
    let text = format!("{}{rest}", SCHEMES[usize::from(pick) % SCHEMES.len()]);
    let target = match parse_ws_url(&text) {
        Ok(t) => t,
        Err(m) => {
            assert!(m.contains(&text), "error {m:?} does not name the URL");
            return;
        }
    };
    let scheme = target.url.scheme();
    assert!(scheme == "ws" || scheme == "wss");
    assert_eq!(target.tls, scheme == "wss");
    assert!(!target.host.is_empty());
    assert!(!target.host.contains(['[', ']']), "host {:?}", target.host);
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        assert_eq!(target.host, ip.to_string(), "IP host not canonical");
    }
    assert!(target.url.fragment().is_none());
    let default = if target.tls { 443 } else { 80 };
    assert_eq!(target.port, target.url.port().unwrap_or(default));
    let again = parse_ws_url(target.url.as_str()).expect("the printed URL parses");
    assert_eq!(
        (&again.host, again.port, again.tls),
        (&target.host, target.port, target.tls),
        "`{text}` and its printed form `{}` differ",
        target.url
    );
    if let Err(e) = target.url.as_str().into_client_request() {
        panic!("`{text}` is accepted, but the WebSocket request for it fails: {e}");
    }
    if target.tls
        && let Err(e) = ServerName::try_from(target.host.clone())
    {
        panic!(
            "`{text}` is accepted, but its host {:?} is no TLS server name: {e}",
            target.host
        );
    }
}
