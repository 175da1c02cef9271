//! `tether bench load`: one server guest (the echo guest's server mode)
//! holding N WebSocket connections from a native load client in another
//! process, so that this process's RSS, file descriptors and CPU are the
//! host's alone.
//!
//! One run measures, in order: round trips with 1 connection open; the
//! connect rate up to 100 open and round trips there; the connect rate up
//! to N (overall and over the last 100); RSS and descriptors with all N
//! open against the baseline before the first one; CPU while all N sit
//! idle; round trips on random connections with all N open; and messages/s
//! across all N with 64 in flight. The same run can repeat it with the
//! guest's old loop (`poll-all`: every stream's pollable in every `poll`),
//! for the before and after, with TCP byte streams instead of
//! WebSocket connections (the echo guest's `--tcp` listener, the same
//! readiness-set loop), and with the echo guest's p3 build (`echo-p3` on
//! `tether:streams-async`: one future per stream, woken through the
//! component's waitable set).
//!
//! The client is this binary re-invoked (`tether bench load-client`, see
//! [`client`]): it prints one `OPEN {json}` line once all N are open,
//! waits for `go` on stdin (the host measures meanwhile), and ends with
//! one `DONE {json}` line.

use std::io::{BufRead, Write};
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use tether_host::Config;
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;

use crate::jmux::pair::proc_cpu;
use crate::latency::{cdf_us, percentile_us};
use crate::tunnel::{GuestThread, free_port, is_listening};

/// Concurrent handshakes the client keeps in flight: under the host's
/// default accept backlog (64).
pub const CONNECT_CONCURRENCY: usize = 64;
/// Messages in flight in the throughput phase.
pub const IN_FLIGHT: usize = 64;
/// Size of one echo, bytes.
pub const MESSAGE_BYTES: usize = 32;
/// Descriptors each side needs beyond one per connection (runtime, pipes,
/// the guest's listener, ...).
const FD_SLACK: u64 = 200;

/// What one run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Connections held open, N.
    pub connections: usize,
    /// Round trips per round-trip phase.
    pub rtt_samples: usize,
    /// How long all N sit idle while the host's CPU is read.
    pub idle: Duration,
    /// How long the throughput phase runs.
    pub throughput: Duration,
    /// Also run the guest's old loop with this many connections (0: not).
    pub poll_all_connections: usize,
    /// Also run with this many TCP byte streams instead of WebSocket
    /// connections (0: not).
    pub tcp_connections: usize,
    /// Also run the echo guest's p3 build (waitable set) with this many
    /// WebSocket connections (0: not).
    pub p3_connections: usize,
}

impl Options {
    /// The full run: 10,000 connections; the old loop with 2,000 (its
    /// connects slow down with every open one).
    pub fn full(connections: usize) -> Options {
        Options {
            connections,
            rtt_samples: 2000,
            idle: Duration::from_secs(3),
            throughput: Duration::from_secs(3),
            poll_all_connections: 2000.min(connections),
            tcp_connections: connections,
            p3_connections: connections,
        }
    }

    /// The CI smoke run (bench all --quick): 500 connections, short phases.
    pub fn quick(connections: Option<usize>) -> Options {
        let connections = connections.unwrap_or(500);
        Options {
            connections,
            rtt_samples: 300,
            idle: Duration::from_secs(1),
            throughput: Duration::from_millis(500),
            poll_all_connections: connections.min(500),
            tcp_connections: connections.min(500),
            p3_connections: connections,
        }
    }
}

/// What the client measured (its `OPEN` and `DONE` lines together).
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct ClientFigures {
    /// Round trips with 1 connection open, ns.
    pub rtt_single_ns: Vec<u64>,
    /// Round trips on random connections with 100 open, ns.
    pub rtt_at_100_ns: Vec<u64>,
    /// Round trips on random connections with all N open, ns.
    pub rtt_loaded_ns: Vec<u64>,
    /// Connections 2..=100 per second.
    pub connect_per_s_at_100: f64,
    /// The last 100 connections up to N, per second.
    pub connect_per_s_at_n: f64,
    /// Connections 2..=N per second, overall.
    pub connect_per_s: f64,
    /// Echoes per second across all N with [`IN_FLIGHT`] in flight.
    pub msgs_per_s: f64,
    /// Connections open at the end of the connect phase.
    pub open: usize,
}

/// One run's figures (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The guest's ABI: `p2` (`tether:streams`) or `p3`
    /// (`tether:streams-async`).
    pub abi: &'static str,
    /// The guest's loop: `readiness-set` or `poll-all` (p2),
    /// `waitable-set` (p3).
    pub guest_loop: &'static str,
    /// What the client opens: `websocket` or `tcp` (byte streams).
    pub streams: &'static str,
    /// Connections held open, N.
    pub connections: usize,
    /// Upgrades per second, connections 2..=N.
    pub connect_per_s: f64,
    /// Upgrades per second, connections 2..=100.
    pub connect_per_s_at_100: f64,
    /// Upgrades per second over the last 100 before N.
    pub connect_per_s_at_n: f64,
    /// Host RSS per open connection, KiB (baseline subtracted).
    pub rss_kib_per_conn: f64,
    /// Host descriptors per open connection (baseline subtracted).
    pub fds_per_conn: f64,
    /// Host RSS before the first connection and with all N open, KiB.
    pub rss_kib_before: u64,
    pub rss_kib_open: u64,
    /// Host descriptors before the first connection and with all N open.
    pub fds_before: u64,
    pub fds_open: u64,
    /// Host CPU while all N sit idle, percent of one core.
    pub idle_cpu_pct: f64,
    /// Round trips of 32 B on a random connection with all N open, us.
    pub rtt_us_p50_loaded: f64,
    pub rtt_us_p99_loaded: f64,
    /// Round trips of 32 B with 1 connection open, us.
    pub rtt_us_p50_single: f64,
    pub rtt_us_p99_single: f64,
    /// Round trips of 32 B on a random connection with 100 open, us.
    pub rtt_us_p50_at_100: f64,
    pub rtt_us_p99_at_100: f64,
    /// Echoes per second across all N, 64 in flight.
    pub msgs_per_s: f64,
    /// Round-trip distributions as `[percentile, us]` (the report's CDFs).
    pub rtt_us_cdf_loaded: Vec<[f64; 2]>,
    pub rtt_us_cdf_single: Vec<[f64; 2]>,
    /// The file-descriptor limit both processes ran under.
    pub nofile_limit: u64,
    /// The same run with the guest's old loop, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_all: Option<Box<Report>>,
    /// The same run over TCP byte streams, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tcp: Option<Box<Report>>,
    /// The same run with the echo guest's p3 build, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub p3: Option<Box<Report>>,
}

impl Report {
    /// The table for people.
    pub fn table(&self) -> String {
        let mut rows = vec![self];
        if let Some(old) = &self.poll_all {
            rows.push(old);
        }
        if let Some(tcp) = &self.tcp {
            rows.push(tcp);
        }
        if let Some(p3) = &self.p3 {
            rows.push(p3);
        }
        side_by_side(
            &rows,
            (34, 36),
            &|r| {
                format!(
                    "{} {} {} ({})",
                    r.streams, r.abi, r.guest_loop, r.connections
                )
            },
            &[
                ("connects/s at 100 open", &|r| {
                    format!("{:.0}", r.connect_per_s_at_100)
                }),
                ("connects/s at N open (last 100)", &|r| {
                    format!("{:.0}", r.connect_per_s_at_n)
                }),
                ("connects/s overall", &|r| format!("{:.0}", r.connect_per_s)),
                ("round trip p50/p99, 1 open (us)", &|r| {
                    format!("{:.0}/{:.0}", r.rtt_us_p50_single, r.rtt_us_p99_single)
                }),
                ("round trip p50/p99, 100 open (us)", &|r| {
                    format!("{:.0}/{:.0}", r.rtt_us_p50_at_100, r.rtt_us_p99_at_100)
                }),
                ("round trip p50/p99, N open (us)", &|r| {
                    format!("{:.0}/{:.0}", r.rtt_us_p50_loaded, r.rtt_us_p99_loaded)
                }),
                ("messages/s, 64 in flight", &|r| {
                    format!("{:.0}", r.msgs_per_s)
                }),
                ("host RSS per connection (KiB)", &|r| {
                    format!("{:.1}", r.rss_kib_per_conn)
                }),
                ("host fds per connection", &|r| {
                    format!("{:.2}", r.fds_per_conn)
                }),
                ("host CPU, all idle (%)", &|r| {
                    format!("{:.2}", r.idle_cpu_pct)
                }),
            ],
        )
    }
}

/// One table line's name and how a run's cell reads.
pub(crate) type Line<'a, R> = (&'a str, &'a dyn Fn(&R) -> String);

/// A table for people with one column per run (new loop, then old):
/// `widths` are the name column's and each run column's, `head` names a
/// run's column.
pub(crate) fn side_by_side<R>(
    rows: &[&R],
    widths: (usize, usize),
    head: &dyn Fn(&R) -> String,
    lines: &[Line<'_, R>],
) -> String {
    let (name_w, col_w) = widths;
    let mut out = format!("{:<name_w$}", "");
    for r in rows {
        out += &format!("{:>col_w$}", head(r));
    }
    out.push('\n');
    for (name, cell) in lines {
        out += &format!("{name:<name_w$}");
        for r in rows {
            out += &format!("{:>col_w$}", cell(r));
        }
        out.push('\n');
    }
    out
}

/// Raises this process's RLIMIT_NOFILE soft limit to its hard limit.
/// Returns the limit now in force.
///
/// Errors: getrlimit/setrlimit failed.
pub fn raise_nofile() -> std::io::Result<u64> {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit only read and write the struct passed.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
        }
    }
    Ok(lim.rlim_cur)
}

/// Raises the limit and checks that `connections` fit under it.
///
/// Errors: the hard limit is too low (naming it and what would fit).
pub fn ensure_nofile(connections: usize) -> anyhow::Result<u64> {
    let limit = raise_nofile().context("raising RLIMIT_NOFILE")?;
    if (connections as u64) + FD_SLACK > limit {
        bail!(
            "RLIMIT_NOFILE is {limit} (the hard limit) and {connections} connections need about {}: \
             raise the hard limit (ulimit -Hn) or use --connections {}",
            connections as u64 + FD_SLACK,
            limit.saturating_sub(FD_SLACK)
        );
    }
    Ok(limit)
}

/// This process's resident set, KiB, from `/proc/self/status`.
///
/// Errors: `/proc/self/status` unreadable or without `VmRSS`.
pub fn rss_kib() -> anyhow::Result<u64> {
    let status = std::fs::read_to_string("/proc/self/status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .context("no VmRSS in /proc/self/status")
}

/// This process's open descriptors, from `/proc/self/fd`.
///
/// Errors: `/proc/self/fd` unreadable.
pub fn fd_count() -> anyhow::Result<u64> {
    Ok(std::fs::read_dir("/proc/self/fd")?.count() as u64)
}

/// Runs the whole bench: the readiness-set loop with `opts.connections`,
/// then the old loop when `opts.poll_all_connections > 0`, TCP byte
/// streams when `opts.tcp_connections > 0`, and the p3 build when
/// `opts.p3_connections > 0`. `client` is the
/// program to re-invoke as the load client (this binary), `on_phase` is
/// called with a phase name as each starts.
///
/// Errors: the guest or the client failed, or a limit is too low.
pub async fn run(
    opts: &Options,
    client: &Path,
    on_phase: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Report> {
    let limit = ensure_nofile(opts.connections)?;
    let mut report = measure(opts, opts.connections, Variant::Ws, client, limit, on_phase).await?;
    if opts.poll_all_connections > 0 {
        let n = opts.poll_all_connections;
        let old = measure(opts, n, Variant::WsPollAll, client, limit, on_phase).await?;
        report.poll_all = Some(Box::new(old));
    }
    if opts.tcp_connections > 0 {
        let n = opts.tcp_connections;
        let tcp = measure(opts, n, Variant::Tcp, client, limit, on_phase).await?;
        report.tcp = Some(Box::new(tcp));
    }
    if opts.p3_connections > 0 {
        let n = opts.p3_connections;
        let p3 = measure(opts, n, Variant::WsP3, client, limit, on_phase).await?;
        report.p3 = Some(Box::new(p3));
    }
    Ok(report)
}

/// What one measurement runs: the guest's loop and what the client opens.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Variant {
    /// WebSocket connections, the readiness-set loop.
    Ws,
    /// WebSocket connections, the old poll-all loop.
    WsPollAll,
    /// TCP byte streams, the readiness-set loop.
    Tcp,
    /// WebSocket connections, the p3 build (`echo-p3`): one future per
    /// stream, the component's waitable set.
    WsP3,
}

async fn measure(
    opts: &Options,
    connections: usize,
    variant: Variant,
    client: &Path,
    limit: u64,
    on_phase: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Report> {
    let poll_all = variant == Variant::WsPollAll;
    let p3 = variant == Variant::WsP3;
    let (abi, guest_loop) = match variant {
        Variant::WsPollAll => ("p2", "poll-all"),
        Variant::Ws | Variant::Tcp => ("p2", "readiness-set"),
        Variant::WsP3 => ("p3", "waitable-set"),
    };
    let streams = if variant == Variant::Tcp {
        "tcp"
    } else {
        "websocket"
    };
    let phase = format!("{streams} {abi} {guest_loop}");
    on_phase(&format!("{phase}: starting the echo guest"));
    let config = Config {
        policy: Policy {
            listen: vec!["127.0.0.1:*".parse()?],
            ..Policy::default()
        },
        ..Config::default()
    };
    let port = free_port()?;
    let listen = format!("127.0.0.1:{port}");
    let mut args = vec![
        if p3 { "echo-p3" } else { "echo" }.to_string(),
        "server".into(),
        listen.clone(),
        "0".into(),
    ];
    if poll_all {
        args.push("poll-all".into());
    }
    // TCP: the guest listens for byte streams too, and the client uses only
    // those (the WebSocket listener sits idle).
    let (port, url) = if variant == Variant::Tcp {
        let tcp_port = free_port()?;
        args.extend(["--tcp".to_string(), format!("127.0.0.1:{tcp_port}")]);
        (tcp_port, format!("tcp://127.0.0.1:{tcp_port}"))
    } else {
        (port, format!("ws://{listen}/"))
    };
    let io = GuestIo::Capture(1 << 20);
    let guest = if p3 {
        let runner = Arc::new(tether_host::p3::Runner::new(config)?);
        let component = runner.compile_cached(tether_guest_artifacts::ECHO_P3)?;
        GuestThread::spawn_p3(runner, component, args, io)?
    } else {
        let runner = Arc::new(Runner::new(config, EngineKind::Cranelift)?);
        let component = runner.compile(tether_guest_artifacts::ECHO)?;
        GuestThread::spawn(runner, component, args, io)?
    };
    let start = Instant::now();
    while !is_listening(port) {
        if guest.is_finished() || start.elapsed() > Duration::from_secs(30) {
            let outcome = guest.stop();
            bail!("the echo guest did not listen for {url}: {outcome:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    let (rss_before, fds_before) = (rss_kib()?, fd_count()?);

    on_phase(&format!("{phase}: connecting {connections}"));
    let child = std::process::Command::new(client)
        .args([
            "bench",
            "load-client",
            "--url",
            &url,
            "--connections",
            &connections.to_string(),
            "--rtt-samples",
            &opts.rtt_samples.to_string(),
            "--throughput-ms",
            &opts.throughput.as_millis().to_string(),
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .with_context(|| format!("starting the load client {}", client.display()))?;
    let mut child = KillOnDrop(child);
    let stdout = child.0.stdout.take().context("client stdout")?;
    let mut stdin = child.0.stdin.take().context("client stdin")?;
    let lines = std::io::BufReader::new(stdout).lines();
    let (opened, lines) = next_line(lines, "OPEN").await?;
    if opened.open != connections {
        bail!("only {} of {connections} connections opened", opened.open);
    }
    on_phase(&format!("{phase}: {connections} open, idle"));
    // Let the last handshakes' buffers settle before reading memory.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let (rss_open, fds_open) = (rss_kib()?, fd_count()?);
    let pid = std::process::id();
    let (cpu0, t0) = (proc_cpu(pid)?, Instant::now());
    tokio::time::sleep(opts.idle).await;
    let idle_cpu = (proc_cpu(pid)? - cpu0).as_secs_f64() / t0.elapsed().as_secs_f64();
    on_phase(&format!("{phase}: round trips and throughput"));
    stdin.write_all(b"go\n")?;
    stdin.flush()?;
    let (done, _) = next_line(lines, "DONE").await?;
    let status = child.0.wait()?;
    if !status.success() {
        bail!("the load client failed: {status}");
    }
    drop(guest);
    let n = connections as f64;
    let p = |v: &[u64], q: f64| percentile_us(v, q);
    Ok(Report {
        abi,
        guest_loop,
        streams,
        connections,
        connect_per_s: opened.connect_per_s,
        connect_per_s_at_100: opened.connect_per_s_at_100,
        connect_per_s_at_n: opened.connect_per_s_at_n,
        rss_kib_per_conn: rss_open.saturating_sub(rss_before) as f64 / n,
        fds_per_conn: fds_open.saturating_sub(fds_before) as f64 / n,
        rss_kib_before: rss_before,
        rss_kib_open: rss_open,
        fds_before,
        fds_open,
        idle_cpu_pct: idle_cpu * 100.0,
        rtt_us_p50_loaded: p(&done.rtt_loaded_ns, 50.0),
        rtt_us_p99_loaded: p(&done.rtt_loaded_ns, 99.0),
        rtt_us_p50_single: p(&opened.rtt_single_ns, 50.0),
        rtt_us_p99_single: p(&opened.rtt_single_ns, 99.0),
        rtt_us_p50_at_100: p(&opened.rtt_at_100_ns, 50.0),
        rtt_us_p99_at_100: p(&opened.rtt_at_100_ns, 99.0),
        msgs_per_s: done.msgs_per_s,
        rtt_us_cdf_loaded: cdf_us(&done.rtt_loaded_ns),
        rtt_us_cdf_single: cdf_us(&opened.rtt_single_ns),
        nofile_limit: limit,
        poll_all: None,
        tcp: None,
        p3: None,
    })
}

type ClientLines = std::io::Lines<std::io::BufReader<std::process::ChildStdout>>;

/// The load client's child process, killed if the bench stops early.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The client's next line starting with `want`, its JSON parsed (read on a
/// blocking thread; the client's own deadlines bound the wait).
async fn next_line(
    mut lines: ClientLines,
    want: &'static str,
) -> anyhow::Result<(ClientFigures, ClientLines)> {
    tokio::task::spawn_blocking(move || {
        loop {
            let line = lines
                .next()
                .with_context(|| format!("the load client ended before `{want}`"))??;
            if let Some(json) = line.strip_prefix(want) {
                return Ok((serde_json::from_str(json.trim())?, lines));
            }
        }
    })
    .await?
}

type Ws =
    tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One of the load client's connections.
enum Conn {
    /// A WebSocket connection: 32 B binary messages.
    Ws(Box<Ws>),
    /// A TCP byte stream: 32 B written, 32 B read back.
    Tcp(tokio::net::TcpStream),
}

/// A xorshift generator: random connections without a dependency.
pub(crate) struct Xorshift(pub(crate) u64);

impl Xorshift {
    /// The next number below `n`.
    pub(crate) fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 % n as u64) as usize
    }
}

/// The client's tungstenite read buffer per connection, bytes.
const CLIENT_READ_BUFFER: usize = 4096;

/// Deadline of one handshake or one round trip in the client.
const CLIENT_DEADLINE: Duration = Duration::from_secs(30);

async fn round_trip(conn: &mut Conn) -> anyhow::Result<u64> {
    let trip = async {
        match conn {
            Conn::Ws(ws) => round_trip_ws(ws).await,
            Conn::Tcp(tcp) => round_trip_tcp(tcp).await,
        }
    };
    tokio::time::timeout(CLIENT_DEADLINE, trip)
        .await
        .context("no echo within 30 s")?
}

async fn round_trip_tcp(tcp: &mut tokio::net::TcpStream) -> anyhow::Result<u64> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let t0 = Instant::now();
    tcp.write_all(&[0x5a; MESSAGE_BYTES]).await?;
    let mut echo = [0u8; MESSAGE_BYTES];
    tcp.read_exact(&mut echo)
        .await
        .context("the echo ended early")?;
    anyhow::ensure!(echo == [0x5a; MESSAGE_BYTES], "the echo differs");
    Ok(t0.elapsed().as_nanos() as u64)
}

async fn round_trip_ws(ws: &mut Ws) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    ws.send(Message::Binary(vec![0x5a; MESSAGE_BYTES].into()))
        .await?;
    loop {
        match ws.next().await.context("connection ended")?? {
            Message::Binary(b) if b.len() == MESSAGE_BYTES => {
                return Ok(t0.elapsed().as_nanos() as u64);
            }
            Message::Binary(b) => bail!("echo of {} bytes, sent {MESSAGE_BYTES}", b.len()),
            _ => {}
        }
    }
}

async fn round_trips(conns: &mut [Conn], n: usize, rng: &mut Xorshift) -> anyhow::Result<Vec<u64>> {
    random_round_trips(conns, n, rng, async |c| round_trip(c).await).await
}

/// `n` round trips (`trip`, ns each) on connections picked at random,
/// after n/10 (at least 10) unrecorded ones.
pub(crate) async fn random_round_trips<T>(
    conns: &mut [T],
    n: usize,
    rng: &mut Xorshift,
    mut trip: impl AsyncFnMut(&mut T) -> anyhow::Result<u64>,
) -> anyhow::Result<Vec<u64>> {
    let warmup = (n / 10).max(10);
    let mut out = Vec::with_capacity(n);
    for i in 0..warmup + n {
        let k = rng.below(conns.len());
        let ns = trip(&mut conns[k]).await?;
        if i >= warmup {
            out.push(ns);
        }
    }
    Ok(out)
}

/// Opens one connection to `url` (`ws://` or `tcp://HOST:PORT`), with
/// TCP_NODELAY.
async fn connect(url: &str) -> anyhow::Result<Conn> {
    if let Some(addr) = url.strip_prefix("tcp://") {
        let tcp = tokio::net::TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        return Ok(Conn::Tcp(tcp));
    }
    // A small read buffer: tungstenite zero-fills the whole buffer before
    // each read (128 KiB by default), which on 10,000 cold connections
    // would be the client's cost, not the host's.
    let config = WebSocketConfig::default().read_buffer_size(CLIENT_READ_BUFFER);
    let (ws, _) = tokio_tungstenite::connect_async_with_config(url, Some(config), true).await?;
    Ok(Conn::Ws(Box::new(ws)))
}

/// Opens `count` more connections, [`CONNECT_CONCURRENCY`] handshakes in
/// flight; returns each one's completion time since `t0`.
async fn open_more(
    url: &str,
    count: usize,
    conns: &mut Vec<Conn>,
    t0: Instant,
) -> anyhow::Result<Vec<Duration>> {
    let mut done = Vec::with_capacity(count);
    let mut pending = futures_util::stream::iter(0..count)
        .map(|_| tokio::time::timeout(CLIENT_DEADLINE, connect(url)))
        .buffer_unordered(CONNECT_CONCURRENCY);
    while let Some(result) = pending.next().await {
        let conn = result
            .context("no handshake within 30 s")?
            .with_context(|| format!("connection {} to {url}", conns.len()))?;
        conns.push(conn);
        done.push(t0.elapsed());
    }
    Ok(done)
}

/// The load client's arguments.
#[derive(Clone, Debug)]
pub struct ClientArgs {
    /// The server's `ws://` URL, or `tcp://HOST:PORT` for byte streams.
    pub url: String,
    /// Connections to open, N.
    pub connections: usize,
    /// Round trips per round-trip phase.
    pub rtt_samples: usize,
    /// Length of the throughput phase.
    pub throughput: Duration,
}

/// The load client (`tether bench load-client`): see the module docs for
/// its lines. Runs on the caller's runtime.
///
/// Errors: a connection failed, or stdin closed before `go`.
pub async fn client(args: &ClientArgs) -> anyhow::Result<()> {
    ensure_nofile(args.connections)?;
    let n = args.connections.max(101);
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let mut figures = ClientFigures::default();
    let mut conns: Vec<Conn> = Vec::with_capacity(n);
    let t0 = Instant::now();
    open_more(&args.url, 1, &mut conns, t0).await?;
    figures.rtt_single_ns = round_trips(&mut conns, args.rtt_samples, &mut rng).await?;
    let t100 = Instant::now();
    let first = open_more(&args.url, 99, &mut conns, t100).await?;
    figures.connect_per_s_at_100 = 99.0 / first.last().unwrap().as_secs_f64();
    figures.rtt_at_100_ns = round_trips(&mut conns, args.rtt_samples, &mut rng).await?;
    let trest = Instant::now();
    let rest = open_more(&args.url, n - 100, &mut conns, trest).await?;
    let total = first.last().unwrap().as_secs_f64() + rest.last().unwrap().as_secs_f64();
    figures.connect_per_s = (n - 1) as f64 / total;
    let last = &rest[rest.len().saturating_sub(101)..];
    figures.connect_per_s_at_n =
        (last.len() - 1) as f64 / (last[last.len() - 1] - last[0]).as_secs_f64();
    figures.open = conns.len();
    let line = serde_json::to_string(&figures)?;
    println!("OPEN {line}");
    std::io::stdout().flush()?;
    // The host measures memory and idle CPU now.
    let mut go = String::new();
    tokio::task::spawn_blocking(move || std::io::stdin().lock().read_line(&mut go).map(|_| go))
        .await??;
    let mut done = ClientFigures {
        rtt_loaded_ns: round_trips(&mut conns, args.rtt_samples, &mut rng).await?,
        ..ClientFigures::default()
    };
    done.msgs_per_s = throughput(conns, args.throughput).await?;
    println!("DONE {}", serde_json::to_string(&done)?);
    std::io::stdout().flush()?;
    Ok(())
}

/// Echoes across every connection for `length`, [`IN_FLIGHT`] in flight:
/// each of [`IN_FLIGHT`] tasks owns a share of the connections and sends
/// on them in turn, one message outstanding. Returns echoes per second.
async fn throughput(conns: Vec<Conn>, length: Duration) -> anyhow::Result<f64> {
    let mut shares: Vec<Vec<Conn>> = (0..IN_FLIGHT).map(|_| Vec::new()).collect();
    for (i, ws) in conns.into_iter().enumerate() {
        shares[i % IN_FLIGHT].push(ws);
    }
    let t0 = Instant::now();
    let end = t0 + length;
    let mut tasks = tokio::task::JoinSet::new();
    for mut share in shares {
        tasks.spawn(async move {
            let mut count = 0u64;
            let mut i = 0;
            while Instant::now() < end && !share.is_empty() {
                let k = i % share.len();
                round_trip(&mut share[k]).await?;
                count += 1;
                i += 1;
            }
            anyhow::Ok((count, share))
        });
    }
    let mut total = 0;
    let mut kept = Vec::new();
    while let Some(r) = tasks.join_next().await {
        let (count, share) = r??;
        total += count;
        kept.push(share);
    }
    let rate = total as f64 / t0.elapsed().as_secs_f64();
    drop(kept);
    Ok(rate)
}
