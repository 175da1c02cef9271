//! `tether bench soak`: thousands of connect / echo / close cycles through
//! one server guest (the echo guest's server, WebSocket and TCP) must
//! leave nothing behind.
//!
//! The cycles are mixed, one kind after another ([`Kind`]): on WebSocket a
//! clean close, a peer reset after its echo, a peer gone with its echo
//! queued, a close the peer does not wait for (the guest drops the stream
//! with its echo and close reply queued) and a handshake abandoned
//! halfway; on TCP a clean half-close, a reset before any byte, a reset
//! while the echo flows, a peer that half-closes after 256 KiB (the guest
//! half-closes too and drops the stream with bytes still queued) and a
//! peer gone with bytes queued (a peer with a 4 KiB receive buffer that
//! resets mid-echo).
//!
//! Checked against the baseline taken before the first cycle (after one
//! probe cycle): this process's open file descriptors and the guest
//! runtime's live tokio tasks are back to it exactly, the host buffers 0
//! bytes (message streams and TCP write queues), the guest's resource table
//! holds as many entries as before ([`TableCensus`]), and RSS is within 5%
//! of where it stood after the first 2,000 cycles ([`RSS_REFERENCE_CYCLES`]).
//!
//! The clients run in this process on the caller's runtime (each cycle's
//! sockets are closed by its end, so they count in no baseline), the guest
//! on its own thread and current-thread runtime, as `tether run` runs it.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use futures_util::{SinkExt, StreamExt};
use serde::Serialize;
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner, TableCensus};
use tether_host::{Config, HostCtx, Limits, Stats};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::load::{fd_count, raise_nofile};
use crate::progress::Progress;
use crate::tunnel::{GuestThread, free_port, is_listening};

/// Cycles in flight at once.
pub const CONCURRENCY: usize = 16;
/// RSS may grow this much (percent) from after [`RSS_REFERENCE_CYCLES`] to
/// the end.
pub const RSS_GROWTH_PCT: f64 = 5.0;
/// Cycles after which the RSS reference is taken: past the warm-up, so
/// that what grows after it is a leak. Measured here (5,000-cycle runs):
/// with the reference after 1,000 cycles, +1.9% to +5.4% by the end (CI
/// failed one at +5.4%), yet 40,000 cycles grew no more (+3.8%): warm-up
/// of the allocator's arenas and the guest's heap, not a leak; after
/// 2,000, +0.1% to +2.3% in seven runs. A leak of 600 bytes per cycle
/// (injected, then reverted) failed the check at +9.7%.
pub const RSS_REFERENCE_CYCLES: usize = 2_000;
/// Deadline of one cycle.
const CYCLE_DEADLINE: Duration = Duration::from_secs(10);
/// How long the host may take to let go of what the last cycles left (the
/// guest's handshake and linger timeouts are 500 ms here).
const SETTLE: Duration = Duration::from_secs(10);
/// Bytes a TCP peer sends before it half-closes ([`Kind::TcpHalfClose`]).
const HALF_CLOSE_BYTES: usize = 256 << 10;
/// Bytes a TCP peer sends before it resets ([`Kind::TcpResetMidEcho`]).
const RESET_BYTES: usize = 64 << 10;
/// Most bytes a TCP peer sends waiting for the host to queue some
/// ([`Kind::TcpGoneQueued`]).
const FLOOD_BYTES: usize = 8 << 20;

/// What one run does.
#[derive(Clone, Debug)]
pub struct Options {
    /// Connect / echo / close cycles, WebSocket and TCP alternating kinds.
    pub cycles: usize,
}

impl Options {
    /// The full run: 100,000 cycles.
    pub fn full(cycles: Option<usize>) -> Options {
        Options {
            cycles: cycles.unwrap_or(100_000),
        }
    }

    /// The CI run (`bench all --quick`, the soak test): 5,000 cycles.
    pub fn quick(cycles: Option<usize>) -> Options {
        Options {
            cycles: cycles.unwrap_or(5_000),
        }
    }
}

/// One kind of cycle; cycle `i` is of kind `Kind::ALL[i % 10]`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// WebSocket: echo, then the closing handshake.
    WsClean,
    /// WebSocket: echo, then RST (no close frame).
    WsResetAfterEcho,
    /// WebSocket: a 4 KiB message, then gone before its echo.
    WsGoneQueued,
    /// WebSocket: a 4 KiB message and a close frame, then gone: the guest
    /// drops the stream with its echo and close reply queued.
    WsCloseUnwaited,
    /// WebSocket: half an upgrade request, then gone.
    WsHandshakeAbandoned,
    /// TCP: 32 B echoed, then both sides half-close.
    TcpClean,
    /// TCP: connect, then RST before any byte.
    TcpResetAtOnce,
    /// TCP: 64 KiB sent, RST once the echo flows.
    TcpResetMidEcho,
    /// TCP: 256 KiB sent and a half-close before reading: the guest echoes,
    /// half-closes and drops the stream with bytes queued; all come back.
    TcpHalfClose,
    /// TCP: a peer with a 4 KiB receive buffer that never reads sends
    /// until the host queues echo bytes in its write buffer (the kernel's
    /// are full; at most 8 MiB), then resets.
    TcpGoneQueued,
}

impl Kind {
    /// Every kind, in the order cycles run them.
    pub const ALL: [Kind; 10] = [
        Kind::WsClean,
        Kind::TcpClean,
        Kind::WsResetAfterEcho,
        Kind::TcpResetAtOnce,
        Kind::WsGoneQueued,
        Kind::TcpResetMidEcho,
        Kind::WsCloseUnwaited,
        Kind::TcpHalfClose,
        Kind::WsHandshakeAbandoned,
        Kind::TcpGoneQueued,
    ];
}

/// Where the echo guest listens.
#[derive(Clone, Copy, Debug)]
struct Addrs {
    ws: SocketAddr,
    tcp: SocketAddr,
}

/// One run's figures and checks (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Report {
    /// Cycles run, half WebSocket and half TCP.
    pub cycles: usize,
    /// Wall time of the cycles, s, and cycles per second.
    pub seconds: f64,
    pub cycles_per_s: f64,
    /// Open descriptors of this process: baseline, after the run.
    pub fds_before: u64,
    pub fds_after: u64,
    /// Live tokio tasks on the guest's runtime: baseline, after the run.
    pub tasks_before: usize,
    pub tasks_after: usize,
    /// Entries in the guest's resource table: baseline, after the run.
    pub table_entries_before: usize,
    pub table_entries_after: usize,
    /// Bytes the host buffers after the run: message streams, TCP write
    /// queues.
    pub buffered_bytes_after: usize,
    pub tcp_queued_bytes_after: usize,
    /// The most the host buffered at once during the run (the cycles did
    /// queue bytes): message streams overall, one TCP write queue.
    pub peak_buffered_bytes: usize,
    pub peak_tcp_queued_bytes: usize,
    /// RSS, KiB: at the baseline, after the first [`RSS_REFERENCE_CYCLES`] (the
    /// reference), after the run; and the growth from the reference, %.
    pub rss_kib_before: u64,
    pub rss_kib_reference: u64,
    pub rss_kib_after: u64,
    pub rss_growth_pct: f64,
    /// RSS along the run, `[cycles done, KiB]`, every tenth of the run
    /// (not settled: cycles in flight included).
    pub rss_kib_along: Vec<[u64; 2]>,
    /// The machine's 1-minute load average at the start and the end.
    pub load_avg_before: f64,
    pub load_avg_after: f64,
    /// The checks that failed, each naming what it found (empty: holds).
    pub failed: Vec<String>,
}

impl Report {
    /// The table for people.
    pub fn table(&self) -> String {
        let check = |ok: bool| if ok { "ok" } else { "FAILED" };
        let rows = [
            (
                "file descriptors",
                format!("{} -> {}", self.fds_before, self.fds_after),
                check(self.fds_after == self.fds_before),
            ),
            (
                "guest runtime tasks",
                format!("{} -> {}", self.tasks_before, self.tasks_after),
                check(self.tasks_after == self.tasks_before),
            ),
            (
                "guest resource table entries",
                format!(
                    "{} -> {}",
                    self.table_entries_before, self.table_entries_after
                ),
                check(self.table_entries_after == self.table_entries_before),
            ),
            (
                "buffered bytes (messages)",
                format!(
                    "{} (peak {})",
                    self.buffered_bytes_after, self.peak_buffered_bytes
                ),
                check(self.buffered_bytes_after == 0),
            ),
            (
                "buffered bytes (TCP queues)",
                format!(
                    "{} (peak {} in one)",
                    self.tcp_queued_bytes_after, self.peak_tcp_queued_bytes
                ),
                check(self.tcp_queued_bytes_after == 0),
            ),
            (
                "RSS KiB (start, 2,000, end)",
                format!(
                    "{}, {}, {} ({:+.1}%)",
                    self.rss_kib_before,
                    self.rss_kib_reference,
                    self.rss_kib_after,
                    self.rss_growth_pct
                ),
                check(self.rss_growth_pct <= RSS_GROWTH_PCT),
            ),
        ];
        let mut out = format!(
            "{} cycles in {:.1} s ({:.0}/s), load average {:.2} -> {:.2}\n\n",
            self.cycles, self.seconds, self.cycles_per_s, self.load_avg_before, self.load_avg_after
        );
        for (name, value, verdict) in rows {
            out += &format!("{name:<30}{value:>36}  {verdict}\n");
        }
        out
    }

    /// Fails naming every check that did not hold.
    ///
    /// Errors: one or more checks failed.
    pub fn check(&self) -> anyhow::Result<()> {
        if self.failed.is_empty() {
            Ok(())
        } else {
            bail!("soak: {}", self.failed.join("; "))
        }
    }
}

/// What [`Report::failed`] lists for these figures.
fn failures(r: &Report) -> Vec<String> {
    let mut failed = Vec::new();
    if r.fds_after != r.fds_before {
        failed.push(format!(
            "file descriptors {} -> {}",
            r.fds_before, r.fds_after
        ));
    }
    if r.tasks_after != r.tasks_before {
        failed.push(format!(
            "guest runtime tasks {} -> {}",
            r.tasks_before, r.tasks_after
        ));
    }
    if r.table_entries_after != r.table_entries_before {
        failed.push(format!(
            "guest resource table entries {} -> {}",
            r.table_entries_before, r.table_entries_after
        ));
    }
    if r.buffered_bytes_after != 0 {
        failed.push(format!(
            "{} bytes still buffered in message streams",
            r.buffered_bytes_after
        ));
    }
    if r.tcp_queued_bytes_after != 0 {
        failed.push(format!(
            "{} bytes still queued in TCP write buffers",
            r.tcp_queued_bytes_after
        ));
    }
    if r.rss_growth_pct > RSS_GROWTH_PCT {
        failed.push(format!(
            "RSS grew {:.1}% (over {RSS_GROWTH_PCT}%) from {} KiB after {RSS_REFERENCE_CYCLES} cycles to {} KiB",
            r.rss_growth_pct, r.rss_kib_reference, r.rss_kib_after
        ));
    }
    failed
}

/// The host's configuration for the run: listening on loopback, and
/// handshake and linger timeouts of 500 ms so that abandoned handshakes and
/// unread queues end within the settle time.
fn config() -> anyhow::Result<Config> {
    Ok(Config {
        policy: Policy {
            listen: vec!["127.0.0.1:*".parse()?],
            ..Policy::default()
        },
        limits: Limits {
            handshake_timeout: Duration::from_millis(500),
            linger_timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..Config::default()
    })
}

/// The machine's 1-minute load average, from `/proc/loadavg` (0 if
/// unreadable).
fn load_avg() -> f64 {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| s.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0)
}

/// This process's RSS, KiB, once the allocator gave back the free pages it
/// kept (`malloc_trim`): memory in use, not the high-water mark of the
/// busiest moment so far (with 16 cycles in flight, a few 256 KiB TCP
/// queues at once now and then, each in the arena of the thread that
/// allocated it).
///
/// Errors: `/proc/self/status` unreadable.
pub fn rss_kib() -> anyhow::Result<u64> {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only walks the allocator's own free lists.
    unsafe {
        libc::malloc_trim(0);
    }
    crate::load::rss_kib()
}

/// What the checks read, now.
struct Now {
    fds: u64,
    tasks: usize,
    buffered: usize,
    tcp_queued: usize,
}

/// Reads the checked figures of the guest on `guest` under `host`.
fn now(host: &HostCtx, guest: &tokio::runtime::Handle) -> anyhow::Result<Now> {
    Ok(Now {
        fds: fd_count()?,
        tasks: guest.metrics().num_alive_tasks(),
        buffered: host.stats.buffered_bytes(),
        tcp_queued: host.stats.tcp_queued_bytes(),
    })
}

/// Waits (at most [`SETTLE`]) until the descriptors and tasks are back to
/// `base` and nothing is buffered; returns the figures then.
async fn settle(host: &HostCtx, guest: &tokio::runtime::Handle, base: &Now) -> anyhow::Result<Now> {
    let t0 = Instant::now();
    loop {
        let n = now(host, guest)?;
        let quiet =
            n.fds == base.fds && n.tasks == base.tasks && n.buffered == 0 && n.tcp_queued == 0;
        if quiet || t0.elapsed() > SETTLE {
            return Ok(n);
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// The guest's resource table size: asks for a census, wakes the guest
/// with one clean WebSocket cycle and takes the count (the table as it
/// stood while the guest was idle, before it accepted that cycle).
async fn table_entries(census: &TableCensus, addrs: Addrs) -> anyhow::Result<usize> {
    census.request();
    cycle(addrs, Kind::WsClean, &Stats::default()).await?;
    census
        .entries(Duration::from_secs(5))
        .await
        .context("the guest did not count its resource table within 5 s")
}

/// Runs the soak: `opts.cycles` cycles, then the checks. `progress` counts
/// cycles (its total should be `opts.cycles`). A failed check is in
/// [`Report::failed`] (see [`Report::check`]), not an error.
///
/// Errors: the guest did not start, a cycle failed or took over 10 s, or
/// the guest did not count its table.
pub async fn run(opts: &Options, progress: &Progress) -> anyhow::Result<Report> {
    raise_nofile().context("raising RLIMIT_NOFILE")?;
    let runner = Arc::new(Runner::new(config()?, EngineKind::Cranelift)?);
    let component = runner.compile(tether_guest_artifacts::ECHO)?;
    let (ws_port, tcp_port) = (free_port()?, free_port()?);
    let addrs = Addrs {
        ws: SocketAddr::from(([127, 0, 0, 1], ws_port)),
        tcp: SocketAddr::from(([127, 0, 0, 1], tcp_port)),
    };
    let args = vec![
        "echo".to_string(),
        "server".into(),
        addrs.ws.to_string(),
        "0".into(),
        "--tcp".into(),
        addrs.tcp.to_string(),
    ];
    let census = TableCensus::new();
    let guest = GuestThread::spawn_with_census(
        runner.clone(),
        component,
        args,
        GuestIo::Capture(1 << 20),
        Some(census.clone()),
    )?;
    let t0 = Instant::now();
    while !(is_listening(ws_port) && is_listening(tcp_port)) {
        if guest.is_finished() || t0.elapsed() > Duration::from_secs(30) {
            let outcome = guest.stop();
            bail!("the echo guest did not listen on {addrs:?}: {outcome:?}");
        }
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let host = runner.host().clone();
    let rt = guest.runtime().clone();
    let load_avg_before = load_avg();

    // Baseline: after one cycle of each transport, once what they left is
    // gone (past the 500 ms timeouts).
    progress.phase("baseline");
    cycle(addrs, Kind::WsClean, &host.stats).await?;
    cycle(addrs, Kind::TcpClean, &host.stats).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let base = now(&host, &rt)?;
    if base.buffered != 0 || base.tcp_queued != 0 {
        bail!(
            "{} bytes buffered ({} in TCP queues) with no connection open",
            base.buffered,
            base.tcp_queued
        );
    }
    let table_before = table_entries(&census, addrs).await?;
    settle(&host, &rt, &base).await?;
    let rss_before = rss_kib()?;

    progress.phase("cycles");
    let started = Instant::now();
    let reference_at = RSS_REFERENCE_CYCLES.min(opts.cycles);
    let mut along = Vec::new();
    run_cycles(addrs, &host.stats, 0..reference_at, progress, &mut along).await?;
    settle(&host, &rt, &base).await?;
    let rss_reference = rss_kib()?;
    run_cycles(
        addrs,
        &host.stats,
        reference_at..opts.cycles,
        progress,
        &mut along,
    )
    .await?;
    let seconds = started.elapsed().as_secs_f64();

    progress.phase("settling");
    let after = settle(&host, &rt, &base).await?;
    let rss_after = rss_kib()?;
    let table_after = table_entries(&census, addrs).await?;
    drop(guest);
    let mut report = Report {
        cycles: opts.cycles,
        seconds,
        cycles_per_s: opts.cycles as f64 / seconds,
        fds_before: base.fds,
        fds_after: after.fds,
        tasks_before: base.tasks,
        tasks_after: after.tasks,
        table_entries_before: table_before,
        table_entries_after: table_after,
        buffered_bytes_after: after.buffered,
        tcp_queued_bytes_after: after.tcp_queued,
        peak_buffered_bytes: host.stats.peak_buffered_bytes(),
        peak_tcp_queued_bytes: host.stats.peak_tcp_queued_bytes(),
        rss_kib_before: rss_before,
        rss_kib_reference: rss_reference,
        rss_kib_after: rss_after,
        rss_growth_pct: (rss_after as f64 / rss_reference as f64 - 1.0) * 100.0,
        rss_kib_along: along,
        load_avg_before,
        load_avg_after: load_avg(),
        failed: Vec::new(),
    };
    report.failed = failures(&report);
    Ok(report)
}

/// Runs the cycles numbered `range`, [`CONCURRENCY`] at a time, and adds
/// `[cycles done, RSS KiB]` to `along` every tenth of `progress`'s total.
async fn run_cycles(
    addrs: Addrs,
    stats: &Stats,
    range: std::ops::Range<usize>,
    progress: &Progress,
    along: &mut Vec<[u64; 2]>,
) -> anyhow::Result<()> {
    let tenth = (progress.total() / 10).max(1);
    let mut runs = futures_util::stream::iter(range)
        .map(|i| async move {
            let kind = Kind::ALL[i % Kind::ALL.len()];
            tokio::time::timeout(CYCLE_DEADLINE, cycle(addrs, kind, stats))
                .await
                .with_context(|| format!("cycle {i} ({kind:?}) took over 10 s"))?
                .with_context(|| format!("cycle {i} ({kind:?})"))
        })
        .buffer_unordered(CONCURRENCY);
    while let Some(done) = runs.next().await {
        done?;
        progress.inc();
        if progress.done().is_multiple_of(tenth) {
            along.push([progress.done(), rss_kib()?]);
        }
    }
    Ok(())
}

/// Sets SO_LINGER 0: closing `tcp` sends RST.
fn reset_on_close(tcp: &TcpStream) -> anyhow::Result<()> {
    tcp.set_zero_linger()?;
    Ok(())
}

/// A WebSocket client connection to `addr` (no name lookup: a lookup runs
/// on a blocking thread, whose own malloc arena would count in RSS).
async fn ws_connect(addr: SocketAddr) -> anyhow::Result<Ws> {
    let tcp = TcpStream::connect(addr).await?;
    tcp.set_nodelay(true)?;
    let (ws, _) = tokio_tungstenite::client_async(format!("ws://{addr}/"), tcp).await?;
    Ok(ws)
}

type Ws = tokio_tungstenite::WebSocketStream<TcpStream>;

/// One cycle of `kind` against the echo guest at `addrs`; `stats` are the
/// host's (a [`Kind::TcpGoneQueued`] peer sends until they show bytes
/// queued).
///
/// Errors: the peer saw something other than an echo where one is due.
async fn cycle(addrs: Addrs, kind: Kind, stats: &Stats) -> anyhow::Result<()> {
    match kind {
        Kind::WsClean => {
            let mut ws = ws_connect(addrs.ws).await?;
            ws.send(Message::binary(vec![7u8; 32])).await?;
            let echoed = ws.next().await.context("no echo")??;
            if echoed.len() != 32 {
                bail!("echo of {} bytes, sent 32", echoed.len());
            }
            ws.close(None).await?;
            while let Some(Ok(_)) = ws.next().await {}
        }
        Kind::WsResetAfterEcho => {
            let mut ws = ws_connect(addrs.ws).await?;
            ws.send(Message::binary(vec![1u8; 32])).await?;
            ws.next().await.context("no echo")??;
            reset_on_close(ws.get_ref())?;
        }
        Kind::WsGoneQueued => {
            let mut ws = ws_connect(addrs.ws).await?;
            ws.send(Message::binary(vec![2u8; 4096])).await?;
        }
        Kind::WsCloseUnwaited => {
            let mut ws = ws_connect(addrs.ws).await?;
            ws.send(Message::binary(vec![3u8; 4096])).await?;
            ws.close(None).await?;
        }
        Kind::WsHandshakeAbandoned => {
            let mut tcp = TcpStream::connect(addrs.ws).await?;
            tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
                .await?;
        }
        Kind::TcpClean => {
            let mut tcp = TcpStream::connect(addrs.tcp).await?;
            tcp.write_all(&[5u8; 32]).await?;
            let mut echo = [0u8; 32];
            tcp.read_exact(&mut echo).await?;
            tcp.shutdown().await?;
            if tcp.read(&mut echo).await? != 0 {
                bail!("bytes after the echo, expected the guest's half-close");
            }
        }
        Kind::TcpResetAtOnce => {
            let tcp = TcpStream::connect(addrs.tcp).await?;
            reset_on_close(&tcp)?;
        }
        Kind::TcpResetMidEcho => {
            let mut tcp = TcpStream::connect(addrs.tcp).await?;
            tcp.write_all(&[6u8; RESET_BYTES]).await?;
            tcp.read_exact(&mut [0u8; 1]).await?;
            reset_on_close(&tcp)?;
        }
        Kind::TcpHalfClose => {
            let mut tcp = TcpStream::connect(addrs.tcp).await?;
            tcp.write_all(&[8u8; HALF_CLOSE_BYTES]).await?;
            tcp.shutdown().await?;
            let mut back = Vec::with_capacity(HALF_CLOSE_BYTES);
            tcp.read_to_end(&mut back).await?;
            if back.len() != HALF_CLOSE_BYTES {
                bail!(
                    "{} bytes echoed before the guest's half-close, sent {HALF_CLOSE_BYTES}",
                    back.len()
                );
            }
        }
        Kind::TcpGoneQueued => {
            let socket = tokio::net::TcpSocket::new_v4()?;
            socket.set_recv_buffer_size(4096)?;
            let mut tcp = socket.connect(addrs.tcp).await?;
            let chunk = [9u8; 64 << 10];
            let mut sent = 0;
            while stats.tcp_queued_bytes() == 0 && sent < FLOOD_BYTES {
                // A write that blocks: the guest stopped reading, its
                // output full.
                let wrote = tokio::time::timeout(Duration::from_millis(200), tcp.write_all(&chunk));
                if wrote.await.is_err() {
                    break;
                }
                sent += chunk.len();
            }
            reset_on_close(&tcp)?;
        }
    }
    Ok(())
}
