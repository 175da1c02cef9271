//! `tether bench echo|quic|jmux`: guest against native code in one run.

use std::process::ExitCode;

use anyhow::Context;
use clap::{Args, Subcommand};
use tether_bench::echo::{self as echo, Workload};
use tether_bench::echo_server::EchoServer;
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
}

#[derive(Args)]
pub struct BenchJmuxArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    pub json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    pub quick: bool,
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
            use tether_bench::jmux as jb;
            let opts = if args.quick {
                jb::Options::quick()
            } else {
                jb::Options::full()
            };
            let report = tokio::task::spawn_blocking(move || jb::run(&opts)).await??;
            if args.json {
                outln!("{}", serde_json::to_string(&report)?);
            } else {
                outln!("tether bench jmux: two JMUX guests over a ws:// loopback pipe vs direct\n");
                outln!("{}", report.table());
            }
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Quic(args) => {
            use tether_bench::quic;
            let workload = if args.quick {
                quic::Workload::quick()
            } else {
                quic::Workload::bench()
            };
            let report = quic::run(&workload, args.mtu, args.max_mtu).await?;
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
            quic::check_guard(&report)?;
            Ok(ExitCode::SUCCESS)
        }
        BenchCommand::Echo(args) => {
            let (server, url) = server_and_url(args.url)?;
            let workload = if args.quick {
                Workload::quick()
            } else {
                Workload::bench()
            };
            let report = compare(&url, &workload, args.rounds).await?;
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
            drop(server);
            Ok(ExitCode::SUCCESS)
        }
    }
}

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

pub async fn compare(
    url: &str,
    workload: &Workload,
    rounds: usize,
) -> anyhow::Result<echo::Report> {
    let target = tether_host::websocket::parse_ws_url(url)
        .map_err(|e| anyhow::anyhow!("{}", tether_host::bindings::describe(&e)))?;
    let rule: Rule = if target.host.contains(':') {
        format!("[{}]:{}", target.host, target.port).parse()?
    } else {
        format!("{}:{}", target.host, target.port).parse()?
    };
    let config = Config {
        policy: Policy {
            allow: vec![rule],
            ..Policy::default()
        },
        ..Config::default()
    };
    let runner = Runner::new(config, EngineKind::Cranelift)?;
    let component = runner.compile(tether_guest_artifacts::ECHO)?;
    echo::compare(&runner, &component, url, workload, rounds).await
}
