use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use proptest::prelude::*;

use super::*;

fn rules(list: &[&str]) -> Vec<Rule> {
    list.iter().map(|r| r.parse().unwrap()).collect()
}

fn policy(allow: &[&str], deny: &[&str]) -> Policy {
    Policy {
        allow: rules(allow),
        deny: rules(deny),
        listen: rules(&["127.0.0.1:*"]),
    }
}

fn host(text: &str) -> Host {
    parse_host(text).unwrap_or_else(|e| panic!("{e}"))
}

/// The whole decision for `host:port`, with a resolver that knows
/// `localhost` (127.0.0.1, ::1) and `rebind.example` (10.9.9.9).
fn decide(p: &Policy, text: &str, port: u16) -> Result<Vec<SocketAddr>, String> {
    let h = parse_host(text).map_err(|e| e.to_string())?;
    let check = p.check_name(&h, port)?;
    let addrs: Vec<IpAddr> = match &h {
        Host::Ip { addr, .. } => vec![*addr],
        Host::Name(n) if n == "localhost" => {
            vec!["127.0.0.1".parse().unwrap(), "::1".parse().unwrap()]
        }
        Host::Name(n) if n == "rebind.example" => vec!["10.9.9.9".parse().unwrap()],
        Host::Name(_) => vec!["93.184.215.14".parse().unwrap()],
    };
    let addrs = addrs
        .into_iter()
        .map(|a| SocketAddr::new(a, port))
        .collect();
    p.check_resolved(&h, check, addrs)
}

#[test]
fn deny_by_default() {
    let p = Policy::default();
    assert!(p.check_name(&host("example.com"), 443).is_err());
    assert!(p.check_name(&host("127.0.0.1"), 80).is_err());
    assert!(p.check_listen("127.0.0.1:0".parse().unwrap()).is_err());
}

#[test]
fn names_suffixes_and_ports() {
    let p = policy(&["example.com:443", "*.corp.net:8000-8999"], &[]);
    assert_eq!(
        p.check_name(&host("EXAMPLE.com."), 443),
        Ok(NameCheck::Named)
    );
    assert!(p.check_name(&host("example.com"), 80).is_err());
    assert_eq!(
        p.check_name(&host("a.b.corp.net"), 8080),
        Ok(NameCheck::Wildcard)
    );
    assert!(p.check_name(&host("corp.net"), 8080).is_err());
    assert!(p.check_name(&host("a.corp.net"), 9000).is_err());
    // A rule written in upper case, with a trailing dot, matches alike.
    let p = policy(&["EXAMPLE.COM.:443", "*.Corp.NET.:*"], &[]);
    assert_eq!(
        p.check_name(&host("example.com"), 443),
        Ok(NameCheck::Named)
    );
    assert_eq!(
        p.check_name(&host("x.corp.net"), 1),
        Ok(NameCheck::Wildcard)
    );
}

#[test]
fn ip_rules_and_cidr() {
    let p = policy(&["127.0.0.0/8:*", "[::1]:22"], &[]);
    assert!(decide(&p, "127.1.2.3", 5).is_ok());
    assert!(decide(&p, "[::1]", 22).is_ok());
    assert!(decide(&p, "::1", 23).is_err());
    assert!(decide(&p, "10.0.0.1", 5).is_err());
    // A name is admitted only through its addresses.
    assert_eq!(
        p.check_name(&host("localhost"), 5),
        Ok(NameCheck::NeedsAddress)
    );
    assert_eq!(
        decide(&p, "localhost", 5).unwrap(),
        vec!["127.0.0.1:5".parse::<SocketAddr>().unwrap()]
    );
    assert!(decide(&p, "rebind.example", 5).is_err());
}

#[test]
fn deny_wins_on_names_and_resolved_addresses() {
    let p = policy(
        &["*:*", "internal:*"],
        &["10.0.0.0/8:*", "secret.example:*"],
    );
    assert!(decide(&p, "secret.example", 1).is_err());
    assert!(decide(&p, "SECRET.example.", 1).is_err());
    let e = decide(&p, "10.2.3.4", 1).unwrap_err();
    assert!(e.contains("`10.0.0.0/8:*`"), "{e}");
    let e = decide(&p, "rebind.example", 443).unwrap_err();
    assert!(
        e.contains("10.9.9.9:443 is denied by rule `10.0.0.0/8:*`"),
        "{e}"
    );
    // IPv4-mapped IPv6 cannot sneak past an IPv4 deny rule.
    let e = decide(&p, "[::ffff:10.0.0.1]", 443).unwrap_err();
    assert!(e.contains("reaches 10.0.0.1"), "{e}");
    assert!(decide(&p, "example.com", 443).is_ok());
}

#[test]
fn bad_rules_are_rejected_with_a_reason() {
    for bad in [
        "example.com",
        "x:99999",
        "x:9-1",
        "x:+80",
        "x:",
        "1.2.3.4/40:1",
        "[::1]/129:1",
        "name/8:1",
        "a*b:1",
        "*.:1",
        "*./8:1",
        "*.1.2:1",
        "*/8:1",
        "internal/8:1",
        "[fe80::1%eth0]:1",
        "256.1.1.1:1",
        "[::1:1",
    ] {
        let e = bad.parse::<Rule>().unwrap_err().to_string();
        assert!(e.contains(bad), "{e}");
    }
    assert_eq!(
        "internal".parse::<Rule>().unwrap().ports(),
        PortRange { lo: 0, hi: 65535 }
    );
    assert_eq!(
        *"INTERNAL:443".parse::<Rule>().unwrap().host(),
        HostPattern::Internal
    );
    // A trailing dot spells the same name (found by the `policy` fuzz
    // target: `internal.:*` was a rule for a host named `internal`).
    for spelling in ["internal.:*", "INTERNAL.:443"] {
        assert_eq!(
            *spelling.parse::<Rule>().unwrap().host(),
            HostPattern::Internal,
            "{spelling}"
        );
    }
}

#[test]
fn listen_rules_match_bind_addresses_without_loopback_aliasing() {
    let p = Policy {
        listen: rules(&["127.0.0.1:*", "[::1]:8000"]),
        ..Policy::default()
    };
    assert!(p.check_listen("127.0.0.1:0".parse().unwrap()).is_ok());
    assert!(
        p.check_listen("[::ffff:127.0.0.1]:0".parse().unwrap())
            .is_ok()
    );
    assert!(p.check_listen("[::1]:8000".parse().unwrap()).is_ok());
    assert!(p.check_listen("[::1]:8001".parse().unwrap()).is_err());
    // 0.0.0.0 listens on every interface: a loopback rule does not cover it.
    assert!(p.check_listen("0.0.0.0:0".parse().unwrap()).is_err());
    assert!(p.check_listen("[::]:8000".parse().unwrap()).is_err());
    assert!(!"internal:*".parse::<Rule>().unwrap().is_address_rule());
}

/// An IPv6 rule is a rule for IPv6 binds: `[::]/0` contains
/// `::ffff:0.0.0.0` but does not allow binding 0.0.0.0 (every IPv4
/// interface), nor any IPv4 address; a rule inside the IPv4-mapped range
/// does, and an IPv4 rule allows no IPv6 bind, not even an
/// IPv4-compatible or NAT64 one (those bind as IPv6).
#[test]
fn an_ipv6_listen_rule_covers_ipv4_binds_only_inside_the_mapped_range() {
    let v6 = Policy {
        listen: rules(&["[::]/0:*"]),
        ..Policy::default()
    };
    for bind in [
        "0.0.0.0:80",
        "127.0.0.1:80",
        "[::ffff:0.0.0.0]:80",
        "10.0.0.1:80",
    ] {
        assert!(v6.check_listen(bind.parse().unwrap()).is_err(), "{bind}");
    }
    for bind in ["[::]:80", "[::1]:80", "[fd00::1]:80", "[::7f00:1]:80"] {
        assert!(v6.check_listen(bind.parse().unwrap()).is_ok(), "{bind}");
    }
    let mapped = Policy {
        listen: rules(&["[::ffff:127.0.0.0]/104:*", "[::ffff:0:0]/96:9000"]),
        ..Policy::default()
    };
    assert!(mapped.check_listen("127.0.0.1:80".parse().unwrap()).is_ok());
    assert!(mapped.check_listen("0.0.0.0:9000".parse().unwrap()).is_ok());
    assert!(mapped.check_listen("0.0.0.0:80".parse().unwrap()).is_err());
    let v4 = Policy {
        listen: rules(&["0.0.0.0/0:*"]),
        ..Policy::default()
    };
    assert!(v4.check_listen("0.0.0.0:80".parse().unwrap()).is_ok());
    assert!(
        v4.check_listen("[::ffff:10.0.0.1]:80".parse().unwrap())
            .is_ok()
    );
    for bind in ["[::]:80", "[::7f00:1]:80", "[64:ff9b::7f00:1]:80"] {
        assert!(v4.check_listen(bind.parse().unwrap()).is_err(), "{bind}");
    }
}

/// The repro, in the matcher: `--allow '*:*' --deny 127.0.0.0/8:*
/// --deny [::1]/128:*` and every spelling of the loopback host is denied,
/// naming the loopback rule; `--allow 127.0.0.1:* --allow [::1]:*` admits
/// every one of them.
#[test]
fn every_loopback_spelling_meets_the_loopback_rules() {
    let deny = policy(&["*:*"], &["127.0.0.0/8:*", "[::1]/128:*"]);
    let allow = policy(&["127.0.0.1:*", "[::1]:*"], &[]);
    let mapped_deny = policy(&["*:*"], &["[::ffff:127.0.0.0]/104:*", "[::1]:*"]);
    let odd_deny = policy(&["*:*"], &["0x7f.0.0.0/8:*", "[0::1]/128:*"]);
    let by_name = policy(&["*:*"], &["internal"]);
    let wildcard_only = policy(&["*:*", "*.example:*"], &[]);
    let explicit = policy(&["*:*", "internal:*"], &[]);
    assert!(spellings::LOOPBACK.len() >= 30);
    for s in spellings::LOOPBACK.iter().filter(|s| s.in_tcp) {
        let loopback_rule = if s.reaches == "::1" {
            "[::1]"
        } else {
            "127.0.0.0/8"
        };
        let e = decide(&deny, s.text, 80).unwrap_err();
        assert!(e.contains(&format!("`{loopback_rule}")), "{}: {e}", s.text);
        assert!(decide(&allow, s.text, 80).is_ok(), "{}", s.text);
        for (name, p) in [
            ("mapped", &mapped_deny),
            ("odd", &odd_deny),
            ("internal", &by_name),
        ] {
            let e = decide(p, s.text, 80).unwrap_err();
            assert!(e.contains("denied by rule"), "{name} {}: {e}", s.text);
        }
        let e = decide(&wildcard_only, s.text, 80).unwrap_err();
        assert!(e.contains("internal"), "{}: {e}", s.text);
        assert!(decide(&explicit, s.text, 80).is_ok(), "{}", s.text);
    }
}

#[test]
fn wildcards_do_not_reach_internal_addresses() {
    let p = policy(&["*:*"], &[]);
    for internal in [
        "10.0.0.1",
        "169.254.169.254",
        "[fd00::1]",
        "[fe80::1]",
        "[::ffff:169.254.169.254]",
        "[64:ff9b::a9fe:a9fe]",
        "100.64.0.1",
        "224.0.0.1",
        "255.255.255.255",
        "rebind.example",
        "localhost",
    ] {
        let e = decide(&p, internal, 80).unwrap_err();
        assert!(e.contains("is internal"), "{internal}: {e}");
    }
    assert!(decide(&p, "1.1.1.1", 80).is_ok());
    assert!(decide(&p, "example.com", 80).is_ok());
    // Named, by address, or with `internal`: reached.
    assert!(decide(&policy(&["rebind.example:80"], &[]), "rebind.example", 80).is_ok());
    assert!(decide(&policy(&["*:*", "10.0.0.0/8:*"], &[]), "rebind.example", 80).is_ok());
    assert!(
        decide(
            &policy(&["*.example:*", "internal:80"], &[]),
            "rebind.example",
            80
        )
        .is_ok()
    );
    assert!(decide(&policy(&["*.example:*"], &[]), "rebind.example", 80).is_err());
    // allow_all (trusted guests, `tether jmux --allow-all`) reaches them.
    assert!(decide(&Policy::allow_all(), "169.254.169.254", 80).is_ok());
    // A deny rule of a name never blocks an address, a deny `internal`
    // blocks even an explicitly named host.
    let p = policy(&["rebind.example:*"], &["internal"]);
    assert!(
        decide(&p, "rebind.example", 80)
            .unwrap_err()
            .contains("`internal`")
    );
}

/// The IPv4 address `a` written in one of the forms `inet_aton` accepts:
/// `parts` parts (1-4), each in `radix` (0: decimal, 1: octal, 2: hex),
/// optionally with a trailing dot; or as IPv4-mapped IPv6.
fn spell_v4(a: Ipv4Addr, parts: usize, radixes: [u8; 4], dot: bool, mapped: u8) -> String {
    match mapped {
        1 => return format!("[::ffff:{a}]"),
        2 => {
            let o = a.octets();
            return format!("[::FFFF:{:x}{:02x}:{:x}{:02x}]", o[0], o[1], o[2], o[3]);
        }
        3 => return format!("[0:0:0:0:0:ffff:{a}]"),
        _ => {}
    }
    let o = a.octets().map(u64::from);
    let values: Vec<u64> = match parts {
        1 => vec![u64::from(u32::from(a))],
        2 => vec![o[0], (o[1] << 16) | (o[2] << 8) | o[3]],
        3 => vec![o[0], o[1], (o[2] << 8) | o[3]],
        _ => o.to_vec(),
    };
    let mut text = values
        .iter()
        .zip(radixes)
        .map(|(v, r)| match r % 3 {
            0 => format!("{v}"),
            1 => format!("0{v:o}"),
            _ => format!("0x{v:x}"),
        })
        .collect::<Vec<_>>()
        .join(".");
    if dot {
        text.push('.');
    }
    text
}

/// A rule for an IPv4 block: `net/prefix`, written as IPv4 or as its
/// IPv4-mapped IPv6 block.
fn v4_rule(net: Ipv4Addr, prefix: u8, mapped: bool, ports: &str) -> String {
    if mapped {
        format!("[::ffff:{net}]/{}:{ports}", u32::from(prefix) + 96)
    } else {
        format!("{net}/{prefix}:{ports}")
    }
}

proptest! {
    /// Equivalent spellings match alike: every form of an IPv4 address
    /// (1-4 parts, decimal/octal/hex, trailing dot, IPv4-mapped) gets the
    /// same decision as its dotted-decimal form, under random allow and
    /// deny rules written as IPv4 or IPv4-mapped blocks, `internal` or
    /// `*`.
    #[test]
    fn equivalent_spellings_match_alike(
        addr in any::<u32>().prop_map(Ipv4Addr::from),
        parts in 1usize..=4,
        radixes in any::<[u8; 4]>(),
        dot in any::<bool>(),
        mapped in 0u8..8,
        allow in proptest::collection::vec((any::<u32>(), 0u8..=32, any::<bool>(), 0u8..4), 0..4),
        deny in proptest::collection::vec((any::<u32>(), 0u8..=32, any::<bool>(), 0u8..4), 0..3),
        port in 1u16..4,
    ) {
        let text = |(net, prefix, mapped, kind): (u32, u8, bool, u8)| match kind {
            0 => "*:*".to_string(),
            1 => "internal:2-3".to_string(),
            // A block that holds the address, or a random one.
            2 => v4_rule(Ipv4Addr::from(u32::from(addr) ^ net.checked_shr(u32::from(prefix)).unwrap_or(0)), prefix, mapped, "*"),
            _ => v4_rule(Ipv4Addr::from(net), prefix, mapped, "*"),
        };
        let p = Policy {
            allow: allow.into_iter().map(|r| text(r).parse().unwrap()).collect(),
            deny: deny.into_iter().map(|r| text(r).parse().unwrap()).collect(),
            listen: Vec::new(),
        };
        let plain = decide(&p, &addr.to_string(), port).map(|_| ());
        let spelled = spell_v4(addr, parts, radixes, dot, mapped);
        let other = decide(&p, &spelled, port).map(|_| ());
        prop_assert_eq!(plain.is_ok(), other.is_ok(), "{} vs {}: {:?} / {:?}", addr, spelled, plain, other);
    }

    /// Any rule text parses or fails with a reason naming it; a parsed
    /// rule's text round-trips through Display.
    #[test]
    fn rules_parse_or_name_themselves(text in "[*a-z0-9.:\\[\\]/x-]{0,24}") {
        match text.parse::<Rule>() {
            Ok(rule) => prop_assert_eq!(rule.to_string(), text),
            Err(e) => prop_assert!(e.to_string().contains(&text)),
        }
    }
}

/// An address of one of this machine's interfaces reaches the local host
/// like loopback does, so it meets loopback's rules as well as its own
/// (the red team of 2026-12-03, third round: `--allow '*:*' --deny
/// internal` let a guest reach a service bound to `0.0.0.0` through the
/// machine's `192.0.2.2`).
#[test]
fn this_machines_own_addresses_meet_the_loopback_rules() {
    let local: Vec<IpAddr> = ["192.0.2.2", "fd00::2", "2001:db8::5", "127.0.0.1"]
        .iter()
        .map(|a| a.parse().unwrap())
        .collect();
    let on = |p: &Policy, text: &str| {
        let h = host(text);
        let check = p.check_name_on(&h, 80, &local)?;
        let addr = h.ip().unwrap();
        p.check_resolved_on(&h, check, vec![SocketAddr::new(addr, 80)], &local)
    };
    let own = [
        "192.0.2.2",
        "[::ffff:192.0.2.2]",
        "0xc0.0.2.2",
        "[2001:db8::5]",
    ];
    for rules in [
        policy(&["*:*"], &["internal"]),
        policy(&["*:*"], &["127.0.0.0/8:*", "[::1]/128:*"]),
        policy(&["*:*"], &[]),
    ] {
        for text in own {
            let why = on(&rules, text).unwrap_err();
            assert!(why.contains("this host"), "{text}: {why}");
            // Without the machine's addresses the policy cannot know.
            assert!(decide(&rules, text, 80).is_ok(), "{text}");
        }
        // Other addresses are unaffected.
        assert!(on(&rules, "93.184.215.14").is_ok());
    }
    // Admitted by a rule for the address itself or `internal`; a rule for
    // loopback does not open the machine's other interfaces.
    for allow in ["192.0.2.2:*", "192.0.2.0/24:*", "internal"] {
        assert!(on(&policy(&[allow], &[]), "192.0.2.2").is_ok(), "{allow}");
    }
    assert!(on(&policy(&["[2001:db8::5]:*"], &[]), "[2001:db8::5]").is_ok());
    for (allow, text) in [
        ("127.0.0.1:*", "192.0.2.2"),
        ("127.0.0.0/8:*", "192.0.2.2"),
        ("[::1]:*", "[2001:db8::5]"),
    ] {
        assert!(on(&policy(&[allow], &[]), text).is_err(), "{allow} {text}");
    }
    // But a loopback deny beats an allow of the address itself.
    let p = policy(&["192.0.2.2:*"], &["127.0.0.0/8:*"]);
    assert!(on(&p, "192.0.2.2").unwrap_err().contains("this host"));
    // An exact-name rule admits what that name resolves to, as for
    // internal addresses, unless a deny rule covers it.
    let named = policy(&["myself.example:80"], &[]);
    let h = host("myself.example");
    let check = named.check_name_on(&h, 80, &local).unwrap();
    assert!(
        named
            .check_resolved_on(&h, check, vec!["192.0.2.2:80".parse().unwrap()], &local)
            .is_ok()
    );
    let p = policy(&["myself.example:80"], &["internal"]);
    let h = host("myself.example");
    let check = p.check_name_on(&h, 80, &local).unwrap();
    let err = p
        .check_resolved_on(&h, check, vec!["192.0.2.2:80".parse().unwrap()], &local)
        .unwrap_err();
    assert!(err.contains("denied by rule `internal`"), "{err}");
}
