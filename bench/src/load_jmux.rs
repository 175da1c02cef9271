//! `tether bench load --jmux`: many channels open through a two-guest JMUX
//! tunnel (the JMUX guest on both ends, in this process, joined by a
//! `ws://` pipe over loopback), the JMUX variant of [`crate::load`].
//!
//! ```text
//! client --TCP--> [jmux guest: tcp-listen] ==ws pipe== [jmux guest] --TCP--> echo
//! ```
//!
//! A native client opens N TCP connections to the client guest's
//! `tcp-listen://` listener, each one a JMUX channel to a native TCP echo
//! server ([`crate::jmux::peers`]), [`CONNECT_CONCURRENCY`] at a time. One
//! run measures, in order: round trips of 32 B with 1 channel open; the
//! connect rate (a channel counts once its first 32 B echo came back) up to
//! 100 and up to N; this process's CPU while all N sit idle (the client
//! and the echo server are idle too, so it is the two guests' and the
//! host's); round trips on random channels with all N open. The same run
//! repeats it with both guests on their old loop (`--poll-all`: every
//! pollable in every `poll`, every channel visited on every wake-up), for
//! the before and after.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::StreamExt;
use serde::Serialize;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use tether_host::runner::{EngineKind, GuestIo, Runner};

use crate::jmux::pair::{Pair, Proxy, proc_cpu};
use crate::jmux::peers::PeerRuntime;
use crate::jmux::tunnel_config;
use crate::latency::{cdf_us, percentile_us};
use crate::load::{MESSAGE_BYTES, Xorshift, ensure_nofile, random_round_trips, side_by_side};
use crate::tunnel::free_port;

/// Channels opening at once (connect plus first echo in flight).
pub const CONNECT_CONCURRENCY: usize = 64;
/// Deadline of one connect or one round trip.
const DEADLINE: Duration = Duration::from_secs(30);
/// The JMUX guest option that selects its old loop.
const POLL_ALL: &str = "--poll-all";

/// What one run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Channels held open, N (at most the session's 1,024).
    pub channels: usize,
    /// Round trips per round-trip phase.
    pub rtt_samples: usize,
    /// How long all N sit idle while the CPU is read.
    pub idle: Duration,
    /// Also run both guests' old loop with this many channels (0: not).
    pub poll_all_channels: usize,
}

impl Options {
    /// The full run: 1,000 channels, both loops.
    pub fn full(channels: usize) -> Options {
        Options {
            channels,
            rtt_samples: 2000,
            idle: Duration::from_secs(3),
            poll_all_channels: channels,
        }
    }

    /// The smoke run (`bench all --quick`): 200 channels, short phases.
    pub fn quick(channels: Option<usize>) -> Options {
        let channels = channels.unwrap_or(200);
        Options {
            channels,
            rtt_samples: 300,
            idle: Duration::from_secs(1),
            poll_all_channels: channels,
        }
    }
}

/// One run's figures (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// The guests' loop: `readiness-set` or `poll-all`.
    pub guest_loop: &'static str,
    /// Channels held open, N.
    pub channels: usize,
    /// Channels per second (connect and first echo), channels 2..=N.
    pub connect_per_s: f64,
    /// Channels per second, channels 2..=100.
    pub connect_per_s_at_100: f64,
    /// Channels per second over the last 100 before N.
    pub connect_per_s_at_n: f64,
    /// This process's CPU while all N sit idle, percent of one core.
    pub idle_cpu_pct: f64,
    /// Round trips of 32 B on a random channel with all N open, us.
    pub rtt_us_p50_loaded: f64,
    pub rtt_us_p99_loaded: f64,
    /// Round trips of 32 B with 1 channel open, us.
    pub rtt_us_p50_single: f64,
    pub rtt_us_p99_single: f64,
    /// Round-trip distributions as `[percentile, us]`.
    pub rtt_us_cdf_loaded: Vec<[f64; 2]>,
    pub rtt_us_cdf_single: Vec<[f64; 2]>,
    /// The same run with both guests on the old loop, when asked for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub poll_all: Option<Box<Report>>,
}

impl Report {
    /// The table for people.
    pub fn table(&self) -> String {
        let mut rows = vec![self];
        if let Some(old) = &self.poll_all {
            rows.push(old);
        }
        side_by_side(
            &rows,
            (36, 20),
            &|r| format!("{} ({})", r.guest_loop, r.channels),
            &[
                ("channels/s at 100 open", &|r| {
                    format!("{:.0}", r.connect_per_s_at_100)
                }),
                ("channels/s at N open (last 100)", &|r| {
                    format!("{:.0}", r.connect_per_s_at_n)
                }),
                ("channels/s overall", &|r| format!("{:.0}", r.connect_per_s)),
                ("round trip p50/p99, 1 open (us)", &|r| {
                    format!("{:.0}/{:.0}", r.rtt_us_p50_single, r.rtt_us_p99_single)
                }),
                ("round trip p50/p99, N open (us)", &|r| {
                    format!("{:.0}/{:.0}", r.rtt_us_p50_loaded, r.rtt_us_p99_loaded)
                }),
                ("process CPU, all idle (%)", &|r| {
                    format!("{:.2}", r.idle_cpu_pct)
                }),
            ],
        )
    }
}

/// Runs the readiness-set loop with `opts.channels`, then the old loop
/// when `opts.poll_all_channels > 0`; `on_phase` is called with a phase
/// name as each starts. Blocking (the client has its own runtime).
///
/// Errors: a guest or the client failed, a deadline passed, or the
/// descriptor limit is too low.
pub fn run(opts: &Options, on_phase: &(dyn Fn(&str) + Sync)) -> anyhow::Result<Report> {
    if opts.channels < 101 || opts.channels > 1024 {
        bail!(
            "channels must be in 101..=1024 (the session's channel cap), not {}",
            opts.channels
        );
    }
    // Four sockets per channel in this process: client, the listener
    // guest's accepted one, the other guest's target, the echo server's.
    ensure_nofile(4 * opts.channels.max(opts.poll_all_channels))?;
    let runner = Arc::new(Runner::new(tunnel_config(), EngineKind::Cranelift)?);
    let component = runner.compile(tether_guest_artifacts::JMUX)?;
    let guest = Proxy::Guest {
        runner,
        component,
        io: GuestIo::Capture(1 << 20),
    };
    let mut report = measure(opts, opts.channels, false, &guest, on_phase)?;
    if opts.poll_all_channels > 0 {
        let old = measure(opts, opts.poll_all_channels, true, &guest, on_phase)?;
        report.poll_all = Some(Box::new(old));
    }
    Ok(report)
}

fn measure(
    opts: &Options,
    channels: usize,
    poll_all: bool,
    guest: &Proxy,
    on_phase: &(dyn Fn(&str) + Sync),
) -> anyhow::Result<Report> {
    let guest_loop = if poll_all {
        "poll-all"
    } else {
        "readiness-set"
    };
    on_phase(&format!("{guest_loop}: starting the tunnel"));
    let peers = PeerRuntime::new()?;
    let echo = peers.echo()?;
    let port = free_port()?;
    let mut listeners = vec![format!("tcp-listen://127.0.0.1:{port}/{echo}")];
    let mut server_args = vec!["--allow-all".to_string()];
    if poll_all {
        listeners.push(POLL_ALL.into());
        server_args.push(POLL_ALL.into());
    }
    let pair = Pair::start(guest, guest, &listeners, &[port], &server_args)
        .context("starting the JMUX guest pair")?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let mut rng = Xorshift(0x9e37_79b9_7f4a_7c15);
    let pid = std::process::id();
    let figures = rt.block_on(async {
        on_phase(&format!("{guest_loop}: round trips, 1 open"));
        let mut conns = Vec::with_capacity(channels);
        open_more(addr, 1, &mut conns, Instant::now()).await?;
        let single = round_trips(&mut conns, opts.rtt_samples, &mut rng).await?;
        on_phase(&format!("{guest_loop}: opening {channels} channels"));
        let t0 = Instant::now();
        let done = open_more(addr, channels - 1, &mut conns, t0).await?;
        let at = |i: usize| done[i].as_secs_f64();
        let connect_per_s = (channels - 1) as f64 / at(done.len() - 1);
        let connect_per_s_at_100 = 99.0 / at(98);
        let last = done.len() - 101;
        let connect_per_s_at_n = 100.0 / (at(done.len() - 1) - at(last));
        on_phase(&format!("{guest_loop}: {channels} open, idle"));
        tokio::time::sleep(Duration::from_millis(500)).await;
        let (cpu0, t_idle) = (proc_cpu(pid)?, Instant::now());
        tokio::time::sleep(opts.idle).await;
        let idle = (proc_cpu(pid)? - cpu0).as_secs_f64() / t_idle.elapsed().as_secs_f64();
        on_phase(&format!("{guest_loop}: round trips, {channels} open"));
        let loaded = round_trips(&mut conns, opts.rtt_samples, &mut rng).await?;
        anyhow::Ok((
            single,
            loaded,
            connect_per_s,
            connect_per_s_at_100,
            connect_per_s_at_n,
            idle,
        ))
    });
    drop(rt);
    drop(pair);
    let (single, loaded, connect_per_s, connect_per_s_at_100, connect_per_s_at_n, idle) = figures?;
    let p = |v: &[u64], q: f64| percentile_us(v, q);
    Ok(Report {
        guest_loop,
        channels,
        connect_per_s,
        connect_per_s_at_100,
        connect_per_s_at_n,
        idle_cpu_pct: idle * 100.0,
        rtt_us_p50_loaded: p(&loaded, 50.0),
        rtt_us_p99_loaded: p(&loaded, 99.0),
        rtt_us_p50_single: p(&single, 50.0),
        rtt_us_p99_single: p(&single, 99.0),
        rtt_us_cdf_loaded: cdf_us(&loaded),
        rtt_us_cdf_single: cdf_us(&single),
        poll_all: None,
    })
}

/// One 32 B round trip on `tcp`, ns ([`DEADLINE`]).
async fn round_trip(tcp: &mut TcpStream) -> anyhow::Result<u64> {
    let t0 = Instant::now();
    let msg = [0x5a_u8; MESSAGE_BYTES];
    let mut back = [0_u8; MESSAGE_BYTES];
    tokio::time::timeout(DEADLINE, async {
        tcp.write_all(&msg).await?;
        tcp.read_exact(&mut back).await?;
        std::io::Result::Ok(())
    })
    .await
    .context("no echo through the tunnel within 30 s")??;
    if back != msg {
        bail!("the echo through the tunnel differed");
    }
    Ok(t0.elapsed().as_nanos() as u64)
}

async fn round_trips(
    conns: &mut [TcpStream],
    n: usize,
    rng: &mut Xorshift,
) -> anyhow::Result<Vec<u64>> {
    random_round_trips(conns, n, rng, async |tcp| round_trip(tcp).await).await
}

/// Opens `count` more channels ([`CONNECT_CONCURRENCY`] at a time), each
/// done once its first echo is back; returns each one's completion time
/// since `t0`.
async fn open_more(
    addr: std::net::SocketAddr,
    count: usize,
    conns: &mut Vec<TcpStream>,
    t0: Instant,
) -> anyhow::Result<Vec<Duration>> {
    let mut done = Vec::with_capacity(count);
    let mut pending = futures_util::stream::iter(0..count)
        .map(|_| async move {
            let mut tcp = tokio::time::timeout(DEADLINE, TcpStream::connect(addr))
                .await
                .context("no connect within 30 s")??;
            tcp.set_nodelay(true)?;
            round_trip(&mut tcp).await?;
            anyhow::Ok(tcp)
        })
        .buffer_unordered(CONNECT_CONCURRENCY);
    while let Some(tcp) = pending.next().await {
        let tcp = tcp.with_context(|| format!("channel {} through the tunnel", conns.len()))?;
        conns.push(tcp);
        done.push(t0.elapsed());
    }
    Ok(done)
}
