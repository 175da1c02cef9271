//! The `tether` command line: run guest components, the demo, benchmarks.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{Args, Parser, Subcommand};
use tether_host::bench::echo::{self as bench, Workload};
use tether_host::echo_server::EchoServer;
use tether_host::policy::{Policy, Rule};
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, Limits, TlsOptions};

#[derive(Parser)]
#[command(
    name = "tether",
    version,
    about = "A WebAssembly component host for message streams"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a guest component built against the Tether world.
    Run(RunArgs),
    /// Echo round trips through a guest next to a native client, on an
    /// embedded server (or --url), with the ratios.
    Demo(DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(BenchCommand),
    /// Run the JMUX proxy guest (`jetsocat jmux-proxy` as a component),
    /// with a host policy derived from its arguments.
    Jmux(JmuxArgs),
}

#[derive(Subcommand)]
enum BenchCommand {
    /// Echo round trips, messages/s and MB/s: guest vs native client.
    Echo(BenchEchoArgs),
    /// QUIC over message streams: handshake, round trip and bulk echo in
    /// every guest/native pairing, with the guest's tax over native.
    Quic(BenchQuicArgs),
    /// A two-guest JMUX tunnel vs direct: HTTP/2 and HTTP/1.1 uploads, bulk
    /// MB/s and CPU per GB, added round trip.
    Jmux(BenchJmuxArgs),
}

#[derive(Args, Clone)]
struct HostArgs {
    /// Allow dialling HOST:PORT (repeatable). HOST: name, *.suffix, *, IP,
    /// CIDR; PORT: number, LO-HI, or *. Nothing is allowed by default.
    #[arg(long = "allow", value_name = "RULE")]
    allow: Vec<Rule>,
    /// Never allow HOST:PORT, even when --allow matches; also checked
    /// against every resolved address (repeatable).
    #[arg(long = "deny", value_name = "RULE")]
    deny: Vec<Rule>,
    /// Allow binding listeners on IP:PORT (repeatable), e.g. 127.0.0.1:*.
    /// The host part is an IP, a CIDR block or *, never a name.
    #[arg(long = "listen", value_name = "RULE", value_parser = listen_rule)]
    listen: Vec<Rule>,
    /// Add the certificates in this PEM file to the trusted roots.
    #[arg(long = "ca-file", value_name = "PEM")]
    ca_file: Vec<PathBuf>,
    /// Do not trust the system's root certificates.
    #[arg(long)]
    no_system_roots: bool,
    /// The engine that runs the guest.
    #[arg(long, value_enum, default_value_t = Engine::Wasmtime)]
    engine: Engine,
    /// Guest linear memory limit, MiB (1 to 1048576).
    #[arg(long, default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    max_memory_mib: usize,
    /// Largest WebSocket message, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().max_message_bytes, value_parser = byte_size())]
    max_message_bytes: usize,
    /// Inbound buffer per message stream, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().inbound_buffer_bytes, value_parser = byte_size())]
    inbound_buffer_bytes: usize,
    /// Outbound buffer per message stream, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().outbound_buffer_bytes, value_parser = byte_size())]
    outbound_buffer_bytes: usize,
    /// Connect deadline (DNS + TCP), ms (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    connect_timeout_ms: u64,
    /// TLS + WebSocket handshake deadline, ms (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    handshake_timeout_ms: u64,
    /// Stop a guest that runs this long without returning to the host, ms
    /// (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    max_run_ms: u64,
}

impl HostArgs {
    fn config(&self) -> Config {
        Config {
            policy: Policy {
                allow: self.allow.clone(),
                deny: self.deny.clone(),
                listen: self.listen.clone(),
            },
            tls: TlsOptions {
                system_roots: !self.no_system_roots,
                extra_ca_files: self.ca_file.clone(),
            },
            limits: Limits {
                max_message_bytes: self.max_message_bytes,
                inbound_buffer_bytes: self.inbound_buffer_bytes,
                outbound_buffer_bytes: self.outbound_buffer_bytes,
                connect_timeout: Duration::from_millis(self.connect_timeout_ms),
                handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
                max_memory_bytes: self.max_memory_mib << 20,
                max_run_without_yield: Duration::from_millis(self.max_run_ms),
                ..Limits::default()
            },
        }
    }

    fn engine(&self) -> EngineKind {
        match self.engine {
            Engine::Wasmtime => EngineKind::Cranelift,
            Engine::WasmtimeWinch => EngineKind::Winch,
            Engine::WasmtimePooling => EngineKind::Pooling,
        }
    }
}

/// `--engine` values.
#[derive(Clone, Copy, clap::ValueEnum)]
enum Engine {
    /// Cranelift, on-demand allocation.
    Wasmtime,
    /// The Winch baseline compiler.
    WasmtimeWinch,
    /// Cranelift with the pooling instance allocator.
    WasmtimePooling,
}

/// A datagram size: QUIC's minimum (1200, RFC 9000 section 14) up to the
/// largest a message stream carries here.
fn mtu_range() -> clap::builder::RangedI64ValueParser<u16> {
    clap::builder::RangedI64ValueParser::<u16>::new()
        .range(i64::from(tether_quic::DEFAULT_MTU)..=i64::from(tether_quic::MAX_MTU))
}

/// A `--listen` rule: an address rule, since bind addresses are IPs.
fn listen_rule(text: &str) -> Result<Rule, String> {
    let rule: Rule = text.parse().map_err(|e| format!("{e}"))?;
    if !rule.is_address_rule() {
        return Err(format!(
            "`{text}`: a listen rule takes an IP, a CIDR block or * (a bind address is never a name)"
        ));
    }
    Ok(rule)
}

/// A size in bytes: at least 1, at most 2^40 (so that sums with it cannot
/// overflow).
fn byte_size() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 40)
}

/// A `usize` option that must be at least 1.
fn at_least_one_usize() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

#[derive(Args)]
struct RunArgs {
    /// The guest component (.wasm).
    guest: PathBuf,
    #[command(flatten)]
    host: HostArgs,
    /// Arguments for the guest.
    #[arg(last = true)]
    args: Vec<String>,
}

#[derive(Args)]
struct JmuxArgs {
    /// Never dial HOST:PORT (repeatable), whatever the arguments allow.
    #[arg(long = "deny", value_name = "RULE")]
    deny: Vec<Rule>,
    /// Add the certificates in this PEM file to the trusted roots (wss://).
    #[arg(long = "ca-file", value_name = "PEM")]
    ca_file: Vec<PathBuf>,
    /// The jmux-proxy arguments: <PIPE> [<LISTENER>...] [--allow-all |
    /// --allow RULE...]. The host may dial the pipe's address, bind the
    /// pipe's and listeners' addresses, and dial the targets that
    /// --allow-all / --allow admit; nothing else. --deny and --ca-file may
    /// also stand among them.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required = true,
        value_name = "ARGS"
    )]
    args: Vec<String>,
}

#[derive(Args)]
struct BenchJmuxArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    quick: bool,
}

#[derive(Args)]
struct DemoArgs {
    /// Use this echo server instead of the embedded one.
    #[arg(long)]
    url: Option<String>,
}

#[derive(Args)]
struct BenchEchoArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    quick: bool,
    /// Alternating guest/native rounds to pool (at least 1).
    #[arg(long, default_value_t = 3, value_parser = at_least_one_usize())]
    rounds: usize,
    /// Use this echo server instead of the embedded one.
    #[arg(long)]
    url: Option<String>,
}

#[derive(Args)]
struct BenchQuicArgs {
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// A short smoke run (CI).
    #[arg(long)]
    quick: bool,
    /// Initial datagram size (MTU), bytes: 1200 (QUIC's minimum) up to 16383.
    #[arg(long, default_value_t = tether_quic::DEFAULT_MTU, value_parser = mtu_range())]
    mtu: u16,
    /// Largest datagram size path MTU discovery may reach, bytes (1200 up
    /// to 16383); equal to --mtu turns discovery off.
    #[arg(long, default_value_t = tether_quic::MAX_MTU, value_parser = mtu_range())]
    max_mtu: u16,
}

/// `println!` that never panics: a closed stdout (`| head`) drops the
/// output instead of killing the process mid-run.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

/// `eprintln!` that never panics: a closed stderr (a log reader that went
/// away) must not take a running tunnel down.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("TETHER_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    // One thread: a guest and its sockets' tasks wake each other without
    // crossing threads (~2 us instead of 5-30 us).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Everything runs as a spawned task, not as the `block_on` future: a
    // task woken by another task on this thread is just queued, while
    // waking the `block_on` future costs an extra trip through the I/O
    // driver on every guest wake-up.
    match rt.block_on(async {
        tokio::spawn(run(cli))
            .await
            .unwrap_or_else(|e| Err(anyhow::anyhow!("main task: {e}")))
    }) {
        Ok(code) => code,
        Err(e) => {
            errln!("tether: {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    match cli.command {
        Command::Run(args) => {
            let wasm = std::fs::read(&args.guest)
                .with_context(|| format!("reading {}", args.guest.display()))?;
            let runner = Runner::new(args.host.config(), args.host.engine())?;
            let component = runner
                .compile(&wasm)
                .with_context(|| format!("compiling {}", args.guest.display()))?;
            let name = args
                .guest
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            let mut guest_args = vec![name];
            guest_args.extend(args.args);
            let outcome = runner.run(&component, &guest_args, GuestIo::Inherit).await;
            match outcome.result {
                Ok(()) => Ok(ExitCode::SUCCESS),
                Err(tether_host::runner::RunError::Exit(code)) => {
                    Ok(ExitCode::from(code.clamp(0, 255) as u8))
                }
                Err(e) => bail!("{e}"),
            }
        }
        Command::Demo(args) => {
            let (server, url) = server_and_url(args.url)?;
            outln!(
                "Tether demo: echo guest (WebAssembly, through the host) vs native tokio-tungstenite client"
            );
            outln!(
                "server: {url}{}",
                if server.is_some() {
                    " (embedded tokio-tungstenite echo server)"
                } else {
                    ""
                }
            );
            let report = compare(&url, &Workload::demo(), 1).await?;
            outln!("\n{}", report.table());
            outln!(
                "guest/native round-trip ratio p50: {:.2}x (target: at most 1.3x)",
                report.ratio_p50
            );
            drop(server);
            Ok(ExitCode::SUCCESS)
        }
        Command::Jmux(args) => jmux(args).await,
        Command::Bench(BenchCommand::Jmux(args)) => {
            use tether_host::bench::jmux as jb;
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
        Command::Bench(BenchCommand::Quic(args)) => {
            use tether_host::bench::quic;
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
        Command::Bench(BenchCommand::Echo(args)) => {
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

/// Moves the host's own options (`--deny`, `--ca-file`) out of the
/// jmux-proxy arguments, wherever they stand: the guest's command line has
/// no options of those names, so `tether jmux -- PIPE --deny RULE` means
/// the same as `tether jmux --deny RULE -- PIPE`.
///
/// Errors: an option without its value, or a `--deny` rule that does not
/// parse.
fn take_host_options(args: &mut JmuxArgs) -> anyhow::Result<()> {
    let mut rest = Vec::with_capacity(args.args.len());
    let mut it = std::mem::take(&mut args.args).into_iter();
    while let Some(arg) = it.next() {
        let (name, inline) = match arg.split_once('=') {
            Some((n, v)) => (n.to_string(), Some(v.to_string())),
            None => (arg.clone(), None),
        };
        if name != "--deny" && name != "--ca-file" {
            rest.push(arg);
            continue;
        }
        let Some(value) = inline.or_else(|| it.next()) else {
            bail!("{name} needs a value");
        };
        if name == "--deny" {
            args.deny.push(
                value
                    .parse()
                    .map_err(|e| anyhow::anyhow!("--deny {value}: {e}"))?,
            );
        } else {
            args.ca_file.push(PathBuf::from(value));
        }
    }
    args.args = rest;
    Ok(())
}

async fn jmux(mut args: JmuxArgs) -> anyhow::Result<ExitCode> {
    let parsed = take_host_options(&mut args).and_then(|()| {
        tether_jmux::proxy::cli::parse_args(&args.args).map_err(|e| anyhow::anyhow!("{e}"))
    });
    let parsed = match parsed {
        Ok(parsed) => parsed,
        Err(e) => {
            // A usage error: exit 2, as clap does for the host's own options.
            errln!("tether jmux: {e:#}");
            return Ok(ExitCode::from(2));
        }
    };
    let config = Config {
        policy: tether_host::jmux::policy_for(&parsed, args.deny)?,
        tls: TlsOptions {
            system_roots: true,
            extra_ca_files: args.ca_file,
        },
        limits: Limits::default(),
    };
    let runner = Runner::new(config, EngineKind::Cranelift)?;
    let component = runner.compile(tether_guest_artifacts::JMUX)?;
    let mut guest_args = vec!["jmux".to_string()];
    guest_args.extend(args.args);
    match runner
        .run(&component, &guest_args, GuestIo::Inherit)
        .await
        .result
    {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(tether_host::runner::RunError::Exit(code)) => {
            Ok(ExitCode::from(code.clamp(0, 255) as u8))
        }
        Err(e) => bail!("{e}"),
    }
}

fn server_and_url(url: Option<String>) -> anyhow::Result<(Option<EchoServer>, String)> {
    Ok(match url {
        Some(u) => (None, u),
        None => {
            let s = EchoServer::start().context("starting the embedded echo server")?;
            let u = s.url();
            (Some(s), u)
        }
    })
}

async fn compare(url: &str, workload: &Workload, rounds: usize) -> anyhow::Result<bench::Report> {
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
    bench::compare(&runner, &component, url, workload, rounds).await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn jmux_args(args: &[&str]) -> JmuxArgs {
        JmuxArgs {
            deny: Vec::new(),
            ca_file: Vec::new(),
            args: args.iter().map(|a| a.to_string()).collect(),
        }
    }

    #[test]
    fn host_options_may_follow_the_pipe() {
        let mut args = jmux_args(&[
            "ws-listen://127.0.0.1:0",
            "--deny",
            "10.0.0.0/8:*",
            "--allow-all",
            "--ca-file=ca.pem",
            "--deny=*.internal:22",
        ]);
        take_host_options(&mut args).unwrap();
        assert_eq!(args.args, ["ws-listen://127.0.0.1:0", "--allow-all"]);
        assert_eq!(args.deny.len(), 2);
        assert_eq!(args.ca_file, [PathBuf::from("ca.pem")]);
    }

    #[test]
    fn a_host_option_without_its_value_is_an_error() {
        let mut args = jmux_args(&["ws://x/", "--deny"]);
        let e = take_host_options(&mut args).unwrap_err();
        assert!(e.to_string().contains("--deny needs a value"), "{e}");
        let mut args = jmux_args(&["ws://x/", "--deny", "not a rule"]);
        assert!(take_host_options(&mut args).is_err());
    }
}
