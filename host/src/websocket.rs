//! WebSocket message streams (RFC 6455): the `tether:streams/websocket`
//! interface.
//!
//! Each stream has two host tasks on the guest's runtime thread: a reader
//! that fills a bounded inbound queue (and stops reading the socket while it
//! is full, so TCP pushes back on the peer) and a writer that drains a
//! bounded outbound queue, writing everything queued and flushing as soon as
//! the queue is empty. The guest never blocks in these calls; it waits on
//! the pollables, which the tasks wake through [`Signal`].
//!
//! Closing is bounded: once the guest closes or drops a stream (or the host
//! closes it), the closing handshake (the backlog, the close frame, the
//! peer's answer) has `linger_timeout`; past it the host resets the TCP
//! connection (SO_LINGER 0) and frees what it still queued (RFC 6455
//! section 7.1.1 lets a client close after a reasonable time).

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use std::pin::Pin;
use std::task::{Context, Poll, Waker, ready};

use futures_util::stream::SplitStream;
use futures_util::{FutureExt, Sink, StreamExt};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::task::AbortHandle;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::handshake::server::{Request, Response};
use tokio_tungstenite::tungstenite::http::{HeaderName, HeaderValue};
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::{self, Message as WsMessage};
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream};
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable};

use crate::accept::AcceptQueue;
use crate::bindings::ErrorCode;
use crate::bindings::tether::streams::websocket::{
    self as wit, CloseInfo, ConnectOptions, ListenOptions, Message,
};
use crate::config::Limits;
use crate::metrics::{Direction, HandshakeFailure, Interface};
use crate::ready::{Pending, Signal, pollable};
use crate::{HostCtx, TetherCtxView, net, places};

pub mod lift;
mod upgrade;

/// Sends written straight to the socket between two guest yields; later
/// sends of the same burst queue up and go out in one flush. Two covers a
/// request that is two small writes (the Nagle case) without costing a
/// syscall per message in a pipeline.
const INLINE_SENDS_PER_YIELD: u8 = 2;

/// Largest read from the socket into tungstenite's input buffer, bytes.
/// tungstenite zero-fills this much before every read, so its 128 KiB
/// default cost a 128 KiB memset per received message on a round trip.
const READ_BUFFER_BYTES: usize = 32 * 1024;

/// Messages a stream's reader queues at most before it wakes the guest's
/// side (its receive pollable and readiness entries): a burst read from
/// one socket read costs one wake-up, not one per message.
const WAKE_BATCH: usize = 64;

/// Close code for "no status code was present" (RFC 6455 section 7.4.1).
pub const CLOSE_NO_STATUS: u16 = 1005;
/// Close code for "closed without a close frame" (RFC 6455 section 7.4.1).
pub const CLOSE_ABNORMAL: u16 = 1006;
/// Close code for "protocol error" (RFC 6455 section 7.4.1): the host fails
/// a connection with it on a framing or masking violation.
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;
/// Close code for "data not consistent with the message type" (RFC 6455
/// section 7.4.1): the host fails a connection with it on a text message
/// or close reason that is not UTF-8.
pub const CLOSE_INVALID_DATA: u16 = 1007;
/// Close code for "message too big" (RFC 6455 section 7.4.1).
pub const CLOSE_TOO_BIG: u16 = 1009;
/// Close code for "an unexpected condition" (RFC 6455 section 7.4.1): the
/// host closes a failed guest's streams with it.
pub const CLOSE_INTERNAL_ERROR: u16 = 1011;
/// Close code the host sends on every stream when it shuts down gracefully
/// (RFC 6455 section 7.4.1: "going away").
pub const CLOSE_GOING_AWAY: u16 = 1001;

/// Pong replies (bytes, frame headers included) the host owes a peer
/// before it stops reading that peer's socket until they are flushed: the
/// bound on queued control replies (RFC 6455 section 5.5.3 lets a host
/// answer only the latest ping, tungstenite answers each).
pub const PONG_DEBT_BYTES: usize = 16 * 1024;

/// Pings and pongs per second (sustained) the host reads from one peer,
/// past a burst of [`CONTROL_FRAME_BURST`]: past that pace the host stops
/// reading the peer's socket until the pace allows the next control frame,
/// so TCP pushes the peer back. The guest never sees control frames and
/// cannot refuse them, so the host bounds them: before, a peer sending
/// empty pings as fast as it could (and reading the pongs) had the host
/// parse them as fast as they came, with nothing to push it back (red team
/// 2026-12-03, eighth round, finding 8). A client pinging every second
/// (keepalive) uses 1/64 of it; one pinging every 10 ms for more than about
/// 30 s is failed. A ping with its pong costs the host about 17 us here:
/// 200 connections just under the pace took 0.22 of a core.
pub const CONTROL_FRAMES_PER_SECOND: u32 = 64;

/// Pings and pongs a peer may send at once before
/// [`CONTROL_FRAMES_PER_SECOND`] paces it: a burst of 1,000 pings is
/// answered at once (RFC 6455 section 5.5.2; the host may answer only the
/// latest of a read, section 5.5.3). An idle peer earns it back in 16 s.
pub const CONTROL_FRAME_BURST: u32 = 1024;

/// How long (ms) a peer may keep sending control frames past
/// [`CONTROL_FRAMES_PER_SECOND`] before the host fails the connection with
/// [`CLOSE_POLICY_VIOLATION`]: a flood, whose backlog would otherwise hold
/// the connection (and its close frame) for as long as the kernel's
/// buffers take at the pace, up to about 1,000 s.
pub const CONTROL_FLOOD_MS: u64 = 2_000;

/// Close code the host sends a peer that breaks its policy (RFC 6455
/// section 7.4.1): a flood of control frames ([`CONTROL_FLOOD_MS`]).
pub const CLOSE_POLICY_VIOLATION: u16 = 1008;

/// How long (ms) the host keeps a connection it failed open after its
/// close frame went out, with its write side shut (a FIN after the close
/// frame) and the socket no longer read, before it closes it. A peer
/// still sending when the host fails it has bytes the host will never
/// read; closing the socket over them at once sends a reset (RFC 1122
/// section 4.2.2.13) in place of the FIN, and the peer, whose writes then
/// fail, may never read the close frame that says why (red team
/// 2026-12-04j: 176 of 300 such peers saw a reset). Bounded by
/// `linger_timeout`, whichever ends first. Node's host waits the same.
pub const FAILED_CLOSE_GRACE_MS: u64 = 1_000;

/// What the host does after reading one of the peer's control frames.
#[derive(Debug, PartialEq, Eq)]
enum Pace {
    /// Read on.
    Read,
    /// Read again at this time, not before.
    WaitUntil(tokio::time::Instant),
    /// Fail the connection: past the pace for [`CONTROL_FLOOD_MS`].
    Flood,
}

/// The peer's control-frame pace ([`CONTROL_FRAMES_PER_SECOND`]): a leaky
/// bucket (GCRA) whose theoretical arrival time moves on by one interval
/// per ping or pong read, and may run up to [`CONTROL_FRAME_BURST`]
/// intervals ahead of now.
#[derive(Debug)]
struct ControlPace {
    /// When the bucket would be empty again.
    tat: tokio::time::Instant,
    /// Since when the bucket has been (nearly) full.
    over_since: Option<tokio::time::Instant>,
}

impl ControlPace {
    /// One control frame's share of the pace.
    const INTERVAL: std::time::Duration =
        std::time::Duration::from_nanos(1_000_000_000 / CONTROL_FRAMES_PER_SECOND as u64);
    /// How far ahead of now the bucket may run: the burst.
    const FULL: std::time::Duration = std::time::Duration::from_nanos(
        1_000_000_000 / CONTROL_FRAMES_PER_SECOND as u64 * CONTROL_FRAME_BURST as u64,
    );

    fn new(now: tokio::time::Instant) -> ControlPace {
        ControlPace {
            tat: now,
            over_since: None,
        }
    }

    /// Counts one control frame read at `now`. The peer is past its pace
    /// while the bucket is within 100 ms of full (a timer wakes the reader
    /// up to a millisecond or so late, so a flood paced by it never quite
    /// fills the bucket); a flood once that has lasted
    /// [`CONTROL_FLOOD_MS`], or once what was read runs that far past the
    /// full bucket at once.
    fn read_one(&mut self, now: tokio::time::Instant) -> Pace {
        use std::time::Duration;
        let flood = Duration::from_millis(CONTROL_FLOOD_MS);
        self.tat = self.tat.max(now) + Self::INTERVAL;
        let ahead = self.tat - now;
        if ahead <= Self::FULL - Duration::from_millis(100) {
            self.over_since = None;
        } else if now - *self.over_since.get_or_insert(now) > flood || ahead > Self::FULL + flood {
            return Pace::Flood;
        }
        if ahead <= Self::FULL {
            Pace::Read
        } else {
            Pace::WaitUntil(self.tat - Self::FULL)
        }
    }
}

/// Bytes one message stream reads off its socket toward a message not yet
/// complete before it draws on the host's `max_assembling_bytes` budget
/// (see [`crate::config::Limits::max_assembling_bytes`]): messages up to
/// about this size never fail for what other streams hold.
pub const ASSEMBLY_ALLOWANCE_BYTES: usize = 64 * 1024;

/// The share of `max_assembling_bytes` one source (an IPv4 address, an
/// IPv6 /64) may hold over all its accepted streams: the budget divided by
/// this, or one largest message (`max_message_bytes`, at most the budget)
/// if that is more. Loopback sources are not counted unless
/// `count_loopback_connections` (as for `max_connections_per_source`).
/// Before, one address parking four 64 MiB unfinished messages held the
/// default budget, and every other client's messages past their 64 KiB
/// allowance failed with 1013 for as long as it stayed.
pub const ASSEMBLING_SHARES: usize = 4;

/// Bytes each message stream queues each way (inbound and outbound)
/// outside the host's `max_buffered_bytes` budget (see
/// [`crate::config::Limits::max_buffered_bytes`]): a stream with less than
/// this queued always makes progress, whatever other streams hold.
pub const BUFFER_ALLOWANCE_BYTES: usize = 64 * 1024;

/// Close code "Try Again Later" (IANA WebSocket close code registry): the
/// host failed the connection because it holds `max_assembling_bytes` of
/// unfinished inbound messages already.
pub const CLOSE_TRY_AGAIN_LATER: u16 = 1013;

/// The tungstenite configuration for a stream under `limits`: messages and
/// frames up to `max_message_bytes`, a write buffer bounded to one maximal
/// message plus 1 MiB.
pub fn ws_config(limits: &Limits) -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(Some(limits.max_message_bytes))
        .max_frame_size(Some(limits.max_message_bytes))
        .max_write_buffer_size(limits.max_message_bytes + (1 << 20))
        .read_buffer_size(READ_BUFFER_BYTES)
}

#[derive(Default)]
struct State {
    /// Data messages only (text or binary), as tungstenite read them: the
    /// payloads are slices of its read buffer, lowered into the guest
    /// without another copy (`lift::Delivered`).
    inbound: VecDeque<WsMessage>,
    inbound_bytes: usize,
    outbound: VecDeque<WsMessage>,
    /// Bytes of the outbound queue, plus `in_sink`.
    outbound_bytes: usize,
    /// Bytes of data messages handed to tungstenite since its last
    /// completed flush: still in its write buffer (or on their way to the
    /// kernel). They stay counted in `outbound_bytes` and the host's sum
    /// until the flush completes, so a peer that never reads pins no
    /// uncounted bytes there (the red team's eighth round: one message per
    /// stream, 60 MiB each, outside every bound).
    in_sink: usize,
    /// Size of the last send refused with would-block: the send pollable is
    /// ready once this much fits, so a guest never spins on it.
    blocked_len: usize,
    /// The guest asked to close (or dropped the stream): no more sends.
    close_queued: bool,
    /// Set when the reader finished; `receive` returns it once the inbound
    /// queue is drained.
    read_end: Option<ErrorCode>,
    write_error: Option<ErrorCode>,
    close_info: Option<CloseInfo>,
    /// tungstenite holds bytes the writer task still has to flush.
    flush_pending: bool,
    /// Bytes of pong frames tungstenite queued for the peer's pings since
    /// the writer's last completed flush. Past [`PONG_DEBT_BYTES`] the
    /// reader stops reading until a flush writes them out, so a peer that
    /// pings and never reads is pushed back by TCP instead of growing
    /// tungstenite's write buffer.
    pong_debt: usize,
    /// Bytes of the queued inbound messages charged to the host's
    /// `max_assembling_bytes` (what each was past
    /// [`ASSEMBLY_ALLOWANCE_BYTES`] when it arrived): released once the
    /// guest has taken every queued message, or the stream is gone.
    queued_charge: usize,
    /// The guest dropped the `message-stream`: its pollables are ready
    /// (the drop rule in `wit/tether.wit`).
    dropped: bool,
    /// The close frame was written and flushed to the socket.
    close_sent: bool,
    /// The close frame was handed to tungstenite (so it will not answer
    /// the peer's close frame with its own).
    close_started: bool,
    /// The linger timer runs (started by the first close or the drop).
    linger_started: bool,
    /// Counts the stream in [`crate::HostCtx::drained`] until its close
    /// frame was written (or the writer ended, or the linger did).
    sending: Option<crate::metrics::Sending>,
    /// The host failed the connection (RFC 6455 section 7.1.7): its close
    /// frame goes out, then the write side shuts and the socket closes
    /// [`FAILED_CLOSE_GRACE_MS`] later, unread.
    failed: bool,
    /// A send since the writer task last ran went straight to the socket.
    /// Further sends queue up until the guest yields, so a burst becomes
    /// one flush (write everything queued, flush on drain).
    inline_sent: u8,
}

impl State {
    /// Fails the connection from the read side (RFC 6455 section 7.1.7):
    /// queues a close frame with `code` and `reason` after what the guest
    /// queued (unless a close is queued already), and records them as the
    /// stream's close info.
    fn fail_connection(&mut self, code: u16, reason: String) {
        if !self.close_queued {
            self.close_queued = true;
            self.outbound.push_back(WsMessage::Close(Some(CloseFrame {
                code: code.into(),
                reason: reason.clone().into(),
            })));
        }
        self.close_info = Some(CloseInfo { code, reason });
        self.failed = true;
    }

    /// tungstenite's write buffer was flushed (or dropped): takes the
    /// bytes handed to it off the outbound count and returns them, for
    /// the host's sum ([`Shared::release_flushed`]).
    fn take_flushed(&mut self) -> usize {
        let n = std::mem::take(&mut self.in_sink);
        self.outbound_bytes -= n;
        n
    }
}

pub(crate) struct Shared {
    state: Mutex<State>,
    max_message: usize,
    inbound_limit: usize,
    outbound_limit: usize,
    /// `max_buffered_bytes`: past [`BUFFER_ALLOWANCE_BYTES`] each way, a
    /// queue grows only while the host-wide sum is under it.
    buffer_budget: usize,
    /// On the host's list of streams held back by the budget (at most
    /// once, however often its conditions are checked).
    held_back: std::sync::atomic::AtomicBool,
    /// `max_batch_messages`: what one `send-many` takes or one
    /// `receive-many` returns at most, messages.
    max_batch: usize,
    /// `linger_timeout`: the bound on the closing handshake, from the
    /// close (or the drop) to the teardown.
    linger: std::time::Duration,
    /// The TCP socket under the stream, to reset it when the linger ends.
    /// Open as long as `sink` is `Some` (the write half owns the stream).
    socket: Option<std::os::fd::RawFd>,
    /// This stream, weakly: for the linger timer, which must not keep the
    /// connection open itself.
    me: std::sync::Weak<Shared>,
    /// Guest side: a message arrived or the stream ended.
    readable: Signal,
    /// Guest side: outbound room freed or the stream ended.
    writable: Signal,
    /// Writer task: outbound work queued.
    outbound_work: Signal,
    /// Reader task: inbound room freed.
    inbound_room: Signal,
    reader: Mutex<Option<AbortHandle>>,
    writer: Mutex<Option<AbortHandle>>,
    stats: Arc<crate::Stats>,
    /// Where the stream's `max_assembling_bytes` charges go (its queued
    /// messages' charge is given back here).
    charges: Arc<Charges>,
    metrics: Arc<crate::metrics::Metrics>,
    /// Counts the connection in `tether_connections_open` while it lives.
    _open: crate::metrics::OpenConnection,
    /// The write half. Locked only inside synchronous polls: by `send`'s
    /// fast path (when the writer task is idle) and by the writer task.
    /// `None` once the connection is over: the writer task drops it after
    /// the read half ended, which closes the TCP connection (RFC 6455
    /// section 7.1.1: the server closes first, as soon as the closing
    /// handshake is done, whether or not the guest still holds the stream).
    sink: Mutex<Option<DynSink>>,
}

type DynSink = Pin<Box<dyn Sink<WsMessage, Error = tungstenite::Error> + Send>>;

/// Runs `f` on a stream's TCP socket (`socket`, its descriptor) while
/// `sink`, the write half that owns the socket, is alive. `None` without a
/// socket or once the write half is gone.
fn with_socket<R>(
    sink: &Option<DynSink>,
    socket: Option<std::os::fd::RawFd>,
    f: impl FnOnce(socket2::SockRef<'_>) -> R,
) -> Option<R> {
    let (Some(_), Some(fd)) = (sink, socket) else {
        return None;
    };
    // SAFETY: the write half is alive (`sink`, borrowed for this call),
    // and it owns the WebSocket stream over this socket: the descriptor is
    // open.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    Some(f(socket2::SockRef::from(&fd)))
}

impl Shared {
    /// Queues a close frame after every queued message, unless a close is
    /// queued already or the stream ended.
    fn queue_close(&self, code: u16, reason: &str) {
        let mut st = self.lock();
        if st.close_queued || st.read_end.is_some() {
            return;
        }
        st.close_queued = true;
        st.outbound.push_back(WsMessage::Close(Some(CloseFrame {
            code: code.into(),
            reason: reason.to_string().into(),
        })));
        drop(st);
        self.outbound_work.wake();
        self.start_linger();
    }

    /// After the close frame of a connection the host failed: shuts the
    /// socket's write side (the FIN follows the close frame) and waits
    /// [`FAILED_CLOSE_GRACE_MS`] without reading, so the peer reads the
    /// close frame and the end of the stream before the close resets
    /// whatever it still sends. The linger timer cuts this short.
    async fn finish_failed(&self) {
        let shut = {
            let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner());
            with_socket(&sink, self.socket, |s| {
                s.shutdown(std::net::Shutdown::Write)
            })
        };
        match shut {
            None => return,
            Some(Err(e)) => {
                tracing::debug!("shutting the write side of a failed connection: {e}");
                return;
            }
            Some(Ok(())) => {}
        }
        tokio::time::sleep(std::time::Duration::from_millis(FAILED_CLOSE_GRACE_MS)).await;
    }

    /// Starts the linger timer, once: [`Shared::linger_over`] runs
    /// `linger` from now unless the stream is gone by then. Without a
    /// runtime (the host is going away) it runs at once.
    fn start_linger(&self) {
        if std::mem::replace(&mut self.lock().linger_started, true) {
            return;
        }
        let me = self.me.clone();
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let linger = self.linger;
                rt.spawn(async move {
                    tokio::time::sleep(linger).await;
                    if let Some(shared) = me.upgrade() {
                        shared.linger_over();
                    }
                });
            }
            Err(_) => self.linger_over(),
        }
    }

    /// The linger ended: stops both tasks, resets the TCP connection
    /// (SO_LINGER 0, then the write half goes; the read half goes with its
    /// aborted task) and frees the outbound queue (and the inbound queue
    /// when the guest dropped the stream). The stream ends with 1006 if it
    /// had not ended yet. Does nothing visible to a stream that already
    /// ended cleanly.
    fn linger_over(&self) {
        for task in [&self.reader, &self.writer] {
            if let Some(t) = task.lock().unwrap_or_else(|e| e.into_inner()).take() {
                t.abort();
            }
        }
        let sink = self.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(set) = with_socket(&sink, self.socket, |s| {
            s.set_linger(Some(std::time::Duration::ZERO))
        }) {
            if let Err(e) = set {
                tracing::debug!("SO_LINGER 0 failed: {e}");
            }
            tracing::debug!("websocket: closing handshake not done within linger_timeout: reset");
        }
        drop(sink);
        let mut st = self.lock();
        st.sending = None;
        let mut freed = std::mem::take(&mut st.outbound_bytes);
        st.in_sink = 0;
        st.outbound.clear();
        if st.dropped {
            freed += std::mem::take(&mut st.inbound_bytes);
            st.inbound.clear();
        }
        self.stats.release_buffered(freed, self.buffer_budget);
        st.read_end.get_or_insert(ErrorCode::Closed);
        st.close_info.get_or_insert(CloseInfo {
            code: CLOSE_ABNORMAL,
            reason: "closing handshake timed out".into(),
        });
        drop(st);
        self.readable.wake();
        self.writable.wake();
        self.outbound_work.wake();
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes `queued` bytes (messages the guest took, counted as
    /// [`queued_len`]) off the inbound buffer, and wakes the reader task
    /// when that made room in a full buffer.
    fn release_inbound(&self, mut st: MutexGuard<'_, State>, queued: usize) {
        let was_full = !self.inbound_open(&st);
        st.inbound_bytes -= queued;
        self.stats.release_buffered(queued, self.buffer_budget);
        if st.inbound.is_empty() && st.queued_charge > 0 {
            self.charges.sub(std::mem::take(&mut st.queued_charge));
        }
        let has_room = self.inbound_open(&st);
        drop(st);
        if was_full && has_room {
            self.inbound_room.wake();
        }
    }

    /// Whether a queue holding `held` bytes may take `more`: within the
    /// stream's [`BUFFER_ALLOWANCE_BYTES`], or while the host-wide
    /// `max_buffered_bytes` budget has room. A queue held back by the
    /// budget goes on once the guest (inbound) or the peer (outbound)
    /// drains it below the allowance (its own progress wakes it), or once
    /// the sum is under the budget again: a refused stream is remembered
    /// ([`crate::Stats::hold_back`]) and woken by the release that makes
    /// room ([`crate::Stats::release_buffered`]), as a readiness-set
    /// registration re-checks its condition only when its stream's signal
    /// fires.
    fn budget_allows(&self, held: usize, more: usize) -> bool {
        if held.saturating_add(more) <= BUFFER_ALLOWANCE_BYTES
            || self.stats.buffer_room(self.buffer_budget)
        {
            return true;
        }
        if !self
            .held_back
            .swap(true, std::sync::atomic::Ordering::AcqRel)
        {
            let me: std::sync::Weak<dyn crate::HeldBack> = self.me.clone();
            self.stats.hold_back(me);
        }
        // A release between the check and the listing found no one to
        // wake: look again now that the stream is listed.
        self.stats.buffer_room(self.buffer_budget)
    }

    /// Whether the reader task may read the socket for more messages: the
    /// inbound queue is under its bound and the budget allows it.
    fn inbound_open(&self, st: &State) -> bool {
        st.inbound_bytes < self.inbound_limit && self.budget_allows(st.inbound_bytes, 0)
    }

    /// Whether the writer task has nothing to do: a send now may write
    /// from the guest's call (see [`MessageStream::send`]).
    fn writer_idle(&self, st: &State) -> bool {
        st.outbound.is_empty() && !st.flush_pending
    }

    /// Checks that a message of `payload` bytes may be queued now (the
    /// rules of the WIT `send`): `message-too-large`, `closed`, the write
    /// error, or `would-block` (remembering what it would count against
    /// the buffer, for the send pollable).
    fn admit(&self, st: &mut State, payload: usize) -> Result<(), ErrorCode> {
        if payload > self.max_message {
            return Err(ErrorCode::MessageTooLarge(self.max_message as u64));
        }
        if st.close_queued || st.read_end.is_some() {
            return Err(ErrorCode::Closed);
        }
        if let Some(e) = &st.write_error {
            return Err(e.clone());
        }
        let len = queued_len(payload);
        if st.outbound_bytes > 0
            && (st.outbound_bytes + len > self.outbound_limit
                || !self.budget_allows(st.outbound_bytes, len))
        {
            st.blocked_len = len;
            return Err(ErrorCode::WouldBlock);
        }
        st.blocked_len = 0;
        Ok(())
    }

    /// Appends an admitted data message to the outbound queue.
    fn queue_data(&self, st: &mut State, message: Message) {
        self.count_sent(st, message_len(&message));
        st.outbound.push_back(match message {
            Message::Text(t) => WsMessage::Text(t.into()),
            Message::Binary(b) => WsMessage::Binary(b.into()),
        });
    }

    /// Counts an admitted data message of `len` payload bytes against the
    /// outbound buffer, the host's sum and the metrics.
    fn count_sent(&self, st: &mut State, len: usize) {
        let flow = &self.metrics.websocket;
        flow.sent_messages.inc();
        flow.sent_bytes.inc_by(len as u64);
        st.outbound_bytes += queued_len(len);
        self.stats.add_buffered(queued_len(len));
    }

    /// Queues the longest prefix of `offered` that fits, in order, copying
    /// each message only once it is admitted, and returns its length (at
    /// most `max_batch_messages`); see the WIT `send-many` for the errors.
    /// The burst goes to tungstenite and the socket with one flush. The
    /// outer error is a failure to read an offered message (a trap).
    ///
    /// Binary payloads under [`SHARED_COPY_BYTES`] are copied into one
    /// buffer per call and queued as slices of it (one allocation per
    /// burst, not per message); the buffer holds only admitted bytes, so
    /// it is never more than the burst counts against the buffers.
    pub(crate) fn send_offered<'a>(
        &self,
        offered: impl Iterator<Item = wasmtime::Result<Offered<'a>>>,
    ) -> wasmtime::Result<Result<u32, ErrorCode>> {
        let mut st = self.lock();
        let idle = self.writer_idle(&st);
        let mut taken = Vec::new();
        for message in offered.take(self.max_batch) {
            let message = message?;
            match self.admit(&mut st, message.len()) {
                Ok(()) => {
                    self.count_sent(&mut st, message.len());
                    taken.push(message);
                }
                Err(e) if taken.is_empty() => return Ok(Err(e)),
                // The next call reports it (or takes it, once there is
                // room: `blocked_len` holds its size for the pollable).
                Err(_) => break,
            }
        }
        if taken.is_empty() {
            return Ok(Ok(0));
        }
        let shared_bytes = taken
            .iter()
            .filter_map(|m| match m {
                Offered::Binary(b) if b.len() < SHARED_COPY_BYTES => Some(b.len()),
                _ => None,
            })
            .sum();
        let mut copies = bytes::BytesMut::with_capacity(shared_bytes);
        let n = taken.len() as u32;
        st.outbound.extend(taken.into_iter().map(|m| match m {
            Offered::Binary(b) if b.len() < SHARED_COPY_BYTES => {
                copies.extend_from_slice(b);
                WsMessage::Binary(copies.split().freeze())
            }
            m => match m.into_message() {
                Message::Text(t) => WsMessage::Text(t.into()),
                Message::Binary(b) => WsMessage::Binary(b.into()),
            },
        }));
        Ok(self.flush_burst(st, idle).map(|()| n))
    }

    /// After messages were queued: when the writer task was idle before
    /// them (`idle`) and this burst has not used up its inline writes, the
    /// first sends after the guest yielded write from here and save a task
    /// hop on every round trip; otherwise the writer task takes them.
    fn flush_burst(&self, mut st: MutexGuard<'_, State>, idle: bool) -> Result<(), ErrorCode> {
        let inline = idle && st.inline_sent < INLINE_SENDS_PER_YIELD;
        if inline {
            st.inline_sent += 1;
        }
        drop(st);
        self.outbound_work.wake();
        if !inline {
            return Ok(());
        }
        if let Err(e) = self.write_now() {
            let code = classify(e);
            self.lock().write_error = Some(code.clone());
            self.writable.wake();
            self.inbound_room.wake();
            return Err(code);
        }
        Ok(())
    }

    /// Hands the queued data messages to tungstenite and flushes once,
    /// without waiting: whatever would wait (socket full, the sink busy in
    /// the writer task) is left to the writer task, already woken. Stops
    /// at a close frame, which only the writer task sends.
    fn write_now(&self) -> Result<(), tungstenite::Error> {
        let Ok(mut sink) = self.sink.try_lock() else {
            return Ok(());
        };
        let Some(sink) = sink.as_mut() else {
            return Err(tungstenite::Error::AlreadyClosed);
        };
        let mut cx = Context::from_waker(Waker::noop());
        // A noop waker may replace the writer task's socket waker; the
        // writer task was idle (nothing queued, nothing to flush), and it
        // was woken explicitly before this, so it polls again with its own.
        loop {
            let message = {
                let mut st = self.lock();
                if !matches!(
                    st.outbound.front(),
                    Some(WsMessage::Text(_) | WsMessage::Binary(_))
                ) {
                    break;
                }
                match sink.as_mut().poll_ready(&mut cx) {
                    Poll::Ready(Ok(())) => {}
                    Poll::Ready(Err(e)) => return Err(e),
                    Poll::Pending => {
                        st.flush_pending = true;
                        return Ok(());
                    }
                }
                let m = st.outbound.pop_front().expect("checked above");
                st.in_sink += queued_len(m.len());
                m
            };
            sink.as_mut().start_send(message)?;
        }
        match sink.as_mut().poll_flush(&mut cx) {
            Poll::Ready(Ok(())) => self.flushed(),
            Poll::Ready(Err(e)) => return Err(e),
            Poll::Pending => self.lock().flush_pending = true,
        }
        Ok(())
    }

    /// tungstenite's write buffer was flushed (or dropped): the bytes
    /// handed to it leave the outbound count and the host's sum, and the
    /// guest may send into the room.
    fn flushed(&self) {
        let n = self.lock().take_flushed();
        self.release_flushed(n);
    }

    /// Gives `n` flushed bytes ([`State::take_flushed`]) back to the
    /// host's sum and wakes the guest's send side.
    fn release_flushed(&self, n: usize) {
        if n > 0 {
            self.stats.release_buffered(n, self.buffer_budget);
            self.writable.wake();
        }
    }

    fn can_receive(&self) -> bool {
        let st = self.lock();
        !st.inbound.is_empty() || st.read_end.is_some() || st.dropped
    }

    fn can_send(&self) -> bool {
        let st = self.lock();
        st.outbound_bytes == 0
            || (st.outbound_bytes + st.blocked_len <= self.outbound_limit
                && self.budget_allows(st.outbound_bytes, st.blocked_len))
            || st.close_queued
            || st.read_end.is_some()
            || st.write_error.is_some()
            || st.dropped
    }
}

impl crate::HeldBack for Shared {
    fn budget_freed(&self) {
        self.held_back
            .store(false, std::sync::atomic::Ordering::Release);
        self.inbound_room.wake();
        self.writable.wake();
    }
}

impl crate::shutdown::GoingAway for Shared {
    fn going_away(&self) {
        self.queue_close(CLOSE_GOING_AWAY, "going away");
    }
}

impl Drop for Shared {
    fn drop(&mut self) {
        let st = self.lock();
        let queued = st.inbound_bytes + st.outbound_bytes;
        self.charges.sub(st.queued_charge);
        drop(st);
        self.stats.release_buffered(queued, self.buffer_budget);
    }
}

/// Binary messages `send-many` copies into one shared buffer per call
/// when they are smaller than this, bytes; larger ones get a buffer each.
const SHARED_COPY_BYTES: usize = 4096;

/// What one queued message counts against a stream's inbound or
/// outbound buffer besides its payload, bytes: about what its queue entry
/// costs the host. Without it a flood of empty messages (two bytes each
/// on the wire) never fills a buffer, and a peer or a guest could queue
/// millions of them while the other side does not read.
pub const QUEUED_MESSAGE_OVERHEAD: usize = 64;

/// The bytes a queued message of `payload` bytes counts against its
/// buffer: the payload plus [`QUEUED_MESSAGE_OVERHEAD`].
fn queued_len(payload: usize) -> usize {
    payload + QUEUED_MESSAGE_OVERHEAD
}

/// A message offered to `send-many`: owned, or still in the guest's
/// memory and copied only once the host takes it.
pub(crate) enum Offered<'a> {
    Owned(Message),
    Text(std::borrow::Cow<'a, str>),
    Binary(&'a [u8]),
}

impl Offered<'_> {
    /// Payload bytes.
    fn len(&self) -> usize {
        match self {
            Offered::Owned(m) => message_len(m),
            Offered::Text(t) => t.len(),
            Offered::Binary(b) => b.len(),
        }
    }

    /// The message, copied out of guest memory if it is still there.
    fn into_message(self) -> Message {
        match self {
            Offered::Owned(m) => m,
            Offered::Text(t) => Message::Text(t.into_owned()),
            Offered::Binary(b) => Message::Binary(b.to_vec()),
        }
    }
}

/// A data message as the guest's bindings carry it (a copy of its
/// payload).
fn to_message(m: WsMessage) -> Message {
    match m {
        WsMessage::Text(t) => Message::Text(t.as_str().to_owned()),
        WsMessage::Binary(b) => Message::Binary(b.into()),
        _ => unreachable!("only data messages are queued inbound"),
    }
}

fn message_len(m: &Message) -> usize {
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) => b.len(),
    }
}

/// An open WebSocket connection (the `message-stream` resource).
pub struct MessageStream {
    shared: Arc<Shared>,
    subprotocol: Option<String>,
    peer: SocketAddr,
    path: String,
}

impl MessageStream {
    /// Starts the reader and writer tasks for an established connection on
    /// the current tokio runtime, in a `connection` span (child of the
    /// current one) with the `peer` address. `direction` says whether a
    /// listener accepted it or a guest dialled it (metrics).
    /// Without the socket, a stream whose linger ends is closed without a
    /// reset (the kernel may keep sending what it holds).
    pub fn start<S>(
        ws: WebSocketStream<Metered<S>>,
        host: &HostCtx,
        subprotocol: Option<String>,
        peer: SocketAddr,
        path: String,
        direction: Direction,
    ) -> MessageStream
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        Self::start_on(ws, None, host, subprotocol, peer, path, direction)
    }

    /// [`MessageStream::start`] for a stream over the TCP socket `socket`
    /// (its descriptor), which the host resets when the linger ends.
    fn start_on<S>(
        mut ws: WebSocketStream<Metered<S>>,
        socket: Option<std::os::fd::RawFd>,
        host: &HostCtx,
        subprotocol: Option<String>,
        peer: SocketAddr,
        path: String,
        direction: Direction,
    ) -> MessageStream
    where
        S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
    {
        let limits = &host.config.limits;
        let charges = Arc::new(Charges {
            stats: host.stats.clone(),
            budget: limits.max_assembling_bytes,
            share: (limits.max_assembling_bytes / ASSEMBLING_SHARES)
                .max(limits.max_message_bytes.min(limits.max_assembling_bytes)),
            source: ws
                .get_ref()
                ._place
                .as_ref()
                .and_then(crate::connections::SourcePlace::source_charge),
        });
        let assembly = Arc::new(Assembly {
            held: Default::default(),
            charged: Default::default(),
            control_header: match direction {
                Direction::Inbound => 6,
                Direction::Outbound => 2,
            },
            charges: charges.clone(),
        });
        ws.get_mut().assembly = Some(assembly.clone());
        let (sink, stream) = ws.split();
        let shared = Arc::new_cyclic(|me| Shared {
            linger: limits.linger_timeout,
            socket,
            me: me.clone(),
            sink: Mutex::new(Some(Box::pin(sink))),
            stats: host.stats.clone(),
            charges,
            metrics: host.metrics.clone(),
            _open: host.metrics.connection(Interface::WebSocket, direction),
            state: Mutex::new(State {
                sending: Some(host.metrics.sending()),
                ..State::default()
            }),
            max_message: limits.max_message_bytes,
            // At least 1, so an empty buffer always takes one message (0
            // would never read the socket).
            inbound_limit: limits.inbound_buffer_bytes.max(1),
            outbound_limit: limits.outbound_buffer_bytes,
            buffer_budget: limits.max_buffered_bytes,
            held_back: std::sync::atomic::AtomicBool::new(false),
            max_batch: limits.max_batch_messages.max(1),
            readable: Signal::default(),
            writable: Signal::default(),
            outbound_work: Signal::default(),
            inbound_room: Signal::default(),
            reader: Mutex::new(None),
            writer: Mutex::new(None),
        });
        host.lifecycle.register(Arc::downgrade(&shared) as _);
        let span = tracing::info_span!("connection", interface = "websocket", %peer, direction = direction.as_str());
        use tracing::Instrument;
        let reader =
            tokio::spawn(read_loop(stream, shared.clone(), assembly).instrument(span.clone()));
        *shared.reader.lock().unwrap() = Some(reader.abort_handle());
        let writer = tokio::spawn(write_loop(shared.clone()).instrument(span));
        *shared.writer.lock().unwrap() = Some(writer.abort_handle());
        MessageStream {
            shared,
            subprotocol,
            peer,
            path,
        }
    }

    /// Queues a message; see the WIT `send` for the errors.
    pub fn send(&self, message: Message) -> Result<(), ErrorCode> {
        let mut st = self.shared.lock();
        let idle = self.shared.writer_idle(&st);
        self.shared.admit(&mut st, message_len(&message))?;
        self.shared.queue_data(&mut st, message);
        self.shared.flush_burst(st, idle)
    }

    /// Queues the longest prefix of `messages` that fits, in order, and
    /// returns its length (at most `max_batch_messages`); see the WIT
    /// `send-many` for the errors. The burst goes to tungstenite and the
    /// socket with one flush.
    pub fn send_many(&self, messages: Vec<Message>) -> Result<u32, ErrorCode> {
        self.shared
            .send_offered(messages.into_iter().map(|m| Ok(Offered::Owned(m))))
            .expect("owned messages never fail to read")
    }

    /// The stream's shared state, for `send-many`'s lazy lift (which must
    /// let go of the resource table before it reads guest memory).
    pub(crate) fn sender(&self) -> Arc<Shared> {
        self.shared.clone()
    }

    /// Takes the next message; see the WIT `receive`.
    pub fn receive(&self) -> Result<Option<Message>, ErrorCode> {
        Ok(self.take_one()?.map(to_message))
    }

    /// Takes the next message as tungstenite read it (a data message);
    /// see [`MessageStream::receive`].
    pub(crate) fn take_one(&self) -> Result<Option<WsMessage>, ErrorCode> {
        let mut st = self.shared.lock();
        if let Some(m) = st.inbound.pop_front() {
            self.shared.release_inbound(st, queued_len(m.len()));
            return Ok(Some(m));
        }
        match &st.read_end {
            Some(e) => Err(e.clone()),
            None => Ok(None),
        }
    }

    /// Takes the waiting messages, oldest first: at most `max_messages`
    /// (and `max_batch_messages`) and at most `max_bytes` payload bytes,
    /// the first message whatever its size; see the WIT `receive-many`.
    /// `Ok` with an empty list when nothing is waiting.
    pub fn receive_many(
        &self,
        max_messages: u32,
        max_bytes: u64,
    ) -> Result<Vec<Message>, ErrorCode> {
        Ok(self
            .take_many(max_messages, max_bytes)?
            .into_iter()
            .map(to_message)
            .collect())
    }

    /// Takes the waiting messages as tungstenite read them (data
    /// messages); see [`MessageStream::receive_many`].
    pub(crate) fn take_many(
        &self,
        max_messages: u32,
        max_bytes: u64,
    ) -> Result<Vec<WsMessage>, ErrorCode> {
        if max_messages == 0 {
            return Err(ErrorCode::InvalidArgument(
                "receive-many: max-messages must be at least 1".into(),
            ));
        }
        let max = (max_messages as usize).min(self.shared.max_batch);
        let mut st = self.shared.lock();
        let mut out = Vec::with_capacity(max.min(st.inbound.len()));
        let (mut bytes, mut queued) = (0u64, 0usize);
        while out.len() < max {
            let Some(m) = st.inbound.front() else { break };
            let len = m.len();
            if !out.is_empty() && bytes + len as u64 > max_bytes {
                break;
            }
            bytes += len as u64;
            queued += queued_len(len);
            out.push(st.inbound.pop_front().expect("checked above"));
        }
        if out.is_empty() {
            return match &st.read_end {
                Some(e) => Err(e.clone()),
                None => Ok(out),
            };
        }
        self.shared.release_inbound(st, queued);
        Ok(out)
    }

    /// Queues a close frame after every queued message; see the WIT `close`.
    pub fn close(&self, code: u16, reason: &str) -> Result<(), ErrorCode> {
        if code != 1000 && !(3000..=4999).contains(&code) {
            return Err(ErrorCode::InvalidArgument(format!(
                "close code {code} is not allowed: use 1000 or 3000-4999 (RFC 6455 section 7.4)"
            )));
        }
        if reason.len() > 123 {
            return Err(ErrorCode::InvalidArgument(format!(
                "close reason is {} bytes; at most 123 fit in a close frame (RFC 6455 section 5.5)",
                reason.len()
            )));
        }
        self.shared.queue_close(code, reason);
        Ok(())
    }

    /// A handle that outlives the guest's resource, for the host to close
    /// the stream when the guest fails.
    pub(crate) fn handle(&self) -> StreamHandle {
        StreamHandle(Arc::downgrade(&self.shared))
    }

    /// The close frame that ended the stream, once it has ended.
    pub fn close_info(&self) -> Option<CloseInfo> {
        self.shared.lock().close_info.clone()
    }

    /// Waits until `receive` would return something (for native callers).
    pub async fn wait_readable(&self) {
        let shared = &self.shared;
        shared.readable.wait_until(|| shared.can_receive()).await;
    }

    /// Resolves once [`MessageStream::receive`] would return something
    /// other than `Ok(None)`: the readiness of `subscribe-receive` as a
    /// future that owns what it needs, for the component-model-async
    /// interface (`p3`), which awaits it outside the resource table.
    pub fn receive_ready(&self) -> impl Future<Output = ()> + Send + use<> {
        let shared = self.shared.clone();
        async move { shared.readable.wait_until(|| shared.can_receive()).await }
    }

    /// Resolves once [`MessageStream::send`] would not return
    /// `would-block` for the message it last refused (or would fail for
    /// another reason): the readiness of `subscribe-send` as a future, for
    /// the `p3` interface's `send-ready`.
    pub fn send_ready(&self) -> impl Future<Output = ()> + Send + use<> {
        let shared = self.shared.clone();
        async move { shared.writable.wait_until(|| shared.can_send()).await }
    }

    /// Where a readiness set watches `interest` (`receive`, `send`): the
    /// same conditions as `subscribe-receive` and `subscribe-send`.
    pub(crate) fn readiness(
        &self,
        interest: crate::readiness::Interest,
    ) -> Option<crate::readiness::Source<'_>> {
        use crate::readiness::{Interest, signal_source};
        let s = &self.shared;
        match interest {
            Interest::Receive => Some(signal_source(&s.readable, s, Shared::can_receive)),
            Interest::Send => Some(signal_source(&s.writable, s, Shared::can_send)),
            _ => None,
        }
    }

    /// Bytes waiting in the inbound and outbound queues (for tests and
    /// metrics).
    pub fn buffered(&self) -> (usize, usize) {
        let st = self.shared.lock();
        (st.inbound_bytes, st.outbound_bytes)
    }
}

/// Hands `stream` to the guest: a resource in its table, remembered in its
/// context so that a failing guest's streams close with 1011.
pub(crate) fn hand_over(
    ctx: &mut crate::TetherCtx,
    table: &mut wasmtime::component::ResourceTable,
    stream: MessageStream,
) -> wasmtime::Result<Resource<MessageStream>> {
    ctx.track(stream.handle());
    Ok(table.push(stream)?)
}

/// A weak handle to a message stream handed to a guest (see
/// [`crate::TetherCtx`]): lets the host close the guest's streams with 1011
/// when the guest traps or exits with an error, before its resources drop
/// (which would close them with 1000, as if all went well).
pub(crate) struct StreamHandle(std::sync::Weak<Shared>);

impl StreamHandle {
    /// Whether the stream still exists.
    pub(crate) fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Resolves once the close frame went out, the stream failed or ended,
    /// or the stream is gone.
    pub(crate) async fn close_sent(&self) {
        let Some(shared) = self.0.upgrade() else {
            return;
        };
        shared
            .writable
            .wait_until(|| {
                let st = shared.lock();
                st.close_sent || st.write_error.is_some() || st.read_end.is_some()
            })
            .await;
    }

    /// Queues a close frame with 1011 (RFC 6455 section 7.4.1: "an
    /// unexpected condition") and `reason`, a fixed phrase that fits a
    /// close frame, after what is queued, unless a close is already queued
    /// or the stream ended.
    pub(crate) fn close_failed(&self, reason: &'static str) {
        debug_assert!(reason.len() <= 123, "a close reason is at most 123 bytes");
        if let Some(shared) = self.0.upgrade() {
            shared.queue_close(CLOSE_INTERNAL_ERROR, reason);
        }
    }
}

impl Drop for MessageStream {
    /// A dropped stream still delivers what was queued: it closes with 1000
    /// after the backlog, and its tasks end after the closing handshake, or
    /// at the latest `linger_timeout` after the drop (or after an earlier
    /// close): a peer that never reads (so the backlog never drains) or
    /// never answers the close must not keep the socket and both tasks
    /// alive after the guest let go.
    fn drop(&mut self) {
        self.shared.readable.watchers().detach_all();
        self.shared.writable.watchers().detach_all();
        self.shared.lock().dropped = true;
        self.shared.queue_close(1000, "");
        // A stream that ended already queues no close: bound its last
        // flush all the same.
        self.shared.start_linger();
        self.shared.readable.wake();
        self.shared.writable.wake();
    }
}

fn classify(e: tungstenite::Error) -> ErrorCode {
    use tungstenite::Error as E;
    use tungstenite::error::ProtocolError as P;
    match e {
        E::ConnectionClosed | E::AlreadyClosed => ErrorCode::Closed,
        E::Capacity(c) => {
            ErrorCode::ProtocolError(format!("peer sent a message over the limit: {c}"))
        }
        E::Protocol(P::ResetWithoutClosingHandshake) => {
            ErrorCode::ProtocolError("connection reset without closing handshake".into())
        }
        E::Protocol(p) => ErrorCode::ProtocolError(p.to_string()),
        E::Utf8(u) => ErrorCode::ProtocolError(format!("invalid UTF-8 in a text message: {u}")),
        E::Io(io) => match io.kind() {
            std::io::ErrorKind::ConnectionReset
            | std::io::ErrorKind::UnexpectedEof
            | std::io::ErrorKind::BrokenPipe
            | std::io::ErrorKind::ConnectionAborted => {
                ErrorCode::ProtocolError(format!("connection lost: {io}"))
            }
            _ => net::io_error(&io),
        },
        E::Tls(t) => ErrorCode::TlsFailure(t.to_string()),
        other => ErrorCode::ProtocolError(other.to_string()),
    }
}

/// The close frame RFC 6455 requires when the host fails the connection
/// because of `e` (sections 7.1.7 and 7.4.1): 1007 for a text message (or
/// close reason) that is not UTF-8, 1009 for a message over the limit, 1008
/// for a message in more frames than its size allows
/// (`tungstenite::protocol::frame::FREE_FRAGMENTS`), 1002 for every other
/// framing, masking or protocol violation. `None` when no
/// frame can go out (the transport failed or the peer reset it). The reason
/// is at most 123 bytes (section 5.5).
fn failure_close(e: &tungstenite::Error) -> Option<(u16, String)> {
    use tungstenite::Error as E;
    use tungstenite::error::ProtocolError as P;
    match e {
        E::Utf8(_) => Some((CLOSE_INVALID_DATA, "invalid UTF-8".into())),
        E::Capacity(_) => Some((CLOSE_TOO_BIG, "message too big".into())),
        E::Io(_) if is_budget_full(e) => Some((CLOSE_TRY_AGAIN_LATER, "try again later".into())),
        E::Protocol(P::ResetWithoutClosingHandshake) => None,
        // Framing the peer may not spend: policy, not a malformed frame.
        E::Protocol(p @ P::TooManyFragments { .. }) => {
            Some((CLOSE_POLICY_VIOLATION, truncate_reason(p.to_string())))
        }
        E::Protocol(p) => Some((CLOSE_PROTOCOL_ERROR, truncate_reason(p.to_string()))),
        _ => None,
    }
}

/// `reason` cut to the 123 bytes a close frame holds (RFC 6455 section
/// 5.5), at a character boundary.
fn truncate_reason(mut reason: String) -> String {
    let mut end = reason.len().min(123);
    while !reason.is_char_boundary(end) {
        end -= 1;
    }
    reason.truncate(end);
    reason
}

async fn read_loop<S>(
    mut rx: SplitStream<WebSocketStream<S>>,
    shared: Arc<Shared>,
    assembly: Arc<Assembly>,
) where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut control_pace = ControlPace::new(tokio::time::Instant::now());
    let mut paused_until = None;
    // Messages queued since the guest's side was last woken: one wake-up
    // per read burst, given before the reader waits for anything (the
    // socket, room, the pace), and at least every [`WAKE_BATCH`] messages.
    let mut unwoken = 0usize;
    let wake = |unwoken: &mut usize| {
        if *unwoken > 0 {
            *unwoken = 0;
            shared.readable.wake();
        }
    };
    let room = || {
        let st = shared.lock();
        (shared.inbound_open(&st)
            || (st.write_error.is_some() && st.inbound_bytes < shared.inbound_limit))
            && (st.pong_debt <= PONG_DEBT_BYTES || st.write_error.is_some())
    };
    let end = loop {
        if let Some(resume) = paused_until.take() {
            wake(&mut unwoken);
            tokio::time::sleep_until(resume).await;
        }
        // Backpressure: while the inbound queue is full, or the pongs
        // owed to the peer wait for a flush, or the peer's pings and pongs
        // ran ahead of their pace, do not read the socket at all; the
        // kernel buffers fill and TCP stalls the peer.
        if !room() {
            wake(&mut unwoken);
            shared.inbound_room.wait_until(room).await;
        }
        // What tungstenite can return without waiting (already buffered,
        // or one socket read away) is queued before the guest is woken.
        let now = if unwoken < WAKE_BATCH {
            rx.next().now_or_never()
        } else {
            None
        };
        let item = match now {
            Some(item) => item,
            None => {
                wake(&mut unwoken);
                rx.next().await
            }
        };
        let charge = match &item {
            Some(Ok(WsMessage::Text(_) | WsMessage::Binary(_))) => assembly.message_delivered(),
            Some(Ok(WsMessage::Ping(p) | WsMessage::Pong(p))) => {
                assembly.control_delivered(assembly.control_header + p.len());
                0
            }
            _ => 0,
        };
        let mut flood = false;
        if let Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) = &item {
            match control_pace.read_one(tokio::time::Instant::now()) {
                Pace::Read => {}
                // Handle this frame, then wait before the next read.
                Pace::WaitUntil(resume) => paused_until = Some(resume),
                Pace::Flood => flood = true,
            }
        }
        {
            let mut st = shared.lock();
            let message = match item {
                Some(Ok(m @ (WsMessage::Text(_) | WsMessage::Binary(_)))) => m,
                Some(Ok(WsMessage::Close(frame))) => {
                    // tungstenite answered the close with the same code
                    // (1002 if the peer's code is not allowed, which it also
                    // reports here); keep reading until the connection ends.
                    let code = frame.as_ref().map_or(CLOSE_NO_STATUS, |f| f.code.into());
                    shared.metrics.close_code(false, code);
                    if !st.close_started {
                        shared.metrics.close_code(true, code);
                    }
                    st.close_info = Some(match frame {
                        Some(f) => CloseInfo {
                            code: f.code.into(),
                            reason: f.reason.as_str().to_owned(),
                        },
                        None => CloseInfo {
                            code: CLOSE_NO_STATUS,
                            reason: String::new(),
                        },
                    });
                    continue;
                }
                Some(Ok(WsMessage::Ping(_) | WsMessage::Pong(_))) if flood => {
                    // Fail the connection: the close frame goes out after
                    // what the guest queued; nothing more is read.
                    let reason = "too many pings and pongs";
                    tracing::info!(
                        "failing WebSocket connection: pings and pongs past {CONTROL_FRAMES_PER_SECOND} a second (after a burst of {CONTROL_FRAME_BURST}) for {CONTROL_FLOOD_MS} ms"
                    );
                    st.fail_connection(CLOSE_POLICY_VIOLATION, reason.to_string());
                    break ErrorCode::ProtocolError(format!(
                        "the peer sent pings and pongs past {CONTROL_FRAMES_PER_SECOND} a second (after a burst of {CONTROL_FRAME_BURST}) for {CONTROL_FLOOD_MS} ms"
                    ));
                }
                Some(Ok(WsMessage::Ping(ping))) => {
                    // tungstenite queued the pong; past the bound, have the
                    // writer flush before reading on (above).
                    st.pong_debt += ping.len() + 2;
                    if st.pong_debt > PONG_DEBT_BYTES && !st.flush_pending {
                        st.flush_pending = true;
                        drop(st);
                        shared.outbound_work.wake();
                    }
                    continue;
                }
                Some(Ok(_)) => continue, // pong, raw frame
                // After the peer's close frame, how the transport ends (even
                // without a TLS close_notify) no longer matters.
                Some(Err(_)) | None if st.close_info.is_some() => break ErrorCode::Closed,
                Some(Err(e)) => {
                    // Fail the connection (RFC 6455 section 7.1.7): the close
                    // frame goes out after what the guest queued, then the
                    // writer task closes the TCP connection.
                    if let Some((code, reason)) = failure_close(&e) {
                        tracing::info!(code, "failing WebSocket connection: {e}");
                        st.fail_connection(code, reason);
                    }
                    break match e {
                        tungstenite::Error::Capacity(_) => {
                            ErrorCode::MessageTooLarge(shared.max_message as u64)
                        }
                        tungstenite::Error::Io(io) if is_budget_io(&io) => {
                            ErrorCode::Other(io.to_string())
                        }
                        e => classify(e),
                    };
                }
                None => break ErrorCode::Closed,
            };
            let len = message.len();
            shared.metrics.websocket.received_messages.inc();
            shared.metrics.websocket.received_bytes.inc_by(len as u64);
            st.inbound_bytes += queued_len(len);
            st.queued_charge += charge;
            shared.stats.add_buffered(queued_len(len));
            st.inbound.push_back(message);
        }
        unwoken += 1;
    };
    // The read half goes first; the writer task drops the write half once
    // it has sent what it must, and the TCP connection closes.
    drop(rx);
    assembly.ended();
    let mut st = shared.lock();
    if st.close_info.is_none() {
        shared.metrics.close_code(false, CLOSE_ABNORMAL);
        st.close_info = Some(CloseInfo {
            code: CLOSE_ABNORMAL,
            reason: String::new(),
        });
    }
    st.read_end = Some(end);
    drop(st);
    shared.readable.wake();
    shared.writable.wake();
    shared.outbound_work.wake();
    // The writer may still flush (a failure's close frame, the backlog):
    // a peer that failed the protocol and never reads must not keep the
    // socket.
    shared.start_linger();
}

enum Drained {
    /// Queue empty and flushed.
    Idle,
    /// The close frame went out.
    CloseSent,
}

/// Feeds every queued message to tungstenite, then flushes once the queue
/// is empty (or right after a close frame).
fn drive(shared: &Shared, cx: &mut Context<'_>) -> Poll<Result<Drained, tungstenite::Error>> {
    let mut sink = shared.sink.lock().unwrap_or_else(|e| e.into_inner());
    let Some(sink) = sink.as_mut() else {
        return Poll::Ready(Err(tungstenite::Error::AlreadyClosed));
    };
    loop {
        if !shared.lock().outbound.is_empty() {
            ready!(sink.as_mut().poll_ready(cx))?;
            let message = {
                let mut st = shared.lock();
                let m = st.outbound.pop_front().expect("checked above");
                let len = match &m {
                    WsMessage::Text(t) => queued_len(t.len()),
                    WsMessage::Binary(b) => queued_len(b.len()),
                    _ => 0,
                };
                st.in_sink += len;
                st.flush_pending = true;
                if let WsMessage::Close(frame) = &m {
                    st.close_started = true;
                    let code = frame.as_ref().map_or(CLOSE_NO_STATUS, |f| f.code.into());
                    shared.metrics.close_code(true, code);
                }
                m
            };
            shared.writable.wake();
            let is_close = message.is_close();
            sink.as_mut().start_send(message)?;
            if is_close {
                ready!(sink.as_mut().poll_flush(cx))?;
                shared.flushed();
                return Poll::Ready(Ok(Drained::CloseSent));
            }
            continue;
        }
        ready!(sink.as_mut().poll_flush(cx))?;
        let mut st = shared.lock();
        let flushed = st.take_flushed();
        let idle = st.outbound.is_empty();
        // The pongs queued so far are on the socket now.
        let pongs_out = idle && std::mem::take(&mut st.pong_debt) > 0;
        if idle {
            st.flush_pending = false;
        }
        drop(st);
        shared.release_flushed(flushed);
        if pongs_out {
            shared.inbound_room.wake();
        }
        if idle {
            return Poll::Ready(Ok(Drained::Idle));
        }
    }
}

async fn write_loop(shared: Arc<Shared>) {
    write_until_done(&shared).await;
    // The connection is over: the read half has ended (or was aborted), so
    // dropping the write half closes the TCP connection now, not when the
    // guest drops the stream.
    let sink = shared.sink.lock().unwrap_or_else(|e| e.into_inner()).take();
    drop(sink);
    // What tungstenite still held went with it.
    shared.flushed();
    shared.lock().sending = None;
}

/// Sends what the guest queues until the connection is over: the close
/// frame went out and the closing handshake ended (or timed out), the
/// read half ended and nothing is left to send, or a write failed.
async fn write_until_done(shared: &Arc<Shared>) {
    loop {
        let mut ended = false;
        shared
            .outbound_work
            .wait_until(|| {
                let st = shared.lock();
                ended = st.read_end.is_some();
                !st.outbound.is_empty() || st.flush_pending || st.inline_sent > 0 || ended
            })
            .await;
        {
            let mut st = shared.lock();
            // This task runs only once the guest yields: end of the burst.
            st.inline_sent = 0;
            if st.outbound.is_empty() && !st.flush_pending && ended {
                return;
            }
        }
        // A peer that never reads stalls this; the linger timer (started
        // by the close, the drop or the end of the read half) ends it.
        let drained = std::future::poll_fn(|cx| drive(shared, cx)).await;
        match drained {
            Ok(Drained::Idle) => {}
            Ok(Drained::CloseSent) => {
                {
                    let mut st = shared.lock();
                    st.close_sent = true;
                    st.sending = None;
                }
                shared.writable.wake();
                // Wait for the peer's close frame, then end the connection;
                // the linger timer the close started cuts a peer that never
                // answers.
                shared
                    .readable
                    .wait_until(|| shared.lock().read_end.is_some())
                    .await;
                if shared.lock().failed {
                    shared.finish_failed().await;
                }
                return;
            }
            Err(e) => {
                let code = classify(e);
                if !matches!(code, ErrorCode::Closed) {
                    tracing::debug!("websocket write failed: {code:?}");
                }
                shared.lock().write_error = Some(code);
                shared.writable.wake();
                // A reader paused on owed pongs reads on (to the end).
                shared.inbound_room.wake();
                // The read half still runs (the peer's close or a reset
                // ends it); keep the socket until then.
                shared
                    .readable
                    .wait_until(|| shared.lock().read_end.is_some())
                    .await;
                return;
            }
        }
    }
}

/// Readiness of `receive` (the `subscribe-receive` pollable).
struct ReceiveReady(Arc<Shared>);
/// Readiness of `send` (the `subscribe-send` pollable).
struct SendReady(Arc<Shared>);

#[async_trait::async_trait]
impl Pollable for ReceiveReady {
    async fn ready(&mut self) {
        let shared = &self.0;
        shared.readable.wait_until(|| shared.can_receive()).await;
    }
}

#[async_trait::async_trait]
impl Pollable for SendReady {
    async fn ready(&mut self) {
        let shared = &self.0;
        shared.writable.wait_until(|| shared.can_send()).await;
    }
}

pub use crate::ws_url::WsTarget;

/// Parses a WebSocket URL ([`crate::ws_url::parse`]). Errors:
/// `invalid-url` saying why.
pub fn parse_ws_url(text: &str) -> Result<WsTarget, ErrorCode> {
    crate::ws_url::parse(text).map_err(ErrorCode::InvalidUrl)
}

fn handshake_error(e: tungstenite::Error) -> ErrorCode {
    match e {
        tungstenite::Error::Http(resp) => {
            let status = resp.status();
            let location = resp
                .headers()
                .get("location")
                .and_then(|l| l.to_str().ok())
                .map(|l| format!(" (redirect to {l} not followed)"))
                .unwrap_or_default();
            ErrorCode::ProtocolError(format!(
                "server answered HTTP {status} instead of 101 Switching Protocols{location}"
            ))
        }
        tungstenite::Error::Protocol(p) => {
            ErrorCode::ProtocolError(format!("handshake failed: {p}"))
        }
        other => classify(other),
    }
}

fn tls_error(e: std::io::Error) -> ErrorCode {
    match e
        .get_ref()
        .and_then(|inner| inner.downcast_ref::<rustls::Error>())
    {
        Some(tls) => ErrorCode::TlsFailure(tls.to_string()),
        None if e.kind() == std::io::ErrorKind::UnexpectedEof => ErrorCode::TlsFailure(format!(
            "peer closed the connection during the TLS handshake: {e}"
        )),
        None => ErrorCode::TlsFailure(e.to_string()),
    }
}

/// Dials `target` and completes the TLS and WebSocket handshakes.
///
/// Errors: everything in `error-code` except `would-block`.
pub async fn dial(
    ctx: Arc<HostCtx>,
    lookups: Arc<tokio::sync::Semaphore>,
    target: WsTarget,
    options: ConnectOptions,
    check: crate::policy::NameCheck,
) -> Result<MessageStream, ErrorCode> {
    let tcp = net::dial(&ctx, &lookups, &target.dest, target.port, check).await?;
    let peer = tcp.peer_addr().map_err(|e| net::io_error(&e))?;
    let socket = std::os::fd::AsRawFd::as_raw_fd(&tcp);
    let mut request = target
        .url
        .as_str()
        .into_client_request()
        .map_err(|e| ErrorCode::InvalidUrl(format!("{}: {e}", target.url)))?;
    for (name, value) in &options.headers {
        let name = HeaderName::from_bytes(name.as_bytes())
            .map_err(|_| ErrorCode::InvalidArgument(format!("bad header name `{name}`")))?;
        let value = HeaderValue::from_str(value)
            .map_err(|_| ErrorCode::InvalidArgument(format!("bad value for header `{name}`")))?;
        request.headers_mut().append(name, value);
    }
    if !options.subprotocols.is_empty() {
        let list = options.subprotocols.join(", ");
        let value = HeaderValue::from_str(&list)
            .map_err(|_| ErrorCode::InvalidArgument(format!("bad subprotocol list `{list}`")))?;
        request
            .headers_mut()
            .insert("sec-websocket-protocol", value);
    }
    let path = target.url[url::Position::BeforePath..url::Position::AfterQuery].to_string();
    let limits = &ctx.config.limits;
    let handshake = async {
        let stream = if target.tls {
            let name = rustls::pki_types::ServerName::try_from(target.host.clone())
                .map_err(|e| ErrorCode::InvalidUrl(format!("{}: {e}", target.host)))?;
            let tls = tokio_rustls::TlsConnector::from(ctx.tls.clone())
                .connect(name, tcp)
                .await
                .map_err(tls_error)?;
            MaybeTlsStream::Rustls(tls)
        } else {
            MaybeTlsStream::Plain(tcp)
        };
        let stream = Metered::new(stream);
        tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config(limits)))
            .await
            .map_err(handshake_error)
    };
    let (ws, response) = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
        Ok(Ok(done)) => done,
        Ok(Err(e)) => {
            if let Some(reason) = crate::metrics::outbound_handshake_failure(&e) {
                ctx.metrics.handshake_failed(Direction::Outbound, reason);
            }
            return Err(e);
        }
        Err(_) => {
            ctx.metrics
                .handshake_failed(Direction::Outbound, HandshakeFailure::Timeout);
            return Err(ErrorCode::Timeout);
        }
    };
    let subprotocol = response
        .headers()
        .get("sec-websocket-protocol")
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    Ok(MessageStream::start_on(
        ws,
        Some(socket),
        &ctx,
        subprotocol,
        peer,
        path,
        Direction::Outbound,
    ))
}

/// A WebSocket server socket (the `listener` resource).
pub struct Listener {
    queue: Arc<AcceptQueue<MessageStream>>,
    local: SocketAddr,
}

impl Drop for Listener {
    /// Stops accepting, closes the streams nobody accepted and makes the
    /// listener's pollables ready (they may outlive it).
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// Picks the first server-supported subprotocol the client offered.
fn select_subprotocol(request: &Request, supported: &[String]) -> Option<String> {
    let offered: Vec<String> = request
        .headers()
        .get_all("sec-websocket-protocol")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(',').map(|p| p.trim().to_string()))
        .collect();
    supported.iter().find(|s| offered.contains(s)).cloned()
}

/// Largest HTTP request head (request line and headers) a WebSocket
/// listener reads before it answers the upgrade, bytes. A longer head is
/// refused with 431 and the connection closed.
pub const MAX_REQUEST_HEAD_BYTES: usize = 16 * 1024;

/// Answer to a connection refused because the listener already runs
/// `max_handshakes_per_listener` handshakes.
const REFUSED_BUSY: &[u8] =
    b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
/// Answer to a request head over [`MAX_REQUEST_HEAD_BYTES`].
const REFUSED_HEAD_TOO_LONG: &[u8] = b"HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";

/// What one message stream read off its socket toward messages not yet
/// complete, charged to the host's `max_assembling_bytes` budget past
/// [`ASSEMBLY_ALLOWANCE_BYTES`]. The transport ([`Metered`]) counts every
/// byte tungstenite reads; a control frame tungstenite hands over takes
/// its own bytes off the count, and a data message takes its charge along
/// into the inbound queue (held until the guest has taken the queue, see
/// `State::queued_charge`), so the count is what tungstenite holds toward
/// the next message (plus at most the rest of one socket read,
/// [`READ_BUFFER_BYTES`], of what follows), however the peer interleaves
/// pings and pongs.
struct Assembly {
    /// Bytes read since tungstenite last handed over a message or frame.
    held: std::sync::atomic::AtomicUsize,
    /// The part of `held` charged to the budget.
    charged: std::sync::atomic::AtomicUsize,
    /// Bytes of a frame header besides the payload length of a control
    /// frame from the peer: 2, plus the 4-byte mask a client's frames carry
    /// (RFC 6455 section 5.2).
    control_header: usize,
    charges: Arc<Charges>,
}

/// Where a stream's `max_assembling_bytes` charges go: the host's sum and,
/// for an accepted stream whose source is counted, its source's share
/// ([`ASSEMBLING_SHARES`]).
struct Charges {
    stats: Arc<crate::Stats>,
    /// `max_assembling_bytes`.
    budget: usize,
    /// The source's share of it, bytes.
    share: usize,
    source: Option<crate::connections::SourceCharge>,
}

impl Charges {
    /// Charges `n` bytes to the host and the source. Errors: either has
    /// no room (nothing is charged).
    fn try_add(&self, n: usize) -> Result<(), AssemblyBudgetFull> {
        if !self.stats.try_add_assembling(n, self.budget) {
            return Err(AssemblyBudgetFull::Host(self.budget));
        }
        if let Some(source) = &self.source
            && !source.try_add(n, self.share)
        {
            self.stats.sub_assembling(n);
            return Err(AssemblyBudgetFull::Source(self.share));
        }
        Ok(())
    }

    /// Gives back `n` bytes charged with [`Charges::try_add`].
    fn sub(&self, n: usize) {
        if n == 0 {
            return;
        }
        self.stats.sub_assembling(n);
        if let Some(source) = &self.source {
            source.sub(n);
        }
    }
}

/// The error a [`Metered`] read returns when the `max_assembling_bytes`
/// budget, or the peer's source's share of it, has no room for it.
#[derive(Debug)]
enum AssemblyBudgetFull {
    /// The host's budget (bytes).
    Host(usize),
    /// The source's share (bytes).
    Source(usize),
}

impl std::fmt::Display for AssemblyBudgetFull {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AssemblyBudgetFull::Host(n) => write!(
                f,
                "the host holds {n} bytes of unfinished inbound messages already (limit max_assembling_bytes)"
            ),
            AssemblyBudgetFull::Source(n) => write!(
                f,
                "this peer's source holds {n} bytes of unfinished inbound messages already (its share of max_assembling_bytes)"
            ),
        }
    }
}

impl std::error::Error for AssemblyBudgetFull {}

/// Whether `e` is a read refused for the `max_assembling_bytes` budget.
fn is_budget_full(e: &tungstenite::Error) -> bool {
    matches!(e, tungstenite::Error::Io(io) if is_budget_io(io))
}

/// Whether `io` is [`AssemblyBudgetFull`].
fn is_budget_io(io: &std::io::Error) -> bool {
    io.get_ref()
        .is_some_and(|inner| inner.is::<AssemblyBudgetFull>())
}

impl Assembly {
    /// Counts `n` bytes just read; charges what is past the allowance.
    /// Errors: the budget has no room (the stream fails with 1013).
    fn read(&self, n: usize) -> std::io::Result<()> {
        use std::sync::atomic::Ordering::Relaxed;
        let held = self.held.fetch_add(n, Relaxed) + n;
        let charged = self.charged.load(Relaxed);
        let need = held
            .saturating_sub(ASSEMBLY_ALLOWANCE_BYTES)
            .saturating_sub(charged);
        if need > 0 {
            self.charges.try_add(need).map_err(std::io::Error::other)?;
            self.charged.store(charged + need, Relaxed);
        }
        Ok(())
    }

    /// tungstenite handed over a data message: the count starts again,
    /// and the message's charge goes along with it into the inbound queue
    /// (returned, still charged to the budget).
    fn message_delivered(&self) -> usize {
        use std::sync::atomic::Ordering::Relaxed;
        self.held.store(0, Relaxed);
        self.charged.swap(0, Relaxed)
    }

    /// tungstenite handed over a control frame of `wire` bytes (header
    /// included): they are no longer held, the unfinished message is.
    fn control_delivered(&self, wire: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        let held = self.held.load(Relaxed).saturating_sub(wire);
        self.held.store(held, Relaxed);
        let over = held.saturating_sub(ASSEMBLY_ALLOWANCE_BYTES);
        let charged = self.charged.load(Relaxed);
        if charged > over {
            self.charged.store(over, Relaxed);
            self.charges.sub(charged - over);
        }
    }

    /// The stream ended: nothing is held any more.
    fn ended(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        self.held.store(0, Relaxed);
        let charged = self.charged.swap(0, Relaxed);
        self.charges.sub(charged);
    }
}

impl Drop for Assembly {
    fn drop(&mut self) {
        self.ended();
    }
}

/// A WebSocket transport whose reads count toward the host's
/// `max_assembling_bytes` budget once [`MessageStream::start`] installs
/// the stream's [`Assembly`] (after the opening handshake); writes pass
/// through. Wrap the transport before the handshake:
/// `client_async_with_config(request, Metered::new(tcp), ...)`. A
/// listener's wrapper first replays the request head it read itself.
pub struct Metered<S> {
    /// Bytes read from `inner` before (a listener's request head), yielded
    /// first; `pos` of them are.
    head: Vec<u8>,
    pos: usize,
    inner: S,
    assembly: Option<Arc<Assembly>>,
    /// An accepted connection's place in its source's count
    /// (`max_connections_per_source`), given back when the socket closes
    /// (this wrapper owns it).
    _place: Option<crate::connections::SourcePlace>,
}

impl<S> Metered<S> {
    /// `inner`, not counted until a stream starts on it.
    pub fn new(inner: S) -> Metered<S> {
        Metered::with_head(Vec::new(), inner)
    }

    /// `inner`, whose first bytes (`head`, a request head the listener
    /// read before the upgrade) were read already: reads yield them first.
    fn with_head(head: Vec<u8>, inner: S) -> Metered<S> {
        Metered {
            head,
            pos: 0,
            inner,
            assembly: None,
            _place: None,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Metered<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        if this.pos < this.head.len() {
            let n = buf.remaining().min(this.head.len() - this.pos);
            buf.put_slice(&this.head[this.pos..this.pos + n]);
            this.pos += n;
            if this.pos == this.head.len() {
                this.head = Vec::new();
                this.pos = 0;
            }
        } else {
            ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        }
        if let Some(assembly) = &this.assembly {
            assembly.read(buf.filled().len() - before)?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Metered<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Reads the client's HTTP request head, up to and including the blank
/// line (RFC 9112 section 2.1), plus whatever came in the same reads; or
/// up to its first bare LF line end, which [`upgrade::check`] refuses
/// (400) at once instead of waiting for a `\r\n\r\n` that such a
/// client never sends.
/// Errors: the peer closed first, or the head is over
/// [`MAX_REQUEST_HEAD_BYTES`] (`InvalidData`).
async fn read_request_head(tcp: &mut TcpStream) -> std::io::Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut head = Vec::with_capacity(1024);
    let mut chunk = [0u8; 2048];
    loop {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let from = head.len().saturating_sub(3);
        head.extend_from_slice(&chunk[..n]);
        if head[from..].windows(4).any(|w| w == b"\r\n\r\n") || upgrade::bare_lf(&head).is_some() {
            return Ok(head);
        }
        if head.len() >= MAX_REQUEST_HEAD_BYTES {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("request head over {MAX_REQUEST_HEAD_BYTES} bytes"),
            ));
        }
    }
}

/// One accepted connection's upgrade. The request head must arrive within
/// the handshake deadline (counted from accept); then the handshake waits
/// for a backlog slot (a guest that does not accept pushes back here: the
/// client gets no 101 until there is room), then tungstenite checks the
/// request and answers it, within the deadline again.
#[allow(clippy::result_large_err)] // the callback signature is tungstenite's
async fn accept_one(
    ctx: Arc<HostCtx>,
    mut tcp: TcpStream,
    peer: SocketAddr,
    supported: Arc<Vec<String>>,
    queue: Arc<AcceptQueue<MessageStream>>,
    arrived: places::HeadArrived,
    place: Option<crate::connections::SourcePlace>,
) {
    let limits = &ctx.config.limits;
    let head =
        match tokio::time::timeout(limits.handshake_timeout, read_request_head(&mut tcp)).await {
            Ok(Ok(head)) => head,
            Ok(Err(e)) => {
                let reason = if e.kind() == std::io::ErrorKind::InvalidData {
                    let _ = tcp.try_write(REFUSED_HEAD_TOO_LONG);
                    HandshakeFailure::HeadTooLarge
                } else {
                    HandshakeFailure::Closed
                };
                ctx.metrics.handshake_failed(Direction::Inbound, reason);
                tracing::info!(%peer, "rejected WebSocket handshake: {e}");
                return;
            }
            Err(_) => {
                ctx.metrics
                    .handshake_failed(Direction::Inbound, HandshakeFailure::Timeout);
                tracing::info!(%peer, "WebSocket handshake timed out");
                return;
            }
        };
    if !arrived.set() {
        // A new connection took this place just as the head came in.
        return;
    }
    if let Err(refusal) = upgrade::check(&head) {
        // A response this short fits the fresh socket's send buffer.
        let _ = tcp.try_write(&refusal.response());
        ctx.metrics
            .handshake_failed(Direction::Inbound, HandshakeFailure::BadRequest);
        tracing::info!(%peer, "rejected WebSocket handshake: {}", refusal.reason());
        return;
    }
    queue.reserve().await;
    let chosen = Arc::new(Mutex::new((String::new(), None::<String>)));
    let out = chosen.clone();
    let callback = move |request: &Request, mut response: Response| {
        let protocol = select_subprotocol(request, &supported);
        if let Some(p) = &protocol
            && let Ok(v) = HeaderValue::from_str(p)
        {
            response.headers_mut().insert("sec-websocket-protocol", v);
        }
        *out.lock().unwrap() = (request.uri().to_string(), protocol);
        Ok(response)
    };
    let socket = std::os::fd::AsRawFd::as_raw_fd(&tcp);
    let mut stream = Metered::with_head(head, tcp);
    stream._place = place;
    let handshake =
        tokio_tungstenite::accept_hdr_async_with_config(stream, callback, Some(ws_config(limits)));
    let stream = match tokio::time::timeout(limits.handshake_timeout, handshake).await {
        Ok(Ok(ws)) => {
            let (path, protocol) = chosen.lock().unwrap().clone();
            Some(MessageStream::start_on(
                ws,
                Some(socket),
                &ctx,
                protocol,
                peer,
                path,
                Direction::Inbound,
            ))
        }
        Ok(Err(e)) => {
            let reason = match e {
                tungstenite::Error::Io(_) | tungstenite::Error::ConnectionClosed => {
                    HandshakeFailure::Closed
                }
                _ => HandshakeFailure::BadRequest,
            };
            ctx.metrics.handshake_failed(Direction::Inbound, reason);
            tracing::info!(%peer, "rejected WebSocket handshake: {e}");
            None
        }
        Err(_) => {
            ctx.metrics
                .handshake_failed(Direction::Inbound, HandshakeFailure::Timeout);
            tracing::info!(%peer, "WebSocket handshake timed out");
            None
        }
    };
    queue.fill(stream);
}

/// Accepts connections and runs their handshakes concurrently. A
/// connection whose source holds `max_connections_per_source` of the
/// host's connections already is answered 503 and closed at once; the
/// others hold their source's place until their socket closes. At most
/// `max_handshakes_per_listener` run at once and `max_handshakes_per_source`
/// from one source (past that, its new connections are answered 503 and
/// closed at once). Past the first, a new connection
/// takes the place of the oldest client that has sent no request head
/// [`places::EVICT_AFTER`] (1 s) after its accept (that client's
/// connection is closed); when there is none, it is answered 503 and
/// closed at once, and the loop goes on. Handshakes never hold up the
/// loop: only a full backlog of completed streams (a guest that does not
/// accept) pauses it, and then the kernel's backlog pushes back. Dropping
/// the loop (the listener) aborts every handshake.
async fn accept_loop(
    ctx: Arc<HostCtx>,
    listener: tokio::net::TcpListener,
    supported: Arc<Vec<String>>,
    queue: Arc<AcceptQueue<MessageStream>>,
) {
    let max_handshakes = ctx.config.limits.max_handshakes_per_listener.max(1);
    let per_source = ctx.config.limits.max_handshakes_per_source.max(1);
    let mut handshakes = places::Places::new(max_handshakes, per_source);
    let mut errors = net::AcceptErrors::new("WebSocket listener");
    loop {
        let accepted = tokio::select! {
            () = handshakes.join_next() => continue,
            accepted = async {
                queue.room().await;
                net::accept(&listener).await
            } => accepted,
        };
        let (tcp, peer) = match accepted {
            Ok(accepted) => {
                errors.accepted();
                accepted
            }
            Err(e) => {
                // EMFILE and friends are not a dead listener: back off.
                errors.failed(&e).await;
                continue;
            }
        };
        let place = match ctx.connections.take(peer) {
            Ok(place) => place,
            Err(refused) => {
                let _ = tcp.try_write(REFUSED_BUSY);
                ctx.metrics
                    .connection_refused(Interface::WebSocket, &refused);
                tracing::debug!(%peer, "refused: {refused}");
                continue;
            }
        };
        match handshakes.make_room(peer, tokio::time::Instant::now()) {
            places::Room::Free => {}
            places::Room::SourceFull => {
                let _ = tcp.try_write(REFUSED_BUSY);
                ctx.metrics
                    .handshake_failed(Direction::Inbound, HandshakeFailure::SourceBusy);
                tracing::debug!(%peer, per_source, "refused: too many WebSocket handshakes in progress from this source (max_handshakes_per_source)");
                continue;
            }
            places::Room::Evicted(silent) => {
                ctx.metrics
                    .handshake_failed(Direction::Inbound, HandshakeFailure::Evicted);
                tracing::info!(
                    peer = %silent,
                    "WebSocket handshake closed: no request head {} ms after accept, and a new connection needed its place ({max_handshakes} handshakes in progress, max_handshakes_per_listener)",
                    places::EVICT_AFTER.as_millis()
                );
            }
            places::Room::Full => {
                let _ = tcp.try_write(REFUSED_BUSY);
                ctx.metrics
                    .handshake_failed(Direction::Inbound, HandshakeFailure::Busy);
                tracing::debug!(%peer, max_handshakes, "refused: too many WebSocket handshakes in progress");
                continue;
            }
        }
        let head = places::HeadArrived::default();
        handshakes.spawn(
            peer,
            head.clone(),
            tracing::Instrument::in_current_span(accept_one(
                ctx.clone(),
                tcp,
                peer,
                supported.clone(),
                queue.clone(),
                head,
                Some(place),
            )),
        );
    }
}

impl Listener {
    /// Binds and starts accepting. Errors: see the WIT `listen`.
    pub fn bind(
        ctx: Arc<HostCtx>,
        address: &str,
        options: ListenOptions,
    ) -> Result<Listener, ErrorCode> {
        let listener = net::bind(&ctx, address)?;
        let local = listener.local_addr().map_err(|e| net::io_error(&e))?;
        let queue = AcceptQueue::new(ctx.config.limits.accept_backlog);
        let span = tracing::info_span!("listener", interface = "websocket", %local);
        let task = tokio::spawn(tracing::Instrument::instrument(
            accept_loop(
                ctx.clone(),
                listener,
                Arc::new(options.subprotocols),
                queue.clone(),
            ),
            span,
        ));
        queue.set_task(task.abort_handle());
        ctx.lifecycle.register(Arc::downgrade(&queue) as _);
        Ok(Listener { queue, local })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Where a readiness set watches `accept`.
    pub(crate) fn readiness(
        &self,
        interest: crate::readiness::Interest,
    ) -> Option<crate::readiness::Source<'_>> {
        (interest == crate::readiness::Interest::Accept).then(|| self.queue.readiness())
    }

    /// Takes the next accepted stream, if any. Errors: `closed` once the
    /// host shut down and every stream accepted before was taken.
    pub fn accept(&self) -> Result<Option<MessageStream>, ErrorCode> {
        self.queue.take()
    }

    /// Resolves once [`Listener::accept`] would return something other
    /// than `Ok(None)` (the async interface's `accept-ready`). Takes
    /// nothing, so dropping it loses no stream.
    pub(crate) fn accept_ready(&self) -> impl Future<Output = ()> + Send + use<> {
        self.queue.ready()
    }
}

/// The `future-message-stream` resource.
pub type FutureMessageStream = Pending<MessageStream>;

impl wit::Host for TetherCtxView<'_> {
    fn connect(
        &mut self,
        url: String,
        options: ConnectOptions,
    ) -> wasmtime::Result<Result<Resource<FutureMessageStream>, ErrorCode>> {
        let target = match parse_ws_url(&url) {
            Ok(t) => t,
            Err(e) => return Ok(Err(e)),
        };
        let check = match net::precheck(&self.ctx.host, &target.dest, target.port) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let pending = Pending::spawn(dial(
            self.ctx.host.clone(),
            self.ctx.lookups.clone(),
            target,
            options,
            check,
        ));
        Ok(Ok(self.table.push(pending)?))
    }

    fn listen(
        &mut self,
        address: String,
        options: ListenOptions,
    ) -> wasmtime::Result<Result<Resource<Listener>, ErrorCode>> {
        match Listener::bind(self.ctx.host.clone(), &address, options) {
            Ok(l) => Ok(Ok(self.table.push(l)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl wit::HostMessageStream for TetherCtxView<'_> {
    fn send(
        &mut self,
        this: Resource<MessageStream>,
        message: Message,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        Ok(self.table.get(&this)?.send(message))
    }

    fn receive(
        &mut self,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Result<Option<Message>, ErrorCode>> {
        Ok(self.table.get(&this)?.receive())
    }

    fn send_many(
        &mut self,
        this: Resource<MessageStream>,
        messages: Vec<Message>,
    ) -> wasmtime::Result<Result<u32, ErrorCode>> {
        Ok(self.table.get(&this)?.send_many(messages))
    }

    fn receive_many(
        &mut self,
        this: Resource<MessageStream>,
        max_messages: u32,
        max_bytes: u64,
    ) -> wasmtime::Result<Result<Vec<Message>, ErrorCode>> {
        Ok(self.table.get(&this)?.receive_many(max_messages, max_bytes))
    }

    fn subscribe_receive(
        &mut self,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let shared = self.table.get(&this)?.shared.clone();
        pollable(self.table, ReceiveReady(shared))
    }

    fn subscribe_send(
        &mut self,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let shared = self.table.get(&this)?.shared.clone();
        pollable(self.table, SendReady(shared))
    }

    fn close(
        &mut self,
        this: Resource<MessageStream>,
        code: u16,
        reason: String,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        Ok(self.table.get(&this)?.close(code, &reason))
    }

    fn close_info(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<Option<CloseInfo>> {
        Ok(self.table.get(&this)?.close_info())
    }

    fn subprotocol(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<Option<String>> {
        Ok(self.table.get(&this)?.subprotocol.clone())
    }

    fn peer_address(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.peer.to_string())
    }

    fn path(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.path.clone())
    }

    fn drop(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl wit::HostFutureMessageStream for TetherCtxView<'_> {
    fn subscribe(
        &mut self,
        this: Resource<FutureMessageStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.table.get(&this)?.pollable();
        pollable(self.table, ready)
    }

    fn get(
        &mut self,
        this: Resource<FutureMessageStream>,
    ) -> wasmtime::Result<Option<Result<Resource<MessageStream>, ErrorCode>>> {
        match self.table.get_mut(&this)?.take() {
            None => Ok(None),
            Some(Ok(stream)) => Ok(Some(Ok(hand_over(self.ctx, self.table, stream)?))),
            Some(Err(e)) => Ok(Some(Err(e))),
        }
    }

    fn drop(&mut self, this: Resource<FutureMessageStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl wit::HostListener for TetherCtxView<'_> {
    fn local_address(&mut self, this: Resource<Listener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.local.to_string())
    }

    fn accept(
        &mut self,
        this: Resource<Listener>,
    ) -> wasmtime::Result<Result<Option<Resource<MessageStream>>, ErrorCode>> {
        match self.table.get(&this)?.accept() {
            Ok(Some(stream)) => Ok(Ok(Some(hand_over(self.ctx, self.table, stream)?))),
            Ok(None) => Ok(Ok(None)),
            Err(e) => Ok(Err(e)),
        }
    }

    fn subscribe(&mut self, this: Resource<Listener>) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.table.get(&this)?.queue.pollable();
        pollable(self.table, ready)
    }

    fn drop(&mut self, this: Resource<Listener>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// A burst of control frames goes at once; past it, each one waits its
    /// interval; an idle peer earns the burst back; a peer past the pace
    /// for CONTROL_FLOOD_MS is a flood, and so is one that reads that far
    /// past it at once.
    #[test]
    fn control_frames_pass_in_a_burst_then_at_their_pace() {
        let t0 = tokio::time::Instant::now();
        let mut pace = ControlPace::new(t0);
        let burst = CONTROL_FRAME_BURST as usize;
        let interval = ControlPace::INTERVAL;
        let paces: Vec<_> = (0..burst + 3).map(|_| pace.read_one(t0)).collect();
        assert!(paces[..burst].iter().all(|p| *p == Pace::Read), "{paces:?}");
        let after: Vec<_> = paces[burst..]
            .iter()
            .map(|p| match p {
                Pace::WaitUntil(t) => *t,
                p => panic!("{p:?}"),
            })
            .collect();
        assert_eq!(after[0], t0 + interval);
        assert!(
            after.windows(2).all(|w| w[1] - w[0] == interval),
            "{after:?}"
        );
        let later = t0 + ControlPace::FULL + Duration::from_secs(1);
        assert!((0..burst).all(|_| pace.read_one(later) == Pace::Read));
        // Past the pace, read as soon as allowed: a flood once that has
        // lasted CONTROL_FLOOD_MS.
        let mut now = later;
        let flood_at = loop {
            match pace.read_one(now) {
                Pace::WaitUntil(t) => now = t,
                Pace::Flood => break now,
                Pace::Read => panic!("read at {:?}", now - later),
            }
        };
        let over = flood_at - later;
        let flood = Duration::from_millis(CONTROL_FLOOD_MS);
        assert!(over > flood && over <= flood + interval, "{over:?}");
        // Woken up to 2 ms late, a flood is still one.
        let mut pace = ControlPace::new(t0);
        let mut now = t0;
        let flood_at = loop {
            match pace.read_one(now) {
                Pace::WaitUntil(t) => now = t + Duration::from_millis(2),
                Pace::Read => {}
                Pace::Flood => break now,
            }
        };
        assert!(
            flood_at - t0 <= flood + Duration::from_millis(200),
            "{:?}",
            flood_at - t0
        );
        // A peer that reads a backlog more than CONTROL_FLOOD_MS past the
        // full bucket at once is one at once.
        let mut pace = ControlPace::new(t0);
        let past = (flood.as_nanos() / interval.as_nanos()) as usize;
        let read = (0..2 * burst + past).take_while(|_| pace.read_one(t0) != Pace::Flood);
        assert_eq!(read.count(), burst + past);
        // A peer at the pace, 200 ms after its burst or without one, is
        // never held back.
        let mut pace = ControlPace::new(t0);
        assert!((0..burst).all(|_| pace.read_one(t0) == Pace::Read));
        assert!((1..4 * burst).all(|k| {
            let now = t0 + Duration::from_millis(200) + interval * k as u32;
            pace.read_one(now) == Pace::Read
        }));
        let mut pace = ControlPace::new(t0);
        assert!((0..4 * burst).all(|k| pace.read_one(t0 + interval * k as u32) == Pace::Read));
    }
}
