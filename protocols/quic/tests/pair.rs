//! Two endpoints in memory with a simulated clock: a client [`Link`] with
//! the [`Client`] workload and a server [`Link`] with the [`EchoServer`],
//! joined by a pipe with a fixed one-way delay. Timers fire by jumping the
//! clock to the next deadline, so timeouts take no real time. Every
//! datagram is checked to fit the largest MTU the options allow, and every
//! datagram before the handshake completes to fit the initial MTU (1200
//! bytes by default).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use tether_quic::{App, Client, EchoServer, Error, Identity, Link, Options, Phase, Report};

/// Datagrams in flight one way: (arrival time, bytes).
type Wire = VecDeque<(Instant, Vec<u8>)>;

/// Sees each server datagram and returns extra datagrams to deliver first.
type Mangler = Box<dyn FnMut(&[u8]) -> Vec<Vec<u8>>>;

struct Pair {
    now: Instant,
    delay: Duration,
    client: Link,
    server: Link,
    workload: Client,
    echo: EchoServer,
    to_server: Wire,
    to_client: Wire,
    /// Deliver nothing to the server (an absent peer).
    blackhole: bool,
    /// Called on every datagram before delivery to the client; may add
    /// extra datagrams (garbage) in front of it.
    mangle: Option<Mangler>,
    /// Times the client's clock jumped to a deadline while idle.
    idle_timer_jumps: usize,
    /// The largest datagram seen, bytes.
    max_seen: usize,
    /// No datagram may be larger, bytes (the options' largest MTU).
    limit: usize,
    /// No datagram before the handshake completes may be larger, bytes
    /// (the options' initial MTU).
    initial: usize,
}

fn phases(list: &[&str]) -> Vec<Phase> {
    list.iter().map(|p| p.parse().unwrap()).collect()
}

impl Pair {
    fn new(list: &[&str], client_opts: &Options, server_opts: &Options) -> Pair {
        let identity = Identity::generate(&["localhost"]).unwrap();
        let now = Instant::now();
        Pair {
            now,
            delay: Duration::from_micros(50),
            client: Link::client(now, &identity.cert_der, "localhost", client_opts).unwrap(),
            server: Link::server(now, &identity, server_opts).unwrap(),
            workload: Client::new(phases(list)),
            echo: EchoServer::new(),
            to_server: Wire::new(),
            to_client: Wire::new(),
            blackhole: false,
            mangle: None,
            idle_timer_jumps: 0,
            max_seen: 0,
            limit: client_opts.max_mtu.max(server_opts.max_mtu).into(),
            initial: client_opts.mtu.max(server_opts.mtu).into(),
        }
    }

    fn check_size(&mut self, len: usize) {
        self.max_seen = self.max_seen.max(len);
        assert!(len <= self.limit, "datagram of {len} bytes");
        if !self.client.is_connected() {
            assert!(len <= self.initial, "handshake datagram of {len} bytes");
        }
    }

    /// Runs until the client is done and nothing is in flight, or the
    /// simulated clock passes `limit`.
    fn run(&mut self, limit: Duration) -> Vec<Report> {
        let start = self.now;
        let mut reports = Vec::new();
        loop {
            // Deliver what has arrived.
            while self.to_server.front().is_some_and(|(t, _)| *t <= self.now) {
                let (_, d) = self.to_server.pop_front().unwrap();
                if !self.blackhole {
                    self.server.handle_datagram(self.now, &d);
                }
            }
            while self.to_client.front().is_some_and(|(t, _)| *t <= self.now) {
                let (_, d) = self.to_client.pop_front().unwrap();
                self.client.handle_datagram(self.now, &d);
            }
            for link in [&mut self.client, &mut self.server] {
                if link.poll_timeout().is_some_and(|t| t <= self.now) {
                    link.handle_timeout(self.now);
                }
            }
            self.workload.pump(&mut self.client, self.now);
            self.echo.pump(&mut self.server, self.now);
            reports.extend(std::iter::from_fn(|| self.workload.poll_report()));
            let arrive = self.now + self.delay;
            while let Some(d) = self.client.poll_transmit(self.now) {
                let d = d.to_vec();
                self.check_size(d.len());
                self.to_server.push_back((arrive, d));
            }
            while let Some(d) = self.server.poll_transmit(self.now) {
                let d = d.to_vec();
                self.check_size(d.len());
                let extra = self.mangle.as_mut().map(|m| m(&d)).unwrap_or_default();
                for e in extra {
                    self.to_client.push_back((arrive, e));
                }
                self.to_client.push_back((arrive, d));
            }
            if self.workload.is_done() && self.to_server.is_empty() && self.to_client.is_empty() {
                return reports;
            }
            // Nothing more now: jump to the next arrival or deadline.
            let next = [
                self.to_server.front().map(|(t, _)| *t),
                self.to_client.front().map(|(t, _)| *t),
                self.client.poll_timeout(),
                self.server.poll_timeout(),
                self.workload.poll_timeout(),
            ]
            .into_iter()
            .flatten()
            .min();
            let Some(next) = next else {
                panic!("deadlock: nothing in flight and no timer");
            };
            if next > self.now {
                if self.workload.is_idle() && self.to_server.is_empty() && self.to_client.is_empty()
                {
                    self.idle_timer_jumps += 1;
                }
                self.now = next;
            }
            assert!(
                self.now - start < limit,
                "still running after {limit:?} of simulated time"
            );
        }
    }
}

fn stream_bytes(reports: &[Report]) -> Vec<u64> {
    reports
        .iter()
        .filter_map(|r| match r {
            Report::Stream { bytes, .. } => Some(*bytes),
            _ => None,
        })
        .collect()
}

#[test]
fn handshake_then_verified_echo_of_1_1000_and_16_mib() {
    let o = Options::default();
    let mut pair = Pair::new(
        &[
            "stream:1",
            "stream:1000",
            "stream:16m",
            "rtt:50:32",
            "dgram:20:1000",
        ],
        &o,
        &o,
    );
    let reports = pair.run(Duration::from_secs(120));
    assert_eq!(pair.workload.error(), None);
    let Report::Handshake { elapsed, alpn } = &reports[0] else {
        panic!("first report is the handshake: {reports:?}");
    };
    assert_eq!(alpn, "tether-quic-echo");
    // One round trip of 2 x 50 us plus nothing else: no timer in the way.
    assert!(
        *elapsed < Duration::from_millis(1),
        "handshake took {elapsed:?}"
    );
    assert_eq!(stream_bytes(&reports), vec![1, 1000, 16 << 20]);
    let rtts: Vec<&Report> = reports
        .iter()
        .filter(|r| matches!(r, Report::Rtt { .. }))
        .collect();
    let Report::Rtt { samples_ns, .. } = rtts[0] else {
        unreachable!()
    };
    assert_eq!(samples_ns.len(), 50);
    // Each round trip is one pipe round trip (100 us), never a timer.
    assert!(
        samples_ns.iter().all(|&ns| ns < 1_000_000),
        "{samples_ns:?}"
    );
    assert!(
        reports
            .iter()
            .any(|r| matches!(r, Report::Datagrams { samples_ns, .. } if samples_ns.len() == 20))
    );
    let stats = pair.echo.stats();
    assert_eq!(stats.bytes, 1 + 1000 + (16 << 20) + 50 * 32);
    assert_eq!(stats.datagrams, 20);
    assert!(pair.echo.is_done(), "the server saw the client's close");
}

#[test]
fn wrong_alpn_fails_the_handshake_on_both_sides() {
    let client = Options {
        alpn: vec![b"something-else".to_vec()],
        ..Options::default()
    };
    let mut pair = Pair::new(&["rtt:1:1"], &client, &Options::default());
    let t0 = pair.now;
    pair.run(Duration::from_secs(5));
    let e = pair.workload.error().expect("the client fails");
    assert_eq!(e.kind(), "alpn", "{e}");
    assert!(e.to_string().contains("something-else"), "{e}");
    assert!(
        pair.now - t0 < Duration::from_millis(10),
        "no waiting for a timeout"
    );
    assert_eq!(
        pair.server.error().map(Error::kind),
        Some("alpn"),
        "{:?}",
        pair.server.error()
    );
}

#[test]
fn untrusted_certificate_fails_the_handshake() {
    let o = Options::default();
    let mut pair = Pair::new(&["rtt:1:1"], &o, &o);
    let other = Identity::generate(&["localhost"]).unwrap();
    pair.client = Link::client(pair.now, &other.cert_der, "localhost", &o).unwrap();
    pair.run(Duration::from_secs(5));
    let e = pair.workload.error().expect("the client fails");
    assert_eq!(e.kind(), "tls", "{e}");
}

#[test]
fn absent_peer_times_out_within_the_idle_timeout() {
    let o = Options {
        idle_timeout: Duration::from_secs(3),
        ..Options::default()
    };
    let mut pair = Pair::new(&["rtt:1:1"], &o, &o);
    pair.blackhole = true;
    let t0 = pair.now;
    pair.run(Duration::from_secs(30));
    let e = pair.workload.error().expect("the client fails");
    assert_eq!(*e, Error::HandshakeTimeout(Duration::from_secs(3)));
    let took = pair.now - t0;
    assert!(
        took >= Duration::from_secs(3) && took < Duration::from_millis(3500),
        "timed out after {took:?}"
    );
}

#[test]
fn garbage_and_truncated_datagrams_are_ignored() {
    let o = Options::default();
    let mut pair = Pair::new(&["rtt:20:100", "stream:200000", "dgram:5:100"], &o, &o);
    let mut n = 0u64;
    pair.mangle = Some(Box::new(move |d: &[u8]| {
        n += 1;
        let garbage: Vec<u8> = (0..(n as usize * 37) % 1300)
            .map(|i| (i as u64 * 2654435761 + n) as u8)
            .collect();
        vec![
            garbage,
            d[..d.len() / 2].to_vec(),
            d[..1.min(d.len())].to_vec(),
            Vec::new(),
        ]
    }));
    let reports = pair.run(Duration::from_secs(60));
    assert_eq!(pair.workload.error(), None);
    assert_eq!(stream_bytes(&reports), vec![200000]);
    assert!(pair.client.stats().datagrams_in > 4 * pair.server.stats().datagrams_out / 2);
}

#[test]
fn idle_connection_without_keep_alive_has_almost_no_timers() {
    let o = Options {
        idle_timeout: Duration::from_secs(60),
        ..Options::default()
    };
    let mut pair = Pair::new(&["rtt:3:32", "idle:30000", "rtt:3:32"], &o, &o);
    let reports = pair.run(Duration::from_secs(120));
    assert_eq!(pair.workload.error(), None);
    assert!(reports.iter().any(|r| matches!(r, Report::Idle { .. })));
    // 30 s of idle: the delayed-ACK/loss timers of the last exchange, and
    // then nothing until the idle phase ends. A 10 ms tick would be 3000.
    assert!(
        pair.idle_timer_jumps <= 4,
        "{} timer deadlines in 30 s of idle",
        pair.idle_timer_jumps
    );
}

#[test]
fn keep_alive_sends_pings_on_an_idle_connection() {
    let o = Options {
        idle_timeout: Duration::from_secs(2),
        keep_alive: Some(Duration::from_millis(500)),
        ..Options::default()
    };
    let mut pair = Pair::new(&["idle:5000", "rtt:1:8"], &o, &o);
    pair.run(Duration::from_secs(20));
    // Without keep-alives the 2 s idle timeout would end the connection.
    assert_eq!(pair.workload.error(), None);
    assert!(
        pair.idle_timer_jumps >= 8,
        "{} timers",
        pair.idle_timer_jumps
    );
}

#[test]
fn phases_parse_and_reports_round_trip_through_text() {
    assert_eq!(
        "stream:16m".parse::<Phase>().unwrap(),
        Phase::Stream { bytes: 16 << 20 }
    );
    assert_eq!(
        "rtt:10:32".parse::<Phase>().unwrap(),
        Phase::Rtt {
            count: 10,
            size: 32
        }
    );
    assert!("rtt:10".parse::<Phase>().is_err());
    assert!("dgram:1:0".parse::<Phase>().is_err());
    for r in [
        Report::Handshake {
            elapsed: Duration::from_nanos(1234),
            alpn: "x".into(),
        },
        Report::Rtt {
            size: 32,
            samples_ns: vec![1, 2, 3],
        },
        Report::Stream {
            bytes: 5,
            elapsed: Duration::from_nanos(9),
        },
        Report::Idle {
            elapsed: Duration::from_nanos(7),
        },
    ] {
        assert_eq!(Report::parse_line(&r.to_line()), Some(r));
    }
}

#[test]
fn larger_datagrams_when_configured() {
    let big = Options {
        mtu: 9000,
        max_mtu: 9000,
        ..Options::default()
    };
    let mut pair = Pair::new(&["stream:2m"], &big, &big);
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.workload.error(), None);
    assert!(pair.max_seen > 8000, "{:?}", pair.max_seen);

    assert!(
        Options {
            mtu: 20000,
            ..Options::default()
        }
        .transport()
        .is_err()
    );
}

#[test]
fn path_mtu_discovery_raises_the_datagram_size_after_the_handshake() {
    let mut pair = Pair::new(&["stream:2m"], &Options::default(), &Options::default());
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.workload.error(), None);
    // Handshake datagrams were checked against 1200 bytes; the bulk ones
    // grew towards the 16383-byte default bound.
    assert!(pair.max_seen > 12_000, "largest datagram {}", pair.max_seen);
    assert!(pair.client.mtu() > Some(12_000), "{:?}", pair.client.mtu());
}

#[test]
fn max_mtu_equal_to_mtu_keeps_every_datagram_at_1200_bytes() {
    let fixed = Options {
        max_mtu: 1200,
        ..Options::default()
    };
    let mut pair = Pair::new(&["stream:2m"], &fixed, &fixed);
    pair.run(Duration::from_secs(60));
    assert_eq!(pair.workload.error(), None);
    assert_eq!(pair.max_seen, 1200);
    assert!(
        Options {
            mtu: 1300,
            max_mtu: 1200,
            ..Options::default()
        }
        .transport()
        .is_err()
    );
}
