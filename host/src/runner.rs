//! Running guest components: engine configuration, per-guest stores with
//! memory and runaway limits, stdout capture.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use wasmtime::component::{Component, Linker, ResourceTable};
use wasmtime::{
    CallHook, Config as EngineConfig, Engine, Store, StoreLimits, StoreLimitsBuilder,
    UpdateDeadline,
};
use wasmtime_wasi::p2::bindings::Command;
use wasmtime_wasi::p2::pipe::MemoryOutputPipe;
use wasmtime_wasi::{WasiCtx, WasiCtxView, WasiView};

use crate::{Config, HostCtx, TetherCtx, TetherCtxView, TetherView};

/// How guests are compiled and instantiated.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EngineKind {
    /// Cranelift, on-demand allocation (wasmtime's default).
    Cranelift,
    /// The Winch baseline compiler.
    Winch,
    /// Cranelift with the pooling instance allocator, as a multi-tenant
    /// embedder configures it (memory slots sized to the guest limit).
    Pooling,
}

impl EngineKind {
    /// The name used on the command line and in reports.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Cranelift => "wasmtime",
            EngineKind::Winch => "wasmtime-winch",
            EngineKind::Pooling => "wasmtime-pooling",
        }
    }
}

/// Where a guest's stdout and stderr go.
#[derive(Clone, Copy, Debug)]
pub enum GuestIo {
    /// The host process's own stdout/stderr.
    Inherit,
    /// Captured in memory, at most this many bytes each; returned in
    /// [`Outcome`].
    Capture(usize),
}

/// Why a guest run failed.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The component could not be instantiated (missing imports, ...).
    #[error("cannot instantiate guest: {0}")]
    Instantiate(String),
    /// The guest exited with a non-zero status.
    #[error("guest exited with status {0}")]
    Exit(i32),
    /// The guest ran longer than `max_run_without_yield` without returning
    /// to the host and was stopped.
    #[error(
        "guest stopped: it ran for more than {0:?} without returning to the host (runaway loop?)"
    )]
    Runaway(Duration),
    /// The guest tried to grow its memory past `max_memory_bytes`.
    #[error("guest stopped: memory limit of {0} bytes exceeded")]
    MemoryLimit(usize),
    /// The guest trapped.
    #[error("guest trapped: {0}")]
    Trap(String),
    /// The host shut down ([`HostCtx::shutdown`]) and the guest was still
    /// running `shutdown_timeout` later, so it was stopped.
    #[error("guest stopped: still running {0:?} after the host started shutting down")]
    ShutdownDeadline(Duration),
}

/// The result of one guest run.
#[derive(Debug)]
pub struct Outcome {
    /// `Ok` when the guest's `main` returned normally.
    pub result: Result<(), RunError>,
    /// Captured stdout (empty with [`GuestIo::Inherit`]).
    pub stdout: Vec<u8>,
    /// Captured stderr (empty with [`GuestIo::Inherit`]).
    pub stderr: Vec<u8>,
    /// Wall-clock time of instantiate plus run.
    pub elapsed: Duration,
}

impl Outcome {
    /// Captured stdout as UTF-8 (lossy).
    pub fn stdout_text(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }
}

/// A guest's store data: WASI, Tether, the resource table and the limits.
pub struct GuestState {
    wasi: WasiCtx,
    table: ResourceTable,
    tether: TetherCtx,
    limits: StoreLimits,
    /// The ticker's count when the guest last got control back from the
    /// host; the runaway check measures from here (an atomic load per host
    /// call instead of a clock read).
    resumed: u64,
    ticks: Arc<AtomicU64>,
    /// Set by the epoch callback (which may park the guest in a yield), so
    /// that coming back from it does not count as a return to the host.
    epoch_yield: bool,
    /// Set when the guest ran a whole epoch tick without returning to the
    /// host on a multi-thread runtime: its next poll runs off the worker
    /// (`block_in_place`) until it returns to the host.
    computing: Arc<AtomicBool>,
    /// Counts `table` when asked ([`Runner::run_with_census`]).
    census: Option<Arc<TableCensus>>,
}

/// The number of entries in one guest's resource table (every handle it
/// holds: streams, listeners, pollables, readiness sets, `wasi:io`
/// streams, and entries the host keeps for it), counted on request: the
/// soak checks that a guest's table is back to its baseline after
/// thousands of connections.
///
/// Costs nothing per message: until [`TableCensus::request`] the guest's
/// host calls only read one flag that nobody writes; the count itself
/// (O(entries)) runs once per request, at the guest's next return from a
/// host call. A guest blocked in `wasi:io/poll` counts once something wakes
/// it (a connection, a message), and its count is then the table as it
/// stood while it was blocked.
#[derive(Debug, Default)]
pub struct TableCensus {
    wanted: AtomicBool,
    entries: AtomicUsize,
    counted: tokio::sync::Notify,
}

impl TableCensus {
    /// A census for [`Runner::run_with_census`].
    pub fn new() -> Arc<TableCensus> {
        Arc::default()
    }

    /// Asks the guest to count its table at its next return from a host
    /// call.
    pub fn request(&self) {
        self.wanted.store(true, Ordering::Release);
    }

    /// The count asked for by [`TableCensus::request`], once the guest took
    /// it; `None` if it did not within `limit` (it made no host call: wake
    /// it).
    pub async fn entries(&self, limit: Duration) -> Option<usize> {
        let taken = async {
            loop {
                let counted = self.counted.notified();
                tokio::pin!(counted);
                counted.as_mut().enable();
                if !self.wanted.load(Ordering::Acquire) {
                    return self.entries.load(Ordering::Acquire);
                }
                counted.await;
            }
        };
        tokio::time::timeout(limit, taken).await.ok()
    }

    /// Counts `table` if a count was requested.
    fn take(&self, table: &mut ResourceTable) {
        if self.wanted.load(Ordering::Relaxed) {
            self.entries
                .store(table.iter_mut().count(), Ordering::Release);
            self.wanted.store(false, Ordering::Release);
            self.counted.notify_waiters();
        }
    }
}

impl WasiView for GuestState {
    fn ctx(&mut self) -> WasiCtxView<'_> {
        WasiCtxView {
            ctx: &mut self.wasi,
            table: &mut self.table,
        }
    }
}

impl TetherView for GuestState {
    fn tether(&mut self) -> TetherCtxView<'_> {
        TetherCtxView {
            ctx: &mut self.tether,
            table: &mut self.table,
        }
    }
}

#[derive(Debug)]
pub(crate) struct Runaway(pub(crate) Duration);

impl std::fmt::Display for Runaway {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "guest ran for more than {:?} without returning to the host",
            self.0
        )
    }
}

impl std::error::Error for Runaway {}

/// Compiles and runs guests under one [`Config`]. Share one `Runner`
/// between many guests; each run gets its own store.
pub struct Runner {
    engine: Engine,
    linker: Linker<GuestState>,
    host: Arc<HostCtx>,
    kind: EngineKind,
    /// Epoch ticks since the runner started (the ticker thread counts them).
    ticks: Arc<AtomicU64>,
}

fn engine_config(kind: EngineKind, config: &Config) -> EngineConfig {
    let mut c = EngineConfig::new();
    c.epoch_interruption(true);
    // WASIp2 guests need no component-model concurrency; without it every
    // host call skips the concurrent-task bookkeeping.
    c.concurrency_support(false);
    // `TETHER_PERFMAP=1`: write /tmp/perf-PID.map so `perf record` /
    // `perf report` name the guest's compiled functions.
    if std::env::var_os("TETHER_PERFMAP").is_some_and(|v| v == "1") {
        c.profiler(wasmtime::ProfilingStrategy::PerfMap);
    }
    match kind {
        EngineKind::Cranelift => {}
        EngineKind::Winch => {
            c.strategy(wasmtime::Strategy::Winch);
        }
        EngineKind::Pooling => {
            // Slots per guest: a wasm32-wasip2 component has one memory,
            // a few core instances (the program and its shims) and tables.
            let guests = u32::try_from(config.limits.max_guests.max(1)).unwrap_or(u32::MAX);
            let mut pool = wasmtime::PoolingAllocationConfig::default();
            pool.total_component_instances(guests)
                .total_core_instances(guests.saturating_mul(4))
                .total_memories(guests)
                .total_tables(guests.saturating_mul(2))
                .max_memory_size(config.limits.max_memory_bytes);
            c.allocation_strategy(wasmtime::InstanceAllocationStrategy::Pooling(pool));
        }
    }
    c
}

impl Runner {
    /// Builds the engine and linker and starts the epoch ticker (a thread
    /// that only advances wasmtime's epoch counter every
    /// `limits.epoch_tick`; it never wakes a guest).
    ///
    /// Errors: engine configuration rejected, unreadable CA file.
    pub fn new(config: Config, kind: EngineKind) -> anyhow::Result<Runner> {
        let engine = Engine::new(&engine_config(kind, &config))?;
        let mut linker = Linker::new(&engine);
        wasmtime_wasi::p2::add_to_linker_async(&mut linker)?;
        crate::add_to_linker(&mut linker)?;
        let ticks = Arc::new(AtomicU64::new(0));
        let counter = ticks.clone();
        let weak = engine.weak();
        let tick = config.limits.epoch_tick;
        std::thread::Builder::new()
            .name("tether-epoch".into())
            .spawn(move || {
                while let Some(engine) = weak.upgrade() {
                    counter.fetch_add(1, Ordering::Relaxed);
                    engine.increment_epoch();
                    drop(engine);
                    std::thread::sleep(tick);
                }
            })?;
        Ok(Runner {
            engine,
            linker,
            host: HostCtx::new(config)?,
            kind,
            ticks,
        })
    }

    /// The engine kind this runner uses.
    pub fn kind(&self) -> EngineKind {
        self.kind
    }

    /// The shared host context (configuration, TLS).
    pub fn host(&self) -> &Arc<HostCtx> {
        &self.host
    }

    /// Compiles a component (`.wasm` bytes).
    pub fn compile(&self, wasm: &[u8]) -> anyhow::Result<Component> {
        // The WebAssembly magic number is "\0asm"; anything else is not a
        // guest at all (a one-line error instead of a parser dump).
        if !wasm.starts_with(b"\0asm") {
            anyhow::bail!(
                "not a WebAssembly component (the file does not start with the \\0asm magic number)"
            );
        }
        Ok(Component::new(&self.engine, wasm)?)
    }

    /// Like [`Runner::compile`], but reuses machine code compiled earlier in
    /// this process for the same bytes and engine configuration (tests and
    /// the conformance suite run one guest under many configurations).
    pub fn compile_cached(&self, wasm: &[u8]) -> anyhow::Result<Component> {
        precompile_cached(
            &self.engine,
            wasm,
            (self.kind, self.host.config.limits.max_memory_bytes),
        )
    }

    /// Runs `component` as a `wasi:cli/command` with `args` (`args[0]` is
    /// the program name) to completion on the current tokio runtime.
    pub async fn run(
        &self,
        component: &Component,
        args: &[impl AsRef<str>],
        io: GuestIo,
    ) -> Outcome {
        self.run_with_census(component, args, io, None).await
    }

    /// Like [`Runner::run`], with `census` counting the guest's resource
    /// table whenever asked.
    pub async fn run_with_census(
        &self,
        component: &Component,
        args: &[impl AsRef<str>],
        io: GuestIo,
        census: Option<Arc<TableCensus>>,
    ) -> Outcome {
        let started = Instant::now();
        let limits = &self.host.config.limits;
        let (wasi, pipes) = wasi_ctx(args, io);
        let state = GuestState {
            wasi,
            table: ResourceTable::new(),
            tether: TetherCtx::new(self.host.clone()),
            limits: StoreLimitsBuilder::new()
                .memory_size(limits.max_memory_bytes)
                .trap_on_grow_failure(true)
                .build(),
            resumed: self.ticks.load(Ordering::Relaxed),
            ticks: self.ticks.clone(),
            epoch_yield: false,
            computing: Arc::new(AtomicBool::new(false)),
            census,
        };
        let mut store = Store::new(&self.engine, state);
        store.set_max_component_handles(limits.component_handles());
        let span = store.data().tether.span();
        let running = self.host.metrics.guest_running();
        store.limiter(|s| &mut s.limits);
        store.call_hook(|mut ctx, hook| {
            let data = ctx.data_mut();
            if matches!(hook, CallHook::ReturningFromHost | CallHook::CallingWasm) {
                if data.epoch_yield {
                    data.epoch_yield = false;
                } else {
                    data.resumed = data.ticks.load(Ordering::Relaxed);
                }
            }
            if matches!(hook, CallHook::ReturningFromHost)
                && let Some(census) = &data.census
            {
                census.take(&mut data.table);
            }
            Ok(())
        });
        let max_run = limits.max_run_without_yield;
        let max_ticks = (max_run.as_nanos() / limits.epoch_tick.as_nanos().max(1)) as u64;
        let multi_thread = tokio::runtime::Handle::try_current()
            .is_ok_and(|h| h.runtime_flavor() == tokio::runtime::RuntimeFlavor::MultiThread);
        store.epoch_deadline_callback(move |mut ctx| {
            let data = ctx.data_mut();
            let running = data
                .ticks
                .load(Ordering::Relaxed)
                .saturating_sub(data.resumed);
            if running > max_ticks {
                return Err(Runaway(max_run).into());
            }
            // Coming back from this callback passes the call hook as a
            // return from the host: it must not count as one.
            data.epoch_yield = true;
            if multi_thread && running >= 2 && data.computing.swap(true, Ordering::Relaxed) {
                // Already running off the worker (below): keep going.
                return Ok(UpdateDeadline::Continue(1));
            }
            // On a multi-thread runtime, a guest that ran a whole tick
            // without returning to the host is computing: it yields once,
            // and its next poll runs in `block_in_place`, which hands this
            // worker's queue and I/O driver to another thread. The OS then
            // time-slices the guest like any thread, and the other guests
            // and socket tasks keep a worker. (Yielding every tick instead
            // holds a worker for a tick at a time, and every task queued
            // behind it waits: 13x the others' p99 in `tether bench
            // isolation`.)
            // Let socket tasks and other guests on this thread run: tokio's
            // `yield_now` wakes the guest again only after the I/O driver
            // has been polled. (A plain yield re-queues it at once; on a
            // current-thread runtime the driver then runs only every 61
            // task polls, so the others waited 61 ticks, 600 ms, for
            // their sockets.)
            Ok(yield_to_runtime())
        });
        store.set_epoch_deadline(1);
        let computing = store.data().computing.clone();
        let guest = async {
            let command = Command::instantiate_async(&mut store, component, &self.linker)
                .await
                .map_err(|e| RunError::Instantiate(format!("{e:#}")))?;
            match command.wasi_cli_run().call_run(&mut store).await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(())) => Err(RunError::Exit(1)),
                Err(e) => Err(classify_trap(e, limits.max_memory_bytes)),
            }
        };
        let result = {
            let guest = tracing::Instrument::instrument(guest, span.clone());
            let mut guest = std::pin::pin!(guest);
            let guest = std::future::poll_fn(|cx| {
                if computing.load(Ordering::Relaxed) {
                    let poll = tokio::task::block_in_place(|| guest.as_mut().poll(cx));
                    computing.store(false, Ordering::Relaxed);
                    poll
                } else {
                    guest.as_mut().poll(cx)
                }
            });
            tokio::select! {
                result = guest => result,
                stopped = shutdown_deadline(&self.host) => Err(stopped),
            }
        };
        end_run(&self.host, &mut store.data_mut().tether, &result, span).await;
        drop(store);
        drop(running);
        outcome(result, pipes, started)
    }
}

/// Compiles `wasm` for `engine`, reusing machine code compiled earlier in
/// this process for the same bytes and the same `config` (whatever,
/// besides the engine, the code depends on).
pub(crate) fn precompile_cached(
    engine: &Engine,
    wasm: &[u8],
    config: impl std::hash::Hash,
) -> anyhow::Result<Component> {
    use std::collections::HashMap;
    use std::hash::{Hash, Hasher};
    use std::sync::{Mutex, OnceLock};
    /// (hash of the bytes and `config`, length) -> precompiled code.
    type Cache = Mutex<HashMap<(u64, usize), Arc<Vec<u8>>>>;
    static CACHE: OnceLock<Cache> = OnceLock::new();
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    wasm.hash(&mut hasher);
    config.hash(&mut hasher);
    let key = (hasher.finish(), wasm.len());
    let cache = CACHE.get_or_init(Default::default);
    let hit = cache.lock().unwrap().get(&key).cloned();
    let bytes = match hit {
        Some(b) => b,
        None => {
            let b = Arc::new(engine.precompile_component(wasm)?);
            cache.lock().unwrap().insert(key, b.clone());
            b
        }
    };
    // SAFETY: the bytes were produced by `precompile_component` in this
    // process for an engine with the same configuration (`config`).
    Ok(unsafe { Component::deserialize(engine, &bytes[..]) }?)
}

/// Captured stdout and stderr of a guest.
pub(crate) type Pipes = Option<(MemoryOutputPipe, MemoryOutputPipe)>;

/// The guest's WASI context: `args`, and stdout/stderr inherited or
/// captured (up to `max` bytes each) as `io` says.
pub(crate) fn wasi_ctx(args: &[impl AsRef<str>], io: GuestIo) -> (WasiCtx, Pipes) {
    let mut wasi = WasiCtx::builder();
    wasi.args(args);
    let pipes = match io {
        GuestIo::Inherit => {
            wasi.inherit_stdout().stderr(LossyStderr);
            None
        }
        GuestIo::Capture(max) => {
            let (out, err) = (MemoryOutputPipe::new(max), MemoryOutputPipe::new(max));
            wasi.stdout(out.clone()).stderr(err.clone());
            Some((out, err))
        }
    };
    (wasi.build(), pipes)
}

/// The host's stderr for a guest, best effort: a write that fails (stderr
/// closed, a full disk, a log reader that went away) is dropped and
/// reported to the guest as done. A guest's log line must never end it:
/// Rust's `eprintln!` panics when the write fails, which took whole JMUX
/// tunnels down. Stdout stays strict, since it carries a guest's results.
struct LossyStderr;

impl wasmtime_wasi::cli::IsTerminal for LossyStderr {
    fn is_terminal(&self) -> bool {
        std::io::IsTerminal::is_terminal(&std::io::stderr())
    }
}

impl wasmtime_wasi::cli::StdoutStream for LossyStderr {
    fn p2_stream(&self) -> Box<dyn wasmtime_wasi::p2::OutputStream> {
        Box::new(LossyStderr)
    }

    fn async_stream(&self) -> Box<dyn tokio::io::AsyncWrite + Send + Sync> {
        Box::new(LossyStderr)
    }
}

impl wasmtime_wasi::p2::OutputStream for LossyStderr {
    fn write(&mut self, bytes: bytes::Bytes) -> wasmtime_wasi::p2::StreamResult<()> {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), &bytes);
        Ok(())
    }

    fn flush(&mut self) -> wasmtime_wasi::p2::StreamResult<()> {
        let _ = std::io::Write::flush(&mut std::io::stderr());
        Ok(())
    }

    fn check_write(&mut self) -> wasmtime_wasi::p2::StreamResult<usize> {
        Ok(64 * 1024)
    }
}

#[async_trait::async_trait]
impl wasmtime_wasi::p2::Pollable for LossyStderr {
    async fn ready(&mut self) {}
}

impl tokio::io::AsyncWrite for LossyStderr {
    fn poll_write(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        let _ = std::io::Write::write_all(&mut std::io::stderr(), buf);
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let _ = std::io::Write::flush(&mut std::io::stderr());
        std::task::Poll::Ready(Ok(()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::task::Poll::Ready(Ok(()))
    }
}

/// What a guest's epoch callback returns when it lets the runtime run
/// other tasks: extend the deadline by one tick after `tokio::task::yield_now`,
/// which wakes the guest again only after the runtime has polled its I/O
/// driver, so socket tasks and other guests on the same thread run first.
pub(crate) fn yield_to_runtime() -> UpdateDeadline {
    UpdateDeadline::YieldCustom(1, Box::pin(tokio::task::yield_now()))
}

/// When a run failed (a trap, a runaway, the memory limit, a non-zero
/// exit), closes the guest's remaining message streams with 1011 naming
/// the failure, before the store drops them (which closes with 1000).
///
/// The reason is a fixed phrase per kind of failure: the details (trap
/// text, backtraces) stay in the host's [`Outcome`], never on the wire.
/// Waits (at most [`CLOSE_FLUSH_WAIT`]) for the close frames to be written,
/// so that a process that exits right after the run still sends them.
/// Resolves `shutdown_timeout` after the host started shutting down, with
/// the error that stops a guest still running then.
pub(crate) async fn shutdown_deadline(host: &HostCtx) -> RunError {
    host.shutdown_started().await;
    let timeout = host.config.limits.shutdown_timeout;
    tokio::time::sleep(timeout).await;
    RunError::ShutdownDeadline(timeout)
}

/// Ends a guest's run on the host side, for both ABIs: counts its outcome
/// in the metrics and, when it failed, closes its message streams with
/// 1011 (within `span`, so the log lines name the guest).
pub(crate) async fn end_run(
    host: &HostCtx,
    tether: &mut TetherCtx,
    result: &Result<(), RunError>,
    span: tracing::Span,
) {
    host.metrics.guest_finished(result);
    tracing::Instrument::instrument(fail_streams_on_error(tether, result), span).await;
}

async fn fail_streams_on_error(tether: &mut TetherCtx, result: &Result<(), RunError>) {
    let reason = match result {
        Ok(()) | Err(RunError::Exit(0)) => return,
        Err(RunError::Exit(_)) => "guest exited with an error",
        Err(RunError::Instantiate(_)) => "guest failed to start",
        Err(RunError::Runaway(_)) => "guest stopped: ran too long without yielding",
        Err(RunError::MemoryLimit(_)) => "guest stopped: memory limit",
        Err(RunError::Trap(_)) => "guest trapped",
        Err(RunError::ShutdownDeadline(_)) => "host shut down",
    };
    let streams = tether.fail_streams(reason);
    let flushed = async {
        for stream in &streams {
            stream.close_sent().await;
        }
    };
    let _ = tokio::time::timeout(CLOSE_FLUSH_WAIT, flushed).await;
}

/// How long a failed run waits for its streams' 1011 close frames to be
/// written before the store drops.
pub const CLOSE_FLUSH_WAIT: Duration = Duration::from_millis(500);

/// The run's [`Outcome`] once its store is gone.
pub(crate) fn outcome(result: Result<(), RunError>, pipes: Pipes, started: Instant) -> Outcome {
    let (stdout, stderr) = match pipes {
        Some((o, e)) => (o.contents().to_vec(), e.contents().to_vec()),
        None => (Vec::new(), Vec::new()),
    };
    Outcome {
        result,
        stdout,
        stderr,
        elapsed: started.elapsed(),
    }
}

/// A guest's exit, runaway, memory limit or trap, from wasmtime's error.
pub(crate) fn classify_trap(e: wasmtime::Error, max_memory: usize) -> RunError {
    if let Some(exit) = e.downcast_ref::<wasmtime_wasi::I32Exit>() {
        return RunError::Exit(exit.0);
    }
    if let Some(r) = e.downcast_ref::<Runaway>() {
        return RunError::Runaway(r.0);
    }
    let text = format!("{e:?}");
    if text.contains("forcing trap when growing memory") {
        return RunError::MemoryLimit(max_memory);
    }
    RunError::Trap(text)
}

impl Outcome {
    /// `Ok` for a normal return or `exit(0)`.
    pub fn success(&self) -> bool {
        matches!(self.result, Ok(()) | Err(RunError::Exit(0)))
    }
}
