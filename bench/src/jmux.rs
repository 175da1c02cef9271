//! `tether bench jmux`: a two-guest JMUX tunnel (`ws://` loopback pipe
//! through the host) next to direct connections to the same peers, in one
//! run:
//!
//! - HTTP/2 upload (curl, prior knowledge) of 8 MiB to an HTTP/2 server
//!   with a 65535-byte stream window, through the tunnel and directly, and
//!   the ratio (timed at the server, median of the rounds);
//! - HTTP/1.1 upload likewise;
//! - bulk throughput through the tunnel (MB/s, and the direct loopback
//!   figure) and the CPU seconds per GB the tunnel costs: process CPU
//!   (getrusage) minus the load generator's and the sink's own threads;
//! - the round trip the tunnel adds to a 64-byte request/response (p50 and
//!   p99 of tunnel minus direct, in us), next to what two native TCP
//!   relays in a row add in the same run: the floor of any tunnel with two
//!   ends on this machine.
//!
//! Every upload is checked byte for byte by the server.

pub mod peers;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::Serialize;

use crate::latency::{cdf_us, percentile_us};
use crate::progress::Progress;
use crate::tunnel::{Tunnel, free_port};
use peers::{PeerRuntime, Uploads};
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, Limits};

/// How much to measure.
#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Upload size, bytes.
    pub upload_bytes: usize,
    /// Uploads per kind and path (median reported).
    pub upload_rounds: usize,
    /// Bulk transfer through the tunnel (and directly), bytes.
    pub bulk_bytes: u64,
    /// Recorded round trips per path (after 10% warm-up).
    pub round_trips: usize,
}

impl Options {
    /// The full benchmark: 8 MiB uploads x3, 1 GiB bulk, 5000 round trips.
    pub fn full() -> Options {
        Options {
            upload_bytes: 8 << 20,
            upload_rounds: 3,
            bulk_bytes: 1 << 30,
            round_trips: 5000,
        }
    }

    /// A smoke run for CI: 8 MiB uploads x1, 64 MiB bulk, 500 round trips.
    pub fn quick() -> Options {
        Options {
            upload_bytes: 8 << 20,
            upload_rounds: 1,
            bulk_bytes: 64 << 20,
            round_trips: 500,
        }
    }
}

/// The figures of one run. Times in seconds, round trips in us, MB = 10^6
/// bytes, GB = 10^9 bytes.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Bytes per upload.
    pub upload_bytes: usize,
    /// HTTP/2 upload through the tunnel, s (median).
    pub h2_upload_s: f64,
    /// HTTP/2 upload direct, s (median).
    pub h2_direct_s: f64,
    /// `h2_upload_s / h2_direct_s`.
    pub h2_ratio: f64,
    /// HTTP/1.1 upload through the tunnel, s (median).
    pub h1_upload_s: f64,
    /// HTTP/1.1 upload direct, s (median).
    pub h1_direct_s: f64,
    /// `h1_upload_s / h1_direct_s`.
    pub h1_ratio: f64,
    /// Bytes of the bulk transfer.
    pub bulk_bytes: u64,
    /// Bulk throughput through the tunnel, MB/s.
    pub bulk_mb_per_s: f64,
    /// Bulk throughput over direct loopback, MB/s.
    pub bulk_direct_mb_per_s: f64,
    /// CPU seconds the tunnel spent per GB relayed (process CPU minus the
    /// generator's and the sink's threads).
    pub cpu_s_per_gb: f64,
    /// Direct round trip, us, p50.
    pub rtt_direct_us_p50: f64,
    /// Direct round trip, us, p99.
    pub rtt_direct_us_p99: f64,
    /// Round trip through the tunnel, us, p50.
    pub rtt_tunnel_us_p50: f64,
    /// Round trip through the tunnel, us, p99.
    pub rtt_tunnel_us_p99: f64,
    /// `rtt_tunnel_us_p50 - rtt_direct_us_p50`.
    pub rtt_added_us_p50: f64,
    /// `rtt_tunnel_us_p99 - rtt_direct_us_p99`.
    pub rtt_added_us_p99: f64,
    /// Round trip through two native TCP relays in a row, us, p50: the
    /// floor under any two-ended tunnel on this machine (two more hops each
    /// way; no WebSocket, no JMUX, no WebAssembly). See [`peers::relay`].
    pub rtt_relay_us_p50: f64,
    /// Round trip through the two native relays, us, p99.
    pub rtt_relay_us_p99: f64,
    /// `rtt_relay_us_p50 - rtt_direct_us_p50`: the part of the added round
    /// trip that the hops alone cost.
    pub rtt_relay_added_us_p50: f64,
    /// `rtt_relay_us_p99 - rtt_direct_us_p99`.
    pub rtt_relay_added_us_p99: f64,
    /// Round trips through the tunnel as `[percentile, us]` pairs (the
    /// report's CDF).
    pub rtt_tunnel_us_cdf: Vec<[f64; 2]>,
    /// Direct round trips as `[percentile, us]` pairs.
    pub rtt_direct_us_cdf: Vec<[f64; 2]>,
    /// Round trips through the two native relays as `[percentile, us]`
    /// pairs.
    pub rtt_relay_us_cdf: Vec<[f64; 2]>,
}

impl Report {
    /// A table for people, with the targets.
    pub fn table(&self) -> String {
        let check = |ok: bool| if ok { "ok" } else { "MISSED" };
        format!(
            "{:<34} {:>12} {:>12} {:>9}  target\n\
             {:<34} {:>12.4} {:>12.4} {:>8.2}x  <= 3x {}\n\
             {:<34} {:>12.4} {:>12.4} {:>8.2}x  <= 3x {}\n\
             {:<34} {:>12.0} {:>12.0} {:>9}  >= 300 {}\n\
             {:<34} {:>12.2} {:>12} {:>9}  <= 2.4 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  <= 100 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  < 1000 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  (native floor)\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  (native floor)\n",
            "",
            "tunnel",
            "direct",
            "ratio/+",
            format!("HTTP/2 upload {} MiB (s)", self.upload_bytes >> 20),
            self.h2_upload_s,
            self.h2_direct_s,
            self.h2_ratio,
            check(self.h2_ratio <= 3.0),
            format!("HTTP/1.1 upload {} MiB (s)", self.upload_bytes >> 20),
            self.h1_upload_s,
            self.h1_direct_s,
            self.h1_ratio,
            check(self.h1_ratio <= 3.0),
            format!("bulk {} MiB (MB/s)", self.bulk_bytes >> 20),
            self.bulk_mb_per_s,
            self.bulk_direct_mb_per_s,
            "",
            check(self.bulk_mb_per_s >= 300.0),
            "tunnel CPU (s per GB relayed)",
            self.cpu_s_per_gb,
            "",
            "",
            check(self.cpu_s_per_gb <= 2.4),
            "round trip 64 B p50 (us, + added)",
            self.rtt_tunnel_us_p50,
            self.rtt_direct_us_p50,
            self.rtt_added_us_p50,
            check(self.rtt_added_us_p50 <= 100.0),
            "round trip 64 B p99 (us, + added)",
            self.rtt_tunnel_us_p99,
            self.rtt_direct_us_p99,
            self.rtt_added_us_p99,
            check(self.rtt_added_us_p99 < 1000.0),
            "two native relays p50 (us, + added)",
            self.rtt_relay_us_p50,
            self.rtt_direct_us_p50,
            self.rtt_relay_added_us_p50,
            "two native relays p99 (us, + added)",
            self.rtt_relay_us_p99,
            self.rtt_direct_us_p99,
            self.rtt_relay_added_us_p99,
        )
    }
}

/// The host configuration of the tunnel guests: dial and listen on
/// 127.0.0.1 only.
pub fn tunnel_config() -> Config {
    let rules = |list: &[&str]| list.iter().map(|r| r.parse().unwrap()).collect::<Vec<_>>();
    Config {
        policy: Policy {
            allow: rules(&["127.0.0.1:*"]),
            deny: Vec::new(),
            listen: rules(&["127.0.0.1:*"]),
        },
        limits: Limits::default(),
        ..Config::default()
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn upload(
    url: &str,
    file: &std::path::Path,
    h2: bool,
    log: &Uploads,
    size: usize,
) -> anyhow::Result<f64> {
    let before = log.lock().unwrap().len();
    let answer = peers::curl_upload(url, file, h2)?;
    let seen = peers::upload_after(log, before)?;
    if !seen.ok || answer.trim() != format!("ok {size}") {
        bail!(
            "upload to {url} arrived damaged: server saw {} bytes, answered {answer:?}",
            seen.bytes
        );
    }
    Ok(seen.elapsed.as_secs_f64())
}

/// One bulk transfer to `addr` that the sink reports on `rx`: (elapsed,
/// generator CPU + sink CPU).
fn bulk(
    addr: SocketAddr,
    rx: &std::sync::mpsc::Receiver<(u64, Duration)>,
    bytes: u64,
) -> anyhow::Result<(Duration, Duration)> {
    let started = Instant::now();
    let generator = std::thread::spawn(move || peers::generate(addr, bytes));
    let (got, sink_cpu) = rx
        .recv_timeout(Duration::from_secs(120))
        .context("the sink got no complete transfer within 120 s")?;
    let elapsed = started.elapsed();
    let gen_cpu = generator
        .join()
        .map_err(|_| anyhow::anyhow!("generator panicked"))??;
    if got != bytes {
        bail!("bulk transfer lost bytes: sent {bytes}, the sink got {got}");
    }
    Ok((elapsed, gen_cpu + sink_cpu))
}

/// The phases of [`run`], in order (what its progress line shows).
pub const PHASES: &[&str] = &[
    "starting the peers and the tunnel",
    "HTTP/2 and HTTP/1.1 uploads",
    "round trips",
    "bulk transfer",
];

/// Runs the benchmark (blocking; call it off any async runtime thread),
/// showing each of [`PHASES`] on `progress`.
///
/// Errors: a peer or guest failed to start, curl is missing, an upload
/// arrived damaged, a transfer lost bytes.
pub fn run(opts: &Options, progress: &Progress) -> anyhow::Result<Report> {
    progress.phase(PHASES[0]);
    let runner = Arc::new(Runner::new(tunnel_config(), EngineKind::Cranelift)?);
    let component = runner.compile(tether_guest_artifacts::JMUX)?;
    let peers = PeerRuntime::new()?;
    let data = Arc::new(peers::payload(opts.upload_bytes, 42));
    let file = peers::data_file("upload.bin", &data)?;
    let (h1, h1_log) = peers.http1(data.clone())?;
    let (h2, h2_log) = peers.http2(data.clone())?;
    let echo = peers.echo()?;
    let (sink, sink_rx) = peers::sink()?;
    let ports = [free_port()?, free_port()?, free_port()?, free_port()?];
    let listeners: Vec<String> = [h1, h2, echo, sink]
        .iter()
        .zip(ports)
        .map(|(target, port)| format!("tcp-listen://127.0.0.1:{port}/{target}"))
        .collect();
    // A thread per guest: on one shared thread the added round trip's p99
    // was measured at 3-4 ms, against ~0.2 ms with a thread each.
    let tunnel = Tunnel::start_on(
        &runner,
        &component,
        &listeners,
        &ports,
        &[],
        GuestIo::Capture(1 << 20),
        false,
    )?;
    let via = |port: u16| SocketAddr::from(([127, 0, 0, 1], port));

    progress.inc();
    progress.phase(PHASES[1]);
    // Uploads, alternating paths so drift hits both alike.
    let size = opts.upload_bytes;
    let (mut h2_t, mut h2_d, mut h1_t, mut h1_d) = (vec![], vec![], vec![], vec![]);
    for _ in 0..opts.upload_rounds.max(1) {
        h2_d.push(upload(
            &format!("http://{h2}/up"),
            &file,
            true,
            &h2_log,
            size,
        )?);
        h2_t.push(upload(
            &format!("http://{}/up", via(ports[1])),
            &file,
            true,
            &h2_log,
            size,
        )?);
        h1_d.push(upload(
            &format!("http://{h1}/up"),
            &file,
            false,
            &h1_log,
            size,
        )?);
        h1_t.push(upload(
            &format!("http://{}/up", via(ports[0])),
            &file,
            false,
            &h1_log,
            size,
        )?);
    }

    progress.inc();
    progress.phase(PHASES[2]);
    // Round trips.
    let warmup = opts.round_trips / 10 + 10;
    let direct = peers::round_trips(echo, warmup, opts.round_trips, 64)?;
    let relayed = {
        let second = peers::relay(echo)?;
        let first = peers::relay(second.addr())?;
        peers::round_trips(first.addr(), warmup, opts.round_trips, 64)?
    };
    let tunneled = peers::round_trips(via(ports[2]), warmup, opts.round_trips, 64)?;

    progress.inc();
    progress.phase(PHASES[3]);
    // Bulk: a warm-up through the tunnel, then direct, then measured.
    bulk(via(ports[3]), &sink_rx, (16 << 20).min(opts.bulk_bytes))?;
    let (direct_elapsed, _) = bulk(sink, &sink_rx, opts.bulk_bytes)?;
    let cpu0 = peers::process_cpu();
    let (elapsed, load_cpu) = bulk(via(ports[3]), &sink_rx, opts.bulk_bytes)?;
    let tunnel_cpu = peers::process_cpu()
        .saturating_sub(cpu0)
        .saturating_sub(load_cpu);
    drop(tunnel);
    progress.inc();

    let mb = opts.bulk_bytes as f64 / 1e6;
    let (h2_upload_s, h2_direct_s) = (median(h2_t), median(h2_d));
    let (h1_upload_s, h1_direct_s) = (median(h1_t), median(h1_d));
    let (d50, d99) = (percentile_us(&direct, 50.0), percentile_us(&direct, 99.0));
    let (t50, t99) = (
        percentile_us(&tunneled, 50.0),
        percentile_us(&tunneled, 99.0),
    );
    let (r50, r99) = (percentile_us(&relayed, 50.0), percentile_us(&relayed, 99.0));
    Ok(Report {
        upload_bytes: size,
        h2_upload_s,
        h2_direct_s,
        h2_ratio: h2_upload_s / h2_direct_s,
        h1_upload_s,
        h1_direct_s,
        h1_ratio: h1_upload_s / h1_direct_s,
        bulk_bytes: opts.bulk_bytes,
        bulk_mb_per_s: mb / elapsed.as_secs_f64(),
        bulk_direct_mb_per_s: mb / direct_elapsed.as_secs_f64(),
        cpu_s_per_gb: tunnel_cpu.as_secs_f64() / (opts.bulk_bytes as f64 / 1e9),
        rtt_direct_us_p50: d50,
        rtt_direct_us_p99: d99,
        rtt_tunnel_us_p50: t50,
        rtt_tunnel_us_p99: t99,
        rtt_added_us_p50: t50 - d50,
        rtt_added_us_p99: t99 - d99,
        rtt_relay_us_p50: r50,
        rtt_relay_us_p99: r99,
        rtt_relay_added_us_p50: r50 - d50,
        rtt_relay_added_us_p99: r99 - d99,
        rtt_tunnel_us_cdf: cdf_us(&tunneled),
        rtt_direct_us_cdf: cdf_us(&direct),
        rtt_relay_us_cdf: cdf_us(&relayed),
    })
}
