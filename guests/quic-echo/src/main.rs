//! The QUIC echo guest: a quinn-proto endpoint (rustls, *ring*) inside the
//! component, its datagrams carried by a Tether message stream, one binary
//! WebSocket message per QUIC datagram.
//!
//! ```text
//! quic-echo server listen ADDR [--max N] --cert HEX --key HEX [OPTIONS]
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
//! stops after N, 0 = forever; `dial`: one connection over a stream it
//! dials). Certificates are DER in hex; the client verifies the server's
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
//! `done`, or `error KIND MESSAGE`.
//!
//! Timers are event-driven: the guest sleeps in one `poll` on its streams
//! and a monotonic-clock pollable armed for the connection's next deadline
//! (re-armed only when the deadline moves), never on a periodic tick.

mod host_aead;

use std::process::ExitCode;
use std::time::Instant;

use tether_guest_sdk::{
    self as sdk, ErrorCode, ListenOptions, Message, MessageStream, Pollable, monotonic_clock,
    websocket,
};
use tether_quic::{App, Client, EchoServer, Error, Identity, Link, Options, Phase, config};

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
}

fn parse(args: &[String]) -> Result<Flags, Error> {
    let mut f = Flags::default();
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
    rx: Pollable,
    tx: Pollable,
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
}

impl<A: App> Pipe<A> {
    fn new(stream: MessageStream, link: Link, app: A) -> Pipe<A> {
        let (rx, tx) = (stream.subscribe_receive(), stream.subscribe_send());
        Pipe {
            stream,
            rx,
            tx,
            link,
            app,
            pending: false,
            out: Message::Binary(Vec::with_capacity(1500)),
            ended: false,
            send_failed: false,
        }
    }

    /// One pass, without blocking: every waiting datagram in, due timers,
    /// the application, every datagram out (until backpressure).
    fn service(&mut self, now: Instant) {
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
                    return;
                }
            }
        }
    }

    fn deadline(&mut self) -> Option<Instant> {
        tether_quic::earliest(self.link.poll_timeout(), self.app.poll_timeout())
    }

    /// Finished: the application is done and everything was sent, or the
    /// message stream ended.
    fn finished(&self) -> bool {
        self.ended || (self.app.is_done() && !self.pending)
    }

    /// Closes the message stream with 1000 after every queued datagram.
    /// The host finishes the closing handshake; nothing waits for it here
    /// (a server with other connections must not block on one peer).
    fn close(self) {
        if !self.ended {
            let _ = self.stream.close(1000, "done");
        }
    }
}

/// The event loop: services every pipe, then sleeps in one `poll` on their
/// streams, `extra` (a listener) and one clock pollable for the nearest
/// deadline.
struct Loop<A: App> {
    pipes: Vec<Pipe<A>>,
    timer: Option<(Instant, Pollable)>,
    wakeups: Wakeups,
}

impl<A: App> Loop<A> {
    fn new() -> Loop<A> {
        Loop {
            pipes: Vec::new(),
            timer: None,
            wakeups: Wakeups::default(),
        }
    }

    /// Services every pipe once and returns the finished ones; then, when
    /// no deadline is already due, blocks until a stream, `extra` or the
    /// timer is ready.
    fn turn(&mut self, extra: Option<&Pollable>) -> Vec<Pipe<A>> {
        let now = Instant::now();
        for p in &mut self.pipes {
            p.service(now);
        }
        let mut finished = Vec::new();
        let mut i = 0;
        while i < self.pipes.len() {
            if self.pipes[i].finished() {
                finished.push(self.pipes.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if !finished.is_empty() {
            return finished;
        }
        let deadline = self.pipes.iter_mut().filter_map(Pipe::deadline).min();
        if let Some(d) = deadline {
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
        let mut list: Vec<&Pollable> = Vec::with_capacity(2 * self.pipes.len() + 2);
        for p in &self.pipes {
            list.push(&p.rx);
        }
        let sends = list.len();
        for p in &self.pipes {
            if p.pending {
                list.push(&p.tx);
            }
        }
        let extras = list.len();
        if let Some(e) = extra {
            list.push(e);
        }
        let timer_index = list.len();
        if let Some((_, t)) = &self.timer {
            list.push(t);
        }
        let t0 = Instant::now();
        let ready = sdk::poll(&list);
        let w = &mut self.wakeups;
        w.blocked_ns += t0.elapsed().as_nanos() as u64;
        w.total += 1;
        let ready = |f: &dyn Fn(usize) -> bool| ready.iter().any(|&r| f(r as usize));
        if ready(&|r| r == timer_index) {
            w.timer += 1;
            self.timer = None;
        }
        if ready(&|r| r < sends) {
            w.message += 1;
        } else if ready(&|r| r >= sends && r < extras) {
            w.send += 1;
        } else if ready(&|r| r >= extras && r < timer_index) {
            w.other += 1;
        }
        finished
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
            "served {served} streams={} bytes={} datagrams={} end={end}",
            s.streams, s.bytes, s.datagrams
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
                .pipes
                .push(Pipe::new(stream, new_link(), EchoServer::new()));
            loop {
                if let Some(p) = events.turn(None).pop() {
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
            let accept = listener.subscribe();
            let mut accepted = 0u64;
            loop {
                while f.max == 0 || accepted < f.max {
                    match listener.accept() {
                        Ok(Some(stream)) => {
                            accepted += 1;
                            events
                                .pipes
                                .push(Pipe::new(stream, new_link(), EchoServer::new()));
                        }
                        Ok(None) => break,
                        Err(e) => return Err(ws_error(&e)),
                    }
                }
                let more = f.max == 0 || accepted < f.max;
                for p in events.turn(more.then_some(&accept)) {
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
        .pipes
        .push(Pipe::new(stream, link, Client::new(phases)));
    // Wake-ups counted from the start of each idle phase.
    let mut idle_start: Option<Wakeups> = None;
    loop {
        let finished = events.turn(None);
        let w = events.wakeups;
        let pipe = match finished.into_iter().next() {
            Some(p) => p,
            None => {
                let p = &mut events.pipes[0];
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
