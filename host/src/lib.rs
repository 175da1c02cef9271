//! Tether: a wasmtime host that gives WebAssembly components WebSocket
//! message streams and TCP byte streams backed by real sockets.
//!
//! # Embedding
//!
//! Three things to call, in the style of `wasmtime-wasi-http`:
//!
//! 1. [`HostCtx::new`] once, from a [`Config`] (policy, TLS roots, limits);
//! 2. [`add_to_linker`] on your own `Linker<T>` (next to
//!    `wasmtime_wasi::p2::add_to_linker_async`), where your store data `T`
//!    implements [`TetherView`] by handing out a [`TetherCtx`] and the
//!    store's `ResourceTable`;
//! 3. run the guest on a tokio runtime (current-thread keeps a guest and
//!    its sockets on one thread: host-guest wake-ups stay ~2 us).
//!
//! The whole of it, as `examples/embed.rs` (compiled as this doc test
//! with nothing but this crate):
//!
#![doc = concat!("```no_run\n", include_str!("../examples/embed.rs"), "\n```")]
//!
//! Or let [`runner::Runner`] do all of it: engine configuration, memory and
//! runaway limits, stdout capture.
//!
//! ```no_run
//! # async fn demo(wasm: &[u8]) -> anyhow::Result<()> {
//! use tether_host::{Config, policy::Policy, runner::{Runner, EngineKind, GuestIo}};
//! let mut config = Config::default();
//! config.policy = Policy { allow: vec!["127.0.0.1:*".parse()?], ..Policy::default() };
//! let runner = Runner::new(config, EngineKind::Cranelift)?;
//! let component = runner.compile(wasm)?;
//! let outcome = runner.run(&component, &["echo", "client", "ws://127.0.0.1:9001/"], GuestIo::Inherit).await;
//! println!("{outcome:?}");
//! # Ok(()) }
//! ```
//!
//! # Where things are
//! - `websocket.rs`: the message-stream, connect and listener resources;
//! - `ws_url.rs`: `ws://` and `wss://` URLs, parsed without I/O;
//! - `tcp.rs`: byte streams over `wasi:io` input and output streams;
//! - `policy.rs`: the capability checks (deny by default);
//! - `net.rs`: dialling and binding under the policy, TCP_NODELAY;
//! - `places.rs`: a listener's handshake places, and which silent client
//!   gives its place up to a new one;
//! - `ready.rs`: event-driven wake-ups (no periodic tick);
//! - `readiness.rs`: readiness sets, a guest's O(1)-per-event wait on many
//!   streams;
//! - `aead.rs`: AEAD packet keys held by the host (native QUIC packet
//!   protection for guests);
//! - `shutdown.rs`: graceful shutdown ([`HostCtx::shutdown`]);
//! - `metrics.rs`: Prometheus metrics ([`HostCtx::metrics`]) and a small
//!   `/metrics` server;
//! - `config.rs`: every limit with its default and unit;
//! - `runner.rs`: engines, stores, limits, running a guest.

use std::sync::Arc;

use wasmtime::component::{HasData, Linker, ResourceTable};

mod accept;
pub mod aead;
pub mod allocator;
pub mod bindings;
pub mod config;
mod connections;
pub mod metrics;
pub mod net;
pub mod p3;
mod places;
pub mod policy;
pub mod readiness;
pub mod ready;
pub mod runner;
mod shutdown;
pub mod tcp;
pub mod tls;
pub mod websocket;
pub mod ws_url;

pub use bindings::ErrorCode;
pub use config::{Config, Limits, TlsOptions};
pub use connections::{DEFAULT_MAX_CONNECTIONS_CAP, raise_descriptor_limit};

// The exact wasmtime, wasmtime-wasi and tokio this crate is built against:
// an embedder's store, linker and runtime must come from the same versions
// (wasmtime is pinned), so a crate that depends on `tether-host` alone has
// them all.
pub use tokio;
pub use wasmtime;
pub use wasmtime_wasi;

/// What every guest of one host shares: the configuration and the TLS
/// client configuration built from it. Cheap to clone through `Arc`.
#[derive(Debug)]
pub struct HostCtx {
    /// Policy, TLS options and limits.
    pub config: Config,
    /// rustls client configuration for `wss://`.
    pub tls: Arc<rustls::ClientConfig>,
    /// Counters across every guest of this host.
    pub stats: Arc<Stats>,
    /// The host's Prometheus metrics (`tether_*`); register them into a
    /// `prometheus_client` registry with [`metrics::Metrics::register`].
    pub metrics: Arc<metrics::Metrics>,
    /// Graceful shutdown: started by [`HostCtx::shutdown`].
    pub(crate) lifecycle: shutdown::Shutdown,
    /// Places for name lookups in flight (`Limits::max_dns_lookups`).
    pub(crate) lookups: Arc<tokio::sync::Semaphore>,
    /// Accepted connections held per source and in all
    /// (`Limits::max_connections_per_source`, `Limits::max_connections`).
    pub(crate) connections: Arc<connections::BySource>,
}

/// Host-wide counters, readable at any time (tests, metrics).
#[derive(Debug, Default)]
pub struct Stats {
    buffered: std::sync::atomic::AtomicUsize,
    peak_buffered: std::sync::atomic::AtomicUsize,
    peak_tcp_queued: std::sync::atomic::AtomicUsize,
    tcp_queued: std::sync::atomic::AtomicUsize,
    assembling: std::sync::atomic::AtomicUsize,
    peak_assembling: std::sync::atomic::AtomicUsize,
    /// Streams held back by `max_buffered_bytes`, woken once the sum is
    /// under it again (a queue held back waits on its own signals, which
    /// another stream's release does not touch).
    held_back: std::sync::Mutex<HeldBackList>,
    any_held_back: std::sync::atomic::AtomicBool,
    budget_wake_ups: std::sync::atomic::AtomicU64,
}

/// The streams held back by the budget, in the order they were refused,
/// and when the list is next swept of streams that ended (amortised O(1)
/// per listing: a stream listed and then closed leaves a dead entry until
/// the sweep, or until a release reaches it at the front).
#[derive(Debug, Default)]
struct HeldBackList {
    streams: std::collections::VecDeque<std::sync::Weak<dyn HeldBack>>,
    sweep_at: usize,
}

/// Room under the budget that one woken held-back stream is expected to
/// take, bytes: a release wakes one stream per this much room (plus one),
/// not every stream held back.
const HELD_BACK_WAKE_BYTES: usize = websocket::BUFFER_ALLOWANCE_BYTES;

/// A stream held back by the `max_buffered_bytes` budget.
pub(crate) trait HeldBack: Send + Sync {
    /// Re-checks its conditions (wakes its own signals).
    fn budget_freed(&self);
}

impl std::fmt::Debug for dyn HeldBack {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HeldBack")
    }
}

impl Stats {
    /// Bytes queued in message-stream buffers (inbound plus outbound) now.
    pub fn buffered_bytes(&self) -> usize {
        self.buffered.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most bytes ever queued in message-stream buffers at once.
    pub fn peak_buffered_bytes(&self) -> usize {
        self.peak_buffered
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Whether message streams' queues hold fewer bytes than `budget` now
    /// (`Limits::max_buffered_bytes`).
    pub(crate) fn buffer_room(&self, budget: usize) -> bool {
        // SeqCst, as the flag in `hold_back` and `release_buffered`.
        self.buffered.load(std::sync::atomic::Ordering::SeqCst) < budget
    }

    /// Remembers `stream`, held back by the budget, for
    /// [`Stats::release_buffered`] (each stream at most once until then;
    /// entries of streams that ended are swept when the list has doubled,
    /// so it stays within twice the live streams plus 64).
    pub(crate) fn hold_back(&self, stream: std::sync::Weak<dyn HeldBack>) {
        let mut list = self.held_back.lock().unwrap_or_else(|e| e.into_inner());
        list.streams.push_back(stream);
        if list.streams.len() > list.sweep_at {
            list.streams.retain(|s| s.strong_count() > 0);
            list.sweep_at = 2 * list.streams.len() + 64;
        }
        // All SeqCst (the flag here and in `release_buffered`, the sum
        // there and in `buffer_room`): either the releaser sees this flag,
        // or the caller's look after listing sees the released bytes, on
        // weakly ordered machines too. On x86 the release's locked
        // subtraction is a full barrier already: no fence on the data path.
        self.any_held_back
            .store(true, std::sync::atomic::Ordering::SeqCst);
    }

    /// Takes `n` bytes off the message-stream buffers' sum; when streams
    /// are held back and the sum is under `budget` again, wakes the ones
    /// held back longest, one per [`HELD_BACK_WAKE_BYTES`] of room plus
    /// one (one flag load when none is held back). A woken stream that
    /// finds the budget spent again lists itself at the back, so under a
    /// spent budget the streams take turns, and a release costs O(room),
    /// not O(streams held back). One that is not woken loses nothing: a
    /// stream is held back only past [`websocket::BUFFER_ALLOWANCE_BYTES`],
    /// and goes on by itself once its own queue drains below that.
    pub(crate) fn release_buffered(&self, n: usize, budget: usize) {
        use std::sync::atomic::Ordering;
        self.buffered.fetch_sub(n, Ordering::SeqCst);
        if !self.any_held_back.load(Ordering::SeqCst) || !self.buffer_room(budget) {
            return;
        }
        let room = budget.saturating_sub(self.buffered.load(Ordering::SeqCst));
        let mut wake = room / HELD_BACK_WAKE_BYTES + 1;
        let mut woken = Vec::new();
        {
            let mut list = self.held_back.lock().unwrap_or_else(|e| e.into_inner());
            while wake > 0 {
                let Some(s) = list.streams.pop_front() else {
                    break;
                };
                if let Some(s) = s.upgrade() {
                    woken.push(s);
                    wake -= 1;
                }
            }
            if list.streams.is_empty() {
                self.any_held_back.store(false, Ordering::SeqCst);
                list.sweep_at = 0;
            }
        }
        self.budget_wake_ups
            .fetch_add(woken.len() as u64, Ordering::Relaxed);
        for s in woken {
            s.budget_freed();
        }
    }

    /// Held-back streams woken by releases under the budget so far (each
    /// [`Stats::release_buffered`] wakes one per 64 KiB of room, plus one).
    pub fn budget_wake_ups(&self) -> u64 {
        self.budget_wake_ups
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    pub(crate) fn add_buffered(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let now = self.buffered.fetch_add(n, Relaxed) + n;
        self.peak_buffered.fetch_max(now, Relaxed);
    }

    /// The most bytes ever queued in one TCP output stream's write buffer
    /// (written by the guest, not yet taken by the kernel); at most
    /// `tcp_write_buffer_bytes`.
    pub fn peak_tcp_queued_bytes(&self) -> usize {
        self.peak_tcp_queued
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Bytes queued in TCP output streams' write buffers now (written by
    /// the guest, not yet taken by the kernel), over every stream, those the
    /// guest dropped included until they drain or their linger ends.
    pub fn tcp_queued_bytes(&self) -> usize {
        self.tcp_queued.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Records that one TCP output stream queued `added` more bytes and now
    /// queues `queued`.
    pub(crate) fn tcp_queued(&self, added: usize, queued: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.tcp_queued.fetch_add(added, Relaxed);
        self.peak_tcp_queued.fetch_max(queued, Relaxed);
    }

    /// Bytes of unfinished inbound WebSocket messages charged to the
    /// host's `max_assembling_bytes` budget now (each stream's first
    /// [`websocket::ASSEMBLY_ALLOWANCE_BYTES`] are not charged).
    pub fn assembling_bytes(&self) -> usize {
        self.assembling.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// The most bytes ever charged to the `max_assembling_bytes` budget at
    /// once; at most the budget.
    pub fn peak_assembling_bytes(&self) -> usize {
        self.peak_assembling
            .load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Charges `n` bytes to the assembling budget if the sum stays at most
    /// `max`; false (nothing charged) otherwise.
    pub(crate) fn try_add_assembling(&self, n: usize, max: usize) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        match self.assembling.fetch_update(Relaxed, Relaxed, |now| {
            now.checked_add(n).filter(|&sum| sum <= max)
        }) {
            Ok(before) => {
                self.peak_assembling.fetch_max(before + n, Relaxed);
                true
            }
            Err(_) => false,
        }
    }

    /// Releases `n` bytes charged with [`Stats::try_add_assembling`].
    pub(crate) fn sub_assembling(&self, n: usize) {
        self.assembling
            .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }

    /// Records that TCP output streams' write buffers released `n` bytes.
    pub(crate) fn tcp_dequeued(&self, n: usize) {
        self.tcp_queued
            .fetch_sub(n, std::sync::atomic::Ordering::Relaxed);
    }
}

impl HostCtx {
    /// Builds the shared context. Errors: an unreadable or empty CA file.
    pub fn new(config: Config) -> anyhow::Result<Arc<HostCtx>> {
        let tls = tls::client_config(&config.tls)?;
        let stats = Arc::<Stats>::default();
        let lookups = net::lookup_places(config.limits.max_dns_lookups);
        let connections = connections::BySource::new(
            config.limits.max_connections_per_source,
            config.limits.count_loopback_connections,
            config.limits.max_connections,
        );
        Ok(Arc::new(HostCtx {
            config,
            tls,
            metrics: Arc::new(metrics::Metrics::new(stats.clone())),
            stats,
            lifecycle: shutdown::Shutdown::default(),
            lookups,
            connections,
        }))
    }

    /// Starts a graceful shutdown of every guest of this host, and returns
    /// at once: listeners stop accepting (`accept` returns `closed` once
    /// what was accepted is taken), message streams close with 1001 (going
    /// away) after what they have queued, TCP byte streams half-close after
    /// what was written. Objects made later wind down as they are made.
    /// [`runner::Runner::run`] stops a guest still running
    /// `limits.shutdown_timeout` later. Calling it again does nothing.
    pub fn shutdown(&self) {
        if self.lifecycle.start() {
            tracing::info!("graceful shutdown started");
        }
    }

    /// Whether [`HostCtx::shutdown`] was called.
    pub fn is_shutting_down(&self) -> bool {
        self.lifecycle.is_started()
    }

    /// Resolves once [`HostCtx::shutdown`] was called.
    pub async fn shutdown_started(&self) {
        self.lifecycle.started().await
    }

    /// Resolves once no connection of this host is open any more: every
    /// message stream finished its closing handshake (or its
    /// `linger_timeout` reset it) and every TCP byte stream sent what the
    /// guest had written, then its FIN (or was reset at its linger). A
    /// process that exits once its guests returned awaits this first,
    /// bounded by `limits.linger_timeout`: the connections' tasks run on
    /// its runtime, and exiting drops what they still hold (a TCP peer
    /// would read a clean FIN after a truncated stream). `tether run` and
    /// `tether jmux` do.
    pub async fn drained(&self) {
        self.metrics.held().none_open().await
    }
}

/// Per-guest Tether state, kept in the store's data.
pub struct TetherCtx {
    pub(crate) host: Arc<HostCtx>,
    /// This guest's id in the process (the `id` of its `guest` span).
    guest_id: u64,
    /// The message streams handed to this guest (weak: the guest owns
    /// them), so that [`TetherCtx::fail_streams`] can reach them.
    streams: Handles<websocket::StreamHandle>,
    /// The TCP byte streams handed to this guest (weak), so that
    /// [`TetherCtx::fail_streams`] can reset them.
    byte_streams: Handles<tcp::ByteStreamHandle>,
    /// Table entries of `wasi:io` streams dropped before their pollables
    /// (see the drop rule in `ready.rs`), deleted once those are gone.
    orphans: Vec<ready::Orphan>,
    /// What this guest makes the host wait on, at most
    /// `readiness_set_entries`: its registrations in all its readiness
    /// sets together, or (a guest of `tether:streams-async`) its pending
    /// async calls (see [`p3::PendingCall`]).
    pub(crate) readiness: readiness::Quota,
    /// Live `tether:streams/aead` packet keys of this guest, at most
    /// `max_aead_keys`.
    pub(crate) aead_keys: usize,
    /// This guest's places for name lookups in flight
    /// (`Limits::max_dns_lookups_per_guest`).
    pub(crate) lookups: Arc<tokio::sync::Semaphore>,
}

impl TetherCtx {
    /// A guest context under the shared host context.
    pub fn new(host: Arc<HostCtx>) -> TetherCtx {
        TetherCtx {
            readiness: readiness::Quota::new(host.config.limits.readiness_set_entries),
            lookups: net::lookup_places(host.config.limits.max_dns_lookups_per_guest),
            host,
            guest_id: metrics::GUEST_IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            streams: Handles::new(websocket::StreamHandle::is_alive),
            byte_streams: Handles::new(tcp::ByteStreamHandle::is_alive),
            orphans: Vec::new(),
            aead_keys: 0,
        }
    }

    /// This guest's id: unique in the process, counting from 1.
    pub fn guest_id(&self) -> u64 {
        self.guest_id
    }

    /// A `guest` span with this guest's `id`: run the guest inside it
    /// (`future.instrument(ctx.span())`) and every log line about its
    /// listeners and connections carries the id (each connection has a
    /// child span with its `peer` address).
    pub fn span(&self) -> tracing::Span {
        tracing::info_span!("guest", id = self.guest_id)
    }

    /// Remembers a stream handed to the guest; forgets dropped ones now and
    /// then, so a guest that accepts streams for days holds no growing list.
    pub(crate) fn track(&mut self, stream: websocket::StreamHandle) {
        self.streams.push(stream);
    }

    /// Remembers a TCP byte stream handed to the guest, as
    /// [`TetherCtx::track`] does message streams.
    pub(crate) fn track_byte_stream(&mut self, stream: tcp::ByteStreamHandle) {
        self.byte_streams.push(stream);
    }

    /// Closes every message stream the guest still holds with 1011 and
    /// `reason` (after what they have queued), so peers learn that the guest
    /// failed instead of seeing a normal close, and resets every TCP byte
    /// stream it holds (what is queued is dropped; the peer reads a reset,
    /// not a FIN that would say the stream ended whole). Call it when the
    /// guest trapped or exited with an error, before its store drops.
    /// Returns the message streams, to wait for their close frames.
    pub(crate) fn fail_streams(&mut self, reason: &'static str) -> Vec<websocket::StreamHandle> {
        for stream in self.byte_streams.take_alive() {
            stream.abort(reason);
        }
        let streams = self.streams.take_alive();
        for stream in &streams {
            stream.close_failed(reason);
        }
        streams
    }
}

/// Weak handles to objects handed to a guest, pruned of the gone ones
/// when the list reaches `prune_at` (twice what the last pruning kept, at
/// least 64): amortized O(1) a handle, whatever the guest's churn.
struct Handles<T> {
    items: Vec<T>,
    prune_at: usize,
    alive: fn(&T) -> bool,
}

impl<T> Handles<T> {
    fn new(alive: fn(&T) -> bool) -> Handles<T> {
        Handles {
            items: Vec::new(),
            prune_at: 64,
            alive,
        }
    }

    fn push(&mut self, item: T) {
        if self.items.len() >= self.prune_at {
            self.items.retain(self.alive);
            self.prune_at = (self.items.len() * 2).max(64);
        }
        self.items.push(item);
    }

    /// Takes every handle out; returns those still alive.
    fn take_alive(&mut self) -> Vec<T> {
        self.items.drain(..).filter(self.alive).collect()
    }
}

/// Gives the Tether host functions access to their state, like
/// `wasmtime_wasi::WasiView`.
pub trait TetherView: Send {
    /// The guest's Tether context and the store's resource table.
    fn tether(&mut self) -> TetherCtxView<'_>;
}

/// Borrowed view of the Tether context and the resource table; the host
/// interfaces are implemented on it.
pub struct TetherCtxView<'a> {
    /// This guest's context.
    pub ctx: &'a mut TetherCtx,
    /// The store's resource table (shared with wasmtime-wasi).
    pub table: &'a mut ResourceTable,
}

struct HasTether;

impl HasData for HasTether {
    type Data<'a> = TetherCtxView<'a>;
}

impl bindings::tether::streams::types::Host for TetherCtxView<'_> {}

/// Adds the `tether:streams` interfaces (types, websocket, tcp,
/// readiness, aead) to `linker`.
/// Call `wasmtime_wasi::p2::add_to_linker_async` first: Tether's streams
/// and pollables are `wasi:io` resources, and this replaces the drop of
/// `wasi:io` input and output streams with Tether's drop rule (a stream
/// dropped before its pollables leaves them ready, not a trap; see
/// `wit/tether.wit`).
///
/// Errors: `wasi:io/streams` is not in `linker` yet.
pub fn add_to_linker<T: TetherView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use bindings::tether::streams::{aead, readiness, tcp, types, websocket};
    types::add_to_linker::<T, HasTether>(linker, T::tether)?;
    websocket::add_to_linker::<T, HasTether>(linker, T::tether)?;
    tcp::add_to_linker::<T, HasTether>(linker, T::tether)?;
    readiness::add_to_linker::<T, HasTether>(linker, T::tether)?;
    aead::add_to_linker::<T, HasTether>(linker, T::tether)?;
    crate::websocket::lift::add_to_linker(linker)?;
    ready::add_stream_drops_to_linker(linker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[derive(Default)]
    struct Counted(AtomicUsize);

    impl HeldBack for Counted {
        fn budget_freed(&self) {
            self.0.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// A release under a spent budget used to wake every stream held back
    /// (1,000 wake-ups, each a task poll, for a release of a few bytes,
    /// again at every dip). Now it wakes the ones held back longest, one
    /// per 64 KiB of room plus one, skipping streams that ended.
    #[test]
    fn a_release_wakes_streams_held_back_in_turn_in_proportion_to_the_room() {
        const BUDGET: usize = 1 << 20;
        let stats = Stats::default();
        stats.add_buffered(BUDGET + 10);
        let streams: Vec<Arc<Counted>> = (0..1000).map(|_| Arc::default()).collect();
        for s in &streams {
            let weak: std::sync::Weak<dyn HeldBack> = Arc::downgrade(s) as _;
            stats.hold_back(weak);
        }
        let woken = |streams: &[Arc<Counted>]| -> Vec<usize> {
            (0..streams.len())
                .filter(|&i| streams[i].0.load(Ordering::Relaxed) > 0)
                .collect()
        };
        // Still over the budget: no one.
        stats.release_buffered(5, BUDGET);
        assert_eq!(stats.budget_wake_ups(), 0);
        // A few bytes of room: the first listed.
        stats.release_buffered(15, BUDGET);
        assert_eq!(woken(&streams), [0]);
        // 200 KiB of room: three more per 64 KiB, plus one.
        stats.add_buffered(10);
        stats.release_buffered(200 << 10, BUDGET);
        assert_eq!(woken(&streams), [0, 1, 2, 3, 4]);
        // Streams that ended are passed over.
        let mut streams = streams;
        streams.drain(5..10);
        stats.add_buffered(200 << 10);
        stats.release_buffered(10, BUDGET);
        assert_eq!(woken(&streams), [0, 1, 2, 3, 4, 5]);
        assert_eq!(stats.budget_wake_ups(), 6);
        // Everything released: every stream once, and the list is empty.
        stats.release_buffered(stats.buffered_bytes(), usize::MAX);
        assert_eq!(woken(&streams).len(), streams.len());
        assert!(!stats.any_held_back.load(Ordering::SeqCst));
    }
}
