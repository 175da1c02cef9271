//! The `tether` command line: run guest components (`run`), the JMUX proxy
//! guest (`jmux`), the demo (`demo`) and the benchmarks (`bench`). One file
//! per subcommand.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use tether_host::policy::{Policy, Rule};
use tether_host::runner::EngineKind;
use tether_host::{Config, Limits, TlsOptions};

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

mod bench;
mod demo;
mod jmux;
mod run;

/// What `tether --help` adds below the commands: every engine and every
/// listener form, so that nobody has to open a subcommand's help for them.
const OVERVIEW: &str = "Engines (--engine of run):
  wasmtime          Cranelift, on-demand allocation (default)
  wasmtime-winch    the Winch baseline compiler
  wasmtime-pooling  Cranelift with the pooling instance allocator

Rules (--allow, --deny): HOST:PORT, HOST = name | *.suffix | * | IP | [IPv6] | CIDR | internal,
  PORT = number | LO-HI | *. `internal` (alone: internal:*) is every loopback, unspecified,
  private, shared, link-local, multicast and broadcast range; a wildcard --allow (*, *.suffix)
  does not reach those unless an IP/CIDR rule or `internal` allows them. Every spelling of
  an address (0.0.0.0, 0x7f.1, [::ffff:127.0.0.1], ...) meets the rules of what it reaches.
  Listen rules (--listen): the same with an IP, CIDR or * host.

Listeners of tether jmux (jetsocat's jmux-proxy forms):
  pipe:      ws://URL | wss://URL | ws-listen://BIND | tcp://HOST:PORT | tcp-listen://BIND
  listener:  tcp-listen://BIND/HOST:PORT | socks5-listen://BIND | http-listen://BIND
  BIND is ip:port (port 0: ephemeral)";

#[derive(Parser)]
#[command(
    name = "tether",
    version,
    about = "A WebAssembly component host for message streams",
    after_help = OVERVIEW
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a guest component built against the Tether world.
    Run(Box<run::RunArgs>),
    /// Echo round trips through a guest next to a native client, on an
    /// embedded server (or --url), with the ratios.
    Demo(demo::DemoArgs),
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Run the JMUX proxy guest (`jetsocat jmux-proxy` as a component),
    /// with a host policy derived from its arguments.
    Jmux(jmux::JmuxArgs),
}

#[derive(Args, Clone)]
pub struct HostArgs {
    /// Allow dialling HOST:PORT (repeatable). HOST: name, *.suffix, *, IP,
    /// CIDR, internal; PORT: number, LO-HI, or *. Nothing is allowed by
    /// default; a wildcard does not reach internal addresses.
    #[arg(long = "allow", value_name = "RULE")]
    pub allow: Vec<Rule>,
    /// Never allow HOST:PORT, even when --allow matches; also checked
    /// against every resolved address (repeatable). `--deny internal`
    /// blocks every internal range.
    #[arg(long = "deny", value_name = "RULE")]
    pub deny: Vec<Rule>,
    /// Allow binding listeners on IP:PORT (repeatable), e.g. 127.0.0.1:*.
    /// The host part is an IP, a CIDR block or *, never a name.
    #[arg(long = "listen", value_name = "RULE", value_parser = listen_rule)]
    pub listen: Vec<Rule>,
    /// Add the certificates in this PEM file to the trusted roots.
    #[arg(long = "ca-file", value_name = "PEM")]
    pub ca_file: Vec<PathBuf>,
    /// Do not trust the system's root certificates.
    #[arg(long)]
    pub no_system_roots: bool,
    /// The engine that runs the guest.
    #[arg(long, value_enum, default_value_t = Engine::Wasmtime)]
    pub engine: Engine,
    /// Guest linear memory limit, MiB (1 to 1048576).
    #[arg(long, default_value_t = 256, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_memory_mib: usize,
    /// Largest WebSocket message, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().max_message_bytes, value_parser = byte_size())]
    pub max_message_bytes: usize,
    /// Inbound buffer per message stream, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().inbound_buffer_bytes, value_parser = byte_size())]
    pub inbound_buffer_bytes: usize,
    /// Bytes of unfinished inbound WebSocket messages the host holds over
    /// all streams (past each stream's first 64 KiB); a read past it fails
    /// its stream with close code 1013 (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().max_assembling_bytes, value_parser = byte_size())]
    pub max_assembling_bytes: usize,
    /// Bytes queued in message streams' buffers over all streams, past
    /// each stream's first 64 KiB each way; at it, such streams stop
    /// reading or would block until there is room (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().max_buffered_bytes, value_parser = byte_size())]
    pub max_buffered_bytes: usize,
    /// Outbound buffer per message stream, bytes (1 to 2^40).
    #[arg(long, default_value_t = Limits::default().outbound_buffer_bytes, value_parser = byte_size())]
    pub outbound_buffer_bytes: usize,
    /// WebSocket handshakes a listener runs at once; past it new
    /// connections get 503 and are closed (1 to 1048576).
    #[arg(long, default_value_t = Limits::default().max_handshakes_per_listener, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_handshakes_per_listener: usize,
    /// Of those, what one source (an IPv4 address, an IPv6 /64) may hold
    /// at once; past it its new connections get 503 and are closed (1 to
    /// 1048576).
    #[arg(long, default_value_t = Limits::default().max_handshakes_per_source, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_handshakes_per_source: usize,
    /// Accepted connections (WebSocket and TCP, upgraded or not) one
    /// source (an IPv4 address, an IPv6 /64) holds at once over every
    /// listener; past it its new connections are closed at once
    /// (WebSocket: 503). Default 256 with loopback clients not counted;
    /// given, loopback clients count too (1 to 1048576).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 20))]
    pub max_connections_per_source: Option<usize>,
    /// Accepted connections (WebSocket and TCP, upgraded or not, loopback
    /// included) the host holds at once over every listener; past it new
    /// connections are closed at once (WebSocket: 503). Default: three
    /// quarters of the file descriptor limit, which `tether` raises to
    /// its hard limit at start, at most 65536 (each held WebSocket
    /// connection costs about 34 KiB of memory; 1 to 16777216).
    #[arg(long, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 24))]
    pub max_connections: Option<usize>,
    /// Name lookups in flight at once over every guest (each holds a
    /// thread until the resolver answers; 1 to 65536).
    #[arg(long, default_value_t = Limits::default().max_dns_lookups, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 16))]
    pub max_dns_lookups: usize,
    /// Of those, what one guest may hold at once (1 to 65536).
    #[arg(long, default_value_t = Limits::default().max_dns_lookups_per_guest, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1 << 16))]
    pub max_dns_lookups_per_guest: usize,
    /// Connect deadline (DNS + TCP), ms (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub connect_timeout_ms: u64,
    /// TLS + WebSocket handshake deadline, ms (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub handshake_timeout_ms: u64,
    /// Bounded linger, ms (at least 1): a stream the guest dropped (TCP:
    /// its output stream, with bytes queued) or closed is reset this long
    /// after, if the peer has not taken what is queued or answered the close.
    #[arg(long, default_value_t = Limits::default().linger_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub linger_timeout_ms: u64,
    /// Stop a guest that runs this long without returning to the host, ms
    /// (at least 1).
    #[arg(long, default_value_t = 10_000, value_parser = clap::value_parser!(u64).range(1..))]
    pub max_run_ms: u64,
    /// Messages one `send-many` takes or one `receive-many` returns at
    /// most (at least 1).
    #[arg(long, default_value_t = Limits::default().max_batch_messages, value_parser = at_least_one_usize())]
    pub max_batch_messages: usize,
    /// Registrations one guest holds at most in all its readiness sets
    /// together (about 150 bytes of host memory each), and async calls
    /// one p3 guest has pending at once (at least 1).
    #[arg(long, default_value_t = Limits::default().readiness_set_entries, value_parser = at_least_one_usize())]
    pub readiness_set_entries: usize,
    /// Live AEAD packet keys (`tether:streams/aead`) one guest holds at
    /// most; 0 refuses every key (a QUIC guest then keeps its AEAD inside).
    #[arg(long, default_value_t = Limits::default().max_aead_keys)]
    pub max_aead_keys: usize,
    #[command(flatten)]
    pub shutdown: ShutdownArgs,
}

/// Where Prometheus scrapes the host's metrics.
#[derive(Args, Clone)]
pub struct MetricsArgs {
    /// Serve Prometheus metrics at http://ADDR/metrics (ADDR is ip:port,
    /// port 0: ephemeral). tether prints `tether: metrics on
    /// http://IP:PORT/metrics` on stderr once it listens. Under `run` the
    /// address needs a --listen rule, like a guest's listener.
    #[arg(long = "metrics", value_name = "ADDR")]
    pub metrics: Option<String>,
    /// Scrapes the metrics server answers at once; past it a new
    /// connection gets 503 (at least 1).
    #[arg(long, default_value_t = Limits::default().max_concurrent_scrapes, value_parser = at_least_one_usize())]
    pub max_concurrent_scrapes: usize,
    /// Time one scrape has to send its request and take the answer, ms
    /// (at least 1).
    #[arg(long, default_value_t = Limits::default().scrape_timeout.as_millis() as u64, value_parser = clap::value_parser!(u64).range(1..))]
    pub scrape_timeout_ms: u64,
}

impl Default for MetricsArgs {
    fn default() -> Self {
        let limits = Limits::default();
        MetricsArgs {
            metrics: None,
            max_concurrent_scrapes: limits.max_concurrent_scrapes,
            scrape_timeout_ms: limits.scrape_timeout.as_millis() as u64,
        }
    }
}

impl MetricsArgs {
    /// Sets the scrape limits in `limits`.
    pub fn apply(&self, limits: &mut Limits) {
        limits.max_concurrent_scrapes = self.max_concurrent_scrapes;
        limits.scrape_timeout = Duration::from_millis(self.scrape_timeout_ms);
    }
}

/// How long a graceful shutdown (SIGTERM, SIGINT) may take.
#[derive(Args, Clone)]
pub struct ShutdownArgs {
    /// Grace period after SIGTERM or SIGINT, ms: listeners stop accepting,
    /// message streams close with 1001, byte streams half-close, and a
    /// guest still running after this long is stopped; tether then exits 0.
    /// A second signal exits at once.
    #[arg(long, default_value_t = Limits::default().shutdown_timeout.as_millis() as u64)]
    pub shutdown_timeout_ms: u64,
}

impl ShutdownArgs {
    pub fn timeout(&self) -> Duration {
        Duration::from_millis(self.shutdown_timeout_ms)
    }
}

impl HostArgs {
    pub fn config(&self) -> Config {
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
                max_assembling_bytes: self.max_assembling_bytes,
                max_buffered_bytes: self.max_buffered_bytes,
                outbound_buffer_bytes: self.outbound_buffer_bytes,
                max_handshakes_per_listener: self.max_handshakes_per_listener,
                max_handshakes_per_source: self.max_handshakes_per_source,
                max_connections_per_source: self
                    .max_connections_per_source
                    .unwrap_or(Limits::default().max_connections_per_source),
                count_loopback_connections: self.max_connections_per_source.is_some(),
                max_connections: self
                    .max_connections
                    .unwrap_or(Limits::default().max_connections),
                max_dns_lookups: self.max_dns_lookups,
                max_dns_lookups_per_guest: self.max_dns_lookups_per_guest,
                connect_timeout: Duration::from_millis(self.connect_timeout_ms),
                handshake_timeout: Duration::from_millis(self.handshake_timeout_ms),
                linger_timeout: Duration::from_millis(self.linger_timeout_ms),
                max_memory_bytes: self.max_memory_mib << 20,
                max_run_without_yield: Duration::from_millis(self.max_run_ms),
                shutdown_timeout: self.shutdown.timeout(),
                readiness_set_entries: self.readiness_set_entries,
                max_batch_messages: self.max_batch_messages,
                max_aead_keys: self.max_aead_keys,
                ..Limits::default()
            },
        }
    }

    pub fn engine(&self) -> EngineKind {
        match self.engine {
            Engine::Wasmtime => EngineKind::Cranelift,
            Engine::WasmtimeWinch => EngineKind::Winch,
            Engine::WasmtimePooling => EngineKind::Pooling,
        }
    }
}

/// `--engine` values.
#[derive(Clone, Copy, clap::ValueEnum)]
pub enum Engine {
    /// Cranelift, on-demand allocation.
    Wasmtime,
    /// The Winch baseline compiler.
    WasmtimeWinch,
    /// Cranelift with the pooling instance allocator.
    WasmtimePooling,
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
pub fn at_least_one_usize() -> clap::builder::RangedU64ValueParser<usize> {
    clap::builder::RangedU64ValueParser::<usize>::new().range(1..)
}

/// The log filter: `TETHER_LOG` if set, else `RUST_LOG`, else `warn`, in
/// tracing-subscriber's `EnvFilter` syntax (`info`,
/// `tether_host=debug,warn`, ...). A filter that does not parse is
/// reported and `warn` is used.
fn log_filter() -> tracing_subscriber::EnvFilter {
    let (var, text) = ["TETHER_LOG", "RUST_LOG"]
        .into_iter()
        .find_map(|var| {
            std::env::var(var)
                .ok()
                .filter(|v| !v.is_empty())
                .map(|v| (var, v))
        })
        .unwrap_or(("default", "warn".to_string()));
    tracing_subscriber::EnvFilter::try_new(&text).unwrap_or_else(|e| {
        errln!("tether: {var}={text:?} is not a log filter ({e}); using `warn`");
        tracing_subscriber::EnvFilter::new("warn")
    })
}

fn main() -> ExitCode {
    // Message-sized buffers reused, not faulted in anew for each message.
    tether_host::allocator::keep_freed_buffers();
    // Connections bounded by `--max-connections`, not by a soft limit of
    // 1,024 descriptors.
    let descriptor_limit = tether_host::raise_descriptor_limit();
    tracing_subscriber::fmt()
        .with_env_filter(log_filter())
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    if let Err(e) = descriptor_limit {
        errln!("tether: the file descriptor limit could not be raised: {e}");
    }
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
        Command::Run(args) => run::run(*args).await,
        Command::Demo(args) => demo::demo(args).await,
        Command::Jmux(args) => jmux::jmux(args).await,
        Command::Bench(command) => bench::bench(command).await,
    }
}
