//! The `jmux-proxy` command line, as `jetsocat` users know it:
//!
//! ```text
//! [jmux-proxy] <PIPE> [<LISTENER>...] [--allow-all | --allow RULE...]
//! ```
//!
//! - PIPE: `ws://URL`, `wss://URL` (dial a WebSocket), `ws-listen://BIND`
//!   (accept one WebSocket), `tcp://HOST:PORT` (dial), `tcp-listen://BIND`
//!   (accept one TCP connection).
//! - LISTENER: `tcp-listen://BIND/HOST:PORT` (every accepted connection
//!   becomes a channel to the fixed target), `socks5-listen://BIND` (SOCKS5
//!   CONNECT, no authentication), `http-listen://BIND` (HTTP CONNECT and
//!   plain proxy requests).
//! - `--allow-all` lets the accepting side open any target (the host's
//!   policy still applies); `--allow RULE` (repeatable, see
//!   [`super::rules`]) opens only matching targets; with neither every OPEN
//!   is refused with reason 2.
//!
//! - Session limits (Tether's own; jetsocat has no such options):
//!   `--max-channels N` ([`Config::max_channels`], default 1024),
//!   `--window BYTES` ([`Config::initial_window`], default 1048576),
//!   `--receive-budget BYTES` ([`Config::receive_budget`], default
//!   67108864), `--half-close-timeout-ms MS`
//!   ([`Config::half_close_timeout`], default 30000; 0: never),
//!   `--idle-timeout-ms MS` ([`Config::idle_timeout`], default 3600000;
//!   0: never).
//! - Listener limits (Tether's own; jetsocat has neither, see
//!   [`HandshakeLimits`]): `--proxy-handshake-timeout-ms MS` (default
//!   10000), `--max-proxy-handshakes N` (default 256),
//!   `--max-proxy-handshakes-per-source N` (default 128), and
//!   `--max-channels-per-source N` ([`ChannelsPerSource`], default a
//!   quarter of `--max-channels`, loopback clients exempt unless given).
//!
//! `BIND` is `ip:port` (port 0 for an ephemeral port).
//!
//! Source: JMUX spec, "How people run it (jetsocat)".

use std::net::SocketAddr;
use std::time::Duration;

use super::rules::{AllowRule, RuleError, TargetFilter};
use crate::codec::Destination;
use crate::session::Config;

/// Usage text for error messages and `--help`.
pub const USAGE: &str = "usage: jmux-proxy <PIPE> [<LISTENER>...] [--allow-all | --allow RULE...]
  PIPE:      ws://URL | wss://URL | ws-listen://BIND | tcp://HOST:PORT | tcp-listen://BIND
  LISTENER:  tcp-listen://BIND/HOST:PORT | socks5-listen://BIND | http-listen://BIND
  --allow-all      open any target the host allows
  --allow RULE     open targets matching HOST:PORT (repeatable; *, *.suffix, IP, CIDR; PORT, LO-HI, *)
  --max-channels N         channels in use at once, both directions (default 1024)
  --window BYTES           receive window per channel (default 1048576)
  --receive-budget BYTES   receive windows plus buffered input over all channels (default 67108864)
  --half-close-timeout-ms MS  idle time a channel may stay half-closed (EOF one way) before it is closed (default 30000; 0: never)
  --idle-timeout-ms MS     idle time any other open channel may stay before it is closed (default 3600000; 0: never)
  --proxy-handshake-timeout-ms MS  time a SOCKS5/HTTP proxy client has for its handshake (default 10000)
  --max-proxy-handshakes N         SOCKS5/HTTP proxy handshakes in progress at once (default 256)
  --max-proxy-handshakes-per-source N  of those, from one client address (IPv6: one /64; default 128)
  --max-channels-per-source N  channels the listeners' clients from one address hold at once (default: a quarter of --max-channels, loopback clients exempt; given, it caps loopback clients too)
  BIND is ip:port (port 0: ephemeral)";

/// The byte pipe that carries the JMUX session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PipeSpec {
    /// Dial a WebSocket (`ws://` or `wss://`); the full URL.
    WsConnect(String),
    /// Accept one WebSocket on `ip:port`.
    WsListen(String),
    /// Dial TCP `host:port`.
    TcpConnect(String),
    /// Accept one TCP connection on `ip:port`.
    TcpListen(String),
}

/// A local listener whose connections become JMUX channels.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ListenerSpec {
    /// `tcp-listen://BIND/HOST:PORT`: every connection to the fixed target.
    Tcp {
        /// `ip:port` to bind.
        bind: String,
        /// Where each channel goes.
        target: Destination,
    },
    /// `socks5-listen://BIND`: SOCKS5 CONNECT, no authentication.
    Socks5 {
        /// `ip:port` to bind.
        bind: String,
    },
    /// `http-listen://BIND`: HTTP CONNECT and plain proxy requests.
    Http {
        /// `ip:port` to bind.
        bind: String,
    },
}

impl ListenerSpec {
    /// The `ip:port` this listener binds.
    pub fn bind(&self) -> &str {
        match self {
            ListenerSpec::Tcp { bind, .. }
            | ListenerSpec::Socks5 { bind }
            | ListenerSpec::Http { bind } => bind,
        }
    }
}

/// Bounds on the SOCKS5 and HTTP proxy handshakes of the listeners
/// (`socks5-listen://`, `http-listen://`): a client accepted there holds a
/// socket until its request is complete, so both its time and their
/// number are bounded. (`tcp-listen://` clients have no handshake: each
/// is a channel at once, bounded by [`Config::max_channels`].)
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandshakeLimits {
    /// How long a client has, from accept, to send its whole SOCKS5
    /// request or HTTP request head; then the connection is closed (an
    /// HTTP client gets `408 Request Timeout`, a SOCKS5 client no reply:
    /// RFC 1928 has none for it). Counts the whole handshake, not the
    /// gaps between bytes. `--proxy-handshake-timeout-ms`; default 10 s
    /// (the host's WebSocket `handshake_timeout`).
    pub timeout: Duration,
    /// Handshakes in progress at once, over all listeners. At the bound a
    /// new client takes the place of the oldest one whose handshake is not
    /// done 1 s after its accept (that one is closed: an HTTP client gets
    /// `408 Request Timeout`); when there is none, the new client is
    /// accepted and closed at once (an HTTP client gets `503 Service
    /// Unavailable`, a SOCKS5 client no reply: RFC 1928's first answer is
    /// the method selection, which has no busy code), so the accept loop
    /// never stops and the sockets held stay bounded.
    /// `--max-proxy-handshakes`; default 256.
    pub max_in_progress: usize,
    /// Of those, what one client source holds at once ([`source_of`]: an
    /// IPv4 address, an IPv6 /64). Past it a new client from that source
    /// is closed at once like one past `max_in_progress`, unless the
    /// oldest handshake not done 1 s after its accept is the source's own,
    /// which then gives its place up: a client that opens connections
    /// faster than that grace keeps every place young, and from one
    /// address takes only this share. `--max-proxy-handshakes-per-source`;
    /// default 128, half the places: a proxy bound to loopback serves one
    /// source, whose bursts of connects keep room.
    pub max_per_source: usize,
}

/// The source a proxy client's handshake counts against: its IPv4
/// address (also when written as IPv4-mapped IPv6), or its IPv6 address's
/// /64 prefix (the block one host gets).
pub fn source_of(peer: SocketAddr) -> std::net::IpAddr {
    use std::net::{IpAddr, Ipv6Addr};
    match peer.ip() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(Ipv6Addr::from(u128::from(v6) & !((1u128 << 64) - 1))),
        },
    }
}

impl Default for HandshakeLimits {
    fn default() -> Self {
        HandshakeLimits {
            timeout: Duration::from_secs(10),
            max_in_progress: 256,
            max_per_source: 128,
        }
    }
}

/// A parsed `jmux-proxy` command line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxyArgs {
    /// The pipe.
    pub pipe: PipeSpec,
    /// Listeners, in command-line order.
    pub listeners: Vec<ListenerSpec>,
    /// Which targets the accepting side opens.
    pub filter: TargetFilter,
    /// The JMUX session's limits: the defaults, with `--max-channels`,
    /// `--window` and `--receive-budget` applied (checked by
    /// [`crate::Session::new`]).
    pub session: Config,
    /// The listeners' handshake bounds: the defaults, with
    /// `--proxy-handshake-timeout-ms`, `--max-proxy-handshakes` and
    /// `--max-proxy-handshakes-per-source` applied.
    pub handshakes: HandshakeLimits,
    /// How many channels the listeners' clients from one source hold.
    pub channels_per_source: ChannelsPerSource,
}

/// The most channels the listeners' clients from one source
/// ([`source_of`]) hold at once, from accept (`tcp-listen://`) or the end
/// of the handshake (`socks5-listen://`, `http-listen://`) until the
/// channel is freed. Past it a new client from that source is refused like
/// one past [`Config::max_channels`] (SOCKS5 reply 1, HTTP 502). Without
/// it one client address that opens channels to targets that never close
/// took every channel of the session, and every other client was refused
/// (the red team of 2026-12-03, eighth round). Peer OPENs do not count.
/// When every channel is in use, the guest gives a quiet channel of the
/// largest sources up for a client of a smaller one (its fair share), so
/// that a few sources at their share do not shut the others out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChannelsPerSource {
    /// The bound; `--max-channels-per-source`, default a quarter of
    /// [`Config::max_channels`] (at least 1): four sources are needed to
    /// take every channel (the red team of 2026-12-04 took them with two
    /// at half).
    pub max: u32,
    /// Loopback clients (127.0.0.0/8, `::1`: this machine) count too. By
    /// default they do not: a listener bound to loopback serves one
    /// source, which a per-source bound would only cut to a share of the
    /// channels; given `--max-channels-per-source`, they do.
    pub loopback_too: bool,
}

/// A command line that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CliError {
    /// No PIPE argument.
    #[error("missing <PIPE>\n{USAGE}")]
    MissingPipe,
    /// The PIPE argument is not one of the pipe forms.
    #[error("`{0}` is not a pipe (ws://, wss://, ws-listen://, tcp://, tcp-listen://)\n{USAGE}")]
    BadPipe(String),
    /// A LISTENER argument is not one of the listener forms.
    #[error("`{arg}` is not a listener: {why}\n{USAGE}")]
    BadListener {
        /// The argument.
        arg: String,
        /// What is wrong.
        why: String,
    },
    /// An `--allow` rule does not parse.
    #[error(transparent)]
    BadRule(#[from] RuleError),
    /// An unknown option, or one missing its value.
    #[error("{0}\n{USAGE}")]
    BadOption(String),
    /// `--allow-all` together with `--allow`.
    #[error("--allow-all and --allow exclude each other")]
    AllowConflict,
}

fn bind_addr(text: &str) -> Result<String, String> {
    text.parse::<SocketAddr>()
        .map(|_| text.to_owned())
        .map_err(|_| format!("`{text}` is not an ip:port bind address"))
}

fn parse_pipe(arg: &str) -> Result<PipeSpec, CliError> {
    let bad = || CliError::BadPipe(arg.to_owned());
    if arg.starts_with("ws://") || arg.starts_with("wss://") {
        return Ok(PipeSpec::WsConnect(arg.to_owned()));
    }
    if let Some(rest) = arg.strip_prefix("ws-listen://") {
        return bind_addr(rest.trim_end_matches('/'))
            .map(PipeSpec::WsListen)
            .map_err(|_| bad());
    }
    if let Some(rest) = arg.strip_prefix("tcp-listen://") {
        return bind_addr(rest).map(PipeSpec::TcpListen).map_err(|_| bad());
    }
    if let Some(rest) = arg.strip_prefix("tcp://") {
        return match Destination::parse(arg) {
            Ok(_) => Ok(PipeSpec::TcpConnect(rest.to_owned())),
            Err(_) => Err(bad()),
        };
    }
    Err(bad())
}

fn parse_listener(arg: &str) -> Result<ListenerSpec, CliError> {
    let bad = |why: String| CliError::BadListener {
        arg: arg.to_owned(),
        why,
    };
    if let Some(rest) = arg.strip_prefix("tcp-listen://") {
        let (bind, target) = rest
            .split_once('/')
            .ok_or_else(|| bad("expected tcp-listen://BIND/HOST:PORT".into()))?;
        let target = Destination::parse(&format!("tcp://{target}"))
            .map_err(|e| bad(format!("target: {}", e.kind)))?;
        return Ok(ListenerSpec::Tcp {
            bind: bind_addr(bind).map_err(bad)?,
            target,
        });
    }
    if let Some(rest) = arg.strip_prefix("socks5-listen://") {
        return Ok(ListenerSpec::Socks5 {
            bind: bind_addr(rest.trim_end_matches('/')).map_err(bad)?,
        });
    }
    if let Some(rest) = arg.strip_prefix("http-listen://") {
        return Ok(ListenerSpec::Http {
            bind: bind_addr(rest.trim_end_matches('/')).map_err(bad)?,
        });
    }
    Err(bad(
        "expected tcp-listen://BIND/HOST:PORT, socks5-listen://BIND or http-listen://BIND".into(),
    ))
}

/// Parses the arguments after the program name. A leading `jmux-proxy`
/// (jetsocat's subcommand) is accepted and skipped. Options may come
/// anywhere; `--allow=RULE` works too.
///
/// Errors: [`CliError`], each naming the offending argument and carrying
/// the usage text.
pub fn parse_args<S: AsRef<str>>(args: &[S]) -> Result<ProxyArgs, CliError> {
    let mut args = args.iter().map(AsRef::as_ref).peekable();
    if args.peek() == Some(&"jmux-proxy") {
        args.next();
    }
    let mut positional = Vec::new();
    let mut allow_all = false;
    let mut rules: Vec<AllowRule> = Vec::new();
    let mut session = Config::default();
    let mut handshakes = HandshakeLimits::default();
    let mut per_source_channels = None;
    while let Some(arg) = args.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) if n.starts_with("--") => (n, Some(v)),
            _ => (arg, None),
        };
        if matches!(
            name,
            "--max-channels"
                | "--window"
                | "--receive-budget"
                | "--half-close-timeout-ms"
                | "--idle-timeout-ms"
                | "--proxy-handshake-timeout-ms"
                | "--max-proxy-handshakes"
                | "--max-proxy-handshakes-per-source"
                | "--max-channels-per-source"
        ) {
            let value = inline
                .or_else(|| args.next())
                .ok_or_else(|| CliError::BadOption(format!("{name} needs a number")))?;
            let bad = || CliError::BadOption(format!("{name} {value}: not a number in range"));
            let positive = |v: &str| v.parse::<u64>().ok().filter(|&n| n > 0).ok_or_else(bad);
            match name {
                "--max-channels" => session.max_channels = value.parse().map_err(|_| bad())?,
                "--window" => session.initial_window = value.parse().map_err(|_| bad())?,
                "--receive-budget" => session.receive_budget = value.parse().map_err(|_| bad())?,
                "--half-close-timeout-ms" | "--idle-timeout-ms" => {
                    let ms: u64 = value.parse().map_err(|_| bad())?;
                    let timeout = (ms > 0).then(|| Duration::from_millis(ms));
                    if name == "--idle-timeout-ms" {
                        session.idle_timeout = timeout;
                    } else {
                        session.half_close_timeout = timeout;
                    }
                }
                "--proxy-handshake-timeout-ms" => {
                    handshakes.timeout = Duration::from_millis(positive(value)?);
                }
                "--max-channels-per-source" => {
                    per_source_channels = Some(u32::try_from(positive(value)?).map_err(|_| bad())?);
                }
                "--max-proxy-handshakes" => {
                    handshakes.max_in_progress =
                        usize::try_from(positive(value)?).map_err(|_| bad())?;
                }
                _ => {
                    handshakes.max_per_source =
                        usize::try_from(positive(value)?).map_err(|_| bad())?;
                }
            }
        } else if arg == "--allow-all" {
            allow_all = true;
        } else if arg == "--allow" {
            let rule = args
                .next()
                .ok_or_else(|| CliError::BadOption("--allow needs a RULE".into()))?;
            rules.push(rule.parse()?);
        } else if let Some(rule) = arg.strip_prefix("--allow=") {
            rules.push(rule.parse()?);
        } else if arg.starts_with("--") {
            return Err(CliError::BadOption(format!("unknown option `{arg}`")));
        } else {
            positional.push(arg);
        }
    }
    let (pipe, listeners) = positional.split_first().ok_or(CliError::MissingPipe)?;
    let filter = match (allow_all, rules.is_empty()) {
        (true, false) => return Err(CliError::AllowConflict),
        (true, true) => TargetFilter::AllowAll,
        (false, false) => TargetFilter::Rules(rules),
        (false, true) => TargetFilter::DenyAll,
    };
    Ok(ProxyArgs {
        pipe: parse_pipe(pipe)?,
        listeners: listeners
            .iter()
            .map(|l| parse_listener(l))
            .collect::<Result<_, _>>()?,
        filter,
        channels_per_source: ChannelsPerSource {
            max: per_source_channels.unwrap_or((session.max_channels / 4).max(1)),
            loopback_too: per_source_channels.is_some(),
        },
        session,
        handshakes,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn jetsocat_style_command_lines() {
        let a = parse_args(&[
            "jmux-proxy",
            "ws://127.0.0.1:8080/jet/jmux?token=x",
            "tcp-listen://127.0.0.1:5000/example.com:80",
            "socks5-listen://127.0.0.1:1080",
            "http-listen://[::1]:3128",
        ])
        .unwrap();
        assert_eq!(
            a.pipe,
            PipeSpec::WsConnect("ws://127.0.0.1:8080/jet/jmux?token=x".into())
        );
        assert_eq!(
            a.listeners,
            vec![
                ListenerSpec::Tcp {
                    bind: "127.0.0.1:5000".into(),
                    target: Destination::tcp("example.com", 80)
                },
                ListenerSpec::Socks5 {
                    bind: "127.0.0.1:1080".into()
                },
                ListenerSpec::Http {
                    bind: "[::1]:3128".into()
                },
            ]
        );
        assert_eq!(a.filter, TargetFilter::DenyAll);

        let b = parse_args(&["ws-listen://0.0.0.0:9000", "--allow-all"]).unwrap();
        assert_eq!(b.pipe, PipeSpec::WsListen("0.0.0.0:9000".into()));
        assert_eq!(b.filter, TargetFilter::AllowAll);

        let c = parse_args(&[
            "tcp://gw.example:7171",
            "--allow",
            "127.0.0.1:*",
            "--allow=*.lan:22",
        ])
        .unwrap();
        assert_eq!(c.pipe, PipeSpec::TcpConnect("gw.example:7171".into()));
        assert!(c.filter.allows("host.lan", 22));
        assert!(c.filter.allows("0x7f.1", 23));
        assert!(!c.filter.allows("10.0.0.1", 23));
        // A name on another port passes only to have its addresses checked
        // by the host against `127.0.0.1:*` after DNS.
        assert!(c.filter.allows("host.lan", 23));
        let d = parse_args(&["tcp://gw.example:7171", "--allow=*.lan:22"]).unwrap();
        assert!(!d.filter.allows("host.lan", 23));
        assert_eq!(
            parse_args(&["tcp-listen://127.0.0.1:0"]).unwrap().pipe,
            PipeSpec::TcpListen("127.0.0.1:0".into())
        );
    }

    #[test]
    fn errors_name_the_argument() {
        assert_eq!(parse_args::<&str>(&[]), Err(CliError::MissingPipe));
        let e = parse_args(&["udp://x:1"]).unwrap_err();
        assert!(e.to_string().contains("udp://x:1"), "{e}");
        let e = parse_args(&["ws://x/", "tcp-listen://127.0.0.1:1"]).unwrap_err();
        assert!(e.to_string().contains("BIND/HOST:PORT"), "{e}");
        let e = parse_args(&["ws://x/", "socks5-listen://nowhere"]).unwrap_err();
        assert!(e.to_string().contains("nowhere"), "{e}");
        let e = parse_args(&["ws://x/", "--allow", "bad"]).unwrap_err();
        assert!(matches!(e, CliError::BadRule(_)));
        assert_eq!(
            parse_args(&["ws://x/", "--allow-all", "--allow", "a:1"]),
            Err(CliError::AllowConflict)
        );
        assert!(matches!(
            parse_args(&["ws://x/", "--frobnicate"]),
            Err(CliError::BadOption(_))
        ));
        let e = parse_args(&["ws://x/", "--window", "-1"]).unwrap_err();
        assert!(e.to_string().contains("--window -1"), "{e}");
        assert!(matches!(
            parse_args(&["ws://x/", "--max-channels"]),
            Err(CliError::BadOption(_))
        ));
    }

    #[test]
    fn session_limits() {
        let a = parse_args(&[
            "ws-listen://127.0.0.1:0",
            "--max-channels",
            "8",
            "--window=65536",
            "--receive-budget",
            "131072",
            "--half-close-timeout-ms=1500",
        ])
        .unwrap();
        assert_eq!(
            (
                a.session.max_channels,
                a.session.initial_window,
                a.session.receive_budget,
                a.session.half_close_timeout,
            ),
            (8, 65536, 131072, Some(Duration::from_millis(1500)))
        );
        assert_eq!(
            a.channels_per_source,
            ChannelsPerSource {
                max: 2,
                loopback_too: false
            },
            "a quarter of --max-channels, loopback exempt"
        );
        let never = parse_args(&[
            "ws://x/",
            "--half-close-timeout-ms",
            "0",
            "--idle-timeout-ms=0",
        ])
        .unwrap();
        assert_eq!(never.session.half_close_timeout, None);
        assert_eq!(never.session.idle_timeout, None);
        let idle = parse_args(&["ws://x/", "--idle-timeout-ms", "2500"]).unwrap();
        assert_eq!(idle.session.idle_timeout, Some(Duration::from_millis(2500)));
        assert_eq!(never.channels_per_source.max, 256);
        let one = parse_args(&["ws://x/", "--max-channels=1"]).unwrap();
        assert_eq!(one.channels_per_source.max, 1);
        let set = parse_args(&["ws://x/", "--max-channels-per-source", "1000"]).unwrap();
        assert_eq!(
            set.channels_per_source,
            ChannelsPerSource {
                max: 1000,
                loopback_too: true
            }
        );
        assert!(parse_args(&["ws://x/", "--max-channels-per-source=0"]).is_err());
        let d = parse_args(&["ws-listen://127.0.0.1:0"]).unwrap();
        assert_eq!(d.session, Config::default());
    }

    #[test]
    fn a_client_source_is_an_ipv4_address_or_an_ipv6_64() {
        let src = |s: &str| source_of(s.parse().unwrap());
        assert_eq!(src("10.0.0.1:1"), src("10.0.0.1:2"));
        assert_ne!(src("10.0.0.1:1"), src("10.0.0.2:1"));
        assert_eq!(src("[::ffff:10.0.0.1]:1"), src("10.0.0.1:9"));
        assert_eq!(
            src("[2001:db8:1:2:aaaa::1]:1"),
            src("[2001:db8:1:2:bbbb::2]:1")
        );
        assert_ne!(src("[2001:db8:1:2::1]:1"), src("[2001:db8:1:3::1]:1"));
    }

    #[test]
    fn handshake_limits() {
        let a = parse_args(&[
            "ws://x/",
            "socks5-listen://127.0.0.1:0",
            "--proxy-handshake-timeout-ms=1500",
            "--max-proxy-handshakes",
            "32",
            "--max-proxy-handshakes-per-source=8",
        ])
        .unwrap();
        assert_eq!(
            a.handshakes,
            HandshakeLimits {
                timeout: Duration::from_millis(1500),
                max_in_progress: 32,
                max_per_source: 8,
            }
        );
        let d = parse_args(&["ws://x/"]).unwrap();
        assert_eq!(d.handshakes.timeout, Duration::from_secs(10));
        assert_eq!(d.handshakes.max_in_progress, 256);
        assert_eq!(d.handshakes.max_per_source, 128);
        for bad in ["0", "-1", "x"] {
            for name in [
                "--proxy-handshake-timeout-ms",
                "--max-proxy-handshakes",
                "--max-proxy-handshakes-per-source",
            ] {
                let e = parse_args(&["ws://x/", name, bad]).unwrap_err();
                assert!(e.to_string().contains(&format!("{name} {bad}")), "{e}");
            }
        }
    }
}
