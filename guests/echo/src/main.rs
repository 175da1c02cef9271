//! The echo guest.
//!
//! ```text
//! echo client URL [SUBPROTOCOL...]   echo every message until the peer closes
//! echo server ADDR [MAX_CONNECTIONS] [poll-all] [--tcp TCP_ADDR]
//!                                    accept streams and echo them (0 = forever);
//!                                    --tcp: also TCP byte streams on TCP_ADDR
//! echo ping URL PHASE...             measure round trips against an echo server
//! ```
//!
//! `ping` phases (sizes in bytes), each printing one line to stdout:
//! - `rtt:N:SIZE`: N one-at-a-time round trips; prints `rtt NS NS ...`
//! - `nagle:N:SIZE`: N times two back-to-back sends, then wait for both
//!   echoes; prints `nagle NS NS ...`
//! - `pipeline:N:SIZE:WINDOW`: N messages with up to WINDOW in flight,
//!   sent in bursts with `send-many` and taken with `receive-many` (one
//!   host call per burst); prints `pipeline N SIZE ELAPSED_NS`
//!
//! The host's native baseline (`tether bench echo`) runs the same phases.
//!
//! `server` waits on one readiness set (`tether:streams/readiness`): a
//! wake-up costs O(ready streams), not O(open streams). A full set (the
//! host's `readiness_set_entries`) closes only the new stream; the server
//! serves on. `poll-all` selects
//! the old loop instead, which passes every stream's pollable to
//! `wasi:io/poll` and pumps every stream on each wake-up (O(open streams)),
//! kept so that `tether bench load` can show both in one run.
//!
//! With `--tcp TCP_ADDR` the readiness-set server also accepts TCP byte
//! streams there and echoes their bytes; when the peer half-closes, it
//! echoes what is left, half-closes too and drops the stream at once (the
//! host delivers what is still queued). `MAX_CONNECTIONS` counts both kinds.
//! Both server loops echo WebSocket messages in bursts (`receive-many`,
//! `send-many`).

mod phase;

use std::collections::VecDeque;
use std::process::ExitCode;
use std::time::Instant;

use phase::{Phase, samples_line};
use tether_guest_sdk::{
    self as sdk, ErrorCode, Interest, ListenOptions, Message, MessageStream, Pollable,
    ReadinessSet, StreamError, tcp, websocket,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let result = match args.get(1).map(String::as_str) {
        Some("client") if args.len() >= 3 => client(&args[2], &args[3..]),
        Some("server") if args.len() >= 3 => {
            let mut rest = args[3..].iter().map(String::as_str).peekable();
            let max = rest
                .next_if(|n| n.parse::<u64>().is_ok())
                .map_or(0, |n| n.parse().unwrap());
            let poll_all = rest.next_if_eq(&"poll-all").is_some();
            let tcp = match (rest.next(), rest.next()) {
                (Some("--tcp"), Some(addr)) if !poll_all => Some(addr),
                (None, _) => None,
                _ => return usage(),
            };
            if poll_all {
                server_poll_all(&args[2], max)
            } else {
                server(&args[2], max, tcp)
            }
        }
        Some("ping") if args.len() >= 4 => ping(&args[2], &args[3..]),
        _ => return usage(),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("echo: {}", sdk::describe(&e));
            println!("error {} {}", sdk::error_kind(&e), sdk::describe(&e));
            ExitCode::FAILURE
        }
    }
}

fn usage() -> ExitCode {
    eprintln!(
        "usage: echo client URL [SUBPROTOCOL...] | echo server ADDR [MAX_CONNECTIONS] [poll-all] [--tcp TCP_ADDR] | echo ping URL PHASE..."
    );
    ExitCode::from(2)
}

fn client(url: &str, subprotocols: &[String]) -> Result<(), ErrorCode> {
    let protocols: Vec<&str> = subprotocols.iter().map(String::as_str).collect();
    let stream = sdk::connect(url, &protocols)?;
    println!(
        "connected protocol={}",
        stream.subprotocol().unwrap_or_default()
    );
    let rx = stream.subscribe_receive();
    let tx = stream.subscribe_send();
    let (mut count, mut bytes) = (0u64, 0u64);
    let end = loop {
        match sdk::receive_blocking(&stream, &rx) {
            Ok(Some(m)) => {
                bytes += len(&m) as u64;
                count += 1;
                if let Err(e) = sdk::send_blocking(&stream, &tx, &m) {
                    break Err(e);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let info = stream.close_info();
    println!(
        "echoed {count} messages {bytes} bytes close={} reason={}",
        info.as_ref().map(|c| c.code).unwrap_or(0),
        info.map(|c| c.reason).unwrap_or_default()
    );
    end
}

fn len(m: &Message) -> usize {
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) => b.len(),
    }
}

/// Binds the server's listener and says where.
fn listen(addr: &str) -> Result<websocket::Listener, ErrorCode> {
    let options = ListenOptions {
        subprotocols: Vec::new(),
    };
    let listener = websocket::listen(addr, &options)?;
    eprintln!("echo: listening on {}", listener.local_address());
    Ok(listener)
}

/// The readiness-set key of the listener; streams use their slot index.
const LISTENER_KEY: u64 = u64::MAX;
/// The readiness-set key of the TCP listener (`--tcp`).
const TCP_LISTENER_KEY: u64 = u64::MAX - 1;

/// A stream being echoed: messages received but not sent yet wait in
/// `pending` while the outbound buffer is full.
struct Echoing {
    stream: MessageStream,
    pending: VecDeque<Message>,
}

/// A TCP byte stream being echoed: bytes read but not written yet wait in
/// `pending` while the output stream grants nothing; `eof` once the peer
/// half-closed.
struct TcpEchoing {
    conn: sdk::Connection,
    pending: Vec<u8>,
    eof: bool,
}

/// What a slot of the readiness-set server holds.
enum Slot {
    Ws(Echoing),
    Tcp(TcpEchoing),
}

impl Slot {
    /// Echoes what is ready; false once the stream is over (drop it).
    fn pump(&mut self) -> bool {
        match self {
            Slot::Ws(c) => pump(&c.stream, &mut c.pending),
            Slot::Tcp(c) => pump_tcp(c),
        }
    }

    /// Bytes received and not yet echoed.
    fn pending_bytes(&self) -> usize {
        match self {
            Slot::Ws(c) => c.pending.iter().map(len).sum(),
            Slot::Tcp(c) => c.pending.len(),
        }
    }

    /// Whether the slot waits to send rather than to receive.
    fn blocked(&self) -> bool {
        match self {
            Slot::Ws(c) => !c.pending.is_empty(),
            Slot::Tcp(c) => !c.pending.is_empty(),
        }
    }

    /// The interest of waiting to receive (`receive`) or to send, as the
    /// stream's kind names it.
    fn interest(&self, receive: bool) -> Interest {
        match (self, receive) {
            (Slot::Ws(_), true) => Interest::Receive,
            (Slot::Ws(_), false) => Interest::Send,
            (Slot::Tcp(_), true) => Interest::Read,
            (Slot::Tcp(_), false) => Interest::Write,
        }
    }

    /// Registers the stream under `key`, waiting to receive or to send.
    fn register(&self, set: &ReadinessSet, receive: bool, key: u64) -> Result<(), ErrorCode> {
        let on = self.interest(receive);
        match self {
            Slot::Ws(c) => set.register_message_stream(&c.stream, on, key),
            Slot::Tcp(c) => set.register_byte_stream(&c.conn.stream, on, key),
        }
    }

    fn deregister(&self, set: &ReadinessSet, receive: bool, key: u64) {
        set.deregister(key, self.interest(receive));
    }
}

/// Bytes read from a TCP stream at once.
const TCP_READ_BYTES: u64 = 64 << 10;

/// Moves what is ready through one TCP stream without blocking. Returns
/// false once the stream is over: failed, or the peer half-closed and
/// every byte was echoed (then this side half-closes too).
fn pump_tcp(c: &mut TcpEchoing) -> bool {
    loop {
        while !c.pending.is_empty() {
            match c.conn.output.check_write() {
                Ok(0) => return true,
                Ok(n) => {
                    let n = (n as usize).min(c.pending.len());
                    if c.conn.output.write(&c.pending[..n]).is_err() {
                        return false;
                    }
                    c.pending.drain(..n);
                }
                Err(_) => return false,
            }
        }
        if c.eof {
            let _ = c.conn.stream.shutdown_send();
            return false;
        }
        match c.conn.input.read(TCP_READ_BYTES) {
            Ok(b) if b.is_empty() => return true,
            Ok(b) => c.pending = b,
            Err(StreamError::Closed) => c.eof = true,
            Err(_) => return false,
        }
    }
}

/// Bytes of unsent echoes the server holds over all its streams: peers
/// that send large messages and never read would otherwise fill the
/// guest's memory with their echoes, one message each, until it traps and
/// every client loses the server (the red team's eighth round: 6 such
/// peers with 60 MiB messages). A stream whose echoes the host cannot take
/// and that brings the total past this is closed (WebSocket: 1013, try
/// again later) and its echoes dropped; the others are served on. So the
/// server holds at most this plus one message.
const PENDING_BUDGET_BYTES: usize = 32 << 20;

/// Echo server on one readiness set: the listener under
/// [`LISTENER_KEY`], the TCP listener (if any) under [`TCP_LISTENER_KEY`],
/// each stream under its slot. A stream is registered for `receive`
/// (`read`) while it has nothing pending, and for `send` (`write`) instead
/// while its outbound buffer is full (so a stalled peer is not read from).
fn server(addr: &str, max_connections: u64, tcp_addr: Option<&str>) -> Result<(), ErrorCode> {
    let listener = listen(addr)?;
    let set = ReadinessSet::new();
    set.register_listener(&listener, Interest::Accept, LISTENER_KEY)?;
    let tcp_listener = match tcp_addr {
        Some(a) => {
            let l = tcp::listen(a)?;
            eprintln!("echo: listening for TCP on {}", l.local_address());
            set.register_byte_listener(&l, Interest::Accept, TCP_LISTENER_KEY)?;
            Some(l)
        }
        None => None,
    };
    let ready = set.subscribe();
    let mut slots: Vec<Option<Slot>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut finished = 0u64;
    let mut refused = 0u64;
    // Bytes of unsent echoes over all streams (PENDING_BUDGET_BYTES).
    let mut held = 0usize;
    let mut over_budget = 0u64;
    // Takes a free slot for a new stream and registers it for `receive`.
    // A full readiness set (`readiness_set_entries`) closes only the new
    // stream (dropped here; a WebSocket peer hears 1000): the server keeps
    // serving the others, and takes new ones again once some end. Logged
    // at powers of two, so a flood cannot flood the log.
    let mut add = |slots: &mut Vec<Option<Slot>>, free: &mut Vec<usize>, s: Slot| {
        let slot = free.pop().unwrap_or_else(|| {
            slots.push(None);
            slots.len() - 1
        });
        if let Err(e) = s.register(&set, true, slot as u64) {
            free.push(slot);
            refused += 1;
            if refused.is_power_of_two() {
                eprintln!("echo: {refused} stream(s) closed at accept so far: {e:?}");
            }
            return;
        }
        slots[slot] = Some(s);
    };
    while max_connections == 0 || finished < max_connections {
        for (key, _) in sdk::wait_ready(&set, &ready, 256) {
            if key == LISTENER_KEY {
                while let Some(stream) = listener.accept()? {
                    let s = Slot::Ws(Echoing {
                        stream,
                        pending: VecDeque::new(),
                    });
                    add(&mut slots, &mut free, s);
                }
                continue;
            }
            if key == TCP_LISTENER_KEY {
                let Some(l) = &tcp_listener else { continue };
                while let Some((stream, input, output)) = l.accept()? {
                    let conn = sdk::Connection {
                        stream,
                        input,
                        output,
                    };
                    let s = Slot::Tcp(TcpEchoing {
                        conn,
                        pending: Vec::new(),
                        eof: false,
                    });
                    add(&mut slots, &mut free, s);
                }
                continue;
            }
            let slot = key as usize;
            let Some(c) = slots.get_mut(slot).and_then(Option::as_mut) else {
                continue;
            };
            let was_blocked = c.blocked();
            held -= c.pending_bytes();
            let alive = c.pump();
            let over = alive && c.blocked() && held + c.pending_bytes() > PENDING_BUDGET_BYTES;
            if over {
                if let Slot::Ws(w) = c {
                    let _ = w.stream.close(1013, "echo buffer full");
                }
                over_budget += 1;
                if over_budget.is_power_of_two() {
                    eprintln!(
                        "echo: {over_budget} stream(s) closed so far: their echoes would have held more than {PENDING_BUDGET_BYTES} bytes"
                    );
                }
            }
            // Registered for what it waits on now. The entry just freed
            // makes room; should the set refuse anyway, only this stream
            // ends.
            let keep = alive
                && !over
                && (c.blocked() == was_blocked || {
                    c.deregister(&set, !was_blocked, key);
                    c.register(&set, was_blocked, key).is_ok()
                });
            if keep {
                held += c.pending_bytes();
            } else {
                // Dropping the stream removes its registrations.
                slots[slot] = None;
                free.push(slot);
                finished += 1;
            }
        }
    }
    Ok(())
}

struct Conn {
    stream: MessageStream,
    rx: Pollable,
    tx: Pollable,
    pending: VecDeque<Message>,
}

/// The loop before readiness sets: every stream's pollable in every `poll`
/// call and every stream pumped on every wake-up, O(open streams) each.
fn server_poll_all(addr: &str, max_connections: u64) -> Result<(), ErrorCode> {
    let listener = listen(addr)?;
    let accept_ready = listener.subscribe();
    let mut conns: Vec<Conn> = Vec::new();
    let mut finished = 0u64;
    while max_connections == 0 || finished < max_connections {
        let mut list: Vec<&Pollable> = vec![&accept_ready];
        for c in &conns {
            list.push(if c.pending.is_empty() { &c.rx } else { &c.tx });
        }
        sdk::poll(&list);
        while let Some(stream) = listener.accept()? {
            let (rx, tx) = (stream.subscribe_receive(), stream.subscribe_send());
            conns.push(Conn {
                stream,
                rx,
                tx,
                pending: VecDeque::new(),
            });
        }
        conns.retain_mut(|c| {
            let alive = pump(&c.stream, &mut c.pending);
            if !alive {
                finished += 1;
            }
            alive
        });
    }
    Ok(())
}

/// Messages one `receive-many` asks for.
const BATCH_MESSAGES: u32 = 256;

/// Payload bytes one `send-many` passes at most (but always one message):
/// the host copies the whole list before it knows how much fits its
/// outbound buffer (1 MiB by default), so a burst stays well under it.
const BURST_BYTES: usize = 256 << 10;

/// How many messages from the front of `messages` make one `send-many`
/// burst: at least one, then as many as fit [`BURST_BYTES`].
fn burst(messages: &[Message]) -> usize {
    let mut bytes = 0;
    let n = messages
        .iter()
        .take_while(|m| {
            bytes += len(m);
            bytes <= BURST_BYTES
        })
        .count();
    n.max(1).min(messages.len())
}

/// Moves what is ready through one connection without blocking: one
/// `receive-many` and one `send-many` per burst. Returns false once the
/// connection is over.
fn pump(stream: &MessageStream, pending: &mut VecDeque<Message>) -> bool {
    loop {
        while !pending.is_empty() {
            let front = pending.make_contiguous();
            match stream.send_many(&front[..burst(front)]) {
                Ok(n) => drop(pending.drain(..n as usize)),
                Err(ErrorCode::WouldBlock) => return true,
                Err(_) => return false,
            }
        }
        match stream.receive_many(BATCH_MESSAGES, BURST_BYTES as u64) {
            Ok(ms) if ms.is_empty() => return true,
            Ok(ms) => pending.extend(ms),
            Err(_) => return false,
        }
    }
}

fn ping(url: &str, phases: &[String]) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    let rx = stream.subscribe_receive();
    let tx = stream.subscribe_send();
    for phase in phases {
        match Phase::parse(phase).map_err(ErrorCode::InvalidArgument)? {
            Phase::RoundTrips {
                name,
                n,
                size,
                sends,
            } => {
                let message = Message::Binary(vec![0x5a; size]);
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let t0 = Instant::now();
                    for _ in 0..sends {
                        sdk::send_blocking(&stream, &tx, &message)?;
                    }
                    for _ in 0..sends {
                        sdk::receive_blocking(&stream, &rx)?.ok_or(ErrorCode::Closed)?;
                    }
                    samples.push(t0.elapsed().as_nanos() as u64);
                }
                println!("{}", samples_line(name, &samples));
            }
            Phase::Pipeline { n, size, window } => {
                // One window of messages, built once: each burst passes a
                // slice of it to `send-many`.
                let messages = vec![Message::Binary(vec![0xa5; size]); window];
                let t0 = Instant::now();
                let (mut sent, mut received) = (0usize, 0usize);
                while received < n {
                    let mut blocked = false;
                    while sent < n && sent - received < window {
                        let room = (n - sent).min(window - (sent - received));
                        let batch = &messages[..room];
                        match stream.send_many(&batch[..burst(batch)]) {
                            Ok(k) => sent += k as usize,
                            Err(ErrorCode::WouldBlock) => {
                                blocked = true;
                                break;
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    // At most `window` are in flight: one call takes every
                    // echo waiting.
                    let got = stream.receive_many(window as u32, u64::MAX)?;
                    if let Some(m) = got.iter().find(|m| len(m) != size) {
                        return Err(ErrorCode::ProtocolError(format!(
                            "echo of {} bytes, sent {size}",
                            len(m)
                        )));
                    }
                    received += got.len();
                    let progressed = !got.is_empty();
                    if !progressed && received < n {
                        if blocked {
                            sdk::poll(&[&rx, &tx])
                        } else {
                            sdk::poll(&[&rx])
                        };
                    }
                }
                println!("pipeline {n} {size} {}", t0.elapsed().as_nanos());
            }
        }
    }
    stream.close(1000, "done")?;
    // Wait for the closing handshake so the server sees a clean close.
    while sdk::receive_blocking(&stream, &rx)?.is_some() {}
    Ok(())
}
