//! The native QUIC peer: the same `tether-quic` protocol code as the
//! `quic-echo` guest, driven by tokio over a tokio-tungstenite WebSocket
//! with the same framing (one binary message = one QUIC datagram). Tests
//! and `tether bench quic` pair it with the guest in every combination.
//!
//! - [`NativeServer`]: a WebSocket listener on `127.0.0.1:0` on its own
//!   thread, an echo server per accepted stream;
//! - [`native_client`]: the measured client workload;
//! - [`guest_client_args`], [`guest_server_args`], [`parse_client_output`]:
//!   run the guest with the same options and read its results;
//! - [`Faults`]: a misbehaving peer for the negative tests.
//!
//! The driver is event-driven like the guest's: it sleeps until a message
//! arrives or the connection's next deadline (one re-armed tokio timer),
//! and a writer task drains a bounded queue of outgoing datagrams (full
//! queue = backpressure, the link keeps the datagram), flushing the socket
//! as soon as the queue is empty.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};

use crate::local_server::LocalServer;
use futures_util::{FutureExt, SinkExt, StreamExt};
use tether_quic::{
    App, Client, EchoServer, EchoStats, Error, Identity, Link, LinkStats, Options, Phase, Report,
    config,
};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// Datagrams queued for the writer task, at most.
const WRITE_QUEUE: usize = 256;

/// A misbehaving peer, for tests. The default behaves.
#[derive(Clone, Copy, Debug, Default)]
pub struct Faults {
    /// After every Nth datagram sent, also send junk: pseudo-random bytes,
    /// a truncated copy of the datagram, an empty binary message and a text
    /// message.
    pub junk_every: Option<u64>,
    /// Close the message stream (WebSocket close 1000, no QUIC close) once
    /// this many datagram bytes have arrived.
    pub close_after_bytes: Option<u64>,
    /// Accept the message stream, read everything and never answer (an
    /// absent QUIC peer behind a live WebSocket).
    pub silent: bool,
}

/// How one driven connection ended.
#[derive(Clone, Debug, Default)]
pub struct Ended {
    /// The failure, unless the connection ended cleanly.
    pub error: Option<Error>,
    /// Junk messages sent ([`Faults::junk_every`]).
    pub junk_sent: u64,
    /// The link's counters.
    pub stats: LinkStats,
}

fn pipe_error(e: impl std::fmt::Display) -> Error {
    Error::PipeClosed(e.to_string())
}

/// Runs `app` on `link` over `ws` until the application is done (and its
/// last datagrams are written) or the message stream ends.
pub async fn drive<A: App, S>(
    ws: WebSocketStream<S>,
    link: &mut Link,
    app: &mut A,
    faults: Faults,
) -> Ended
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (mut sink, mut stream) = ws.split();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Message>(WRITE_QUEUE);
    let writer = tokio::spawn(async move {
        while let Some(m) = rx.recv().await {
            sink.feed(m).await?;
            while let Ok(m) = rx.try_recv() {
                sink.feed(m).await?;
            }
            sink.flush().await?;
        }
        sink.close().await
    });
    let mut ended = Ended::default();
    let mut pending: Option<Message> = None;
    let mut sent = 0u64;
    let mut received_bytes = 0u64;
    let timer = tokio::time::sleep(Duration::from_secs(3600));
    tokio::pin!(timer);
    let mut armed: Option<Instant> = None;
    let mut writer_failed = false;
    let mut peer_closed = false;
    'outer: loop {
        let now = Instant::now();
        if link.poll_timeout().is_some_and(|t| t <= now) {
            link.handle_timeout(now);
        }
        app.pump(link, now);
        if !faults.silent && !writer_failed {
            loop {
                if pending.is_none() {
                    let Some(d) = link.poll_transmit(now) else {
                        break;
                    };
                    let d = bytes::Bytes::copy_from_slice(d);
                    sent += 1;
                    if let Some(n) = faults.junk_every
                        && sent.is_multiple_of(n)
                    {
                        for junk in junk(&d, sent) {
                            if tx.send(junk).await.is_err() {
                                break;
                            }
                            ended.junk_sent += 1;
                        }
                    }
                    pending = Some(Message::Binary(d));
                }
                match tx.try_send(pending.take().expect("set above")) {
                    Ok(()) => {}
                    Err(tokio::sync::mpsc::error::TrySendError::Full(m)) => {
                        pending = Some(m);
                        break;
                    }
                    Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                        // The peer's close frame (or a socket error) ended
                        // the writer: the reader below reports which.
                        writer_failed = true;
                        pending = None;
                        break;
                    }
                }
            }
        }
        if app.is_done() && pending.is_none() {
            break;
        }
        let deadline = tether_quic::earliest(link.poll_timeout(), app.poll_timeout());
        if let Some(d) = deadline
            && armed != Some(d)
        {
            timer.as_mut().reset(d.into());
            armed = Some(d);
        }
        tokio::select! {
            biased;
            m = stream.next() => {
                let mut next = Some(m);
                while let Some(m) = next.take() {
                    match m {
                        Some(Ok(Message::Binary(b))) => {
                            received_bytes += b.len() as u64;
                            if !faults.silent {
                                link.handle_datagram(Instant::now(), &b);
                            }
                            if faults.close_after_bytes.is_some_and(|n| received_bytes >= n) {
                                // Walk away mid-connection: no QUIC close.
                                link.fail(pipe_error(format!(
                                    "walked away after {received_bytes} bytes (fault injected)"
                                )));
                                break 'outer;
                            }
                        }
                        Some(Ok(Message::Close(frame))) => {
                            peer_closed = true;
                            if !link.is_closed() {
                                link.fail(pipe_error(format!("closed by the peer ({frame:?})")));
                            }
                            app.pump(link, Instant::now());
                            break 'outer;
                        }
                        Some(Ok(_)) => {}
                        Some(Err(e)) => {
                            if !link.is_closed() {
                                link.fail(pipe_error(e));
                            }
                            app.pump(link, Instant::now());
                            break 'outer;
                        }
                        None => {
                            if !link.is_closed() {
                                link.fail(pipe_error("the connection ended without a close frame"));
                            }
                            app.pump(link, Instant::now());
                            break 'outer;
                        }
                    }
                    next = stream.next().now_or_never();
                }
            }
            _ = &mut timer, if deadline.is_some() => { armed = None; }
            permit = tx.reserve(), if pending.is_some() => {
                if permit.is_err() {
                    writer_failed = true;
                    pending = None;
                }
            }
        }
    }
    let reason = if link.is_closed() {
        "done"
    } else {
        "walked away"
    };
    let _ = tx
        .send(Message::Close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: reason.into(),
        })))
        .await;
    drop(tx);
    // Read until the peer's close frame (reading drives the closing
    // handshake the writer waits on), at most 2 s; then the writer is done.
    if !peer_closed {
        let _ = tokio::time::timeout(Duration::from_secs(2), async {
            while let Some(Ok(m)) = stream.next().await {
                if m.is_close() {
                    break;
                }
            }
        })
        .await;
    }
    let _ = tokio::time::timeout(Duration::from_millis(100), writer).await;
    if !link.closed_cleanly() {
        ended.error = link.error().cloned();
    }
    ended.stats = link.stats();
    ended
}

fn junk(datagram: &[u8], seed: u64) -> Vec<Message> {
    let noise: Vec<u8> = (0..(seed as usize * 131) % 1400 + 1)
        .map(|i| (i as u64).wrapping_mul(0x9E37_79B9).wrapping_add(seed) as u8)
        .collect();
    vec![
        Message::Binary(noise.into()),
        Message::Binary(bytes::Bytes::copy_from_slice(
            &datagram[..datagram.len() / 2],
        )),
        Message::Binary(bytes::Bytes::new()),
        Message::Text("not a datagram".into()),
    ]
}

/// What a server did with one connection.
#[derive(Clone, Debug)]
pub struct Served {
    /// Streams, bytes and datagrams echoed.
    pub echo: EchoStats,
    /// How it ended.
    pub ended: Ended,
}

/// A native QUIC echo server behind a WebSocket listener on `127.0.0.1:0`,
/// on its own thread and runtime (a remote peer). Stopped when dropped.
pub struct NativeServer {
    served: Arc<Mutex<Vec<Served>>>,
    notify: Arc<tokio::sync::Notify>,
    server: LocalServer,
}

impl NativeServer {
    /// Starts serving with `identity`, `options` and `faults`.
    /// Errors: bind failure, a certificate rustls rejects.
    pub fn start(identity: &Identity, options: &Options, faults: Faults) -> anyhow::Result<Self> {
        let config = config::server_config(identity, options)?;
        options.transport()?;
        let served = Arc::new(Mutex::new(Vec::new()));
        let notify = Arc::new(tokio::sync::Notify::new());
        let (served2, notify2, options) = (served.clone(), notify.clone(), options.clone());
        let server = LocalServer::start("quic-server", move |listener| async move {
            loop {
                let Ok((tcp, _)) = listener.accept().await else {
                    continue;
                };
                let _ = tcp.set_nodelay(true);
                let (config, options) = (config.clone(), options.clone());
                let (served, notify) = (served2.clone(), notify2.clone());
                tokio::spawn(async move {
                    let ws_config = tether_host::websocket::ws_config(&Default::default());
                    let Ok(ws) =
                        tokio_tungstenite::accept_async_with_config(tcp, Some(ws_config)).await
                    else {
                        return;
                    };
                    let mut link = Link::server_with(Instant::now(), config, &options);
                    let mut app = EchoServer::new();
                    let ended = drive(ws, &mut link, &mut app, faults).await;
                    served.lock().unwrap().push(Served {
                        echo: app.stats(),
                        ended,
                    });
                    notify.notify_waiters();
                });
            }
        })?;
        Ok(NativeServer {
            served,
            notify,
            server,
        })
    }

    /// The listening address.
    pub fn addr(&self) -> SocketAddr {
        self.server.addr()
    }

    /// `ws://ADDR/quic`.
    pub fn url(&self) -> String {
        format!("ws://{}/quic", self.addr())
    }

    /// The connections that ended so far.
    pub fn served(&self) -> Vec<Served> {
        self.served.lock().unwrap().clone()
    }

    /// Waits until `n` connections have ended, at most `timeout`.
    /// Errors: the timeout passed first.
    pub async fn wait_served(&self, n: usize, timeout: Duration) -> anyhow::Result<Vec<Served>> {
        tokio::time::timeout(timeout, async {
            loop {
                let notified = self.notify.notified();
                tokio::pin!(notified);
                notified.as_mut().enable();
                let served = self.served();
                if served.len() >= n {
                    return served;
                }
                notified.await;
            }
        })
        .await
        .with_context(|| format!("the native server did not see {n} connections end"))
    }
}

/// The client's results: handshakes, phase reports, wake-up counts (guest
/// only), or the error that stopped it.
#[derive(Clone, Debug, Default)]
pub struct ClientRun {
    /// Handshake times: the handshake-only connections, then the measured
    /// connection's.
    pub handshakes: Vec<Duration>,
    /// The ALPN agreed on the last connection.
    pub alpn: String,
    /// Phase reports of the measured connection (no handshake).
    pub reports: Vec<Report>,
    /// Guest wake-ups during each idle phase.
    pub idle_wakeups: Vec<Wakeups>,
    /// Guest wake-ups over the whole measured connection.
    pub wakeups: Option<Wakeups>,
    /// `(kind, message)` of the failure (`tether_quic::Error::kind`).
    pub error: Option<(String, String)>,
}

impl ClientRun {
    /// Round-trip samples (ns) of every `rtt` phase.
    pub fn rtt_ns(&self) -> Vec<u64> {
        self.reports
            .iter()
            .flat_map(|r| match r {
                Report::Rtt { samples_ns, .. } => samples_ns.clone(),
                _ => Vec::new(),
            })
            .collect()
    }

    /// `(bytes, elapsed)` of every `stream` phase.
    pub fn streams(&self) -> Vec<(u64, Duration)> {
        self.reports
            .iter()
            .filter_map(|r| match r {
                Report::Stream { bytes, elapsed } => Some((*bytes, *elapsed)),
                _ => None,
            })
            .collect()
    }
}

/// A guest's wake-ups: returns from `poll`, by what was ready.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Wakeups {
    /// Every return from `poll`.
    pub total: u64,
    /// The deadline timer was ready.
    pub timer: u64,
    /// A message arrived.
    pub message: u64,
    /// Only outbound room.
    pub send: u64,
    /// Anything else (a listener).
    pub other: u64,
    /// Time spent blocked in `poll`, ns.
    pub blocked_ns: u64,
}

impl Wakeups {
    fn parse(line: &str) -> Option<Wakeups> {
        let mut w = Wakeups::default();
        for word in line.split_whitespace().skip(1) {
            let (k, v) = word.split_once('=')?;
            let v: u64 = v.parse().ok()?;
            match k {
                "total" => w.total = v,
                "timer" => w.timer = v,
                "message" => w.message = v,
                "send" => w.send = v,
                "other" => w.other = v,
                "blocked_ns" => w.blocked_ns = v,
                _ => {}
            }
        }
        Some(w)
    }
}

/// Reads the guest client's stdout (see the guest's docs).
pub fn parse_client_output(stdout: &str) -> ClientRun {
    let mut run = ClientRun::default();
    let mut pending_idle = false;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("error ") {
            let (kind, message) = rest.split_once(' ').unwrap_or((rest, ""));
            run.error = Some((kind.to_string(), message.to_string()));
        } else if line.starts_with("wakeups ") {
            if let Some(w) = Wakeups::parse(line) {
                if pending_idle {
                    run.idle_wakeups.push(w);
                    pending_idle = false;
                } else {
                    run.wakeups = Some(w);
                }
            }
        } else if let Some(r) = Report::parse_line(line) {
            match r {
                Report::Handshake { elapsed, alpn } => {
                    run.handshakes.push(elapsed);
                    run.alpn = alpn;
                }
                Report::Idle { .. } => {
                    pending_idle = true;
                    run.reports.push(r);
                }
                r => run.reports.push(r),
            }
        }
    }
    run
}

fn option_args(options: &Options) -> Vec<String> {
    let mut args = Vec::new();
    for p in &options.alpn {
        args.push("--alpn".into());
        args.push(String::from_utf8_lossy(p).into_owned());
    }
    args.push("--idle-ms".into());
    args.push(options.idle_timeout.as_millis().to_string());
    if let Some(k) = options.keep_alive {
        args.push("--keep-alive-ms".into());
        args.push(k.as_millis().to_string());
    }
    args.push("--mtu".into());
    args.push(options.mtu.to_string());
    args.push("--max-mtu".into());
    args.push(options.max_mtu.to_string());
    args
}

/// Arguments for `quic-echo client` (program name first): connect to
/// `url`, trust `trusted_der`, `handshakes` handshake-only connections,
/// then `phases`.
pub fn guest_client_args(
    url: &str,
    trusted_der: &[u8],
    options: &Options,
    handshakes: usize,
    phases: &[String],
) -> Vec<String> {
    let mut args = vec![
        "quic-echo".into(),
        "client".into(),
        url.into(),
        "--ca".into(),
        config::to_hex(trusted_der),
        "--handshakes".into(),
        handshakes.to_string(),
    ];
    args.extend(option_args(options));
    args.extend(phases.iter().cloned());
    args
}

/// Arguments for `quic-echo server` (program name first): `mode` is
/// `["listen", ADDR]` or `["dial", URL]`; `max` connections (0 = forever).
pub fn guest_server_args(
    mode: [&str; 2],
    identity: &Identity,
    options: &Options,
    max: u64,
) -> Vec<String> {
    let mut args = vec![
        "quic-echo".into(),
        "server".into(),
        mode[0].into(),
        mode[1].into(),
        "--cert".into(),
        config::to_hex(&identity.cert_der),
        "--key".into(),
        config::to_hex(&identity.key_der),
        "--max".into(),
        max.to_string(),
    ];
    args.extend(option_args(options));
    args
}

/// Dials `url` natively (TCP_NODELAY) and returns the WebSocket.
pub async fn dial(url: &str) -> anyhow::Result<WebSocketStream<tokio::net::TcpStream>> {
    let parsed = url::Url::parse(url)?;
    let addr = format!(
        "{}:{}",
        parsed.host_str().context("host")?,
        parsed.port_or_known_default().context("port")?
    );
    let tcp = tokio::net::TcpStream::connect(&addr)
        .await
        .with_context(|| format!("connecting to {addr}"))?;
    tcp.set_nodelay(true)?;
    let ws_config = tether_host::websocket::ws_config(&Default::default());
    let (ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(ws_config)).await?;
    Ok(ws)
}

/// Waits until something accepts TCP connections at `addr` (a guest's
/// listener starting up), at most `timeout`. The probe connection is
/// closed before any WebSocket upgrade, so the listener never surfaces it.
pub async fn wait_for_listener(addr: SocketAddr, timeout: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + timeout;
    loop {
        match tokio::net::TcpStream::connect(addr).await {
            Ok(_) => return Ok(()),
            Err(e) if Instant::now() >= deadline => {
                bail!("nothing listens at {addr} after {timeout:?}: {e}")
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(2)).await,
        }
    }
}

/// The native client: `handshakes` handshake-only connections, then one
/// connection running `phases`, each on its own message stream to `url`.
/// Errors (WebSocket dial failures) are returned; QUIC failures land in
/// [`ClientRun::error`].
pub async fn native_client(
    url: &str,
    trusted_der: &[u8],
    options: &Options,
    handshakes: usize,
    phases: &[Phase],
    faults: Faults,
) -> anyhow::Result<ClientRun> {
    let config = config::client_config(trusted_der, options)?;
    let mut run = ClientRun::default();
    for i in 0..=handshakes {
        let ws = dial(url).await?;
        let mut link = Link::client_with(
            Instant::now(),
            config.clone(),
            tether_quic::DEFAULT_SERVER_NAME,
            options,
        )?;
        let measured = i == handshakes;
        let mut app = Client::new(if measured {
            phases.to_vec()
        } else {
            Vec::new()
        });
        let ended = drive(ws, &mut link, &mut app, faults).await;
        while let Some(r) = app.poll_report() {
            match r {
                Report::Handshake { elapsed, alpn } => {
                    run.handshakes.push(elapsed);
                    run.alpn = alpn;
                }
                r => run.reports.push(r),
            }
        }
        if let Some(e) = app.error().cloned().or(ended.error) {
            run.error = Some((e.kind().to_string(), e.to_string()));
            return Ok(run);
        }
    }
    Ok(run)
}

/// Picks a free port on 127.0.0.1 for a guest listener (bound, then
/// released).
pub fn free_local_addr() -> anyhow::Result<SocketAddr> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?)
}
