//! `tether bench echo|quic|jmux|load|isolation|soak|all|report`: guest against native code in
//! one run; `all` runs every bench and writes `target/bench/report.html`.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tether_bench::echo::{self as echo, Workload};
use tether_bench::echo_server::EchoServer;
use tether_bench::progress::Progress;
use tether_bench::report::{self, Meta};
use tether_host::Config;
use tether_host::policy::{Policy, Rule};
use tether_host::runner::{EngineKind, Runner};

use crate::at_least_one_usize;

#[derive(Subcommand)]
pub enum BenchCommand {
    /// Echo round trips, messages/s and MB/s: guest vs native client.
    Echo(BenchEchoArgs),
    /// QUIC over message streams: handshake, round trip and bulk echo in
    /// every guest/native pairing, with the guest's tax over native.
    Quic(BenchQuicArgs),
    /// A two-guest JMUX tunnel vs direct: HTTP/2 and HTTP/1.1 uploads, bulk
    /// MB/s and CPU per GB, added round trip.
    Jmux(BenchJmuxArgs),
    /// N WebSocket connections (default 10,000) held by one server guest
    /// (the echo guest) from a load client in another process: connect
    /// rate, host RSS and descriptors per connection, idle CPU, round trips
    /// with 1 and with N open, messages/s; and the guest's old poll-all
    /// loop in the same run.
    Load(BenchLoadArgs),
    /// 100 guests on one host (pooling engine); one of them traps, spins,
    /// exhausts its memory or floods its outbound buffer while the others
    /// serve round trips: their p99 against a well-behaved baseline.
    Isolation(BenchIsolationArgs),
    /// 100,000 connect / echo / close cycles (WebSocket and TCP; clean
    /// closes, resets, guest drops, abandoned handshakes) through one echo
    /// guest: descriptors, tasks, buffered bytes, the guest's resource
    /// table and RSS must come back. Exits non-zero naming a failed check.
    Soak(BenchSoakArgs),
    /// The load client of `bench load` (started by it, in its own process).
    #[command(hide = true)]
    LoadClient(LoadClientArgs),
    /// Every bench above in turn; writes each one's JSON, meta.json and
    /// report.html (plots as SVG) into --out.
    All(BenchAllArgs),
    /// Draws report.html and its SVGs again from the JSON files in --dir.
    Report(BenchReportArgs),
}

#[derive(Args)]
pub struct BenchAllArgs {
    /// Short smoke runs of every bench (CI).
    #[arg(long)]
    pub quick: bool,
    /// Where the JSON files, the SVGs and report.html go.
    #[arg(long, default_value = "target/bench", value_name = "DIR")]
    pub out: PathBuf,
    /// The jetsocat binary of the JMUX bench's side-by-side rows [default:
    /// ../shared/peers/jetsocat/jetsocat from the workspace root].
    #[arg(long, value_name = "PATH")]
    pub jetsocat: Option<PathBuf>,
}

#[derive(Args)]
pub struct BenchLoadArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI): 500 connections, short phases.
    #[arg(long)]
    pub quick: bool,
    /// Connections to hold open (200 or more) [default: 10000, 500 with
    /// --quick].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(200..))]
    pub connections: Option<usize>,
    /// Connections for the run with the guest's old poll-all loop (0: skip
    /// it) [default: 2000, or --connections if fewer].
    #[arg(long)]
    pub poll_all_connections: Option<usize>,
    /// TCP byte streams for the run over TCP (the echo guest's `--tcp`
    /// listener, readiness-set loop; 0: skip it) [default: --connections,
    /// 500 at most with --quick].
    #[arg(long)]
    pub tcp_connections: Option<usize>,
    /// WebSocket connections for the run with the echo guest's p3 build
    /// (`echo-p3`: one future per stream, the component's waitable set; 0:
    /// skip it) [default: --connections].
    #[arg(long)]
    pub p3_connections: Option<usize>,
    /// The JMUX variant instead: channels open through a two-guest JMUX
    /// tunnel (TCP clients -> tcp-listen guest == ws pipe == guest -> TCP
    /// echo), both guests' readiness-set loop and then their old poll-all
    /// loop, in this process.
    #[arg(long, conflicts_with_all = ["connections", "poll_all_connections", "tcp_connections", "p3_connections"])]
    pub jmux: bool,
    /// With --jmux: channels to hold open (101 to 1024, the session's
    /// channel cap) [default: 1000, 200 with --quick].
    #[arg(long, requires = "jmux", value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(101..=1024))]
    pub channels: Option<usize>,
}

#[derive(Args)]
pub struct BenchSoakArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short run (CI): 5,000 cycles.
    #[arg(long)]
    pub quick: bool,
    /// Cycles to run (10 or more) [default: 100000, 5000 with --quick].
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(10..))]
    pub cycles: Option<usize>,
}

#[derive(Args)]
pub struct BenchIsolationArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI): 300 ms windows, one round.
    #[arg(long)]
    pub quick: bool,
    /// Guests on the host, the misbehaving one included.
    #[arg(long, default_value_t = 100, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(2..))]
    pub guests: usize,
    /// The guests' tokio runtime.
    #[arg(long, value_enum, default_value = "multi-thread")]
    pub runtime: IsolationRuntime,
}

/// The runtime of `tether bench isolation`.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum IsolationRuntime {
    /// One worker per core.
    MultiThread,
    /// One thread for every guest.
    CurrentThread,
}

#[derive(Args)]
pub struct LoadClientArgs {
    #[arg(long)]
    pub url: String,
    #[arg(long)]
    pub connections: usize,
    #[arg(long)]
    pub rtt_samples: usize,
    #[arg(long)]
    pub throughput_ms: u64,
}

#[derive(Args)]
pub struct BenchReportArgs {
    /// The folder with echo.json, quic.json, jmux.json, load.json,
    /// load-jmux.json, isolation.json (any of them) and meta.json;
    /// report.html and the SVGs are written there.
    #[arg(long, default_value = "target/bench", value_name = "DIR")]
    pub dir: PathBuf,
}

#[derive(Args)]
pub struct BenchJmuxArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    pub quick: bool,
    /// Also run every row through two `jetsocat jmux-proxy` processes, two
    /// `tether jmux` processes and the two mixed pairs, side by side.
    #[arg(long, value_enum, value_name = "PEER")]
    pub vs: Option<Versus>,
    /// The jetsocat binary [default: ../shared/peers/jetsocat/jetsocat from
    /// the workspace root].
    #[arg(long, value_name = "PATH", requires = "vs")]
    pub jetsocat: Option<PathBuf>,
}

/// What `tether bench jmux --vs` compares against.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Versus {
    /// The reference JMUX proxy (Devolutions).
    Jetsocat,
}

#[derive(Args)]
pub struct BenchEchoArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    pub quick: bool,
    /// Alternating guest/native rounds to pool (at least 1).
    #[arg(long, default_value_t = 3, value_parser = at_least_one_usize())]
    pub rounds: usize,
    /// Use this echo server instead of the embedded one.
    #[arg(long)]
    pub url: Option<String>,
}

#[derive(Args)]
pub struct BenchQuicArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    pub quick: bool,
    /// Initial datagram size (MTU), bytes: 1200 (QUIC's minimum) up to 16383.
    #[arg(long, default_value_t = tether_quic::DEFAULT_MTU, value_parser = mtu_range())]
    pub mtu: u16,
    /// Largest datagram size path MTU discovery may reach, bytes (1200 up
    /// to 16383); equal to --mtu turns discovery off.
    #[arg(long, default_value_t = tether_quic::MAX_MTU, value_parser = mtu_range())]
    pub max_mtu: u16,
}

/// A datagram size: QUIC's minimum (1200, RFC 9000 section 14) up to the
/// largest a message stream carries here.
fn mtu_range() -> clap::builder::RangedI64ValueParser<u16> {
    clap::builder::RangedI64ValueParser::<u16>::new()
        .range(i64::from(tether_quic::DEFAULT_MTU)..=i64::from(tether_quic::MAX_MTU))
}

/// Runs one benchmark and prints its table (or `--json`).
///
/// Errors: a peer or guest failed, or a guard was broken.
pub async fn bench(command: BenchCommand) -> anyhow::Result<ExitCode> {
    match command {
        BenchCommand::Jmux(args) => {
            let vs = match args.vs {
                Some(Versus::Jetsocat) => Some(competitors(args.jetsocat)?),
                None => None,
            };
            let report = run_jmux(args.quick, vs).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!("tether bench jmux: two JMUX guests over a ws:// loopback pipe vs direct\n");
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Quic(args) => {
            let (workload, report) = run_quic(args.quick, args.mtu, args.max_mtu).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench quic: QUIC over WebSocket message streams, one datagram per message ({} bytes first, up to {} by path MTU discovery)\n\
                 per pairing: {} handshakes, {} round trips of {} B, {} MiB bulk echo\n",
                    args.mtu,
                    args.max_mtu.max(args.mtu),
                    workload.handshakes,
                    workload.rtt.0,
                    workload.rtt.1,
                    workload.bulk_bytes >> 20
                );
                outln!("{}", report.table());
            }
            tether_bench::quic::check_guard(&report)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Echo(args) => {
            let (url, report) = run_echo(args.quick, args.rounds, args.url).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench echo: {url}, {} rounds, {} round trips each side\n",
                    args.rounds,
                    report.rtt_samples
                );
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Load(args) if args.jmux => {
            let report = run_load_jmux(args.quick, args.channels).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench load --jmux: {} channels through a two-guest JMUX tunnel to a TCP echo server ({} B round trips)\n",
                    report.channels,
                    tether_bench::load::MESSAGE_BYTES
                );
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Load(args) => {
            let report = run_load(&args).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench load: {} WebSocket connections (and TCP byte streams) held by the echo guest's server (p2, then p3), a load client in its own process ({} B round trips)\n",
                    report.connections,
                    tether_bench::load::MESSAGE_BYTES
                );
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Isolation(args) => {
            let runtime = match args.runtime {
                IsolationRuntime::MultiThread => tether_bench::isolation::RuntimeKind::MultiThread,
                IsolationRuntime::CurrentThread => {
                    tether_bench::isolation::RuntimeKind::CurrentThread
                }
            };
            let report = run_isolation(args.quick, args.guests, runtime).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench isolation: {} guests on one host ({} runtime, {} workers), {} B round trips on the well-behaved ones, medians of {} rounds\n",
                    report.guests,
                    report.runtime,
                    report.workers,
                    tether_bench::isolation::MESSAGE_BYTES,
                    report.runs
                );
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Soak(args) => {
            let report = run_soak(args.quick, args.cycles).await?;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!(
                    "tether bench soak: WebSocket and TCP connect / echo / close cycles through one echo guest, {} in flight\n",
                    tether_bench::soak::CONCURRENCY
                );
                outln!("{}", report.table());
            }
            report.check()?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::LoadClient(args) => {
            tether_bench::load::client(&tether_bench::load::ClientArgs {
                url: args.url,
                connections: args.connections,
                rtt_samples: args.rtt_samples,
                throughput: std::time::Duration::from_millis(args.throughput_ms),
            })
            .await?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::All(args) => all(args).await,
        BenchCommand::Report(args) => {
            let rendered = report::render(&args.dir)?;
            outln!("{}", rendered.page.display());
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// `tether bench all`: echo, QUIC, JMUX (with `--vs jetsocat`) and load in turn,
/// each one's JSON next to meta.json, then the report. A failed bench stops the run (its
/// error names it); the JSON of the benches before it stays.
async fn all(args: BenchAllArgs) -> anyhow::Result<ExitCode> {
    let quick = if args.quick { " --quick" } else { "" };
    // jetsocat is checked first: a missing binary fails before minutes of
    // benches, not after.
    let jetsocat_arg = args
        .jetsocat
        .as_ref()
        .map(|p| format!(" --jetsocat {}", p.display()))
        .unwrap_or_default();
    let vs = competitors(args.jetsocat.clone())?;
    let mut meta = Meta::now();
    let dir = &args.out;
    // Results of an earlier run must not mix into this report.
    for (name, _) in report::BENCHES {
        let _ = std::fs::remove_file(dir.join(format!("{name}.json")));
    }
    let rounds = if args.quick { 1 } else { 3 };
    let (_, echo) = run_echo(args.quick, rounds, None).await?;
    meta.commands
        .push(format!("tether bench echo --json --rounds {rounds}{quick}"));
    report::write_json(dir, "echo", &echo)?;
    let (_, quic) = run_quic(args.quick, tether_quic::DEFAULT_MTU, tether_quic::MAX_MTU).await?;
    meta.commands
        .push(format!("tether bench quic --json{quick}"));
    report::write_json(dir, "quic", &quic)?;
    let jmux = run_jmux(args.quick, Some(vs)).await?;
    meta.commands.push(format!(
        "tether bench jmux --json --vs jetsocat{jetsocat_arg}{quick}"
    ));
    report::write_json(dir, "jmux", &jmux)?;
    let load = run_load(&BenchLoadArgs {
        json: true,
        quick: args.quick,
        connections: None,
        poll_all_connections: None,
        tcp_connections: None,
        p3_connections: None,
        jmux: false,
        channels: None,
    })
    .await?;
    meta.commands
        .push(format!("tether bench load --json{quick}"));
    report::write_json(dir, "load", &load)?;
    let load_jmux = run_load_jmux(args.quick, None).await?;
    meta.commands
        .push(format!("tether bench load --jmux --json{quick}"));
    report::write_json(dir, "load-jmux", &load_jmux)?;
    let isolation = run_isolation(
        args.quick,
        100,
        tether_bench::isolation::RuntimeKind::MultiThread,
    )
    .await?;
    meta.commands
        .push(format!("tether bench isolation --json{quick}"));
    report::write_json(dir, "isolation", &isolation)?;
    let soak = run_soak(args.quick, None).await?;
    meta.commands
        .push(format!("tether bench soak --json{quick}"));
    report::write_json(dir, "soak", &soak)?;
    report::write_json(dir, "meta", &meta)?;
    let rendered = report::render(dir)?;
    outln!("{}", rendered.page.display());
    tether_bench::quic::check_guard(&quic)?;
    soak.check()?;
    Ok(ExitCode::SUCCESS)
}

/// The programs of `--vs jetsocat`: jetsocat at `jetsocat` (or the
/// default path), and this very `tether` binary for the Tether processes.
///
/// Errors: jetsocat is missing (naming the path), or this binary's path is
/// unknown.
fn competitors(jetsocat: Option<PathBuf>) -> anyhow::Result<tether_bench::jmux::Competitors> {
    use tether_bench::jmux::pair;
    let jetsocat = pair::require_jetsocat(&jetsocat.unwrap_or_else(pair::default_jetsocat))?;
    let tether = std::env::current_exe().context("the path of this tether binary")?;
    Ok(tether_bench::jmux::Competitors { jetsocat, tether })
}

async fn run_jmux(
    quick: bool,
    vs: Option<tether_bench::jmux::Competitors>,
) -> anyhow::Result<tether_bench::jmux::Report> {
    use tether_bench::jmux as jb;
    let mut opts = if quick {
        jb::Options::quick()
    } else {
        jb::Options::full()
    };
    opts.vs_jetsocat = vs;
    let progress = Progress::new("bench jmux", jb::PHASES.len() as u64);
    let p = progress.clone();
    let report = tokio::task::spawn_blocking(move || jb::run(&opts, &p)).await?;
    progress.finish();
    report
}

async fn run_isolation(
    quick: bool,
    guests: usize,
    runtime: tether_bench::isolation::RuntimeKind,
) -> anyhow::Result<tether_bench::isolation::Report> {
    use tether_bench::isolation as iso;
    let mut opts = if quick {
        iso::Options::quick()
    } else {
        iso::Options::full()
    };
    opts.guests = guests;
    opts.runtime = runtime;
    let progress = Progress::new("bench isolation", 0);
    let p = progress.clone();
    let report =
        tokio::task::spawn_blocking(move || iso::run(&opts, &|phase| p.phase(phase))).await?;
    progress.finish();
    report
}

async fn run_load(args: &BenchLoadArgs) -> anyhow::Result<tether_bench::load::Report> {
    use tether_bench::load;
    let mut opts = if args.quick {
        load::Options::quick(args.connections)
    } else {
        load::Options::full(args.connections.unwrap_or(10_000))
    };
    if let Some(n) = args.poll_all_connections {
        opts.poll_all_connections = n;
    }
    if let Some(n) = args.tcp_connections {
        opts.tcp_connections = n;
    }
    if let Some(n) = args.p3_connections {
        opts.p3_connections = n;
    }
    let client = std::env::current_exe().context("the path of this tether binary")?;
    let progress = Progress::new("bench load", 0);
    let report = load::run(&opts, &client, &|phase| progress.phase(phase)).await;
    progress.finish();
    report
}

async fn run_soak(
    quick: bool,
    cycles: Option<usize>,
) -> anyhow::Result<tether_bench::soak::Report> {
    use tether_bench::soak;
    let opts = if quick {
        soak::Options::quick(cycles)
    } else {
        soak::Options::full(cycles)
    };
    let progress = Progress::new("bench soak", opts.cycles as u64);
    let report = soak::run(&opts, &progress).await;
    progress.finish();
    report
}

async fn run_load_jmux(
    quick: bool,
    channels: Option<usize>,
) -> anyhow::Result<tether_bench::load_jmux::Report> {
    use tether_bench::load_jmux;
    let opts = if quick {
        load_jmux::Options::quick(channels)
    } else {
        load_jmux::Options::full(channels.unwrap_or(1000))
    };
    let progress = Progress::new("bench load --jmux", 0);
    let p = progress.clone();
    let report =
        tokio::task::spawn_blocking(move || load_jmux::run(&opts, &|phase| p.phase(phase))).await?;
    progress.finish();
    report
}

async fn run_quic(
    quick: bool,
    mtu: u16,
    max_mtu: u16,
) -> anyhow::Result<(tether_bench::quic::Workload, tether_bench::quic::Report)> {
    use tether_bench::quic;
    let workload = if quick {
        quic::Workload::quick()
    } else {
        quic::Workload::bench()
    };
    let progress = Progress::new("bench quic", quic::PAIRINGS.len() as u64);
    let report = quic::run(&workload, mtu, max_mtu, &progress).await;
    progress.finish();
    Ok((workload, report?))
}

async fn run_echo(
    quick: bool,
    rounds: usize,
    url: Option<String>,
) -> anyhow::Result<(String, echo::Report)> {
    let (server, url) = server_and_url(url)?;
    let workload = if quick {
        Workload::quick()
    } else {
        Workload::bench()
    };
    let progress = Progress::new("bench echo", echo::STEPS_PER_ROUND * rounds as u64);
    let report = compare(&url, &workload, rounds, &progress).await;
    progress.finish();
    drop(server);
    Ok((url, report?))
}

/// The echo server to measure against: `url`, or an embedded one (kept
/// running while the returned handle lives).
///
/// Errors: the embedded server could not start.
pub fn server_and_url(url: Option<String>) -> anyhow::Result<(Option<EchoServer>, String)> {
    Ok(match url {
        Some(u) => (None, u),
        None => {
            let s = EchoServer::start().context("starting the embedded echo server")?;
            let u = s.url();
            (Some(s), u)
        }
    })
}

/// The echo guest on both ABIs (p2 `echo`, p3 `echo-p3`) and the native
/// client against `url`, `rounds` times each, alternating (the hosts may
/// dial `url`'s host and port only).
///
/// Errors: a bad URL, or a side failed.
pub async fn compare(
    url: &str,
    workload: &Workload,
    rounds: usize,
    progress: &Progress,
) -> anyhow::Result<echo::Report> {
    let target = tether_host::websocket::parse_ws_url(url)
        .map_err(|e| anyhow::anyhow!("{}", tether_host::bindings::describe(&e)))?;
    let rule: Rule = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port).parse()?
    } else {
        format!("{}:{}", target.host, target.port).parse()?
    };
    let node_allow = rule.to_string();
    let config = Config {
        policy: Policy {
            allow: vec![rule],
            ..Policy::default()
        },
        ..Config::default()
    };
    let p3 = tether_host::p3::Runner::new(config.clone())?;
    let p3_component = p3.compile_cached(tether_guest_artifacts::ECHO_P3)?;
    let runner = Runner::new(config, EngineKind::Cranelift)?;
    let component = runner.compile(tether_guest_artifacts::ECHO)?;
    let guests = echo::Guests {
        p2: (&runner, &component),
        p3: (&p3, &p3_component),
        node_allow,
    };
    echo::compare(&guests, url, workload, rounds, progress).await
}
