//! `tether bench jmux`: a two-guest JMUX tunnel (`ws://` loopback pipe
//! through the host) next to direct connections to the same peers, in one
//! run:
//!
//! - HTTP/2 upload (curl, prior knowledge) of 8 MiB to an HTTP/2 server
//!   with a 65535-byte stream window, through the tunnel and directly, and
//!   the ratio (timed by curl: its `time_total`, from connect to the last
//!   byte of the answer, without curl's start-up; median of the rounds);
//! - HTTP/1.1 upload likewise;
//! - bulk throughput through the tunnel (MB/s, and the direct loopback
//!   figure) and the CPU seconds per GB the tunnel costs: process CPU
//!   (getrusage) minus the load generator's and the sink's own threads;
//! - the round trip the tunnel adds to a 64-byte request/response (p50 and
//!   p99 of tunnel minus direct, in us), next to what two native TCP
//!   relays in a row add in the same run: the floor of any tunnel with two
//!   ends on this machine.
//!
//! With `--vs jetsocat` ([`Options::vs_jetsocat`]) the same run also sends
//! every row through four pairs of processes ([`pair::Pair`]): two `tether
//! jmux` processes, two `jetsocat jmux-proxy` processes (the reference),
//! and the two mixed pairs (Tether client with jetsocat server, and the
//! reverse). Each process pair's CPU is read from `/proc/PID/stat` of its
//! two processes, so Tether's and jetsocat's figures are measured alike.
//! Uploads go round by round over every path, round trips in blocks over
//! every path in turn, so drift hits all paths alike.
//!
//! Every upload is checked byte for byte by the server.

pub mod pair;
pub mod peers;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Serialize, Serializer};

use crate::latency::{cdf_us, percentile_us};
use crate::progress::Progress;
use crate::tunnel::free_port;
use pair::{Pair, Proxy};
use peers::{PeerRuntime, RoundTrips, Uploads};
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, Limits};

/// How much to measure.
#[derive(Clone, Debug)]
pub struct Options {
    /// Upload size, bytes.
    pub upload_bytes: usize,
    /// Uploads per kind and path (median reported), at most.
    pub upload_rounds: usize,
    /// A path gets no further upload round of a kind once its uploads of
    /// that kind took this long in all (each path gets at least one): a
    /// jetsocat pair's HTTP/2 upload is Nagle-bound (~5.6 s for 8 MiB).
    pub upload_budget: Duration,
    /// Bulk transfer through the tunnel (and directly), bytes.
    pub bulk_bytes: u64,
    /// Recorded round trips per path (after 10% warm-up).
    pub round_trips: usize,
    /// Also run every row through jetsocat and the mixed pairs.
    pub vs_jetsocat: Option<Competitors>,
}

/// The programs of the process pairs of `--vs jetsocat`.
#[derive(Clone, Debug)]
pub struct Competitors {
    /// The `jetsocat` binary (default: [`pair::default_jetsocat`]).
    pub jetsocat: PathBuf,
    /// The `tether` binary whose `tether jmux` makes the Tether processes.
    pub tether: PathBuf,
}

impl Options {
    /// The full benchmark: 8 MiB uploads x3 (within 5 s of uploads per
    /// kind and path), 1 GiB bulk, 5000 round trips.
    pub fn full() -> Options {
        Options {
            upload_bytes: 8 << 20,
            upload_rounds: 3,
            upload_budget: Duration::from_secs(5),
            bulk_bytes: 1 << 30,
            round_trips: 5000,
            vs_jetsocat: None,
        }
    }

    /// A smoke run for CI: 1 MiB uploads x1 (a jetsocat pair's HTTP/2
    /// upload of 8 MiB alone takes ~6 s), 64 MiB bulk, 500 round trips.
    pub fn quick() -> Options {
        Options {
            upload_bytes: 1 << 20,
            upload_rounds: 1,
            upload_budget: Duration::ZERO,
            bulk_bytes: 64 << 20,
            round_trips: 500,
            vs_jetsocat: None,
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
    /// `rtt_added_us_p50 / rtt_relay_added_us_p50`: the tunnel's added
    /// round trip in units of the two-relay floor (issue 13: at most 1.3).
    pub rtt_added_over_floor_p50: f64,
    /// Round trips through the tunnel as `[percentile, us]` pairs (the
    /// report's CDF).
    pub rtt_tunnel_us_cdf: Vec<[f64; 2]>,
    /// Direct round trips as `[percentile, us]` pairs.
    pub rtt_direct_us_cdf: Vec<[f64; 2]>,
    /// Round trips through the two native relays as `[percentile, us]`
    /// pairs.
    pub rtt_relay_us_cdf: Vec<[f64; 2]>,
    /// The process pairs of `--vs jetsocat`, flattened into this object
    /// with a prefix per pair (see [`VsJetsocat`]).
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub vs_jetsocat: Option<VsJetsocat>,
}

/// One path's figures, in the units of [`Report`].
#[derive(Clone, Debug, Serialize)]
pub struct PathFigures {
    /// HTTP/2 upload, s (median of the rounds run).
    pub h2_upload_s: f64,
    /// HTTP/2 upload rounds run (fewer than asked once the upload budget
    /// was spent).
    pub h2_upload_rounds: usize,
    /// HTTP/1.1 upload, s (median).
    pub h1_upload_s: f64,
    /// HTTP/1.1 upload rounds run.
    pub h1_upload_rounds: usize,
    /// Bulk throughput, MB/s.
    pub bulk_mb_per_s: f64,
    /// CPU seconds of the pair's two processes per GB relayed
    /// (`/proc/PID/stat`, 10 ms ticks).
    pub cpu_s_per_gb: f64,
    /// Round trip, us, p50.
    pub rtt_us_p50: f64,
    /// Round trip, us, p99.
    pub rtt_us_p99: f64,
    /// Round trip minus the direct one, us, p50.
    pub rtt_added_us_p50: f64,
    /// Round trip minus the direct one, us, p99.
    pub rtt_added_us_p99: f64,
    /// `rtt_added_us_p50 / rtt_relay_added_us_p50` (the two-relay floor).
    pub rtt_added_over_floor_p50: f64,
    /// Round trips as `[percentile, us]` pairs.
    pub rtt_us_cdf: Vec<[f64; 2]>,
}

/// The four process pairs of `--vs jetsocat`. In JSON each pair's
/// [`PathFigures`] appear with a prefix (`tether_procs_`, `jetsocat_`,
/// `tether_to_jetsocat_`, `jetsocat_to_tether_`), followed by the
/// Tether/jetsocat ratios (`tether_over_jetsocat_*`, from the two pure
/// pairs: below 1 means Tether is ahead, except for bulk MB/s where above
/// 1 does) and `jetsocat_path`.
#[derive(Clone, Debug)]
pub struct VsJetsocat {
    /// The jetsocat binary used.
    pub jetsocat_path: String,
    /// Two `tether jmux` processes.
    pub tether: PathFigures,
    /// Two `jetsocat jmux-proxy` processes.
    pub jetsocat: PathFigures,
    /// A `tether jmux` client with a jetsocat server.
    pub tether_to_jetsocat: PathFigures,
    /// A jetsocat client with a `tether jmux` server.
    pub jetsocat_to_tether: PathFigures,
}

/// A row of the side-by-side table.
struct Row {
    /// Suffix of its `tether_over_jetsocat_` JSON key.
    key: &'static str,
    label: &'static str,
    get: fn(&PathFigures) -> f64,
    /// Digits after the point.
    digits: usize,
    /// Higher is better (MB/s); otherwise lower is.
    higher: bool,
}

const ROWS: [Row; 6] = [
    Row {
        key: "h2_upload",
        label: "HTTP/2 upload (s)",
        get: |p| p.h2_upload_s,
        digits: 4,
        higher: false,
    },
    Row {
        key: "h1_upload",
        label: "HTTP/1.1 upload (s)",
        get: |p| p.h1_upload_s,
        digits: 4,
        higher: false,
    },
    Row {
        key: "bulk_mb_per_s",
        label: "bulk (MB/s)",
        get: |p| p.bulk_mb_per_s,
        digits: 0,
        higher: true,
    },
    Row {
        key: "cpu_s_per_gb",
        label: "CPU (s per GB relayed)",
        get: |p| p.cpu_s_per_gb,
        digits: 2,
        higher: false,
    },
    Row {
        key: "rtt_added_p50",
        label: "round trip added p50 (us)",
        get: |p| p.rtt_added_us_p50,
        digits: 1,
        higher: false,
    },
    Row {
        key: "rtt_added_p99",
        label: "round trip added p99 (us)",
        get: |p| p.rtt_added_us_p99,
        digits: 1,
        higher: false,
    },
];

impl VsJetsocat {
    /// Tether/jetsocat per row: (JSON key suffix, ratio, Tether ahead).
    pub fn ratios(&self) -> Vec<(&'static str, f64, bool)> {
        ROWS.iter()
            .map(|row| {
                let (t, j) = ((row.get)(&self.tether), (row.get)(&self.jetsocat));
                (row.key, t / j, if row.higher { t > j } else { t < j })
            })
            .collect()
    }
}

impl Serialize for VsJetsocat {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        use serde::ser::Error;
        let mut map = serde_json::Map::new();
        for (prefix, figures) in [
            ("tether_procs", &self.tether),
            ("jetsocat", &self.jetsocat),
            ("tether_to_jetsocat", &self.tether_to_jetsocat),
            ("jetsocat_to_tether", &self.jetsocat_to_tether),
        ] {
            let value = serde_json::to_value(figures).map_err(S::Error::custom)?;
            for (key, v) in value.as_object().into_iter().flatten() {
                map.insert(format!("{prefix}_{key}"), v.clone());
            }
        }
        for (key, ratio, _) in self.ratios() {
            map.insert(format!("tether_over_jetsocat_{key}"), ratio.into());
        }
        map.insert("jetsocat_path".into(), self.jetsocat_path.clone().into());
        map.serialize(serializer)
    }
}

fn check(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}

impl Report {
    /// A table for people, with the targets (and the jetsocat
    /// table when measured).
    pub fn table(&self) -> String {
        let mut out = format!(
            "{:<34} {:>12} {:>12} {:>9}  target\n\
             {:<34} {:>12.4} {:>12.4} {:>8.2}x  <= 3x {}\n\
             {:<34} {:>12.4} {:>12.4} {:>8.2}x  <= 3x {}\n\
             {:<34} {:>12.0} {:>12.0} {:>9}  >= 300 {}\n\
             {:<34} {:>12.2} {:>12} {:>9}  <= 2.4 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  <= 100 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  < 1000 {}\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  (native floor)\n\
             {:<34} {:>12.1} {:>12.1} {:>8.1}  (native floor)\n\
             {:<34} {:>12} {:>12} {:>8.2}x  <= 1.3x {}\n",
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
            "added p50 / two-relay floor",
            "",
            "",
            self.rtt_added_over_floor_p50,
            check(self.rtt_added_over_floor_p50 <= 1.3),
        );
        if let Some(vs) = &self.vs_jetsocat {
            out.push('\n');
            out.push_str(&vs.table(self.upload_bytes));
        }
        out
    }
}

impl VsJetsocat {
    /// The side-by-side table: Tether and jetsocat pairs of processes, the
    /// ratio, the mixed pairs, and whether Tether is ahead.
    pub fn table(&self, upload_bytes: usize) -> String {
        let mib = upload_bytes >> 20;
        let paths = [
            &self.tether,
            &self.jetsocat,
            &self.tether_to_jetsocat,
            &self.jetsocat_to_tether,
        ];
        let ratios = self.ratios();
        let mut out = format!(
            "{:<32} {:>10} {:>10} {:>8} {:>10} {:>10}  target\n",
            "two processes each", "Tether", "jetsocat", "T/j", "T->j", "j->T"
        );
        for (row, (_, ratio, ahead)) in ROWS.iter().zip(&ratios) {
            let v: Vec<String> = paths
                .iter()
                .map(|p| format!("{:.*}", row.digits, (row.get)(p)))
                .collect();
            let label = row.label.replace("upload", &format!("upload {mib} MiB"));
            out.push_str(&format!(
                "{label:<32} {:>10} {:>10} {:>7.2}x {:>10} {:>10}  Tether ahead {}\n",
                v[0],
                v[1],
                ratio,
                v[2],
                v[3],
                check(*ahead)
            ));
        }
        out.push_str(&format!(
            "{:<32} {:>10.2} {:>10.2} {:>8} {:>10.2} {:>10.2}  Tether <= 1.3x {}\n",
            "added p50 / two-relay floor",
            self.tether.rtt_added_over_floor_p50,
            self.jetsocat.rtt_added_over_floor_p50,
            "",
            self.tether_to_jetsocat.rtt_added_over_floor_p50,
            self.jetsocat_to_tether.rtt_added_over_floor_p50,
            check(self.tether.rtt_added_over_floor_p50 <= 1.3)
        ));
        let rounds: Vec<String> = paths
            .iter()
            .map(|p| format!("{}/{}", p.h2_upload_rounds, p.h1_upload_rounds))
            .collect();
        out.push_str(&format!(
            "upload rounds run (HTTP/2 / HTTP/1.1): Tether {}, jetsocat {}, T->j {}, j->T {}\n\
             T->j: Tether client, jetsocat server; j->T: jetsocat client, Tether server\n",
            rounds[0], rounds[1], rounds[2], rounds[3]
        ));
        out
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
    let (answer, total) = peers::curl_upload_timed(url, file, h2)?;
    let seen = peers::upload_after(log, before)?;
    if !seen.ok || answer.trim() != format!("ok {size}") {
        bail!(
            "upload to {url} arrived damaged: server saw {} bytes, answered {answer:?}",
            seen.bytes
        );
    }
    Ok(total.as_secs_f64())
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

/// The targets every path leads to, in this order.
const H1: usize = 0;
const H2: usize = 1;
const ECHO: usize = 2;
const SINK: usize = 3;

/// One way to reach the four targets: directly, or through a pair of JMUX
/// proxies with a `tcp-listen://` listener per target.
struct Path {
    name: &'static str,
    /// Where to connect for each target (`H1`, `H2`, `ECHO`, `SINK`).
    via: [SocketAddr; 4],
    pair: Option<Pair>,
    h2: Vec<f64>,
    h1: Vec<f64>,
    rtt: Option<RoundTrips>,
    /// Bulk: elapsed, and CPU of the relaying (none for direct).
    bulk: Option<(Duration, Option<Duration>)>,
}

impl Path {
    fn direct(targets: [SocketAddr; 4]) -> Path {
        Path {
            name: "direct",
            via: targets,
            pair: None,
            h2: Vec::new(),
            h1: Vec::new(),
            rtt: None,
            bulk: None,
        }
    }

    fn through(
        name: &'static str,
        server: &Proxy,
        client: &Proxy,
        targets: [SocketAddr; 4],
    ) -> anyhow::Result<Path> {
        let ports = [free_port()?, free_port()?, free_port()?, free_port()?];
        let listeners: Vec<String> = targets
            .iter()
            .zip(ports)
            .map(|(target, port)| format!("tcp-listen://127.0.0.1:{port}/{target}"))
            .collect();
        let pair = Pair::start(server, client, &listeners, &ports, &[])
            .with_context(|| format!("starting the {name} pair"))?;
        Ok(Path {
            name,
            via: ports.map(|p| SocketAddr::from(([127, 0, 0, 1], p))),
            pair: Some(pair),
            ..Path::direct(targets)
        })
    }

    /// The relaying's CPU so far: the pair's processes, or (`true`) this
    /// whole process for a pair of guests in it; `None` for direct.
    fn cpu(&self) -> anyhow::Result<Option<(Duration, bool)>> {
        let Some(pair) = &self.pair else {
            return Ok(None);
        };
        Ok(Some(match pair.cpu()? {
            Some(cpu) => (cpu, false),
            None => (peers::process_cpu(), true),
        }))
    }

    fn figures(&self, direct: &[u64], floor_added_p50: f64, bulk_bytes: u64) -> PathFigures {
        let samples = self.rtt.as_ref().map_or(&[][..], |r| &r.samples[..]);
        let (p50, p99) = (percentile_us(samples, 50.0), percentile_us(samples, 99.0));
        let (d50, d99) = (percentile_us(direct, 50.0), percentile_us(direct, 99.0));
        let (elapsed, cpu) = self.bulk.unwrap_or_default();
        PathFigures {
            h2_upload_s: median(self.h2.clone()),
            h2_upload_rounds: self.h2.len(),
            h1_upload_s: median(self.h1.clone()),
            h1_upload_rounds: self.h1.len(),
            bulk_mb_per_s: bulk_bytes as f64 / 1e6 / elapsed.as_secs_f64(),
            cpu_s_per_gb: cpu.unwrap_or_default().as_secs_f64() / (bulk_bytes as f64 / 1e9),
            rtt_us_p50: p50,
            rtt_us_p99: p99,
            rtt_added_us_p50: p50 - d50,
            rtt_added_us_p99: p99 - d99,
            rtt_added_over_floor_p50: (p50 - d50) / floor_added_p50,
            rtt_us_cdf: cdf_us(samples),
        }
    }
}

/// The phases of [`run`], in order (what its progress line shows).
pub const PHASES: &[&str] = &[
    "starting the peers and the tunnels",
    "HTTP/2 and HTTP/1.1 uploads",
    "round trips",
    "bulk transfers",
];

/// Runs the benchmark (blocking; call it off any async runtime thread),
/// showing each of [`PHASES`] on `progress`.
///
/// Errors: jetsocat is missing (naming the path), a peer, guest or proxy
/// process failed to start, curl is missing, an upload arrived damaged, a
/// transfer lost bytes.
pub fn run(opts: &Options, progress: &Progress) -> anyhow::Result<Report> {
    progress.phase(PHASES[0]);
    if let Some(c) = &opts.vs_jetsocat {
        pair::require_jetsocat(&c.jetsocat)?;
    }
    let runner = Arc::new(Runner::new(tunnel_config(), EngineKind::Cranelift)?);
    let component = runner.compile(tether_guest_artifacts::JMUX)?;
    let peers = PeerRuntime::new()?;
    let data = Arc::new(peers::payload(opts.upload_bytes, 42));
    let file = peers::data_file("upload.bin", &data)?;
    let (h1, h1_log) = peers.http1(data.clone())?;
    let (h2, h2_log) = peers.http2(data.clone())?;
    let echo = peers.echo()?;
    let (sink, sink_rx) = peers::sink()?;
    let targets = [h1, h2, echo, sink];
    // A thread per guest: on one shared thread the added round trip's p99
    // was measured at 3-4 ms, against ~0.2 ms with a thread each.
    let guest = Proxy::Guest {
        runner,
        component,
        io: GuestIo::Capture(1 << 20),
    };
    let mut paths = vec![
        Path::direct(targets),
        Path::through("tunnel", &guest, &guest, targets)?,
    ];
    if let Some(c) = &opts.vs_jetsocat {
        let tether = Proxy::Tether(c.tether.clone());
        let jetsocat = Proxy::Jetsocat(c.jetsocat.clone());
        paths.push(Path::through("tether", &tether, &tether, targets)?);
        paths.push(Path::through("jetsocat", &jetsocat, &jetsocat, targets)?);
        // (server, client): Tether client with a jetsocat server, and the
        // reverse.
        paths.push(Path::through(
            "tether_to_jetsocat",
            &jetsocat,
            &tether,
            targets,
        )?);
        paths.push(Path::through(
            "jetsocat_to_tether",
            &tether,
            &jetsocat,
            targets,
        )?);
    }

    progress.inc();
    progress.phase(PHASES[1]);
    // Uploads, round by round over every path so drift hits all alike.
    let size = opts.upload_bytes;
    let budget = opts.upload_budget.as_secs_f64();
    for round in 0..opts.upload_rounds.max(1) {
        for path in &mut paths {
            for (h2, target, log) in [(true, H2, &h2_log), (false, H1, &h1_log)] {
                let times = if h2 { &mut path.h2 } else { &mut path.h1 };
                if round > 0 && times.iter().sum::<f64>() >= budget {
                    continue;
                }
                let url = format!("http://{}/up", path.via[target]);
                let s = upload(&url, &file, h2, log, size)
                    .with_context(|| format!("upload through {}", path.name))?;
                times.push(s);
            }
        }
    }

    progress.inc();
    progress.phase(PHASES[2]);
    // Round trips: a connection per path (and through two native relays),
    // then blocks over every path in turn.
    let warmup = opts.round_trips / 10 + 10;
    let second = peers::relay(echo)?;
    let first = peers::relay(second.addr())?;
    let mut relayed = RoundTrips::connect(first.addr(), 64, warmup)?;
    for path in &mut paths {
        path.rtt = Some(
            RoundTrips::connect(path.via[ECHO], 64, warmup)
                .with_context(|| format!("round trips through {}", path.name))?,
        );
    }
    let blocks = 10;
    let per_block = opts.round_trips.div_ceil(blocks);
    for _ in 0..blocks {
        relayed.run(per_block)?;
        for path in &mut paths {
            if let Some(r) = &mut path.rtt {
                r.run(per_block)
                    .with_context(|| format!("round trips through {}", path.name))?;
            }
        }
    }
    drop((first, second));

    progress.inc();
    progress.phase(PHASES[3]);
    // Bulk: a warm-up through every pair, then each path in turn.
    let warm = (16 << 20).min(opts.bulk_bytes);
    for path in paths.iter().filter(|p| p.pair.is_some()) {
        bulk(path.via[SINK], &sink_rx, warm)
            .with_context(|| format!("bulk warm-up through {}", path.name))?;
    }
    for path in &mut paths {
        let cpu0 = path.cpu()?;
        let (elapsed, load_cpu) = bulk(path.via[SINK], &sink_rx, opts.bulk_bytes)
            .with_context(|| format!("bulk through {}", path.name))?;
        let cpu = match (cpu0, path.cpu()?) {
            (Some((c0, false)), Some((c1, _))) => Some(c1.saturating_sub(c0)),
            (Some((c0, true)), Some((c1, _))) => {
                Some(c1.saturating_sub(c0).saturating_sub(load_cpu))
            }
            _ => None,
        };
        path.bulk = Some((elapsed, cpu));
    }
    progress.inc();

    let direct = paths[0].rtt.as_ref().map_or(&[][..], |r| &r.samples);
    let (d50, d99) = (percentile_us(direct, 50.0), percentile_us(direct, 99.0));
    let relay = &relayed.samples;
    let (r50, r99) = (percentile_us(relay, 50.0), percentile_us(relay, 99.0));
    let floor = r50 - d50;
    let mut figures: Vec<PathFigures> = paths
        .iter()
        .map(|p| p.figures(direct, floor, opts.bulk_bytes))
        .collect();
    let vs_jetsocat = opts.vs_jetsocat.as_ref().map(|c| {
        let mut rest = figures.drain(2..);
        let mut next = || rest.next().expect("four process pairs");
        VsJetsocat {
            jetsocat_path: c.jetsocat.display().to_string(),
            tether: next(),
            jetsocat: next(),
            tether_to_jetsocat: next(),
            jetsocat_to_tether: next(),
        }
    });
    let (d, t) = (&figures[0], &figures[1]);
    Ok(Report {
        upload_bytes: size,
        h2_upload_s: t.h2_upload_s,
        h2_direct_s: d.h2_upload_s,
        h2_ratio: t.h2_upload_s / d.h2_upload_s,
        h1_upload_s: t.h1_upload_s,
        h1_direct_s: d.h1_upload_s,
        h1_ratio: t.h1_upload_s / d.h1_upload_s,
        bulk_bytes: opts.bulk_bytes,
        bulk_mb_per_s: t.bulk_mb_per_s,
        bulk_direct_mb_per_s: d.bulk_mb_per_s,
        cpu_s_per_gb: t.cpu_s_per_gb,
        rtt_direct_us_p50: d50,
        rtt_direct_us_p99: d99,
        rtt_tunnel_us_p50: t.rtt_us_p50,
        rtt_tunnel_us_p99: t.rtt_us_p99,
        rtt_added_us_p50: t.rtt_added_us_p50,
        rtt_added_us_p99: t.rtt_added_us_p99,
        rtt_relay_us_p50: r50,
        rtt_relay_us_p99: r99,
        rtt_relay_added_us_p50: floor,
        rtt_relay_added_us_p99: r99 - d99,
        rtt_added_over_floor_p50: t.rtt_added_over_floor_p50,
        rtt_tunnel_us_cdf: t.rtt_us_cdf.clone(),
        rtt_direct_us_cdf: d.rtt_us_cdf.clone(),
        rtt_relay_us_cdf: cdf_us(relay),
        vs_jetsocat,
    })
}
