//! The QUIC echo guest: a quinn-proto endpoint (rustls, *ring*) inside the
//! component, its datagrams carried by a Tether message stream, one binary
//! WebSocket message per QUIC datagram.
//!
//! ```text
//! quic-echo server listen ADDR [--max N] [--max-connections N] [--window-budget BYTES] --cert HEX --key HEX [OPTIONS]
//! quic-echo server dial URL --cert HEX --key HEX [OPTIONS]
//! quic-echo client URL --ca HEX [--name NAME] [--handshakes K] [OPTIONS] PHASE...
//! OPTIONS: [--alpn PROTO]... [--idle-ms MS] [--keep-alive-ms MS] [--mtu BYTES] [--max-mtu BYTES]
//!          [--aead host|guest]
//! ```
//!
//! `--aead host` (the default) hands QUIC packet keys to the host
//! (`tether:streams/aead`, see `host_aead.rs`) and prefers AES-128-GCM;
//! `--aead guest` keeps every key inside the guest (SIMD ChaCha20-Poly1305
//! preferred).
//!
//! The server echoes every bidirectional stream and datagram of every
//! connection (`listen`: each accepted message stream carries one; `--max`
//! stops after N, 0 = forever; at most `--max-connections` at once,
//! default 1024: past it a new stream takes the place of the oldest one
//! whose QUIC handshake has not completed 1 s after its accept, or waits
//! in the host's accept queue;
//! a stream whose peer starts no QUIC connection within the idle timeout
//! is closed; the connections share `--window-budget` bytes (default 72
//! MiB) for their windows, each starting at 40 KiB and taking its full
//! windows once its handshake completes, while the budget has room;
//! `dial`: one connection over a stream it dials). Certificates are DER in hex; the client verifies the server's
//! certificate against `--ca` and the name `--name` (default `localhost`).
//!
//! The client first runs K handshake-only connections (each on its own
//! message stream), then one connection with the PHASEs (`rtt:N:SIZE`,
//! `stream:BYTES`, `dgram:N:SIZE`, `idle:MS`; see `tether_quic::client`).
//! Stdout, one line each, for the host to parse: every
//! `tether_quic::Report` line (`handshake NS ALPN`, `rtt SIZE NS...`,
//! ...), after each idle phase and at the end of the measured connection
//! `wakeups total=W timer=T message=M send=S other=O blocked_ns=NS` (returns
//! from `poll` by what was ready, and the time spent blocked in it), then
//! `done`, or `error KIND MESSAGE`. The server prints `served N streams=S
//! bytes=B datagrams=D services=V end=ok|KIND MESSAGE` per connection (V:
//! how many times the loop serviced it).
//!
//! Timers are event-driven: the guest sleeps in one `poll` on a readiness
//! set holding its streams and a monotonic-clock pollable armed for the
//! nearest deadline (re-armed only when it moves), never on a periodic
//! tick; a wake-up services only the connections that are ready or due.

mod host_aead;

use std::collections::{BTreeSet, VecDeque};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use tether_guest_sdk::{
    self as sdk, ErrorCode, Interest, ListenOptions, Message, MessageStream, Pollable,
    ReadinessSet, monotonic_clock, websocket,
};
use tether_quic::{
    App, Client, EchoServer, Error, Identity, Link, Options, Phase, SharedBudget, Windows, config,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("server") => server(&args[1..]),
        Some("client") => client(&args[1..]),
        _ => Err(Error::Config(
            "usage: quic-echo server listen ADDR|dial URL --cert HEX --key HEX ... | quic-echo client URL --ca HEX ... PHASE...".into(),
        )),
    };
    match result {
        Ok(()) => {
            println!("done");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("quic-echo: {e}");
            println!("error {} {e}", e.kind());
            ExitCode::FAILURE
        }
    }
}

/// Command-line flags shared by both roles.
#[derive(Default)]
struct Flags {
    positional: Vec<String>,
    options: Options,
    cert: Option<Vec<u8>>,
    key: Option<Vec<u8>>,
    ca: Option<Vec<u8>>,
    name: Option<String>,
    handshakes: usize,
    max: u64,
    max_connections: u64,
    window_budget: u64,
}

fn parse(args: &[String]) -> Result<Flags, Error> {
    let mut f = Flags {
        max_connections: DEFAULT_MAX_CONNECTIONS,
        window_budget: DEFAULT_WINDOW_BUDGET,
        ..Flags::default()
    };
    f.options.aead = config::Aead::External(&host_aead::HOST_AEAD);
    let mut alpn = Vec::new();
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut value = || {
            it.next()
                .cloned()
                .ok_or_else(|| Error::Config(format!("{a} needs a value")))
        };
        let number = |v: String| {
            v.parse::<u64>()
                .map_err(|_| Error::Config(format!("{a}: `{v}` is not a number")))
        };
        match a.as_str() {
            "--cert" => f.cert = Some(config::from_hex(&value()?)?),
            "--key" => f.key = Some(config::from_hex(&value()?)?),
            "--ca" => f.ca = Some(config::from_hex(&value()?)?),
            "--name" => f.name = Some(value()?),
            "--alpn" => alpn.push(value()?.into_bytes()),
            "--idle-ms" => {
                f.options.idle_timeout = std::time::Duration::from_millis(number(value()?)?)
            }
            "--keep-alive-ms" => {
                f.options.keep_alive = Some(std::time::Duration::from_millis(number(value()?)?))
            }
            "--mtu" => {
                f.options.mtu = u16::try_from(number(value()?)?)
                    .map_err(|_| Error::Config("--mtu is at most 65535".into()))?
            }
            "--max-mtu" => {
                f.options.max_mtu = u16::try_from(number(value()?)?)
                    .map_err(|_| Error::Config("--max-mtu is at most 65535".into()))?
            }
            "--aead" => {
                f.options.aead = match value()?.as_str() {
                    "host" => config::Aead::External(&host_aead::HOST_AEAD),
                    "guest" => config::Aead::Builtin,
                    other => {
                        return Err(Error::Config(format!(
                            "--aead: `{other}` is neither host nor guest"
                        )));
                    }
                }
            }
            "--handshakes" => f.handshakes = number(value()?)? as usize,
            "--max" => f.max = number(value()?)?,
            "--window-budget" => f.window_budget = number(value()?)?,
            "--max-connections" => {
                f.max_connections = number(value()?)?;
                if f.max_connections == 0 {
                    return Err(Error::Config("--max-connections must be at least 1".into()));
                }
            }
            flag if flag.starts_with("--") => {
                return Err(Error::Config(format!("unknown option {flag}")));
            }
            _ => f.positional.push(a.clone()),
        }
    }
    if !alpn.is_empty() {
        f.options.alpn = alpn;
    }
    Ok(f)
}

/// Connections a `listen` server serves at once unless
/// `--max-connections` says otherwise: each holds about 50 KiB of QUIC
/// state, so a peer opening message streams cannot grow the guest without
/// bound.
const DEFAULT_MAX_CONNECTIONS: u64 = 1024;

/// Bytes the connections of a `listen` server share for their windows
/// unless `--window-budget` says otherwise (`tether_quic::SharedBudget`):
/// a connection whose handshake completed takes its full windows from it
/// (receive and send windows, 8 MiB each, and a 2 MiB echo budget: four
/// connections at a time), the others keep `Windows::FLOOR` (40 KiB). With
/// 1,024 connections that is at most 72 + 40 MiB, plus their 16 KiB
/// datagram buffers each way (32 MiB) and QUIC state (about 50 MiB): under
/// the host's default 256 MiB of guest memory. Before, each connection
/// could make the guest hold 100 streams x 5 MiB, and one peer had it
/// stopped at its memory limit, with every connection in it (the red team
/// of 2026-12-04i, F1).
const DEFAULT_WINDOW_BUDGET: u64 = 72 << 20;

/// Each way, bytes, for every connection of a `listen` server.
const SHARED_DATAGRAM_BUFFER: usize = 16 << 10;

fn ws_error(e: &ErrorCode) -> Error {
    Error::PipeClosed(sdk::describe(e))
}

/// Wake-up counters: every return from `poll`, by what was ready.
#[derive(Clone, Copy, Default)]
struct Wakeups {
    total: u64,
    /// The deadline timer was ready.
    timer: u64,
    /// A message arrived.
    message: u64,
    /// Only outbound room (backpressure released).
    send: u64,
    /// Only a listener had a connection.
    other: u64,
    /// Time spent blocked in `poll`, ns.
    blocked_ns: u64,
}

impl Wakeups {
    fn line(&self) -> String {
        format!(
            "wakeups total={} timer={} message={} send={} other={} blocked_ns={}",
            self.total, self.timer, self.message, self.send, self.other, self.blocked_ns
        )
    }
}

/// One QUIC connection over one message stream, and its application.
struct Pipe<A: App> {
    stream: MessageStream,
    link: Link,
    app: A,
    /// A datagram refused with would-block, sent first next time.
    pending: bool,
    /// Reused message buffer for outgoing datagrams.
    out: Message,
    /// The message stream ended (closed or failed).
    ended: bool,
    /// Sending failed: nothing more is sent, and the receive side tells
    /// how the stream ended (a peer's close frame races our sends).
    send_failed: bool,
    /// A server pipe whose peer must start a QUIC connection this long
    /// after `accepted_at` (the idle timeout): a message stream that never
    /// carries a client's first datagram would otherwise hold its QUIC
    /// state (about 50 KiB) for ever. `None` once there is a connection
    /// (quinn-proto's handshake and idle timeouts take over) and on the
    /// client side.
    start_within: Option<Duration>,
    /// When a server pipe was accepted (`None` on the client side).
    accepted_at: Option<Instant>,
    /// No QUIC connection started in time: the pipe is closed.
    expired: bool,
    /// The pipe is registered for `send` in the loop's readiness set.
    watch_send: bool,
    /// The deadline the loop holds for this pipe.
    deadline: Option<Instant>,
    /// Times the loop serviced this pipe (the `served` line's
    /// `services=`): about one per event of its own, however many other
    /// pipes the loop holds.
    services: u64,
}

impl<A: App> Pipe<A> {
    fn new(stream: MessageStream, link: Link, app: A) -> Pipe<A> {
        Pipe {
            stream,
            link,
            app,
            pending: false,
            out: Message::Binary(Vec::with_capacity(1500)),
            ended: false,
            send_failed: false,
            start_within: None,
            accepted_at: None,
            expired: false,
            watch_send: false,
            deadline: None,
            services: 0,
        }
    }

    /// A server pipe accepted at `now`: its peer has `idle` (the idle
    /// timeout, never 0) to start a QUIC connection.
    fn accepted(stream: MessageStream, link: Link, app: A, now: Instant, idle: Duration) -> Self {
        let mut p = Pipe::new(stream, link, app);
        p.accepted_at = Some(now);
        p.start_within = Some(idle);
        p
    }

    /// One pass, without blocking: every waiting datagram in, due timers,
    /// the application, every datagram out (until backpressure).
    fn service(&mut self, now: Instant) {
        self.services += 1;
        while !self.ended {
            match self.stream.receive() {
                Ok(Some(Message::Binary(d))) => self.link.handle_datagram(now, &d),
                // Not a datagram: ignored like any undecodable datagram.
                Ok(Some(Message::Text(_))) => {}
                Ok(None) => break,
                Err(e) => {
                    self.ended = true;
                    if !self.link.is_closed() {
                        let how = match self.stream.close_info() {
                            Some(c) => format!(
                                "{} (close code {} {})",
                                sdk::describe(&e),
                                c.code,
                                c.reason
                            ),
                            None => sdk::describe(&e),
                        };
                        self.link.fail(Error::PipeClosed(how));
                    }
                }
            }
        }
        if self.link.poll_timeout().is_some_and(|t| t <= now) {
            self.link.handle_timeout(now);
        }
        if self.link.has_connection() {
            self.start_within = None;
        } else if self.start_by().is_some_and(|by| by <= now)
            && let Some(idle) = self.start_within.take()
        {
            self.expired = true;
            self.link.fail(Error::HandshakeTimeout(idle));
        }
        self.app.pump(&mut self.link, now);
        self.flush(now);
    }

    fn flush(&mut self, now: Instant) {
        if self.ended || self.send_failed {
            return;
        }
        loop {
            if !self.pending {
                let Some(d) = self.link.poll_transmit(now) else {
                    return;
                };
                let Message::Binary(buf) = &mut self.out else {
                    unreachable!()
                };
                buf.clear();
                buf.extend_from_slice(d);
            }
            match self.stream.send(&self.out) {
                Ok(()) => self.pending = false,
                Err(ErrorCode::WouldBlock) => {
                    self.pending = true;
                    return;
                }
                Err(e) => {
                    eprintln!("quic-echo: send failed: {}", sdk::describe(&e));
                    self.send_failed = true;
                    // Nothing more will be sent: stop waiting for room
                    // (a closed stream's `send` interest stays ready).
                    self.pending = false;
                    return;
                }
            }
        }
    }

    fn next_deadline(&mut self) -> Option<Instant> {
        let quic = tether_quic::earliest(self.link.poll_timeout(), self.app.poll_timeout());
        tether_quic::earliest(quic, self.start_by())
    }

    /// When a server pipe must have a QUIC connection (see
    /// `start_within`).
    fn start_by(&self) -> Option<Instant> {
        self.accepted_at?.checked_add(self.start_within?)
    }

    /// Finished: the application is done and everything was sent, the
    /// message stream ended, or no QUIC connection started in time.
    fn finished(&self) -> bool {
        self.ended || self.expired || (self.app.is_done() && !self.pending)
    }

    /// Closes the message stream with 1000 after every queued datagram.
    /// The host finishes the closing handshake; nothing waits for it here
    /// (a server with other connections must not block on one peer).
    fn close(self) {
        if !self.ended {
            let reason = if self.expired {
                "no QUIC connection started"
            } else {
                "done"
            };
            let _ = self.stream.close(1000, reason);
        }
    }
}

/// Readiness-set key of the listener; a pipe's key is its slot.
const LISTENER_KEY: u64 = u64::MAX;

/// Registrations taken from the readiness set per turn.
const READY_PER_TURN: u32 = 256;

/// New streams a `listen` server accepts per turn of its loop.
const ACCEPTS_PER_TURN: usize = 64;

/// How long after its accept a pipe whose QUIC handshake has not
/// completed may be closed to make room at `--max-connections`: a client
/// on loopback or a LAN completes its handshake well within it, and the
/// pipes a burst of reconnecting clients brings are serviced (their
/// first datagrams read) before any of them can be closed.
const EVICT_AFTER: Duration = Duration::from_secs(1);

/// The event loop. Pipes wait in one readiness set (`receive`, and `send`
/// while a datagram waits for room) and their deadlines in one ordered
/// set; each turn services only the pipes that are ready or due, then
/// sleeps in one `poll` on the set and one clock pollable for the nearest
/// deadline. So a wake-up costs O(pipes ready or due), not O(pipes): it
/// serviced every pipe and polled every pipe's pollables (the red team of
/// 2026-12-03, sixth round: with 2,000 idle connections a live round trip
/// took 2.5 ms, 23x the 108 us with none).
struct Loop<A: App> {
    /// Pipes by slot; a free slot is `None`.
    pipes: Vec<Option<Pipe<A>>>,
    free: Vec<usize>,
    /// Pipes in use.
    live: usize,
    set: ReadinessSet,
    ready: Pollable,
    /// Each pipe's next deadline, earliest first.
    deadlines: BTreeSet<(Instant, usize)>,
    /// Pipes to service next turn (new, or reported by the set).
    due: Vec<usize>,
    /// Server pipes by accept time, oldest first: the ones to close
    /// when every place is taken, while their QUIC handshake has not
    /// completed. Entries whose pipe connected or left are dropped as
    /// they reach the front, and the list is compacted past twice the
    /// live pipes, so it stays O(live).
    unconnected: VecDeque<(Instant, usize)>,
    /// An extra time to wake up at (the server's next chance to make
    /// room), beside the pipes' deadlines.
    wake_at: Option<Instant>,
    timer: Option<(Instant, Pollable)>,
    wakeups: Wakeups,
}

impl<A: App> Loop<A> {
    fn new() -> Loop<A> {
        let set = ReadinessSet::new();
        let ready = set.subscribe();
        Loop {
            pipes: Vec::new(),
            free: Vec::new(),
            live: 0,
            set,
            ready,
            deadlines: BTreeSet::new(),
            due: Vec::new(),
            unconnected: VecDeque::new(),
            wake_at: None,
            timer: None,
            wakeups: Wakeups::default(),
        }
    }

    /// Adds a pipe, registered for `receive` and serviced next turn.
    ///
    /// Errors: the readiness set refused the registration (full).
    fn add(&mut self, pipe: Pipe<A>) -> Result<(), ErrorCode> {
        let slot = self.free.pop().unwrap_or_else(|| {
            self.pipes.push(None);
            self.pipes.len() - 1
        });
        if let Err(e) =
            self.set
                .register_message_stream(&pipe.stream, Interest::Receive, slot as u64)
        {
            self.free.push(slot);
            return Err(e);
        }
        if let Some(at) = pipe.accepted_at {
            if self.unconnected.len() > 2 * self.live + 64 {
                let pipes = &self.pipes;
                self.unconnected
                    .retain(|&(at, slot)| Self::unconnected_at(pipes, slot, at));
            }
            self.unconnected.push_back((at, slot));
        }
        self.pipes[slot] = Some(pipe);
        self.live += 1;
        self.due.push(slot);
        Ok(())
    }

    /// Whether the pipe in `slot` is the one accepted at `at` and its
    /// QUIC handshake has not completed.
    fn unconnected_at(pipes: &[Option<Pipe<A>>], slot: usize, at: Instant) -> bool {
        pipes[slot]
            .as_ref()
            .is_some_and(|p| p.accepted_at == Some(at) && !p.link.is_connected())
    }

    /// The slot of the oldest pipe whose handshake has not completed,
    /// if it was accepted at least [`EVICT_AFTER`] before `now`;
    /// otherwise when the oldest one will be (`None`: there is none).
    fn evictable(&mut self, now: Instant) -> Result<usize, Option<Instant>> {
        while let Some(&(at, slot)) = self.unconnected.front() {
            if !Self::unconnected_at(&self.pipes, slot, at) {
                self.unconnected.pop_front();
                continue;
            }
            let from = at + EVICT_AFTER;
            return if from <= now {
                Ok(slot)
            } else {
                Err(Some(from))
            };
        }
        Err(None)
    }

    /// Makes room for a new connection at `now`: closes the oldest pipe
    /// whose QUIC handshake has not completed [`EVICT_AFTER`] after its
    /// accept, and returns it (to report). Each candidate is serviced
    /// first, so a client whose datagrams are already waiting is not
    /// closed for want of a look. A peer that opens message streams and
    /// sends nothing, or only a first datagram, cannot keep clients out.
    /// `None`: no pipe may be closed now.
    fn make_room(&mut self, now: Instant) -> Option<Pipe<A>> {
        while let Ok(slot) = self.evictable(now) {
            if let Some(finished) = self.service(slot, now) {
                return Some(finished);
            }
            if !Self::unconnected_at(&self.pipes, slot, self.unconnected[0].0) {
                // It connected on that look: `evictable` drops it.
                continue;
            }
            self.unconnected.pop_front();
            let mut p = self.remove(slot);
            p.start_within = None;
            p.expired = true;
            p.link.fail(Error::PipeClosed(
                "closed to make room for a new connection: its QUIC handshake had not completed"
                    .into(),
            ));
            return Some(p);
        }
        None
    }

    /// Takes the pipe in `slot` out of the loop: its registrations, its
    /// deadline and its slot.
    fn remove(&mut self, slot: usize) -> Pipe<A> {
        let p = self.pipes[slot].take().expect("a live slot");
        let key = slot as u64;
        self.set.deregister(key, Interest::Receive);
        self.set.deregister(key, Interest::Send);
        if let Some(d) = p.deadline {
            self.deadlines.remove(&(d, slot));
        }
        self.free.push(slot);
        self.live -= 1;
        p
    }

    /// The pipe in `slot`, if any (client mode has one, in slot 0).
    fn pipe(&mut self, slot: usize) -> Option<&mut Pipe<A>> {
        self.pipes.get_mut(slot).and_then(Option::as_mut)
    }

    /// Services the pipes that are ready or due and returns the finished
    /// ones (out of the set); then, when none finished and no deadline is
    /// already due, blocks until the set or the timer is ready.
    fn turn(&mut self) -> Vec<Pipe<A>> {
        let now = Instant::now();
        let mut work = std::mem::take(&mut self.due);
        while let Some(&(d, slot)) = self.deadlines.first() {
            if d > now {
                break;
            }
            self.deadlines.pop_first();
            if let Some(p) = self.pipe(slot) {
                p.deadline = None;
            }
            work.push(slot);
        }
        work.sort_unstable();
        work.dedup();
        let mut finished = Vec::new();
        for slot in work {
            if let Some(p) = self.service(slot, now) {
                finished.push(p);
            }
        }
        if !finished.is_empty() {
            return finished;
        }
        let next = self.deadlines.first().map(|&(d, _)| d);
        if let Some(d) = tether_quic::earliest(next, self.wake_at) {
            let now = Instant::now();
            if d <= now {
                return finished;
            }
            // Re-arm only when the deadline moved.
            if self.timer.as_ref().is_none_or(|(t, _)| *t != d) {
                let ns = d.duration_since(now).as_nanos().min(u64::MAX as u128) as u64;
                self.timer = Some((d, monotonic_clock::subscribe_duration(ns)));
            }
        } else {
            self.timer = None;
        }
        // The set's pollable is ready at once while any registration is,
        // so one `poll`, then one `take-ready`, per turn.
        let t0 = Instant::now();
        let w = &mut self.wakeups;
        let mut list: Vec<&Pollable> = vec![&self.ready];
        if let Some((_, t)) = &self.timer {
            list.push(t);
        }
        let ready = sdk::poll(&list);
        w.blocked_ns += t0.elapsed().as_nanos() as u64;
        w.total += 1;
        if ready.contains(&1) {
            w.timer += 1;
            self.timer = None;
        }
        let events = self.set.take_ready(READY_PER_TURN);
        let (mut message, mut send, mut other) = (false, false, false);
        for (key, interest) in events {
            if key == LISTENER_KEY {
                other = true;
                continue;
            }
            match interest {
                Interest::Send => send = true,
                _ => message = true,
            }
            self.due.push(key as usize);
        }
        if message {
            w.message += 1;
        } else if send {
            w.send += 1;
        } else if other {
            w.other += 1;
        }
        finished
    }

    /// Services the pipe in `slot` at `now`: takes it out of the loop and
    /// returns it once finished, otherwise brings its `send` registration
    /// and its deadline up to date.
    fn service(&mut self, slot: usize, now: Instant) -> Option<Pipe<A>> {
        let Loop {
            pipes,
            set,
            deadlines,
            ..
        } = self;
        let p = pipes.get_mut(slot)?.as_mut()?;
        p.service(now);
        let key = slot as u64;
        if !p.finished() {
            if p.pending != p.watch_send {
                p.watch_send = p.pending;
                if !p.pending {
                    set.deregister(key, Interest::Send);
                } else if let Err(e) = set.register_message_stream(&p.stream, Interest::Send, key) {
                    p.link.fail(Error::PipeClosed(format!(
                        "readiness set: {}",
                        sdk::describe(&e)
                    )));
                    p.send_failed = true;
                    p.ended = true;
                }
            }
            let next = p.next_deadline();
            if next != p.deadline {
                if let Some(old) = p.deadline.take() {
                    deadlines.remove(&(old, slot));
                }
                if let Some(d) = next {
                    deadlines.insert((d, slot));
                }
                p.deadline = next;
            }
            if !p.finished() {
                return None;
            }
        }
        Some(self.remove(slot))
    }
}

fn identity(f: &Flags) -> Result<Identity, Error> {
    match (&f.cert, &f.key) {
        (Some(c), Some(k)) => Ok(Identity {
            cert_der: c.clone(),
            key_der: k.clone(),
        }),
        _ => Err(Error::Config(
            "the server needs --cert HEX and --key HEX".into(),
        )),
    }
}

fn server(args: &[String]) -> Result<(), Error> {
    let f = parse(args)?;
    let config = config::server_config(&identity(&f)?, &f.options)?;
    let new_link = || Link::server_with(Instant::now(), config.clone(), &f.options);
    // `listen`: connections start at the floor windows and share the rest.
    let floor = Options {
        receive_window: Windows::FLOOR.receive.min(f.options.receive_window),
        send_window: Windows::FLOOR.send.min(f.options.send_window),
        datagram_buffer: SHARED_DATAGRAM_BUFFER.min(f.options.datagram_buffer),
        ..f.options.clone()
    };
    let shared_config = config::server_config(&identity(&f)?, &floor)?;
    let budget = SharedBudget::new(f.window_budget);
    let full = Windows::of(&f.options);
    let new_shared_link = || Link::server_with(Instant::now(), shared_config.clone(), &floor);
    let mut events: Loop<EchoServer> = Loop::new();
    let mut served = 0u64;
    let mut report = |p: Pipe<EchoServer>| {
        served += 1;
        let s = p.app.stats();
        let end = if p.link.closed_cleanly() {
            "ok".to_string()
        } else {
            match p.link.error() {
                Some(e) => format!("{} {e}", e.kind()),
                None => "ok".to_string(),
            }
        };
        println!(
            "served {served} streams={} bytes={} datagrams={} services={} end={end}",
            s.streams, s.bytes, s.datagrams, p.services
        );
        p.close();
        served
    };
    match f.positional.first().map(String::as_str) {
        Some("dial") => {
            let url = f
                .positional
                .get(1)
                .ok_or_else(|| Error::Config("server dial needs a URL".into()))?;
            let stream = sdk::connect(url, &[]).map_err(|e| ws_error(&e))?;
            events
                .add(Pipe::new(stream, new_link(), EchoServer::new()))
                .map_err(|e| ws_error(&e))?;
            loop {
                if let Some(p) = events.turn().pop() {
                    let failed = !p.link.closed_cleanly() && p.link.error().is_some();
                    let error = p.link.error().cloned();
                    report(p);
                    return match error {
                        Some(e) if failed => Err(e),
                        _ => Ok(()),
                    };
                }
            }
        }
        Some("listen") => {
            let addr = f
                .positional
                .get(1)
                .ok_or_else(|| Error::Config("server listen needs ADDR".into()))?;
            let listener = websocket::listen(
                addr,
                &ListenOptions {
                    subprotocols: Vec::new(),
                },
            )
            .map_err(|e| Error::Config(format!("listen on {addr}: {}", sdk::describe(&e))))?;
            println!("listening {}", listener.local_address());
            let mut accepted = 0u64;
            let mut listening = false;
            loop {
                // Accept while under --max (in all) and --max-connections
                // (at once), at most ACCEPTS_PER_TURN per turn so a flood
                // of new streams cannot starve the live ones. At the cap
                // a new stream takes the place of the oldest one whose
                // handshake has not completed (`Loop::make_room`); if no
                // pipe may be closed yet, new streams wait in the host's
                // accept queue, whose own bound then applies.
                let now = Instant::now();
                events.wake_at = None;
                let mut taken = 0;
                let want = loop {
                    if f.max != 0 && accepted >= f.max {
                        break false;
                    }
                    if events.live as u64 >= f.max_connections {
                        match events.evictable(now) {
                            Ok(_) => {}
                            Err(at) => {
                                events.wake_at = at;
                                break false;
                            }
                        }
                    }
                    if taken == ACCEPTS_PER_TURN {
                        break true;
                    }
                    let stream = match listener.accept() {
                        Ok(Some(stream)) => stream,
                        Ok(None) => break true,
                        Err(e) => return Err(ws_error(&e)),
                    };
                    accepted += 1;
                    taken += 1;
                    if events.live as u64 >= f.max_connections {
                        match events.make_room(now) {
                            Some(p) => {
                                if report(p) == f.max {
                                    return Ok(());
                                }
                            }
                            None => {
                                // Every candidate turned out connected.
                                let _ = stream.close(1000, "too many connections");
                                continue;
                            }
                        }
                    }
                    let pipe = Pipe::accepted(
                        stream,
                        new_shared_link(),
                        EchoServer::sharing(budget.clone(), full),
                        now,
                        f.options.idle_timeout,
                    );
                    if let Err(e) = events.add(pipe) {
                        // The readiness set is full: this stream is closed
                        // (dropped), the others go on.
                        eprintln!("quic-echo: readiness set: {}", sdk::describe(&e));
                    }
                };
                if want != listening {
                    listening = want;
                    if want {
                        events
                            .set
                            .register_listener(&listener, Interest::Accept, LISTENER_KEY)
                            .map_err(|e| ws_error(&e))?;
                    } else {
                        events.set.deregister(LISTENER_KEY, Interest::Accept);
                    }
                }
                for p in events.turn() {
                    if report(p) == f.max {
                        return Ok(());
                    }
                }
            }
        }
        _ => Err(Error::Config("server listen ADDR | server dial URL".into())),
    }
}

/// Runs one client connection on a new message stream to completion,
/// printing its reports. Returns the wake-up counters.
fn connect_and_run(
    url: &str,
    config: &tether_quic::quinn_proto::ClientConfig,
    f: &Flags,
    phases: Vec<Phase>,
) -> Result<Wakeups, Error> {
    let stream = sdk::connect(url, &[]).map_err(|e| ws_error(&e))?;
    let name = f
        .name
        .as_deref()
        .unwrap_or(tether_quic::DEFAULT_SERVER_NAME);
    let link = Link::client_with(Instant::now(), config.clone(), name, &f.options)?;
    let mut events = Loop::new();
    events
        .add(Pipe::new(stream, link, Client::new(phases)))
        .map_err(|e| ws_error(&e))?;
    // Wake-ups counted from the start of each idle phase.
    let mut idle_start: Option<Wakeups> = None;
    loop {
        let finished = events.turn();
        let w = events.wakeups;
        let pipe = match finished.into_iter().next() {
            Some(p) => p,
            None => {
                let p = events.pipe(0).expect("the one pipe is live");
                while let Some(r) = p.app.poll_report() {
                    println!("{}", r.to_line());
                }
                if p.app.is_idle() {
                    idle_start.get_or_insert(w);
                } else if let Some(s) = idle_start.take() {
                    println!(
                        "{}",
                        Wakeups {
                            total: w.total - s.total,
                            timer: w.timer - s.timer,
                            message: w.message - s.message,
                            send: w.send - s.send,
                            other: w.other - s.other,
                            blocked_ns: w.blocked_ns - s.blocked_ns,
                        }
                        .line()
                    );
                }
                continue;
            }
        };
        let mut pipe = pipe;
        while let Some(r) = pipe.app.poll_report() {
            println!("{}", r.to_line());
        }
        if let Some(e) = pipe.app.error() {
            return Err(e.clone());
        }
        if let Some(e) = pipe.link.error()
            && !pipe.link.closed_cleanly()
        {
            return Err(e.clone());
        }
        pipe.close();
        return Ok(w);
    }
}

fn client(args: &[String]) -> Result<(), Error> {
    let f = parse(args)?;
    let url = f
        .positional
        .first()
        .ok_or_else(|| Error::Config("client needs a URL".into()))?
        .clone();
    let ca =
        f.ca.as_ref()
            .ok_or_else(|| Error::Config("the client needs --ca HEX".into()))?;
    let phases = f.positional[1..]
        .iter()
        .map(|p| p.parse())
        .collect::<Result<Vec<Phase>, Error>>()?;
    let config = config::client_config(ca, &f.options)?;
    for _ in 0..f.handshakes {
        connect_and_run(&url, &config, &f, Vec::new())?;
    }
    let w = connect_and_run(&url, &config, &f, phases)?;
    println!("{}", w.line());
    Ok(())
}
