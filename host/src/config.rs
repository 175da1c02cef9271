//! Every limit and knob of the host in one place, with documented defaults
//! and units. The CLI (`tether run --help`) and the embedding API set the
//! same fields.

use std::path::PathBuf;
use std::time::Duration;

use crate::policy::Policy;

/// Limits that bound what one guest can make the host hold or do.
///
/// Byte counts are bytes; durations are wall-clock.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Largest WebSocket message a guest may send or receive, bytes.
    /// Larger inbound messages end the stream with close code 1009.
    /// Default 64 MiB.
    pub max_message_bytes: usize,
    /// Inbound buffer per message stream, bytes. When it is full the host
    /// stops reading the socket, so TCP pushes back on the peer. One
    /// message larger than the bound is still accepted when the buffer is
    /// empty. Each queued message counts its payload plus 64 bytes
    /// ([`crate::websocket::QUEUED_MESSAGE_OVERHEAD`]), so a flood of empty
    /// messages fills it too (at most 16,384 of them in 1 MiB). Default
    /// 1 MiB.
    pub inbound_buffer_bytes: usize,
    /// Bytes of inbound WebSocket messages not yet complete (read off the
    /// socket, the final frame not yet in) the host holds, summed over every
    /// message stream of the host, accepted or not yet. Each stream reads its
    /// first [`crate::websocket::ASSEMBLY_ALLOWANCE_BYTES`] (64 KiB) toward a
    /// message outside this budget, so small messages never fail for what
    /// other streams hold. A read that would take the sum past the budget
    /// fails its stream: the peer gets close code 1013 (Try Again Later),
    /// the guest `other`. A fragmented message is also refused (1009) as
    /// soon as a fragment's header would take it past `max_message_bytes`,
    /// before its payload is read (RFC 6455 section 10.4). Default 256 MiB.
    pub max_assembling_bytes: usize,
    /// Bytes queued in message streams' inbound and outbound buffers,
    /// summed over every stream of the host. A queue holding at most
    /// [`crate::websocket::BUFFER_ALLOWANCE_BYTES`] (64 KiB) is never held
    /// back (its bytes count in the sum all the same); past that, while the
    /// sum is at the budget, the stream stops reading its socket (TCP
    /// pushes back) and its `send` returns `would-block`, until its own
    /// queue drains to the allowance or the sum is under the budget again
    /// (either wakes it). Nothing is dropped or failed: what peers that
    /// never read pin in host memory stays within the budget plus, per
    /// stream and direction, the allowance and one message (a queue takes
    /// one message past the check: an empty one takes any message, up to
    /// `max_message_bytes`). TCP write buffers are not in it
    /// (`tcp_write_buffer_bytes` bounds each). Default 256 MiB.
    pub max_buffered_bytes: usize,
    /// Outbound buffer per message stream, bytes. When full, `send` returns
    /// `would-block` and `subscribe-send` wakes the guest once there is room.
    /// Counted as the inbound buffer is (payload plus 64 bytes a message).
    /// Default 1 MiB.
    pub outbound_buffer_bytes: usize,
    /// Messages one `send-many` takes or one `receive-many` returns at
    /// most, whatever count the guest asks for, so a guest cannot make the
    /// host build an unbounded list. Their bytes are bounded by
    /// `outbound_buffer_bytes` and `inbound_buffer_bytes` already.
    /// Default 1024.
    pub max_batch_messages: usize,
    /// Outbound buffer per TCP byte stream, bytes (what `check-write`
    /// grants at most). Default 256 KiB.
    pub tcp_write_buffer_bytes: usize,
    /// Largest single read from a TCP byte stream, bytes. Default 64 KiB.
    pub tcp_read_chunk_bytes: usize,
    /// Accepted connections a listener holds before the guest takes them;
    /// past it the host stops accepting (the kernel backlog pushes back).
    /// Default 64.
    pub accept_backlog: usize,
    /// Registrations one guest holds at most in all its readiness sets
    /// (`tether:streams/readiness`) together, however many sets it makes;
    /// past it `register-*` fails with `invalid-argument` naming this
    /// limit, and a deregistration, a replaced or dropped resource's
    /// registrations and a dropped set give their places back. Each
    /// costs the host about 150 bytes, so one guest holds at most about
    /// 10 MiB of host memory in registrations at the default. Also the
    /// async calls (`connect`, `accept`, `send`, `receive`) one guest of
    /// the async interface (`tether:streams-async`) has pending at once,
    /// the component model's waitable set being its readiness set; past
    /// it the call returns `invalid-argument` at once. Default 65,536.
    pub readiness_set_entries: usize,
    /// Live AEAD packet keys (`tether:streams/aead`) one guest instance
    /// holds at most; past it `packet-key.create` fails with
    /// `too-many-keys` (the QUIC guest then keeps that key inside). Each
    /// costs the host under 1 KiB (*ring*'s expanded key). A QUIC
    /// connection holds up to 8 at once. Default 4,096.
    pub max_aead_keys: usize,
    /// WebSocket handshakes a listener runs at once: connections accepted
    /// whose upgrade is not done yet (each is cut at `handshake_timeout`).
    /// They do not count against `accept_backlog`, so clients that stall
    /// their upgrade never hold up the accept loop. Past this bound a new
    /// connection is answered 503 and closed at once, and the listener keeps
    /// accepting. Default 1024.
    pub max_handshakes_per_listener: usize,
    /// Of those, what one source may hold at once: an IPv4 address, or an
    /// IPv6 /64. Past it, a new connection from that source is answered
    /// 503 and closed at once, while other sources find the rest: an
    /// attacker that opens connections faster than the places' one-second
    /// grace (`places::EVICT_AFTER`) keeps every place it holds young, so
    /// only this share bounds what one address takes. Clients behind one
    /// NAT share it. Default 256.
    pub max_handshakes_per_source: usize,
    /// Accepted connections one source (an IPv4 address, an IPv6 /64)
    /// holds at once over every listener of the host, WebSocket and TCP:
    /// from its accept (a handshake counts) until its socket closes. Past
    /// it, a new connection from that source is closed at once (a
    /// WebSocket client is answered 503 first), while other sources are
    /// served: without it, one address that keeps its connections open
    /// takes every file descriptor of the process and the memory each
    /// connection holds. Clients behind one NAT share it. Loopback
    /// clients are counted only with `count_loopback_connections`.
    /// Default 256.
    pub max_connections_per_source: usize,
    /// Whether loopback clients count against
    /// `max_connections_per_source`. Off by default: on a listener bound
    /// to loopback they are this machine's own programs, and behind a
    /// reverse proxy on the same machine every client is loopback (the
    /// proxy is the place to bound them). Default false.
    pub count_loopback_connections: bool,
    /// Accepted connections the host holds at once over all its
    /// listeners, WebSocket and TCP, whatever their source (loopback
    /// included): from accept (a handshake counts) until the socket
    /// closes. Past it a new connection is closed at once (a WebSocket
    /// client is answered 503 first). Without it, enough sources at their
    /// `max_connections_per_source` took every file descriptor of the
    /// process (80 addresses at 256 fill 20,000), and the guests could
    /// then dial nothing. Default: three quarters of the process's soft
    /// `RLIMIT_NOFILE` when the limits are made, so a quarter of the
    /// descriptors stays for the guests' dials, files and listeners, at
    /// least 64 and at most 65,536 (a held WebSocket connection costs the
    /// host about 34 KiB: 2.2 GiB there); 49,152 if unlimited. Memory, not
    /// descriptors, is the bound to size it by on a small machine.
    pub max_connections: usize,
    /// Name lookups (getaddrinfo, one blocking thread each) in flight at
    /// once, over every guest of the host. A lookup past it waits for a
    /// place within `connect_timeout`; a lookup holds its place until the
    /// resolver answers, even past the timeout (getaddrinfo cannot be
    /// stopped), so a resolver that never answers costs at most this many
    /// threads. Default 64.
    pub max_dns_lookups: usize,
    /// Of those, what one guest may hold at once, so that a guest (or a
    /// JMUX peer) whose lookups never end leaves places for the others.
    /// Default 16.
    pub max_dns_lookups_per_guest: usize,
    /// Deadline for DNS plus TCP connect. Default 10 s.
    pub connect_timeout: Duration,
    /// Deadline for the TLS and WebSocket opening handshakes, dialled or
    /// accepted (an accepted client's request head must arrive within it,
    /// counted from accept). Default 10 s.
    pub handshake_timeout: Duration,
    /// Bounded linger: how long a connection may outlive the guest's hold
    /// on it, or its close, to deliver what is queued. A TCP output stream
    /// the guest dropped with bytes still queued, a message stream the
    /// guest dropped or closed (or the host closed: shutdown, failure) is
    /// torn down at the latest this long after the drop or close, even if
    /// the peer never reads or never answers the close frame (RFC 6455
    /// section 7.1.1 lets a client close the TCP connection after a
    /// reasonable time). Teardown resets the connection (SO_LINGER 0, so
    /// the kernel drops its unsent bytes too and keeps no orphan socket)
    /// and frees the bytes the host still queued for it. Default 5 s.
    pub linger_timeout: Duration,
    /// Linear memory a guest may grow to, bytes. Default 256 MiB.
    pub max_memory_bytes: usize,
    /// Longest a guest may run without returning to the host (a runaway
    /// loop). Past it the guest is stopped with a clear error; other guests
    /// keep running. Checked every `epoch_tick`. Default 10 s.
    pub max_run_without_yield: Duration,
    /// Grace period of a graceful shutdown ([`crate::HostCtx::shutdown`],
    /// SIGTERM or SIGINT to `tether run` / `tether jmux`): a guest still
    /// running this long after the shutdown started is stopped. Default 5 s.
    pub shutdown_timeout: Duration,
    /// Scrapes a metrics server ([`crate::metrics::MetricsServer`],
    /// `--metrics`) answers at once; past it a new connection gets 503 and
    /// is closed at once. One source (an IPv4 address, an IPv6 /64) holds
    /// at most half of them, rounded up. Default 4.
    pub max_concurrent_scrapes: usize,
    /// Time one scrape has, from accept, to send its request head and take
    /// the answer; past it the connection is closed. Default 5 s.
    pub scrape_timeout: Duration,
    /// Granularity of the runaway check and of cooperative yielding between
    /// guests that share a thread. Not a data-path timer: it never wakes a
    /// guest. Default 10 ms.
    pub epoch_tick: Duration,
    /// Guests one [`crate::runner::Runner`] with the pooling engine
    /// ([`crate::runner::EngineKind::Pooling`]) runs at once: the pool's
    /// component, core-instance, memory and table slots are sized for this
    /// many (a memory slot reserves address space for `max_memory_bytes`,
    /// not memory). One more fails to instantiate with a clear error
    /// ([`crate::runner::RunError::Instantiate`]); the others keep running.
    /// The on-demand engines do not pool and ignore it. Default 128.
    pub max_guests: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_message_bytes: 64 << 20,
            inbound_buffer_bytes: 1 << 20,
            outbound_buffer_bytes: 1 << 20,
            max_assembling_bytes: 256 << 20,
            max_buffered_bytes: 256 << 20,
            max_batch_messages: 1024,
            tcp_write_buffer_bytes: 256 << 10,
            tcp_read_chunk_bytes: 64 << 10,
            accept_backlog: 64,
            readiness_set_entries: 1 << 16,
            max_aead_keys: 4096,
            max_handshakes_per_listener: 1024,
            max_handshakes_per_source: 256,
            max_connections_per_source: 256,
            count_loopback_connections: false,
            max_connections: crate::connections::default_max_connections(),
            max_dns_lookups: 64,
            max_dns_lookups_per_guest: 16,
            connect_timeout: Duration::from_secs(10),
            handshake_timeout: Duration::from_secs(10),
            linger_timeout: Duration::from_secs(5),
            max_memory_bytes: 256 << 20,
            max_run_without_yield: Duration::from_secs(10),
            shutdown_timeout: Duration::from_secs(5),
            max_concurrent_scrapes: 4,
            scrape_timeout: Duration::from_secs(5),
            epoch_tick: Duration::from_millis(10),
            max_guests: 128,
        }
    }
}

/// Component-model handles a connection the host accepts may cost its
/// guest at most, counted generously: on p2 a TCP stream, its input and
/// output streams and their pollables; on p3 the stream, its halves'
/// `stream<u8>` ends and their futures.
pub const HANDLES_PER_CONNECTION: usize = 8;

/// Component-model handles a guest keeps for itself on top of what
/// [`Limits::component_handles`] derives from the limits: its own
/// resources, dials, listeners, pollables and clocks. wasmtime's default
/// for the whole store.
pub const GUEST_HANDLES: usize = 100_000;

impl Limits {
    /// Live component-model handles one guest's store may hold
    /// (wasmtime's `Store::set_max_component_handles`; past it, lowering
    /// one more traps the guest). Derived so that the host's own limits
    /// always bind first and a guest gets their documented refusal, never
    /// that trap: [`HANDLES_PER_CONNECTION`] per connection of
    /// `max_connections`, one per readiness registration or p3 pending
    /// call (`readiness_set_entries`), one per AEAD key (`max_aead_keys`),
    /// plus [`GUEST_HANDLES`]. With the defaults about 694,000 (a handle
    /// costs wasmtime tens of bytes). The runners set it on every store;
    /// an embedder that makes its own stores sets it too
    /// (`host/examples/embed.rs`). Before, wasmtime's default of 100,000
    /// trapped a guest at its 100,001st AEAD key under `--max-aead-keys
    /// 150000`, or at its 33,334th accepted TCP connection (the red team
    /// of 2026-12-07, F2).
    pub fn component_handles(&self) -> usize {
        self.max_connections
            .saturating_mul(HANDLES_PER_CONNECTION)
            .saturating_add(self.readiness_set_entries)
            .saturating_add(self.max_aead_keys)
            .saturating_add(GUEST_HANDLES)
    }
}

/// Where TLS trust comes from.
#[derive(Clone, Debug)]
pub struct TlsOptions {
    /// Trust the operating system's roots (falls back to the bundled
    /// webpki roots when the system has none). Default true.
    pub system_roots: bool,
    /// PEM files whose certificates are added as roots (`--ca-file`).
    pub extra_ca_files: Vec<PathBuf>,
}

impl Default for TlsOptions {
    fn default() -> Self {
        TlsOptions {
            system_roots: true,
            extra_ca_files: Vec::new(),
        }
    }
}

/// Everything the host needs to serve one or more guests.
#[derive(Clone, Debug, Default)]
pub struct Config {
    /// Which destinations a guest may dial and where it may listen.
    pub policy: Policy,
    /// TLS trust.
    pub tls: TlsOptions,
    /// Resource limits.
    pub limits: Limits,
}
