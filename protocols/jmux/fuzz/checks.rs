//! The checks behind the `tether-jmux` fuzz targets, one function per
#![allow(dead_code)] // each fuzz target uses one check
//! target: each takes the fuzzer's bytes and panics when a property fails.
//!
//! Shared by the cargo-fuzz targets (`fuzz_targets/*.rs`, nightly) and the
//! corpus replay test (`tests/fuzz_corpus.rs`, stable), both through
//! `#[path]`, so CI replays every committed input through exactly the
//! check the fuzzer ran.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use tether_jmux::proxy::http::{self, ProxyRequest};
use tether_jmux::proxy::socks5::{self, Socks5Handshake};
use tether_jmux::{
    ChannelId, ChannelState, Config, DATA_OVERHEAD, Decoder, Destination, Event, MAX_MESSAGE_SIZE,
    MIN_WINDOW, Message, ReasonCode, SenderConfig, Session, SessionError,
};

/// Whether to print each step (`FUZZ_TRACE=1`), to read a failing input.
fn trace() -> bool {
    static TRACE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("FUZZ_TRACE").is_some())
}

/// The target names, as the corpus folders are named.
pub const TARGETS: &[&str] = &["decode", "session", "socks5", "http_proxy"];

/// Runs the check of target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "decode" => decode(data),
        "session" => session(data),
        "socks5" => socks5(data),
        "http_proxy" => http_proxy(data),
        other => panic!("no fuzz target `{other}`"),
    }
}

// ----- decode ---------------------------------------------------------------

/// `decode`: arbitrary bytes, cut into arbitrary chunks (the first byte is
/// the chunk size), through the incremental [`Decoder`] and a session.
/// Nothing may panic; every decoded message survives encode -> decode
/// unchanged; chunking never changes what is decoded; a destination URL
/// that parses prints as a URL that parses to the same destination.
pub fn decode(data: &[u8]) {
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).max(1);

    let chunked = decode_all(bytes.chunks(cut));
    let whole = decode_all(std::iter::once(bytes));
    assert_eq!(chunked, whole, "chunking changed what was decoded");
    for msg in &whole.0 {
        let mut out = Vec::new();
        msg.encode(&mut out).expect("a decoded message re-encodes");
        assert_eq!(out.len(), msg.encoded_len());
        let again = Message::decode(&out).expect("re-encoded bytes decode");
        assert_eq!(&again, msg);
        if let Message::Open {
            destination_url, ..
        } = msg
            && let Ok(dest) = Destination::parse(destination_url)
        {
            assert!(!dest.scheme.is_empty() && !dest.host.is_empty());
            let printed = dest.to_string();
            assert_eq!(
                Destination::parse(&printed).as_ref(),
                Ok(&dest),
                "`{destination_url}` parses, prints as `{printed}`, which parses differently"
            );
        }
    }

    // The same bytes as peer input to a session with one channel open.
    let mut session = Session::new(Config::default()).unwrap();
    let now = Instant::now();
    let _ = session.open(&Destination::tcp("fuzz", 1), now);
    let mut t = now;
    for chunk in bytes.chunks(cut) {
        t += Duration::from_micros(7);
        if session.handle_input(t, chunk).is_err() {
            break;
        }
        // As a driver does: take the events, write, and decode what a
        // pause held back before the next input (a bounded number of
        // times: a flush held back by the coalescing rules moves nothing
        // within one instant).
        for _ in 0..256 {
            while let Some(ev) = session.poll_event() {
                if let Event::OpenRequest { id, .. } = ev {
                    let _ = session.accept(id);
                }
            }
            if session.poll_flush(t) {
                let n = session.transmit().len();
                session.advance_transmit(n);
            }
            if session.wants_input() {
                break;
            }
            if session.resume_input(t).is_err() {
                return;
            }
        }
    }
}

/// Every message a decoder yields from `chunks`, and whether it stopped on
/// an error.
fn decode_all<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> (Vec<Message>, bool) {
    let mut dec = Decoder::new();
    let mut msgs = Vec::new();
    for chunk in chunks {
        dec.push(chunk);
        loop {
            match dec.next_message() {
                Ok(Some(msg)) => msgs.push(msg),
                Ok(None) => break,
                Err(e) => {
                    // Sticky.
                    assert_eq!(dec.next_message(), Err(e));
                    return (msgs, true);
                }
            }
        }
    }
    (msgs, false)
}

// ----- session --------------------------------------------------------------

/// One step of the `session` target: a message from the peer (played by
/// the check, which keeps its own view of every window) or a call by the
/// local driver.
#[derive(Debug)]
enum Step {
    /// The peer opens a channel.
    PeerOpen {
        window: u32,
        max_packet: u16,
    },
    /// The peer answers one of our pending OPENs (`ch` picks which).
    PeerOpenSuccess {
        ch: u8,
        window: u32,
        max_packet: u16,
    },
    /// The peer refuses one of our pending OPENs.
    PeerOpenFailure {
        ch: u8,
        reason: u32,
    },
    /// The peer grants us more send credit on an open channel.
    PeerAdjust {
        ch: u8,
        amount: u32,
    },
    /// The peer sends DATA within the window it was granted (clamped).
    PeerData {
        ch: u8,
        len: u16,
    },
    /// The peer sends DATA of any length to any id (may overrun).
    PeerDataAny {
        id: u8,
        len: u16,
    },
    /// The peer sends EOF.
    PeerEof {
        ch: u8,
    },
    /// The peer sends CLOSE.
    PeerClose {
        ch: u8,
    },
    /// A message to an id the peer never learnt (any type).
    PeerStray {
        id: u8,
        kind: u8,
    },
    /// The local driver opens a channel.
    Open,
    Accept(u8),
    Reject(u8),
    Send {
        ch: u8,
        len: u16,
    },
    Recv {
        ch: u8,
        len: u16,
    },
    Shutdown(u8),
    Abort(u8),
    /// A drain point: flush, write out (maybe partially) and deliver.
    Flush {
        partial: u16,
    },
    /// Drain everything the session wants to send.
    DrainAll,
    /// The clock moves on (microseconds); timers run.
    Tick(u16),
}

impl Step {
    /// One step from the fuzzer's bytes (`arbitrary` without its derive,
    /// whose feature would rebuild wasmtime, see Cargo.toml).
    fn read(u: &mut Unstructured) -> Result<Step> {
        Ok(match u.choose_index(19)? {
            0 => Step::PeerOpen {
                window: u.arbitrary()?,
                max_packet: u.arbitrary()?,
            },
            1 => Step::PeerOpenSuccess {
                ch: u.arbitrary()?,
                window: u.arbitrary()?,
                max_packet: u.arbitrary()?,
            },
            2 => Step::PeerOpenFailure {
                ch: u.arbitrary()?,
                reason: u.arbitrary()?,
            },
            3 => Step::PeerAdjust {
                ch: u.arbitrary()?,
                amount: u.arbitrary()?,
            },
            4 => Step::PeerData {
                ch: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            5 => Step::PeerDataAny {
                id: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            6 => Step::PeerEof { ch: u.arbitrary()? },
            7 => Step::PeerClose { ch: u.arbitrary()? },
            8 => Step::PeerStray {
                id: u.arbitrary()?,
                kind: u.arbitrary()?,
            },
            9 => Step::Open,
            10 => Step::Accept(u.arbitrary()?),
            11 => Step::Reject(u.arbitrary()?),
            12 => Step::Send {
                ch: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            13 => Step::Recv {
                ch: u.arbitrary()?,
                len: u.arbitrary()?,
            },
            14 => Step::Shutdown(u.arbitrary()?),
            15 => Step::Abort(u.arbitrary()?),
            16 => Step::Flush {
                partial: u.arbitrary()?,
            },
            17 => Step::DrainAll,
            _ => Step::Tick(u.arbitrary()?),
        })
    }
}

#[derive(Debug)]
struct SessionInput {
    initial_window: u32,
    max_packet_size: u16,
    receive_budget: u32,
    max_channels: u8,
    window_adjust_threshold: u32,
    sender_capacity: u16,
    open_timeout_ms: Option<u8>,
    steps: Vec<Step>,
}

impl SessionInput {
    fn read(data: &[u8]) -> Result<SessionInput> {
        let mut u = Unstructured::new(data);
        let mut input = SessionInput {
            initial_window: u.arbitrary()?,
            max_packet_size: u.arbitrary()?,
            receive_budget: u.arbitrary()?,
            max_channels: u.arbitrary()?,
            window_adjust_threshold: u.arbitrary()?,
            sender_capacity: u.arbitrary()?,
            open_timeout_ms: u.arbitrary()?,
            steps: Vec::new(),
        };
        while !u.is_empty() {
            input.steps.push(Step::read(&mut u)?);
        }
        Ok(input)
    }
}

/// What the peer knows about one channel of ours (keyed by our id, the
/// recipient id of every message the peer sends on it).
#[derive(Debug, Clone)]
struct PeerView {
    /// The peer's id for the channel.
    remote: u32,
    /// Payload bytes the peer may still send us (our grants minus its DATA;
    /// below 0 when DATA to a guessed id overtook a WINDOW ADJUST).
    window: i64,
    /// Payload bytes we may still send the peer (its grants minus our DATA).
    credit: u64,
    /// A WINDOW ADJUST went past 2^32 - 1 while our DATA was in flight:
    /// the session clamped its credit before subtracting that DATA, the
    /// peer after, so the two may differ (the session ahead) until the
    /// next full drain re-syncs them.
    credit_clamped: bool,
    /// Largest DATA payload the peer accepts from us.
    max_payload: usize,
    /// The peer sent EOF or CLOSE: it sends no more DATA.
    peer_done: bool,
    close_from_peer: bool,
    close_from_us: bool,
}

/// The peer side of the `session` target.
#[derive(Default)]
struct Peer {
    /// Channels both sides know, by our id.
    chans: HashMap<u32, PeerView>,
    /// Our OPENs the peer has not answered: (our id, window we granted).
    pending_opens: Vec<(u32, u32)>,
    /// The peer's OPENs not answered yet: remote id -> (window, max payload).
    peer_opens: HashMap<u32, (u32, usize)>,
    /// Remote id -> our id, for channels both sides know.
    by_remote: HashMap<u32, u32>,
    /// DATA the peer sent to an id it guessed, accepted on a channel whose
    /// OPEN SUCCESS is still on its way (its window is counted from there),
    /// by the peer's (remote) id of that channel. Keyed by remote id, not
    /// by ours: our id may still name an older channel in the peer's view
    /// (its CLOSE still on its way) while the session already reused it
    /// (JMUX spec: an id is free once CLOSE went both ways).
    early: HashMap<u32, u64>,
    next_remote: u32,
}

impl Peer {
    fn pick(&self, ch: u8) -> Option<u32> {
        let mut ids: Vec<u32> = self.chans.keys().copied().collect();
        ids.sort_unstable();
        (!ids.is_empty()).then(|| ids[usize::from(ch) % ids.len()])
    }

    /// Takes one message from the session, checking what it may send.
    fn receive(&mut self, config: &Config, msg: Message) {
        match msg {
            Message::Open {
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
                destination_url,
            } => {
                assert_eq!(maximum_packet_size, config.max_packet_size);
                assert!(initial_window_size > 0, "OPEN with an empty window");
                assert!(initial_window_size <= config.initial_window);
                assert!(Destination::parse(&destination_url).is_ok());
                self.forget(sender_channel_id);
                self.pending_opens
                    .push((sender_channel_id, initial_window_size));
            }
            Message::OpenSuccess {
                recipient_channel_id,
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
            } => {
                let (credit, max_payload) = self
                    .peer_opens
                    .remove(&recipient_channel_id)
                    .expect("OPEN SUCCESS answers an OPEN of the peer, once");
                assert_eq!(maximum_packet_size, config.max_packet_size);
                assert!(initial_window_size > 0 && initial_window_size <= config.initial_window);
                let early = self.early.remove(&recipient_channel_id).unwrap_or(0);
                self.forget(sender_channel_id);
                self.by_remote
                    .insert(recipient_channel_id, sender_channel_id);
                self.chans.insert(
                    sender_channel_id,
                    PeerView {
                        remote: recipient_channel_id,
                        window: i64::from(initial_window_size) - early as i64,
                        credit: u64::from(credit),
                        credit_clamped: false,
                        max_payload,
                        peer_done: false,
                        close_from_peer: false,
                        close_from_us: false,
                    },
                );
            }
            Message::OpenFailure {
                recipient_channel_id,
                ..
            } => {
                assert!(
                    self.peer_opens.remove(&recipient_channel_id).is_some(),
                    "OPEN FAILURE answers an OPEN of the peer, once"
                );
            }
            Message::WindowAdjust {
                recipient_channel_id,
                window_adjustment,
            } => {
                let v = self.view_of_remote(recipient_channel_id, "WINDOW ADJUST");
                assert!(!v.close_from_us, "WINDOW ADJUST after our CLOSE");
                v.window += i64::from(window_adjustment);
                assert!(
                    v.window <= i64::from(config.initial_window),
                    "granted window {} exceeds the initial window {}",
                    v.window,
                    config.initial_window
                );
            }
            Message::Data {
                recipient_channel_id,
                payload,
            } => {
                let v = self.view_of_remote(recipient_channel_id, "DATA");
                assert!(!v.close_from_us, "DATA after our CLOSE");
                assert!(
                    payload.len() as u64 <= v.credit,
                    "DATA of {} bytes beyond the peer's window of {}",
                    payload.len(),
                    v.credit
                );
                assert!(
                    payload.len() <= v.max_payload,
                    "DATA of {} bytes beyond the peer's maximum payload {}",
                    payload.len(),
                    v.max_payload
                );
                assert!(!payload.is_empty(), "empty DATA");
                v.credit -= payload.len() as u64;
            }
            Message::Eof {
                recipient_channel_id,
            } => {
                let v = self.view_of_remote(recipient_channel_id, "EOF");
                assert!(!v.close_from_us, "EOF after our CLOSE");
            }
            Message::Close {
                recipient_channel_id,
            } => {
                let our = self.by_remote[&recipient_channel_id];
                let v = self.view_of_remote(recipient_channel_id, "CLOSE");
                assert!(!v.close_from_us, "CLOSE sent twice");
                v.close_from_us = true;
                if v.close_from_peer {
                    self.forget(our);
                }
            }
        }
    }

    fn view_of_remote(&mut self, remote: u32, what: &str) -> &mut PeerView {
        let our = *self
            .by_remote
            .get(&remote)
            .unwrap_or_else(|| panic!("{what} to remote id {remote}, which was never opened"));
        self.chans.get_mut(&our).expect("mapped")
    }

    /// Our id `id` starts a new life: drop what the peer knew of it.
    fn forget(&mut self, id: u32) {
        if let Some(v) = self.chans.remove(&id) {
            self.by_remote.remove(&v.remote);
        }
        self.pending_opens.retain(|(o, _)| *o != id);
    }
}

struct SessionCheck {
    s: Session,
    config: Config,
    peer: Peer,
    out: Decoder,
    now: Instant,
    floor: u64,
}

impl SessionCheck {
    fn feed(&mut self, msg: Message) -> Result<(), SessionError> {
        let mut bytes = Vec::new();
        msg.encode(&mut bytes)
            .expect("the check builds valid messages");
        let r = self.s.handle_input(self.now, &bytes);
        self.events();
        r
    }

    fn events(&mut self) {
        while let Some(ev) = self.s.poll_event() {
            if let Event::OpenRequest { id, .. } = ev {
                assert!(
                    self.s.channel(id).map(|c| c.state) == Some(ChannelState::Requested),
                    "{id} requested but not in the requested state"
                );
            }
        }
    }

    /// Moves what the session wrote to the peer.
    fn deliver(&mut self, bytes: &[u8]) {
        self.out.push(bytes);
        while let Some(msg) = self
            .out
            .next_message()
            .expect("the session emits valid JMUX")
        {
            if trace() {
                eprintln!("  session sent {msg:?}");
            }
            self.peer.receive(&self.config, msg);
        }
    }

    /// One drain point; writes out `partial` bytes (all when 0).
    fn flush(&mut self, partial: usize) {
        if self.s.poll_flush(self.now) {
            let pending = self.s.transmit().to_vec();
            assert!(!pending.is_empty(), "a due flush with nothing to send");
            let n = if partial == 0 {
                pending.len()
            } else {
                partial.min(pending.len())
            };
            self.s.advance_transmit(n);
            self.deliver(&pending[..n]);
        } else if self.s.sender().buffered() > 0 && self.s.transmit().is_empty() {
            assert!(
                self.s.next_deadline().is_some(),
                "unflushed bytes and no deadline: the driver would sleep forever"
            );
        }
        self.events();
    }

    /// Drains everything, advancing the clock past every held-back flush.
    fn drain_all(&mut self) {
        for _ in 0..64 {
            self.flush(0);
            if self.s.sender().buffered() == 0 && !self.s.is_output_blocked() {
                return;
            }
            self.now += Duration::from_millis(2);
        }
        panic!("output did not drain");
    }

    /// The invariants that hold after every step.
    /// After a full drain nothing is in flight: a channel whose credit was
    /// clamped takes the session's figure and is checked exactly again.
    fn resync_clamped_credit(&mut self) {
        for (id, v) in self.peer.chans.iter_mut() {
            if v.credit_clamped
                && let Some(c) = self.s.channel(ChannelId(*id))
            {
                v.credit = c.send_credit;
                v.credit_clamped = false;
            }
        }
    }

    fn check(&self, drained: bool) {
        let cfg = &self.config;
        assert!(
            self.s.sender().buffered() <= cfg.sender.capacity.max(MAX_MESSAGE_SIZE),
            "output buffer {} beyond its bound",
            self.s.sender().buffered()
        );
        let mut live = 0;
        let mut exposure = 0u64;
        for id in 0..16 {
            let Some(c) = self.s.channel(ChannelId(id)) else {
                continue;
            };
            live += 1;
            assert!(
                c.readable as u64 + c.recv_window <= u64::from(cfg.initial_window),
                "channel {id}: {} buffered + {} window beyond the initial window {}",
                c.readable,
                c.recv_window,
                cfg.initial_window
            );
            if !(c.eof_received || c.close_received) {
                exposure += c.recv_window;
            }
            exposure += c.readable as u64;
            let open_for_input = c.state == ChannelState::Open
                && !c.eof_received
                && !c.close_received
                && !c.close_sent;
            if open_for_input && c.readable == 0 {
                assert!(
                    c.recv_window > 0,
                    "channel {id}: drained, open, and no window left: it stalls"
                );
            }
            if drained
                && c.state == ChannelState::Open
                && let Some(v) = self.peer.chans.get(&id)
                && !v.close_from_us
                && !v.close_from_peer
            {
                assert_eq!(
                    v.window, c.recv_window as i64,
                    "channel {id}: the peer and the session disagree on the window"
                );
                if v.credit_clamped {
                    // Clamped with DATA in flight: the session clamped first
                    // and may be ahead of the peer, never behind, and never
                    // past 2^32 - 1.
                    assert!(
                        v.credit <= c.send_credit && c.send_credit <= u64::from(u32::MAX),
                        "channel {id}: clamped credit {} against the peer's {}",
                        c.send_credit,
                        v.credit
                    );
                } else {
                    assert_eq!(
                        v.credit, c.send_credit,
                        "channel {id}: the peer and the session disagree on the credit"
                    );
                }
            }
        }
        assert_eq!(live, self.s.channel_count());
        assert!(live <= cfg.max_channels as usize, "{live} channels in use");
        assert!(
            exposure <= cfg.receive_budget + live as u64 * self.floor,
            "{exposure} bytes exposed, budget {} + {live} x floor {}",
            cfg.receive_budget,
            self.floor
        );
    }
}

/// `session`: arbitrary peer messages and local calls on one [`Session`]
/// with arbitrary (valid) limits. The check plays the peer and keeps its
/// own view of every window. Asserted after every step: no panic; the only
/// fatal error is DATA beyond the window, and only when the DATA really
/// was beyond it; what we send is valid JMUX, never beyond the peer's
/// window or maximum packet size, never after our CLOSE; no channel holds
/// more than the initial window; exposure (windows granted plus bytes
/// buffered) stays within the receive budget plus one window floor per
/// channel; a drained open channel always has window left; after a full
/// drain the peer's view of every window and credit equals the session's;
/// the output buffer stays bounded and never waits without a deadline.
pub fn session(data: &[u8]) {
    let Ok(input) = SessionInput::read(data) else {
        return;
    };
    let config = Config {
        initial_window: input.initial_window.max(1),
        max_packet_size: input.max_packet_size.max(9),
        max_message_size: MAX_MESSAGE_SIZE,
        window_adjust_threshold: input.window_adjust_threshold,
        receive_budget: u64::from(input.receive_budget.max(1)),
        max_channels: u32::from(input.max_channels % 8) + 1,
        open_timeout: input
            .open_timeout_ms
            .map(|ms| Duration::from_millis(u64::from(ms))),
        sender: SenderConfig {
            capacity: usize::from(input.sender_capacity).max(1024),
            ..SenderConfig::default()
        },
        ..Config::default()
    };
    let floor = u64::from(config.initial_window).min(
        ((usize::from(config.max_packet_size) - DATA_OVERHEAD) as u64).max(u64::from(MIN_WINDOW)),
    );
    let mut h = SessionCheck {
        s: Session::new(config.clone()).expect("valid config"),
        config,
        peer: Peer {
            next_remote: 1000,
            ..Peer::default()
        },
        out: Decoder::new(),
        now: Instant::now(),
        floor,
    };
    let payload = bytes::Bytes::from(vec![0xA5u8; usize::from(u16::MAX)]);
    let mut buf = vec![0u8; usize::from(u16::MAX)];
    for step in input.steps {
        if trace() {
            eprintln!("step {step:?}");
        }
        h.now += Duration::from_micros(7);
        let mut drained = false;
        match step {
            Step::PeerOpen { window, max_packet } => {
                let remote = h.peer.next_remote;
                h.peer.next_remote += 1;
                let max_payload = usize::from(max_packet).saturating_sub(DATA_OVERHEAD);
                if max_payload > 0 {
                    h.peer.peer_opens.insert(remote, (window, max_payload));
                }
                let before = h.s.channel_count();
                h.feed(Message::Open {
                    sender_channel_id: remote,
                    initial_window_size: window,
                    maximum_packet_size: max_packet,
                    destination_url: "tcp://fuzz.example:1".to_owned(),
                })
                .expect("OPEN is never fatal");
                if max_payload == 0 {
                    // Refused at once with OPEN FAILURE.
                    assert_eq!(h.s.channel_count(), before);
                    h.peer.peer_opens.insert(remote, (window, 0));
                }
            }
            Step::PeerOpenSuccess {
                ch,
                window,
                max_packet,
            } => {
                if h.peer.pending_opens.is_empty() {
                    continue;
                }
                let i = usize::from(ch) % h.peer.pending_opens.len();
                let (ours, granted) = h.peer.pending_opens.remove(i);
                let remote = h.peer.next_remote;
                h.peer.next_remote += 1;
                h.feed(Message::OpenSuccess {
                    recipient_channel_id: ours,
                    sender_channel_id: remote,
                    initial_window_size: window,
                    maximum_packet_size: max_packet,
                })
                .expect("OPEN SUCCESS is never fatal");
                h.peer.by_remote.insert(remote, ours);
                h.peer.chans.insert(
                    ours,
                    PeerView {
                        remote,
                        window: i64::from(granted),
                        credit: u64::from(window),
                        credit_clamped: false,
                        max_payload: usize::from(max_packet).saturating_sub(DATA_OVERHEAD),
                        peer_done: false,
                        close_from_peer: false,
                        close_from_us: false,
                    },
                );
            }
            Step::PeerOpenFailure { ch, reason } => {
                if h.peer.pending_opens.is_empty() {
                    continue;
                }
                let i = usize::from(ch) % h.peer.pending_opens.len();
                let (ours, _) = h.peer.pending_opens.remove(i);
                h.feed(Message::OpenFailure {
                    recipient_channel_id: ours,
                    reason_code: ReasonCode::from_u32(reason),
                    description: "fuzz".to_owned(),
                })
                .expect("OPEN FAILURE is never fatal");
            }
            Step::PeerAdjust { ch, amount } => {
                let Some(id) = h.peer.pick(ch) else { continue };
                let v = h.peer.chans.get_mut(&id).expect("picked");
                if v.close_from_peer {
                    continue;
                }
                // The session clamps credit at 2^32-1 (a window is a u32 on
                // the wire, JMUX spec), counting what it dropped.
                let sum = v.credit + u64::from(amount);
                v.credit = sum.min(u64::from(u32::MAX));
                let overflows = h.s.stats().window_overflows;
                h.feed(Message::WindowAdjust {
                    recipient_channel_id: id,
                    window_adjustment: amount,
                })
                .expect("WINDOW ADJUST is never fatal");
                if sum > u64::from(u32::MAX) || h.s.stats().window_overflows > overflows {
                    let v = h.peer.chans.get_mut(&id).expect("picked");
                    v.credit_clamped = true;
                }
            }
            Step::PeerData { ch, len } => {
                let Some(id) = h.peer.pick(ch) else { continue };
                let v = h.peer.chans.get(&id).expect("picked");
                if v.peer_done {
                    continue;
                }
                let len = usize::from(len)
                    .min(usize::try_from(v.window).unwrap_or(0))
                    .min(MAX_MESSAGE_SIZE - DATA_OVERHEAD);
                let before = h.s.channel(ChannelId(id));
                h.feed(Message::Data {
                    recipient_channel_id: id,
                    payload: payload.slice(..len),
                })
                .expect("DATA within the window is never fatal");
                h.peer.chans.get_mut(&id).expect("picked").window -= len as i64;
                if let Some(b) = before
                    && !b.close_sent
                {
                    let after = h.s.channel(ChannelId(id)).expect("still there");
                    assert_eq!(after.readable, b.readable + len, "DATA was not buffered");
                }
            }
            Step::PeerDataAny { id, len } => {
                let id = u32::from(id % 8);
                let len = usize::from(len).min(MAX_MESSAGE_SIZE - DATA_OVERHEAD);
                let before = h.s.channel(ChannelId(id));
                let r = h.feed(Message::Data {
                    recipient_channel_id: id,
                    payload: payload.slice(..len),
                });
                let accepts = before.as_ref().is_some_and(|c| {
                    c.state == ChannelState::Open
                        && !c.close_sent
                        && !c.eof_received
                        && !c.close_received
                });
                match r {
                    Err(SessionError::WindowExceeded { .. }) => {
                        let c = before.expect("refused by a channel");
                        assert!(accepts && len as u64 > c.recv_window);
                        return;
                    }
                    Err(e) => panic!("unexpected fatal error {e}"),
                    Ok(()) => {
                        if accepts {
                            let c = before.expect("accepted");
                            assert!(len as u64 <= c.recv_window);
                            // Charged to the channel that holds the id in
                            // the session now. The peer's view of the id
                            // may be an older channel, closed both ways in
                            // the session but its CLOSE not yet delivered;
                            // then the DATA counts for the new channel,
                            // whose OPEN SUCCESS is still on its way.
                            let remote = c.remote_id.expect("an open channel knows its peer id");
                            match h.peer.chans.get_mut(&id) {
                                Some(v) if v.remote == remote => v.window -= len as i64,
                                _ => *h.peer.early.entry(remote).or_default() += len as u64,
                            }
                        }
                    }
                }
            }
            Step::PeerEof { ch } => {
                let Some(id) = h.peer.pick(ch) else { continue };
                let v = h.peer.chans.get_mut(&id).expect("picked");
                if v.peer_done {
                    continue;
                }
                v.peer_done = true;
                h.feed(Message::Eof {
                    recipient_channel_id: id,
                })
                .expect("EOF is never fatal");
            }
            Step::PeerClose { ch } => {
                let Some(id) = h.peer.pick(ch) else { continue };
                let v = h.peer.chans.get_mut(&id).expect("picked");
                if v.close_from_peer {
                    continue;
                }
                v.close_from_peer = true;
                v.peer_done = true;
                if v.close_from_us {
                    h.peer.forget(id);
                }
                h.feed(Message::Close {
                    recipient_channel_id: id,
                })
                .expect("CLOSE is never fatal");
            }
            Step::PeerStray { id, kind } => {
                // Ids 200.. are never in use (at most 8 channels).
                let id = 200 + u32::from(id % 50);
                let msg = match kind % 5 {
                    0 => Message::OpenSuccess {
                        recipient_channel_id: id,
                        sender_channel_id: 7,
                        initial_window_size: 1,
                        maximum_packet_size: 100,
                    },
                    1 => Message::OpenFailure {
                        recipient_channel_id: id,
                        reason_code: ReasonCode::GeneralFailure,
                        description: String::new(),
                    },
                    2 => Message::WindowAdjust {
                        recipient_channel_id: id,
                        window_adjustment: u32::MAX,
                    },
                    3 => Message::Eof {
                        recipient_channel_id: id,
                    },
                    _ => Message::Close {
                        recipient_channel_id: id,
                    },
                };
                let before = h.s.channel_count();
                h.feed(msg).expect("stray messages are dropped");
                assert_eq!(h.s.channel_count(), before);
            }
            Step::Open => {
                let _ = h.s.open(&Destination::tcp("fuzz.example", 2), h.now);
            }
            Step::Accept(i) => {
                let _ = h.s.accept(ChannelId(u32::from(i % 8)));
            }
            Step::Reject(i) => {
                let _ = h.s.reject(
                    ChannelId(u32::from(i % 8)),
                    ReasonCode::GeneralFailure,
                    "no",
                );
            }
            Step::Send { ch, len } => {
                let id = ChannelId(u32::from(ch % 8));
                let before = h.s.channel(id);
                if let Ok(n) = h.s.send_data(id, &payload[..usize::from(len)], h.now) {
                    let c = before.expect("sent on a live channel");
                    assert!(n as u64 <= c.send_credit);
                    assert!(n <= usize::from(len));
                }
            }
            Step::Recv { ch, len } => {
                let id = ChannelId(u32::from(ch % 8));
                let buf = &mut buf[..usize::from(len)];
                let before = h.s.channel(id);
                if let Ok(n) = h.s.recv(id, buf) {
                    let c = before.expect("read from a live channel");
                    assert_eq!(n, c.readable.min(buf.len()));
                    assert!(buf[..n].iter().all(|b| *b == 0xA5));
                }
            }
            Step::Shutdown(i) => {
                let _ = h.s.shutdown(ChannelId(u32::from(i % 8)), h.now);
            }
            Step::Abort(i) => {
                let _ = h.s.abort(ChannelId(u32::from(i % 8)));
            }
            Step::Flush { partial } => h.flush(usize::from(partial)),
            Step::DrainAll => {
                h.drain_all();
                drained = true;
            }
            Step::Tick(us) => {
                h.now += Duration::from_micros(u64::from(us));
                h.s.handle_timeout(h.now);
                if h.s.poll_flush_busy(h.now) {
                    let pending = h.s.transmit().to_vec();
                    h.s.advance_transmit(pending.len());
                    h.deliver(&pending);
                }
            }
        }
        h.events();
        h.check(drained);
        if drained {
            h.resync_clamped_credit();
        }
    }
}

// ----- socks5 ---------------------------------------------------------------

/// `socks5`: client bytes (the first byte picks the chunk size) through the
/// SOCKS5 server handshake. No panic; chunking never changes the outcome,
/// the method selection sent back, or the bytes left over for the target;
/// a request names a non-empty host that a SOCKS5 request can carry back
/// (address type 1, 3 or 4) to the same destination; every error has the
/// reply RFC 1928 asks for.
pub fn socks5(data: &[u8]) {
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).max(1);
    let whole = socks5_run(std::iter::once(bytes));
    let chunked = socks5_run(bytes.chunks(cut));
    assert_eq!(whole, chunked, "chunking changed the handshake");
    let (out, outcome) = whole;
    assert!(out.is_empty() || out == [5, 0], "method selection {out:?}");
    match outcome {
        Some(Ok(req)) => {
            let d = &req.destination;
            assert!(d.is_tcp() && !d.host.is_empty());
            assert!(bytes.ends_with(&req.leftover));
            // The request encoded back names the same destination.
            let mut wire = vec![5, 1, 0, 5, 1, 0];
            match d.host.parse::<std::net::IpAddr>() {
                Ok(std::net::IpAddr::V4(ip)) => {
                    wire.push(1);
                    wire.extend_from_slice(&ip.octets());
                }
                Ok(std::net::IpAddr::V6(ip)) => {
                    wire.push(4);
                    wire.extend_from_slice(&ip.octets());
                }
                Err(_) => {
                    assert!(d.host.len() <= 255);
                    wire.push(3);
                    wire.push(d.host.len() as u8);
                    wire.extend_from_slice(d.host.as_bytes());
                }
            }
            wire.extend_from_slice(&d.port.to_be_bytes());
            let mut out = Vec::new();
            let again = Socks5Handshake::new()
                .feed(&wire, &mut out)
                .expect("a request re-encodes")
                .expect("complete");
            assert_eq!(&again.destination, d);
            for outcome in [None, Some(ReasonCode::from_u32(cut as u32))] {
                let r = socks5::reply(outcome);
                assert_eq!((r[0], r[2], r[3]), (5, 0, 1));
            }
        }
        Some(Err(e)) => {
            if let Some(reply) = e.reply() {
                assert_eq!(reply[0], 5);
                assert!(reply.len() == 2 || reply.len() == 10);
            }
            assert!(!e.to_string().is_empty());
        }
        None => {}
    }
}

type Socks5Outcome = Option<Result<socks5::Socks5Request, socks5::Socks5Error>>;

fn socks5_run<'a>(chunks: impl Iterator<Item = &'a [u8]>) -> (Vec<u8>, Socks5Outcome) {
    let mut hs = Socks5Handshake::new();
    let mut out = Vec::new();
    let mut chunks = chunks.peekable();
    while let Some(chunk) = chunks.next() {
        match hs.feed(chunk, &mut out) {
            Ok(None) => {}
            Ok(Some(mut req)) => {
                // The rest goes to the target.
                for rest in chunks.by_ref() {
                    req.leftover.extend_from_slice(rest);
                }
                return (out, Some(Ok(req)));
            }
            Err(e) => return (out, Some(Err(e))),
        }
    }
    (out, None)
}

// ----- http_proxy -----------------------------------------------------------

/// `http_proxy`: bytes as a proxy client's request head and what it sends
/// after it. No panic; the result for the bytes the head took is the
/// result for the whole buffer (an incremental reader sees the same
/// request); no shorter prefix yields a request; a destination has a
/// non-empty host without `/`, `@` or space and prints as a JMUX URL that
/// parses back to it; a forwarded head is one complete HTTP/1.x request in
/// origin form, without hop-by-hop fields, with exactly one `Connection`
/// field (`close` or `upgrade`); every refusal has a 400 or 431 response.
/// The bytes after a forwarded head go through its gate whole and in
/// chunks of the first byte's size, with the same result; bytes the gate
/// does not admit come after the request's end (the gate is closed or
/// holds for an upgrade), and a closed gate admits nothing more; the same
/// bytes as the origin's answer move an upgrade on, and a tunnel admits
/// everything. An `http::HeadReader` fed the bytes in pieces of the
/// first byte's size finds the same request on the piece that holds the
/// head's end, with the rest of that piece after it; it never finds a
/// request where the whole buffer has none, and holds at most
/// `MAX_HEAD` plus one piece.
pub fn http_proxy(data: &[u8]) {
    let Some((&cut, buf)) = data.split_first() else {
        return;
    };
    check_head_reader(buf, usize::from(cut).max(1));
    match http::parse_request(buf) {
        Ok(Some((req, n))) => {
            assert!(n <= buf.len());
            assert_eq!(
                http::parse_request(&buf[..n]),
                Ok(Some((req.clone(), n))),
                "the head alone parses differently"
            );
            let k = usize::from(cut) * n / 256;
            assert!(
                !matches!(http::parse_request(&buf[..k]), Ok(Some(_))),
                "a request in a {k}-byte prefix of a {n}-byte head"
            );
            let d = req.destination();
            assert!(d.is_tcp() && !d.host.is_empty());
            assert!(!d.host.contains(['/', '@', ' ']), "host {:?}", d.host);
            assert_eq!(Destination::parse(&d.to_string()).as_ref(), Ok(d));
            if let ProxyRequest::Forward { head, gate, .. } = &req {
                check_forwarded_head(head);
                check_gate(gate, &buf[n..], usize::from(cut).max(1));
            }
        }
        Ok(None) => assert!(buf.len() <= http::MAX_HEAD),
        Err(e) => {
            let resp = e.response();
            assert!(resp.starts_with(b"HTTP/1.1 400 ") || resp.starts_with(b"HTTP/1.1 431 "));
        }
    }
}

fn check_head_reader(buf: &[u8], piece: usize) {
    let whole = http::parse_request(buf);
    let mut reader = http::HeadReader::new();
    let mut fed = 0;
    for p in buf.chunks(piece) {
        fed += p.len();
        match reader.feed(p) {
            Ok(None) => assert!(reader.len() <= http::MAX_HEAD + piece),
            Ok(Some((req, rest))) => {
                let Ok(Some((want, n))) = &whole else {
                    panic!("the reader found {req:?}, the whole buffer {whole:?}");
                };
                assert_eq!(&req, want);
                assert!(
                    *n <= fed && fed - n < piece + 1,
                    "found late: head {n}, fed {fed}"
                );
                assert_eq!(rest, &buf[*n..fed]);
                return;
            }
            Err(e) => {
                assert!(
                    !matches!(whole, Ok(Some(_))),
                    "the reader refused ({e}) a request the whole buffer holds"
                );
                return;
            }
        }
    }
    assert!(
        !matches!(whole, Ok(Some(_))),
        "the reader missed the request of a {}-byte buffer",
        buf.len()
    );
}

/// What a gate admits of `rest`: the count, or `None` on a framing error.
fn admit_all<'a>(
    gate: &mut http::ForwardGate,
    pieces: impl Iterator<Item = &'a [u8]>,
) -> Option<usize> {
    let mut total = 0;
    for piece in pieces {
        let k = gate.admit(piece).ok()?;
        assert!(k <= piece.len());
        total += k;
        if k < piece.len() {
            break;
        }
    }
    Some(total)
}

fn check_gate(gate: &http::ForwardGate, rest: &[u8], cut: usize) {
    use http::GateState;
    let mut whole = gate.clone();
    let n = admit_all(&mut whole, std::iter::once(rest));
    let mut chunked = gate.clone();
    assert_eq!(
        admit_all(&mut chunked, rest.chunks(cut)),
        n,
        "chunking changed what the gate admits"
    );
    assert_eq!(chunked.state(), whole.state());
    match n {
        None => assert_eq!(whole.state(), GateState::Closed),
        Some(k) if k < rest.len() => assert!(
            matches!(
                whole.state(),
                GateState::Closed | GateState::AwaitingUpgrade
            ),
            "bytes refused in state {:?}",
            whole.state()
        ),
        Some(_) => {}
    }
    if whole.state() == GateState::Closed {
        assert_eq!(whole.admit(rest), Ok(0), "a closed gate admitted bytes");
    }
    // The same bytes as the origin's answer.
    let before = whole.state();
    whole.observe_response(rest);
    let after = whole.state();
    match before {
        GateState::AwaitingUpgrade => {}
        s => assert_eq!(after, s, "the origin's bytes moved a {s:?} gate"),
    }
    if after == GateState::Tunnel {
        assert_eq!(whole.admit(rest), Ok(rest.len()));
    }
}

fn check_forwarded_head(head: &[u8]) {
    assert!(head.ends_with(b"\r\n\r\n"));
    let mut headers = [httparse::EMPTY_HEADER; http::MAX_HEADERS + 1];
    let mut req = httparse::Request::new(&mut headers);
    let status = req.parse(head).unwrap_or_else(|e| {
        panic!(
            "forwarded head does not parse ({e}): {:?}",
            String::from_utf8_lossy(head)
        )
    });
    assert_eq!(
        status,
        httparse::Status::Complete(head.len()),
        "forwarded head is not exactly one head"
    );
    assert!(
        req.path.is_some_and(|p| p.starts_with('/')),
        "not origin form"
    );
    let mut connection = Vec::new();
    let upgrade = req
        .headers
        .iter()
        .any(|h| h.name.eq_ignore_ascii_case("connection") && h.value == b"upgrade");
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        assert!(
            ![
                "proxy-connection",
                "proxy-authorization",
                "keep-alive",
                "te",
                "trailer"
            ]
            .contains(&name.as_str()),
            "hop-by-hop field {name} forwarded"
        );
        assert!(
            upgrade || name != "upgrade",
            "Upgrade forwarded without Connection: upgrade"
        );
        if name == "connection" {
            connection.push(h.value.to_vec());
        }
    }
    assert!(
        connection == [b"close".to_vec()] || connection == [b"upgrade".to_vec()],
        "Connection fields {connection:?}"
    );
}
