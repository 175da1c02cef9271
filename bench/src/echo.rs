//! The echo measurement behind `tether demo` and `tether bench echo`: the
//! echo guest's `ping` mode on both ABIs (the p2 build through
//! [`Runner`], the p3 build `echo-p3` through [`tether_host::p3::Runner`])
//! and a native tokio-tungstenite client run the same phases against the
//! same server in the same process, and the report puts them side by
//! side.

use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{FutureExt, SinkExt, StreamExt};
use serde::Serialize;
use tokio_tungstenite::tungstenite::Message;

use tether_host::runner::{GuestIo, Outcome, Runner};

use crate::latency::{cdf_us, percentile_us};
use crate::progress::Progress;

/// The workload: counts and sizes (bytes) of each phase.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Unrecorded round trips first (JIT, caches, TCP windows).
    pub warmup: usize,
    /// One-at-a-time round trips and their message size.
    pub rtt: (usize, usize),
    /// Two back-to-back sends then both echoes (the Nagle case).
    pub nagle: (usize, usize),
    /// Small pipelined messages: count, size, window in flight.
    pub pipeline: (usize, usize, usize),
    /// Large pipelined messages: count, size, window in flight.
    pub bulk: (usize, usize, usize),
}

impl Workload {
    /// The demo: about a second each side.
    pub fn demo() -> Workload {
        Workload {
            warmup: 500,
            rtt: (5000, 32),
            nagle: (2000, 16),
            pipeline: (50_000, 64, 64),
            bulk: (256, 1 << 20, 8),
        }
    }

    /// `tether bench echo`: longer runs for stable percentiles.
    pub fn bench() -> Workload {
        Workload {
            warmup: 2000,
            rtt: (20_000, 32),
            nagle: (10_000, 16),
            pipeline: (200_000, 64, 64),
            bulk: (1024, 1 << 20, 8),
        }
    }

    /// A smoke run for CI.
    pub fn quick() -> Workload {
        Workload {
            warmup: 100,
            rtt: (500, 32),
            nagle: (300, 16),
            pipeline: (5000, 64, 64),
            bulk: (32, 1 << 20, 8),
        }
    }

    fn guest_phases(&self) -> Vec<String> {
        vec![
            format!("rtt:{}:{}", self.warmup, self.rtt.1),
            format!("rtt:{}:{}", self.rtt.0, self.rtt.1),
            format!("nagle:{}:{}", self.nagle.0, self.nagle.1),
            format!(
                "pipeline:{}:{}:{}",
                self.pipeline.0, self.pipeline.1, self.pipeline.2
            ),
            format!("pipeline:{}:{}:{}", self.bulk.0, self.bulk.1, self.bulk.2),
        ]
    }
}

/// Raw results of one side: round-trip samples in ns, pipelines as
/// (messages, size bytes, elapsed).
#[derive(Clone, Debug, Default)]
pub struct Samples {
    /// One-at-a-time round trips, ns.
    pub rtt_ns: Vec<u64>,
    /// Two sends then two echoes, ns.
    pub nagle_ns: Vec<u64>,
    /// Small-message pipeline: (messages, bytes each, elapsed).
    pub pipeline: (usize, usize, Duration),
    /// Large-message pipeline: (messages, bytes each, elapsed).
    pub bulk: (usize, usize, Duration),
}

impl Samples {
    fn merge(&mut self, other: Samples) {
        self.rtt_ns.extend(other.rtt_ns);
        self.nagle_ns.extend(other.nagle_ns);
        self.pipeline = (
            self.pipeline.0 + other.pipeline.0,
            other.pipeline.1,
            self.pipeline.2 + other.pipeline.2,
        );
        self.bulk = (
            self.bulk.0 + other.bulk.0,
            other.bulk.1,
            self.bulk.2 + other.bulk.2,
        );
    }
}

/// Parses the echo guest's `ping` output (warm-up line first, ignored).
pub fn parse_guest_output(stdout: &str) -> anyhow::Result<Samples> {
    let mut s = Samples::default();
    let mut rtt_lines = 0;
    let mut pipelines = Vec::new();
    for line in stdout.lines() {
        let mut words = line.split_whitespace();
        let kind = words.next().unwrap_or("");
        let nums: Vec<u64> = words
            .map(|w| w.parse().context("number in guest output"))
            .collect::<Result<_, _>>()?;
        match kind {
            "rtt" => {
                rtt_lines += 1;
                if rtt_lines == 2 {
                    s.rtt_ns = nums;
                }
            }
            "nagle" => s.nagle_ns = nums,
            "pipeline" if nums.len() == 3 => pipelines.push((
                nums[0] as usize,
                nums[1] as usize,
                Duration::from_nanos(nums[2]),
            )),
            "error" => bail!("guest reported: {line}"),
            _ => {}
        }
    }
    if rtt_lines != 2 || pipelines.len() != 2 || s.nagle_ns.is_empty() {
        bail!("incomplete guest output:\n{stdout}");
    }
    s.pipeline = pipelines[0];
    s.bulk = pipelines[1];
    Ok(s)
}

/// Runs the phases with the echo guest through the host.
pub async fn guest_ping(
    runner: &Runner,
    component: &wasmtime::component::Component,
    url: &str,
    w: &Workload,
) -> anyhow::Result<Samples> {
    let args = ping_args("echo", url, w);
    let outcome = runner
        .run(component, &args, GuestIo::Capture(64 << 20))
        .await;
    samples_of(&outcome)
}

/// Runs the phases with the echo guest's p3 build (`echo-p3`) through the
/// async-interface host.
pub async fn guest_ping_p3(
    runner: &tether_host::p3::Runner,
    component: &wasmtime::component::Component,
    url: &str,
    w: &Workload,
) -> anyhow::Result<Samples> {
    let args = ping_args("echo-p3", url, w);
    let outcome = runner
        .run(component, &args, GuestIo::Capture(64 << 20))
        .await;
    samples_of(&outcome)
}

fn ping_args(program: &str, url: &str, w: &Workload) -> Vec<String> {
    let mut args = vec![program.to_string(), "ping".to_string(), url.to_string()];
    args.extend(w.guest_phases());
    args
}

/// The samples of a finished `ping` run.
///
/// Errors: the guest failed, or its output is incomplete.
fn samples_of(outcome: &Outcome) -> anyhow::Result<Samples> {
    if let Err(e) = &outcome.result {
        bail!(
            "echo guest failed: {e}\nstdout: {}\nstderr: {}",
            outcome.stdout_text(),
            String::from_utf8_lossy(&outcome.stderr)
        );
    }
    parse_guest_output(&outcome.stdout_text())
}

type Ws = tokio_tungstenite::WebSocketStream<tokio::net::TcpStream>;

async fn round_trips(ws: &mut Ws, n: usize, size: usize, sends: usize) -> anyhow::Result<Vec<u64>> {
    let payload = bytes::Bytes::from(vec![0x5au8; size]);
    let mut samples = Vec::with_capacity(n);
    for _ in 0..n {
        let t0 = Instant::now();
        for _ in 0..sends {
            ws.send(Message::Binary(payload.clone())).await?;
        }
        for _ in 0..sends {
            next_data(ws).await?;
        }
        samples.push(t0.elapsed().as_nanos() as u64);
    }
    Ok(samples)
}

async fn next_data(ws: &mut Ws) -> anyhow::Result<Message> {
    loop {
        match ws.next().await {
            Some(Ok(m)) if crate::echo_server::is_data(&m) => return Ok(m),
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
            None => bail!("server closed"),
        }
    }
}

async fn pipeline(
    ws: &mut Ws,
    n: usize,
    size: usize,
    window: usize,
) -> anyhow::Result<(usize, usize, Duration)> {
    let payload = bytes::Bytes::from(vec![0xa5u8; size]);
    let t0 = Instant::now();
    let (mut sent, mut received) = (0usize, 0usize);
    while received < n {
        let mut fed = false;
        while sent < n && sent - received < window {
            ws.feed(Message::Binary(payload.clone())).await?;
            sent += 1;
            fed = true;
        }
        if fed {
            ws.flush().await?;
        }
        let m = next_data(ws).await?;
        anyhow::ensure!(m.len() == size, "echo of {} bytes, sent {size}", m.len());
        received += 1;
        while let Some(Some(Ok(m))) = ws.next().now_or_never() {
            if crate::echo_server::is_data(&m) {
                received += 1;
            }
        }
    }
    Ok((n, size, t0.elapsed()))
}

/// Runs the phases with a native tokio-tungstenite client (TCP_NODELAY
/// set, as the host does).
pub async fn native_ping(url: &str, w: &Workload) -> anyhow::Result<Samples> {
    let parsed = url::Url::parse(url)?;
    let addr = format!(
        "{}:{}",
        parsed.host_str().context("host")?,
        parsed.port_or_known_default().context("port")?
    );
    let tcp = tokio::net::TcpStream::connect(&addr).await?;
    tcp.set_nodelay(true)?;
    // The host's own tungstenite settings, so the ratio measures the guest
    // and nothing else.
    let config = tether_host::websocket::ws_config(&Default::default());
    let (mut ws, _) = tokio_tungstenite::client_async_with_config(url, tcp, Some(config)).await?;
    round_trips(&mut ws, w.warmup, w.rtt.1, 1).await?;
    let rtt_ns = round_trips(&mut ws, w.rtt.0, w.rtt.1, 1).await?;
    let nagle_ns = round_trips(&mut ws, w.nagle.0, w.nagle.1, 2).await?;
    let pipeline = pipeline(&mut ws, w.pipeline.0, w.pipeline.1, w.pipeline.2).await?;
    let bulk = pipeline_bulk(&mut ws, w).await?;
    let _ = ws.close(None).await;
    Ok(Samples {
        rtt_ns,
        nagle_ns,
        pipeline,
        bulk,
    })
}

async fn pipeline_bulk(ws: &mut Ws, w: &Workload) -> anyhow::Result<(usize, usize, Duration)> {
    pipeline(ws, w.bulk.0, w.bulk.1, w.bulk.2).await
}

fn rate(p: (usize, usize, Duration)) -> (f64, f64) {
    let secs = p.2.as_secs_f64().max(1e-9);
    (p.0 as f64 / secs, (p.0 * p.1) as f64 / secs / 1e6)
}

/// The figures of one run, guest next to native. Latencies in us, rates in
/// messages/s and MB/s (10^6 bytes; echoed bytes counted once). The
/// unprefixed guest fields are the p2 build's; `p3_` fields are the p3
/// build's (`echo-p3`, `tether:streams-async`) from the same run.
#[derive(Debug, Serialize)]
pub struct Report {
    /// Guest round trip, median, us.
    pub rtt_us_p50: f64,
    /// Guest round trip, 99th percentile, us.
    pub rtt_us_p99: f64,
    /// Native client round trip, median, us.
    pub native_rtt_us_p50: f64,
    /// Native client round trip, 99th percentile, us.
    pub native_rtt_us_p99: f64,
    /// `rtt_us_p50 / native_rtt_us_p50`.
    pub ratio_p50: f64,
    /// `rtt_us_p99 / native_rtt_us_p99`.
    pub ratio_p99: f64,
    /// Guest: two back-to-back sends then both echoes, median, us.
    pub nagle_us_p50: f64,
    /// Guest: the same, 99th percentile, us (must stay under 1 ms).
    pub nagle_us_p99: f64,
    /// Native: two sends then both echoes, median, us.
    pub native_nagle_us_p50: f64,
    /// Native: the same, 99th percentile, us.
    pub native_nagle_us_p99: f64,
    /// Guest: small pipelined messages echoed per second.
    pub msgs_per_s: f64,
    /// Native: small pipelined messages echoed per second.
    pub native_msgs_per_s: f64,
    /// `msgs_per_s / native_msgs_per_s`.
    pub msgs_ratio: f64,
    /// Guest: large-message echo throughput, MB/s (10^6 bytes).
    pub mb_per_s: f64,
    /// Native: large-message echo throughput, MB/s.
    pub native_mb_per_s: f64,
    /// `mb_per_s / native_mb_per_s`.
    pub mb_ratio: f64,
    /// Round-trip samples per side.
    pub rtt_samples: usize,
    /// Size of the pipelined small messages, bytes.
    pub message_bytes: usize,
    /// Size of the large messages, bytes.
    pub bulk_message_bytes: usize,
    /// Guest round trips as `[percentile, us]` pairs (the report's CDF).
    pub rtt_us_cdf: Vec<[f64; 2]>,
    /// Native round trips as `[percentile, us]` pairs.
    pub native_rtt_us_cdf: Vec<[f64; 2]>,
    /// p3 guest round trip, median, us.
    pub p3_rtt_us_p50: f64,
    /// p3 guest round trip, 99th percentile, us.
    pub p3_rtt_us_p99: f64,
    /// `p3_rtt_us_p50 / native_rtt_us_p50`.
    pub p3_ratio_p50: f64,
    /// `p3_rtt_us_p99 / native_rtt_us_p99`.
    pub p3_ratio_p99: f64,
    /// `p3_rtt_us_p50 / rtt_us_p50` (p3 against p2; target at most 1.1).
    pub p3_vs_p2_p50: f64,
    /// p3 guest: two back-to-back sends then both echoes, median, us.
    pub p3_nagle_us_p50: f64,
    /// p3 guest: the same, 99th percentile, us.
    pub p3_nagle_us_p99: f64,
    /// p3 guest: small pipelined messages echoed per second.
    pub p3_msgs_per_s: f64,
    /// `p3_msgs_per_s / native_msgs_per_s`.
    pub p3_msgs_ratio: f64,
    /// p3 guest: large-message echo throughput, MB/s (10^6 bytes).
    pub p3_mb_per_s: f64,
    /// `p3_mb_per_s / native_mb_per_s`.
    pub p3_mb_ratio: f64,
    /// `p3_mb_per_s / mb_per_s` (p3 against p2; target at least 1.0).
    pub p3_vs_p2_mb: f64,
    /// p3 guest round trips as `[percentile, us]` pairs.
    pub p3_rtt_us_cdf: Vec<[f64; 2]>,
    /// The p2 guest on Node.js 24 through jco (`tether-node`, JSPI):
    /// round trip, median, us.
    pub node_rtt_us_p50: f64,
    /// Node: round trip, 99th percentile, us.
    pub node_rtt_us_p99: f64,
    /// `node_rtt_us_p50 / rtt_us_p50` (Node against wasmtime; target at
    /// most 2).
    pub node_vs_p2_p50: f64,
    /// Node: two back-to-back sends then both echoes, median, us.
    pub node_nagle_us_p50: f64,
    /// Node: the same, 99th percentile, us.
    pub node_nagle_us_p99: f64,
    /// Node: small pipelined messages echoed per second.
    pub node_msgs_per_s: f64,
    /// `node_msgs_per_s / msgs_per_s` (Node against wasmtime; target at
    /// least 0.3).
    pub node_vs_p2_msgs: f64,
    /// Node: large-message echo throughput, MB/s (10^6 bytes).
    pub node_mb_per_s: f64,
    /// Node round trips as `[percentile, us]` pairs.
    pub node_rtt_us_cdf: Vec<[f64; 2]>,
}

impl Report {
    /// Computes the figures from the four sides' samples (p2 guest, p3
    /// guest, native, the p2 guest on Node).
    pub fn new(guest: &Samples, p3: &Samples, native: &Samples, node: &Samples) -> Report {
        let (node_msgs, _) = rate(node.pipeline);
        let (_, node_mb) = rate(node.bulk);
        let node_rtt_us_p50 = percentile_us(&node.rtt_ns, 50.0);
        let (g_msgs, _) = rate(guest.pipeline);
        let (p3_msgs, _) = rate(p3.pipeline);
        let (n_msgs, _) = rate(native.pipeline);
        let (_, g_mb) = rate(guest.bulk);
        let (_, p3_mb) = rate(p3.bulk);
        let (_, n_mb) = rate(native.bulk);
        let p3_rtt_us_p50 = percentile_us(&p3.rtt_ns, 50.0);
        let p3_rtt_us_p99 = percentile_us(&p3.rtt_ns, 99.0);
        let rtt_us_p50 = percentile_us(&guest.rtt_ns, 50.0);
        let native_rtt_us_p50 = percentile_us(&native.rtt_ns, 50.0);
        let rtt_us_p99 = percentile_us(&guest.rtt_ns, 99.0);
        let native_rtt_us_p99 = percentile_us(&native.rtt_ns, 99.0);
        Report {
            rtt_us_p50,
            rtt_us_p99,
            native_rtt_us_p50,
            native_rtt_us_p99,
            ratio_p50: rtt_us_p50 / native_rtt_us_p50,
            ratio_p99: rtt_us_p99 / native_rtt_us_p99,
            nagle_us_p50: percentile_us(&guest.nagle_ns, 50.0),
            nagle_us_p99: percentile_us(&guest.nagle_ns, 99.0),
            native_nagle_us_p50: percentile_us(&native.nagle_ns, 50.0),
            native_nagle_us_p99: percentile_us(&native.nagle_ns, 99.0),
            msgs_per_s: g_msgs,
            native_msgs_per_s: n_msgs,
            msgs_ratio: g_msgs / n_msgs,
            mb_per_s: g_mb,
            native_mb_per_s: n_mb,
            mb_ratio: g_mb / n_mb,
            rtt_samples: guest.rtt_ns.len(),
            message_bytes: guest.pipeline.1,
            bulk_message_bytes: guest.bulk.1,
            rtt_us_cdf: cdf_us(&guest.rtt_ns),
            native_rtt_us_cdf: cdf_us(&native.rtt_ns),
            p3_rtt_us_p50,
            p3_rtt_us_p99,
            p3_ratio_p50: p3_rtt_us_p50 / native_rtt_us_p50,
            p3_ratio_p99: p3_rtt_us_p99 / native_rtt_us_p99,
            p3_vs_p2_p50: p3_rtt_us_p50 / rtt_us_p50,
            p3_nagle_us_p50: percentile_us(&p3.nagle_ns, 50.0),
            p3_nagle_us_p99: percentile_us(&p3.nagle_ns, 99.0),
            p3_msgs_per_s: p3_msgs,
            p3_msgs_ratio: p3_msgs / n_msgs,
            p3_mb_per_s: p3_mb,
            p3_mb_ratio: p3_mb / n_mb,
            p3_vs_p2_mb: p3_mb / g_mb,
            p3_rtt_us_cdf: cdf_us(&p3.rtt_ns),
            node_rtt_us_p50,
            node_rtt_us_p99: percentile_us(&node.rtt_ns, 99.0),
            node_vs_p2_p50: node_rtt_us_p50 / rtt_us_p50,
            node_nagle_us_p50: percentile_us(&node.nagle_ns, 50.0),
            node_nagle_us_p99: percentile_us(&node.nagle_ns, 99.0),
            node_msgs_per_s: node_msgs,
            node_vs_p2_msgs: node_msgs / g_msgs,
            node_mb_per_s: node_mb,
            node_rtt_us_cdf: cdf_us(&node.rtt_ns),
        }
    }

    /// The human-readable table: the p2 guest, the p3 guest, native and
    /// the p2 guest on Node, with each guest's ratio to native, p3's to
    /// p2 and Node's to p2 (wasmtime).
    pub fn table(&self) -> String {
        let node = [
            self.node_rtt_us_p50,
            self.node_rtt_us_p99,
            self.node_nagle_us_p50,
            self.node_nagle_us_p99,
            self.node_msgs_per_s,
            self.node_mb_per_s,
        ];
        let row_index = std::cell::Cell::new(0);
        let row = |name: &str, g: f64, p3: f64, n: f64, unit: &str| {
            let nd = node[row_index.get()];
            row_index.set(row_index.get() + 1);
            format!(
                "{name:<36} {g:>11.1} {p3:>11.1} {n:>11.1} {nd:>11.1}   {:>6.2}x {:>6.2}x {:>6.2}x {:>6.2}x  {unit}\n",
                g / n,
                p3 / n,
                p3 / g,
                nd / g
            )
        };
        let mut t = format!(
            "{:<36} {:>11} {:>11} {:>11} {:>11}   {:>7} {:>7} {:>7} {:>7}\n",
            "",
            "guest p2",
            "guest p3",
            "native",
            "node-jco",
            "p2/nat",
            "p3/nat",
            "p3/p2",
            "node/p2"
        );
        t += &row(
            &format!("round trip p50 ({} B)", 32),
            self.rtt_us_p50,
            self.p3_rtt_us_p50,
            self.native_rtt_us_p50,
            "us",
        );
        t += &row(
            "round trip p99",
            self.rtt_us_p99,
            self.p3_rtt_us_p99,
            self.native_rtt_us_p99,
            "us",
        );
        t += &row(
            "2 sends + 2 echoes p50 (Nagle case)",
            self.nagle_us_p50,
            self.p3_nagle_us_p50,
            self.native_nagle_us_p50,
            "us",
        );
        t += &row(
            "2 sends + 2 echoes p99",
            self.nagle_us_p99,
            self.p3_nagle_us_p99,
            self.native_nagle_us_p99,
            "us",
        );
        t += &row(
            &format!("messages/s ({} B, pipelined)", self.message_bytes),
            self.msgs_per_s,
            self.p3_msgs_per_s,
            self.native_msgs_per_s,
            "msg/s",
        );
        t += &row(
            &format!("MB/s ({} KiB messages)", self.bulk_message_bytes >> 10),
            self.mb_per_s,
            self.p3_mb_per_s,
            self.native_mb_per_s,
            "MB/s",
        );
        t
    }
}

/// The guests to compare: each ABI's runner and its compiled echo
/// guest (`echo` for p2, `echo-p3` for p3).
pub struct Guests<'a> {
    /// The p2 host and the `echo` component.
    pub p2: (&'a Runner, &'a wasmtime::component::Component),
    /// The p3 host and the `echo-p3` component.
    pub p3: (
        &'a tether_host::p3::Runner,
        &'a wasmtime::component::Component,
    ),
    /// The `--allow` rule for the `echo` guest on Node (the URL's host
    /// and port).
    pub node_allow: String,
}

/// Steps of `progress` per round of [`compare`]: p2 guest, p3 guest,
/// native, the p2 guest on Node.
pub const STEPS_PER_ROUND: u64 = 4;

/// Runs the phases with the `echo` guest on Node.js through jco
/// (`tether-node run`, see [`crate::node`]), allowed to dial `allow` only.
///
/// Errors: Node is missing (run scripts/setup), the guest failed, or its
/// output is incomplete.
pub async fn node_ping(allow: &str, url: &str, w: &Workload) -> anyhow::Result<Samples> {
    let run = crate::node::NodeRun {
        allow: vec![allow.to_string()],
        ..Default::default()
    };
    let args = ping_args("echo", url, w);
    let out = run
        .output(
            std::path::Path::new(tether_guest_artifacts::ECHO_PATH),
            &args[1..],
        )
        .await?;
    if !out.status.success() {
        bail!(
            "echo guest on node failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    parse_guest_output(&out.stdout)
}

/// Runs the p2 guest, the p3 guest and native `rounds` times each,
/// alternating, against `url`, and pools the samples. Each side of each
/// round is a step of `progress` ([`STEPS_PER_ROUND`] per round).
pub async fn compare(
    guests: &Guests<'_>,
    url: &str,
    w: &Workload,
    rounds: usize,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let mut guest = Samples::default();
    let mut p3 = Samples::default();
    let mut native = Samples::default();
    let mut node = Samples::default();
    let rounds = rounds.max(1);
    for round in 1..=rounds {
        progress.phase(&format!("round {round}/{rounds}: guest p2"));
        let (runner, component) = guests.p2;
        guest.merge(guest_ping(runner, component, url, w).await?);
        progress.inc();
        progress.phase(&format!("round {round}/{rounds}: guest p3"));
        let (runner, component) = guests.p3;
        p3.merge(guest_ping_p3(runner, component, url, w).await?);
        progress.inc();
        progress.phase(&format!("round {round}/{rounds}: native"));
        native.merge(native_ping(url, w).await?);
        progress.inc();
        progress.phase(&format!("round {round}/{rounds}: guest p2 on node-jco"));
        node.merge(node_ping(&guests.node_allow, url, w).await?);
        progress.inc();
    }
    Ok(Report::new(&guest, &p3, &native, &node))
}
