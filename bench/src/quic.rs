//! `tether bench quic`: QUIC over message streams in every pairing of the
//! `quic-echo` guest and the native peer (`crate::quic_peer`), client -> server:
//! native -> native (the baseline), guest -> native, native -> guest,
//! guest -> guest, with the guest's QUIC packet keys in the host
//! (`--aead host`, its default), then the three guest pairings again with
//! the keys inside the guest (`guest-wasm-aead`, `--aead guest`). Servers
//! run on their own thread and runtime, clients on the caller's, all in one
//! process and one run.
//!
//! Per pairing: handshake time p50/p99 (ms, from the client's first
//! datagram to `Connected`, one fresh message stream each), echo round
//! trip p50/p99 (us, 32-byte messages on one stream) and bulk echo
//! throughput (MB/s, 10^6 bytes, echoed bytes counted once, every byte
//! verified). The tax rows compare the guest client (guest -> native) with
//! native -> native; the run fails when the guest's handshake p50 is more
//! than [`HANDSHAKE_TAX_GUARD_MS`] above native's (lesson 3 of
//! latency-lessons.md: a polling tax must not quietly return).

use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use serde::Serialize;
use tether_quic::{Identity, Options, Phase};
use wasmtime::component::Component;

use crate::latency::{cdf_us, percentile_us};
use crate::progress::Progress;
use crate::quic_peer::{self as peer, ClientRun, Faults, NativeServer};
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, Limits};

/// The largest guest handshake p50 above native's that the run accepts, ms.
pub const HANDSHAKE_TAX_GUARD_MS: f64 = 10.0;

/// The pairings of a run (client, server), in order: native -> native
/// first, the baseline.
pub const PAIRINGS: [(Side, Side); 7] = [
    (Side::Native, Side::Native),
    (Side::Guest, Side::Native),
    (Side::Native, Side::Guest),
    (Side::Guest, Side::Guest),
    (Side::GuestWasmAead, Side::Native),
    (Side::Native, Side::GuestWasmAead),
    (Side::GuestWasmAead, Side::GuestWasmAead),
];

/// How much each pairing does.
#[derive(Clone, Copy, Debug)]
pub struct Workload {
    /// Handshake-only connections (the first is a warm-up, not counted).
    pub handshakes: usize,
    /// Unrecorded round trips first.
    pub warmup: usize,
    /// Recorded round trips and their size, bytes.
    pub rtt: (usize, usize),
    /// Bytes of the bulk echo.
    pub bulk_bytes: u64,
}

impl Workload {
    /// The full benchmark.
    pub fn bench() -> Workload {
        Workload {
            handshakes: 100,
            warmup: 200,
            rtt: (2000, 32),
            bulk_bytes: 64 << 20,
        }
    }

    /// A smoke run for CI.
    pub fn quick() -> Workload {
        Workload {
            handshakes: 10,
            warmup: 50,
            rtt: (200, 32),
            bulk_bytes: 4 << 20,
        }
    }

    fn phases(&self) -> Vec<String> {
        vec![
            format!("rtt:{}:{}", self.warmup, self.rtt.1),
            format!("rtt:{}:{}", self.rtt.0, self.rtt.1),
            format!("stream:{}", self.bulk_bytes),
        ]
    }
}

/// Who runs a side of a pairing.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Side {
    /// The native peer (`crate::quic_peer`).
    Native,
    /// The `quic-echo` guest through the host, its packet keys in the host
    /// (`--aead host`, the guest's default).
    Guest,
    /// The `quic-echo` guest with its packet keys inside (`--aead guest`):
    /// ChaCha20-Poly1305 in WebAssembly.
    GuestWasmAead,
}

/// Where a `quic-echo` guest keeps its QUIC packet keys (its `--aead`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GuestAead {
    /// In the host (`tether:streams/aead`): native AES-GCM.
    Host,
    /// In the guest: ChaCha20-Poly1305 in WebAssembly.
    Guest,
}

impl GuestAead {
    /// The guest's `--aead` option.
    pub fn args(self) -> [String; 2] {
        let value = match self {
            GuestAead::Host => "host",
            GuestAead::Guest => "guest",
        };
        ["--aead".into(), value.into()]
    }
}

impl Side {
    /// The guest's AEAD choice; `None` for the native peer.
    pub fn guest_aead(self) -> Option<GuestAead> {
        match self {
            Side::Native => None,
            Side::Guest => Some(GuestAead::Host),
            Side::GuestWasmAead => Some(GuestAead::Guest),
        }
    }
}

/// The figures of one pairing.
#[derive(Clone, Debug, Serialize)]
pub struct PairingReport {
    /// `client->server`, e.g. `guest->native`.
    pub name: String,
    pub client: Side,
    pub server: Side,
    pub handshake_ms_p50: f64,
    pub handshake_ms_p99: f64,
    pub rtt_us_p50: f64,
    pub rtt_us_p99: f64,
    pub bulk_mb_per_s: f64,
    /// Handshakes measured.
    pub handshakes: usize,
    /// Round trips measured.
    pub rtt_samples: usize,
    /// Round trips as `[percentile, us]` pairs (the report's CDF).
    pub rtt_us_cdf: Vec<[f64; 2]>,
}

/// The whole run. Headline fields are the guest client against the native
/// server next to native against native; `pairings` has all four.
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    pub handshake_ms_p50: f64,
    pub handshake_ms_p99: f64,
    pub native_handshake_ms_p50: f64,
    pub native_handshake_ms_p99: f64,
    /// Guest handshake p50 minus native handshake p50, ms.
    pub handshake_tax_ms: f64,
    pub rtt_us_p50: f64,
    pub rtt_us_p99: f64,
    pub native_rtt_us_p50: f64,
    pub native_rtt_us_p99: f64,
    /// Guest round-trip p50 minus native round-trip p50, us.
    pub rtt_tax_us: f64,
    pub bulk_mb_per_s: f64,
    pub native_bulk_mb_per_s: f64,
    /// Guest bulk MB/s over native bulk MB/s.
    pub bulk_ratio: f64,
    /// Bulk MB/s of the guest client with its AEAD inside
    /// (guest-wasm-aead -> native), same run.
    pub wasm_aead_bulk_mb_per_s: f64,
    /// That over native bulk MB/s.
    pub wasm_aead_bulk_ratio: f64,
    pub bulk_bytes: u64,
    pub rtt_message_bytes: usize,
    /// The initial datagram size (MTU) both sides used, bytes.
    pub datagram_bytes: u16,
    /// The largest datagram size path MTU discovery could reach, bytes
    /// (equal to `datagram_bytes`: discovery off).
    pub max_datagram_bytes: u16,
    /// The tax guard applied, ms.
    pub handshake_tax_guard_ms: f64,
    pub pairings: Vec<PairingReport>,
}

impl Report {
    fn pairing(&self, client: Side, server: Side) -> &PairingReport {
        self.pairings
            .iter()
            .find(|p| p.client == client && p.server == server)
            .expect("every pairing runs")
    }

    /// The human-readable table.
    pub fn table(&self) -> String {
        let mut t = format!(
            "{:<36} {:>12} {:>12} {:>11} {:>11} {:>11}\n",
            "client -> server", "handshake", "handshake", "rtt p50", "rtt p99", "bulk echo"
        );
        t += &format!(
            "{:<36} {:>12} {:>12} {:>11} {:>11} {:>11}\n",
            "", "p50 (ms)", "p99 (ms)", "(us)", "(us)", "(MB/s)"
        );
        for p in &self.pairings {
            t += &format!(
                "{:<36} {:>12.2} {:>12.2} {:>11.1} {:>11.1} {:>11.1}\n",
                p.name.replace("->", " -> "),
                p.handshake_ms_p50,
                p.handshake_ms_p99,
                p.rtt_us_p50,
                p.rtt_us_p99,
                p.bulk_mb_per_s
            );
        }
        t += &format!(
            "\ntax, guest -> native vs native -> native (guest: packet keys in the host):\n  handshake_tax_ms {:+.2} (guard: at most {:.0})\n  rtt_tax_us       {:+.1}\n  bulk ratio       {:.2}x (guest-wasm-aead: {:.2}x)\n",
            self.handshake_tax_ms,
            self.handshake_tax_guard_ms,
            self.rtt_tax_us,
            self.bulk_ratio,
            self.wasm_aead_bulk_ratio
        );
        t
    }
}

fn side_name(side: Side) -> &'static str {
    match side {
        Side::Guest => "guest",
        Side::GuestWasmAead => "guest-wasm-aead",
        Side::Native => "native",
    }
}

fn to_ns(d: &[Duration]) -> Vec<u64> {
    d.iter().map(|d| d.as_nanos() as u64).collect()
}

fn summarize(
    client: Side,
    server: Side,
    run: &ClientRun,
    w: &Workload,
) -> anyhow::Result<PairingReport> {
    let name = format!("{}->{}", side_name(client), side_name(server));
    if let Some((kind, message)) = &run.error {
        bail!("{name}: the client failed ({kind}): {message}");
    }
    // The first handshake warms up code paths and caches.
    let handshakes = to_ns(run.handshakes.get(1..).unwrap_or_default());
    let rtts: Vec<&Vec<u64>> = run
        .reports
        .iter()
        .filter_map(|r| match r {
            tether_quic::Report::Rtt { samples_ns, .. } => Some(samples_ns),
            _ => None,
        })
        .collect();
    let streams = run.streams();
    if handshakes.len() != w.handshakes || rtts.len() != 2 || streams.len() != 1 {
        bail!("{name}: incomplete results: {run:?}");
    }
    let rtt = rtts[1];
    let (bytes, elapsed) = streams[0];
    Ok(PairingReport {
        name,
        client,
        server,
        handshake_ms_p50: percentile_us(&handshakes, 50.0) / 1000.0,
        handshake_ms_p99: percentile_us(&handshakes, 99.0) / 1000.0,
        rtt_us_p50: percentile_us(rtt, 50.0),
        rtt_us_p99: percentile_us(rtt, 99.0),
        bulk_mb_per_s: bytes as f64 / elapsed.as_secs_f64().max(1e-9) / 1e6,
        handshakes: handshakes.len(),
        rtt_samples: rtt.len(),
        rtt_us_cdf: cdf_us(rtt),
    })
}

/// The host configuration for the guests: dial and listen on 127.0.0.1.
pub fn local_config() -> Config {
    let rule = |r: &str| r.parse().expect("valid rule");
    Config {
        policy: Policy {
            allow: vec![rule("127.0.0.1:*")],
            deny: Vec::new(),
            listen: vec![rule("127.0.0.1:*")],
        },
        limits: Limits::default(),
        ..Config::default()
    }
}

/// Runs the guest client against `url`, its packet keys where `aead`
/// says, and parses its output.
#[allow(clippy::too_many_arguments)]
pub async fn guest_client(
    runner: &Runner,
    component: &Component,
    url: &str,
    trusted_der: &[u8],
    options: &Options,
    aead: GuestAead,
    handshakes: usize,
    phases: &[String],
) -> anyhow::Result<ClientRun> {
    let mut args = peer::guest_client_args(url, trusted_der, options, handshakes, &[]);
    args.extend(aead.args());
    args.extend(phases.iter().cloned());
    let outcome = runner
        .run(component, &args, GuestIo::Capture(16 << 20))
        .await;
    let run = peer::parse_client_output(&outcome.stdout_text());
    if run.error.is_none() && !outcome.success() {
        bail!(
            "the quic-echo client failed: {:?}\nstdout: {}\nstderr: {}",
            outcome.result,
            outcome.stdout_text(),
            String::from_utf8_lossy(&outcome.stderr)
        );
    }
    Ok(run)
}

/// Runs the `quic-echo` guest as a client on Node.js through jco
/// (`tether-node run`, see [`crate::node`]), allowed to dial `url`'s
/// host and port only, and parses its report lines.
///
/// Errors: Node is missing (run scripts/setup), or the guest failed
/// without a report line saying why.
pub async fn node_client(
    url: &str,
    trusted_der: &[u8],
    options: &Options,
    handshakes: usize,
    phases: &[String],
) -> anyhow::Result<ClientRun> {
    let target = tether_host::websocket::parse_ws_url(url)
        .map_err(|e| anyhow::anyhow!("{}", tether_host::bindings::describe(&e)))?;
    let run = crate::node::NodeRun {
        allow: vec![format!("{}:{}", target.host, target.port)],
        ..Default::default()
    };
    let args = peer::guest_client_args(url, trusted_der, options, handshakes, phases);
    let out = run
        .output(
            std::path::Path::new(tether_guest_artifacts::QUIC_ECHO_PATH),
            &args[1..],
        )
        .await?;
    let client = peer::parse_client_output(&out.stdout);
    if client.error.is_none() && !out.status.success() {
        bail!(
            "the quic-echo client on node failed ({}):\nstdout: {}\nstderr: {}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    Ok(client)
}

/// A guest server listening on a free 127.0.0.1 port, on its own thread
/// and runtime, serving `max` connections then exiting.
pub struct GuestServer {
    /// `ws://ADDR/quic`.
    pub url: String,
    thread: Option<std::thread::JoinHandle<tether_host::runner::Outcome>>,
}

impl GuestServer {
    /// Starts the guest, its packet keys where `aead` says, and waits
    /// until it listens. Errors: no free port, the guest never listened.
    pub async fn start(
        runner: Arc<Runner>,
        component: Component,
        identity: &Identity,
        options: &Options,
        aead: GuestAead,
        max: u64,
    ) -> anyhow::Result<GuestServer> {
        GuestServer::start_with(runner, component, identity, options, aead, max, &[]).await
    }

    /// Like [`GuestServer::start`], with `extra` arguments for the guest
    /// (e.g. `--max-connections N`).
    pub async fn start_with(
        runner: Arc<Runner>,
        component: Component,
        identity: &Identity,
        options: &Options,
        aead: GuestAead,
        max: u64,
        extra: &[&str],
    ) -> anyhow::Result<GuestServer> {
        let addr = peer::free_local_addr()?;
        let mut args =
            peer::guest_server_args(["listen", &addr.to_string()], identity, options, max);
        args.extend(aead.args());
        args.extend(extra.iter().map(|a| a.to_string()));
        let thread = std::thread::Builder::new()
            .name("quic-guest-server".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("runtime");
                rt.block_on(runner.run(&component, &args, GuestIo::Capture(1 << 20)))
            })?;
        let server = GuestServer {
            url: format!("ws://{addr}/quic"),
            thread: Some(thread),
        };
        peer::wait_for_listener(addr, Duration::from_secs(10)).await?;
        Ok(server)
    }

    /// Waits for the guest to exit (after its `max` connections) and
    /// returns how it went. Errors: it failed.
    pub async fn finish(mut self) -> anyhow::Result<tether_host::runner::Outcome> {
        let thread = self.thread.take().expect("joined once");
        let outcome = tokio::task::spawn_blocking(move || thread.join())
            .await?
            .map_err(|_| anyhow::anyhow!("the guest server thread panicked"))?;
        if !outcome.success() {
            bail!(
                "the quic-echo server failed: {:?}\nstdout: {}\nstderr: {}",
                outcome.result,
                outcome.stdout_text(),
                String::from_utf8_lossy(&outcome.stderr)
            );
        }
        Ok(outcome)
    }
}

/// Runs one pairing and returns the client's results.
#[allow(clippy::too_many_arguments)]
pub async fn run_pairing(
    runner: &Arc<Runner>,
    component: &Component,
    identity: &Identity,
    options: &Options,
    client: Side,
    server: Side,
    handshakes: usize,
    phases: &[String],
) -> anyhow::Result<ClientRun> {
    let connections = handshakes as u64 + 1;
    let (native, guest) = match server.guest_aead() {
        None => (
            Some(NativeServer::start(identity, options, Faults::default())?),
            None,
        ),
        Some(aead) => (
            None,
            Some(
                GuestServer::start(
                    runner.clone(),
                    component.clone(),
                    identity,
                    options,
                    aead,
                    connections,
                )
                .await?,
            ),
        ),
    };
    let url = match (&native, &guest) {
        (Some(n), _) => n.url(),
        (_, Some(g)) => g.url.clone(),
        _ => unreachable!(),
    };
    let run = match client.guest_aead() {
        None => {
            let parsed = phases
                .iter()
                .map(|p| p.parse::<Phase>())
                .collect::<Result<Vec<_>, _>>()?;
            peer::native_client(
                &url,
                &identity.cert_der,
                options,
                handshakes,
                &parsed,
                Faults::default(),
            )
            .await?
        }
        Some(aead) => {
            guest_client(
                runner,
                component,
                &url,
                &identity.cert_der,
                options,
                aead,
                handshakes,
                phases,
            )
            .await?
        }
    };
    if let Some(g) = guest {
        if run.error.is_none() {
            g.finish().await.context("guest server")?;
        }
    } else if let Some(n) = native
        && run.error.is_none()
    {
        let served = n
            .wait_served(connections as usize, Duration::from_secs(10))
            .await?;
        if let Some(e) = served.iter().find_map(|s| s.ended.error.as_ref()) {
            bail!("the native server failed: {e}");
        }
    }
    Ok(run)
}

/// Runs every pairing with `w` and computes the report. Errors: a side
/// failed, or the handshake tax guard tripped.
///
/// `mtu` is the initial datagram size, bytes: 1200 (the default, QUIC's
/// minimum) or more, up to 16383, since a message stream carries any size;
/// `max_mtu` is the largest size path MTU discovery may reach (equal to
/// `mtu`: discovery off). Each pairing is a step of `progress`.
pub async fn run(
    w: &Workload,
    mtu: u16,
    max_mtu: u16,
    progress: &Progress,
) -> anyhow::Result<Report> {
    let runner = Arc::new(Runner::new(local_config(), EngineKind::Cranelift)?);
    let component = runner.compile(tether_guest_artifacts::QUIC_ECHO)?;
    let identity = Identity::generate(&[tether_quic::DEFAULT_SERVER_NAME])?;
    let options = Options {
        mtu,
        max_mtu,
        ..Options::default()
    };
    options.transport()?;
    let phases = w.phases();
    let mut pairings = Vec::new();
    for (client, server) in PAIRINGS {
        progress.phase(&format!("{} -> {}", side_name(client), side_name(server)));
        let run = run_pairing(
            &runner,
            &component,
            &identity,
            &options,
            client,
            server,
            w.handshakes,
            &phases,
        )
        .await?;
        pairings.push(summarize(client, server, &run, w)?);
        progress.inc();
    }
    let mut report = Report {
        handshake_ms_p50: 0.0,
        handshake_ms_p99: 0.0,
        native_handshake_ms_p50: 0.0,
        native_handshake_ms_p99: 0.0,
        handshake_tax_ms: 0.0,
        rtt_us_p50: 0.0,
        rtt_us_p99: 0.0,
        native_rtt_us_p50: 0.0,
        native_rtt_us_p99: 0.0,
        rtt_tax_us: 0.0,
        bulk_mb_per_s: 0.0,
        native_bulk_mb_per_s: 0.0,
        bulk_ratio: 0.0,
        wasm_aead_bulk_mb_per_s: 0.0,
        wasm_aead_bulk_ratio: 0.0,
        bulk_bytes: w.bulk_bytes,
        rtt_message_bytes: w.rtt.1,
        datagram_bytes: mtu,
        max_datagram_bytes: max_mtu.max(mtu),
        handshake_tax_guard_ms: HANDSHAKE_TAX_GUARD_MS,
        pairings,
    };
    let native = report.pairing(Side::Native, Side::Native).clone();
    let guest = report.pairing(Side::Guest, Side::Native).clone();
    report.handshake_ms_p50 = guest.handshake_ms_p50;
    report.handshake_ms_p99 = guest.handshake_ms_p99;
    report.native_handshake_ms_p50 = native.handshake_ms_p50;
    report.native_handshake_ms_p99 = native.handshake_ms_p99;
    report.handshake_tax_ms = guest.handshake_ms_p50 - native.handshake_ms_p50;
    report.rtt_us_p50 = guest.rtt_us_p50;
    report.rtt_us_p99 = guest.rtt_us_p99;
    report.native_rtt_us_p50 = native.rtt_us_p50;
    report.native_rtt_us_p99 = native.rtt_us_p99;
    report.rtt_tax_us = guest.rtt_us_p50 - native.rtt_us_p50;
    report.bulk_mb_per_s = guest.bulk_mb_per_s;
    report.native_bulk_mb_per_s = native.bulk_mb_per_s;
    report.bulk_ratio = guest.bulk_mb_per_s / native.bulk_mb_per_s;
    let wasm = report.pairing(Side::GuestWasmAead, Side::Native).clone();
    report.wasm_aead_bulk_mb_per_s = wasm.bulk_mb_per_s;
    report.wasm_aead_bulk_ratio = wasm.bulk_mb_per_s / native.bulk_mb_per_s;
    Ok(report)
}

/// Fails when any pairing with a guest has a handshake p50 more than
/// [`HANDSHAKE_TAX_GUARD_MS`] above native's.
pub fn check_guard(report: &Report) -> anyhow::Result<()> {
    for p in &report.pairings {
        let tax = p.handshake_ms_p50 - report.native_handshake_ms_p50;
        if tax > HANDSHAKE_TAX_GUARD_MS {
            bail!(
                "handshake tax guard: {} handshake p50 {:.2} ms is {:.2} ms above native's {:.2} ms (at most {HANDSHAKE_TAX_GUARD_MS} ms)",
                p.name,
                p.handshake_ms_p50,
                tax,
                report.native_handshake_ms_p50
            );
        }
    }
    Ok(())
}
