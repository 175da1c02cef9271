//! `tether run GUEST.wasm [HOST OPTIONS] [-- GUEST ARGS]`: one guest
//! component under the host's policy and limits.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;
use std::sync::Arc;

use prometheus_client::registry::Registry;
use tether_host::ErrorCode;
use tether_host::bindings::describe;
use tether_host::metrics::MetricsServer;
use tether_host::runner::{GuestIo, RunError, Runner};

use crate::HostArgs;

#[derive(Args)]
pub struct RunArgs {
    /// The guest component (.wasm).
    pub guest: PathBuf,
    #[command(flatten)]
    pub host: HostArgs,
    #[command(flatten)]
    pub metrics: crate::MetricsArgs,
    /// Arguments for the guest.
    #[arg(last = true)]
    pub args: Vec<String>,
}

/// Runs the guest; its exit status becomes the process's. A component
/// that uses the component model's async ABI (a guest of
/// `tether:streams-async`, WASIp3) runs on the p3 runner, which has the
/// Cranelift engine only.
///
/// Errors: the file cannot be read or compiled, a p3 guest with another
/// `--engine`, or the guest failed (trap, memory limit, runaway: the
/// error names it).
pub async fn run(args: RunArgs) -> anyhow::Result<ExitCode> {
    let wasm =
        std::fs::read(&args.guest).with_context(|| format!("reading {}", args.guest.display()))?;
    let mut config = args.host.config();
    args.metrics.apply(&mut config.limits);
    let name = args
        .guest
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_default();
    let mut guest_args = vec![name];
    guest_args.extend(args.args);
    let runner = Runner::new(config.clone(), args.host.engine())?;
    let compiled = runner.compile(&wasm);
    if let Err(e) = &compiled
        && uses_async_abi(e)
    {
        if !matches!(args.host.engine, crate::Engine::Wasmtime) {
            bail!(
                "{} is a WASIp3 guest (component model async): it runs on --engine wasmtime only",
                args.guest.display()
            );
        }
        drop(runner);
        let runner = tether_host::p3::Runner::new(config)?;
        let component = runner
            .compile_cached(&wasm)
            .with_context(|| format!("compiling {}", args.guest.display()))?;
        let _metrics = serve_metrics_flag(runner.host(), &args.metrics)?;
        return run_until_signal(
            runner.host(),
            runner.run(&component, &guest_args, GuestIo::Inherit),
        )
        .await;
    }
    let component = compiled.with_context(|| format!("compiling {}", args.guest.display()))?;
    let _metrics = serve_metrics_flag(runner.host(), &args.metrics)?;
    run_until_signal(
        runner.host(),
        runner.run(&component, &guest_args, GuestIo::Inherit),
    )
    .await
}

/// Whether compiling failed because the component uses the component
/// model's async ABI, which the WASIp2 engines do not enable.
fn uses_async_abi(e: &anyhow::Error) -> bool {
    e.chain()
        .any(|cause| cause.to_string().contains("component model async"))
}

/// The metrics server `--metrics` asks for, if any.
fn serve_metrics_flag(
    host: &Arc<tether_host::HostCtx>,
    metrics: &crate::MetricsArgs,
) -> anyhow::Result<Option<MetricsServer>> {
    match &metrics.metrics {
        Some(addr) => Ok(Some(
            serve_metrics(host, tether_host::net::bind(host, addr))
                .map_err(|e| anyhow::anyhow!("--metrics {addr}: {}", describe(&e)))?,
        )),
        None => Ok(None),
    }
}

/// Serves `host`'s metrics at `/metrics` on `listener` (for `--metrics`),
/// and says where on stderr: `tether: metrics on http://IP:PORT/metrics`.
///
/// Errors: what binding the listener failed with.
pub fn serve_metrics(
    host: &tether_host::HostCtx,
    listener: Result<tether_host::tokio::net::TcpListener, ErrorCode>,
) -> Result<MetricsServer, ErrorCode> {
    let mut registry = Registry::default();
    host.metrics.register(&mut registry);
    let server = MetricsServer::serve(listener?, Arc::new(registry), &host.config.limits)
        .map_err(|e| tether_host::net::io_error(&e))?;
    errln!("tether: metrics on http://{}/metrics", server.local_addr());
    Ok(server)
}

/// Runs the guest with graceful shutdown: the first SIGTERM or SIGINT
/// starts [`tether_host::HostCtx::shutdown`] (listeners stop accepting,
/// message streams close with 1001, byte streams half-close; the runner
/// stops the guest if it still runs `shutdown_timeout` later), and tether
/// then exits 0 unless the guest trapped. A second signal exits at once
/// with 128 + the signal number.
pub async fn run_until_signal(
    host: &Arc<tether_host::HostCtx>,
    guest: impl std::future::Future<Output = tether_host::runner::Outcome>,
) -> anyhow::Result<ExitCode> {
    let runner_host = host.clone();
    let host = host.clone();
    let mut signals = Signals::install()?;
    let signals = tokio::spawn(async move {
        let first = signals.next().await;
        errln!(
            "tether: {first}: shutting down (at most {:?}; a second signal exits at once)",
            host.config.limits.shutdown_timeout
        );
        host.shutdown();
        let second = signals.next().await;
        errln!("tether: {second}: exiting now");
        std::process::exit(128 + second.number());
    });
    let outcome = guest.await;
    // What the host took from the guest still goes out before the
    // process exits and drops it: each stream's queue, then its close
    // frame or FIN, within linger_timeout (a failed guest's byte streams
    // were reset, its message streams closed with 1011). A signal meanwhile
    // still exits at once (the second one) or shuts down (the first).
    let linger = runner_host.config.limits.linger_timeout;
    let _ = tokio::time::timeout(linger + DRAIN_SLACK, runner_host.drained()).await;
    signals.abort();
    if runner_host.is_shutting_down() {
        return match outcome.result {
            Ok(()) | Err(RunError::Exit(_)) => Ok(ExitCode::SUCCESS),
            Err(e @ RunError::ShutdownDeadline(_)) => {
                errln!("tether: {e}");
                Ok(ExitCode::SUCCESS)
            }
            Err(e) => bail!("{e}"),
        };
    }
    exit_code(outcome.result)
}

/// How long past `linger_timeout` tether waits for the host's connections
/// to end after the guest returned: the linger's own reset runs at
/// `linger_timeout`, this is for its task to run.
const DRAIN_SLACK: std::time::Duration = std::time::Duration::from_millis(200);

/// A termination signal tether reacts to.
#[derive(Clone, Copy)]
enum Signal {
    Term,
    Int,
}

impl Signal {
    fn number(self) -> i32 {
        match self {
            Signal::Term => 15,
            Signal::Int => 2,
        }
    }
}

impl std::fmt::Display for Signal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Signal::Term => "SIGTERM",
            Signal::Int => "SIGINT",
        })
    }
}

/// SIGTERM and SIGINT handlers, installed before the guest starts (from
/// then on neither signal kills the process by its default action).
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

impl Signals {
    fn install() -> std::io::Result<Signals> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(Signals {
            term: signal(SignalKind::terminate())?,
            int: signal(SignalKind::interrupt())?,
        })
    }

    /// Waits for the next SIGTERM or SIGINT.
    async fn next(&mut self) -> Signal {
        tokio::select! {
            _ = self.term.recv() => Signal::Term,
            _ = self.int.recv() => Signal::Int,
        }
    }
}

/// A guest's result as the process's exit status: its own exit code
/// (clamped to 0-255), or an error naming the failure.
pub fn exit_code(result: Result<(), RunError>) -> anyhow::Result<ExitCode> {
    match result {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(RunError::Exit(code)) => Ok(ExitCode::from(code.clamp(0, 255) as u8)),
        Err(e) => bail!("{e}"),
    }
}
