//! TCP byte streams: the `tether:streams/tcp` interface.
//!
//! Data flows through ordinary `wasi:io` streams. Reads go straight to the
//! socket (`try_read`, no extra buffer or task); writes go straight to the
//! socket too when nothing is queued, and only the part the kernel did not
//! take waits in a bounded per-stream buffer that a writer task drains. A
//! full buffer makes `check-write` return 0: backpressure, never loss.
//!
//! A dropped output stream still delivers what it queued, for at most
//! `linger_timeout`: past it the host drops the queue and resets the
//! connection (SO_LINGER 0), so a peer that never reads cannot hold the
//! socket and the buffer after the guest let go.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use tokio::net::TcpStream;
use wasmtime::component::Resource;
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, DynPollable, InputStream, OutputStream, Pollable, StreamError,
    StreamResult,
};

use crate::accept::AcceptQueue;
use crate::bindings::ErrorCode;
use crate::bindings::tether::streams::tcp as wit;
use crate::connections::SourcePlace;
use crate::metrics::{Direction, Interface, OpenConnection};
use crate::ready::{Pending, Signal, pollable};
use crate::{HostCtx, TetherCtxView, net};

#[derive(Default)]
struct WriteState {
    queue: VecDeque<Bytes>,
    queued: usize,
    /// `flush` was called: `check-write` grants nothing until the queue is
    /// empty.
    flushing: bool,
    shutdown_requested: bool,
    /// The output stream was dropped: drain (for at most the linger), then
    /// end the task.
    dropped: bool,
    /// The FIN went out (every queued byte was sent before it).
    finished: bool,
    error: Option<String>,
}

struct Writer {
    stream: Arc<TcpStream>,
    stats: Arc<crate::Stats>,
    /// `tether_sent_bytes_total{interface="tcp"}`.
    sent_bytes: prometheus_client::metrics::counter::Counter,
    /// Counts the connection as open while the writer or the reader lives
    /// (and an accepted one in its source's count).
    _open: Arc<Open>,
    /// Counts the connection in [`crate::HostCtx::drained`] until the
    /// writer task ends (queue sent and FIN, or reset).
    _sending: crate::metrics::Sending,
    state: Mutex<WriteState>,
    limit: usize,
    /// `linger_timeout`: how long the queue may take to drain once the
    /// output stream was dropped.
    linger: std::time::Duration,
    /// Writer task: bytes queued, shutdown requested or stream dropped.
    work: Signal,
    /// Guest side: queue shrank or an error happened.
    progress: Signal,
}

impl Drop for Writer {
    fn drop(&mut self) {
        let st = self.lock();
        self.stats.tcp_dequeued(st.queued);
    }
}

impl Writer {
    fn lock(&self) -> MutexGuard<'_, WriteState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Half-closes now (FIN) and tells the guest side.
    fn shutdown_now(&self) {
        if let Err(e) = socket2::SockRef::from(&*self.stream).shutdown(std::net::Shutdown::Write) {
            tracing::debug!("shutdown(SHUT_WR) failed: {e}");
        }
        self.lock().finished = true;
        self.progress.wake();
    }

    /// Takes `data` (at most the permit, checked by the caller): straight
    /// to the socket when nothing is queued (no task hop), the rest queued
    /// for the writer task. `own` turns the unsent tail `data[n..]` into
    /// [`Bytes`] (a slice of the caller's buffer, or a copy). Errors: the
    /// socket failed (the error is kept for later calls too).
    fn write_with(
        &self,
        mut st: MutexGuard<'_, WriteState>,
        data: &[u8],
        own: impl FnOnce(usize) -> Bytes,
    ) -> io::Result<()> {
        self.sent_bytes.inc_by(data.len() as u64);
        let mut sent = 0;
        if st.queued == 0 {
            match self.stream.try_write(data) {
                Ok(n) => sent = n,
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    st.error = Some(e.to_string());
                    return Err(e);
                }
            }
        }
        if sent < data.len() {
            let rest = own(sent);
            st.queued += rest.len();
            self.stats.tcp_queued(rest.len(), st.queued);
            st.queue.push_back(rest);
            drop(st);
            self.work.wake();
        }
        Ok(())
    }

    /// Half-closes once every queued byte is sent (`shutdown-send`).
    fn request_shutdown(&self) -> Result<(), ErrorCode> {
        let mut st = self.lock();
        if let Some(e) = &st.error {
            return Err(ErrorCode::Other(e.clone()));
        }
        if st.shutdown_requested {
            return Ok(());
        }
        st.shutdown_requested = true;
        let idle = st.queued == 0;
        drop(st);
        if idle {
            self.shutdown_now();
        }
        self.work.wake();
        Ok(())
    }

    fn permit(&self, st: &WriteState) -> StreamResult<usize> {
        if let Some(e) = &st.error {
            return Err(StreamError::LastOperationFailed(wasmtime::format_err!(
                "{e}"
            )));
        }
        if st.shutdown_requested {
            return Err(StreamError::Closed);
        }
        if st.flushing && st.queued > 0 {
            return Ok(0);
        }
        Ok(self.limit - st.queued)
    }
}

impl Writer {
    /// The linger ended with bytes still queued: drops them and makes the
    /// socket reset when it closes (SO_LINGER 0: RST, and the kernel drops
    /// its unsent bytes too instead of keeping an orphan socket). It closes
    /// as soon as the writer task ends, or, if the guest still holds the
    /// input stream, when it drops that.
    fn reset(&self) {
        tracing::debug!(
            queued = self.lock().queued,
            "TCP output stream dropped and not drained within linger_timeout: reset"
        );
        self.abort("connection reset: linger_timeout ended");
    }

    /// Drops what is queued and makes the socket reset when it closes
    /// (SO_LINGER 0), never half-close: the stream ends with `why`. The
    /// peer reads a reset, not the FIN of a stream that ended normally.
    fn abort(&self, why: &str) {
        let sock = socket2::SockRef::from(&*self.stream);
        if let Err(e) = sock.set_linger(Some(std::time::Duration::ZERO)) {
            tracing::debug!("SO_LINGER 0 failed: {e}");
        }
        let mut st = self.lock();
        self.stats.tcp_dequeued(st.queued);
        st.queue.clear();
        st.queued = 0;
        st.error.get_or_insert_with(|| why.into());
        drop(st);
        self.progress.wake();
        self.work.wake();
    }
}

/// A guest's hold on one of its byte streams, to reset the connection if
/// the guest fails ([`crate::TetherCtx`] keeps one per stream it handed
/// out): a failed guest's TCP peers read a reset, the byte stream's
/// counterpart of the 1011 its message streams' peers get, not a FIN that
/// says the stream ended whole.
pub(crate) struct ByteStreamHandle(std::sync::Weak<Writer>);

impl ByteStreamHandle {
    /// Whether the connection's writer still runs.
    pub(crate) fn is_alive(&self) -> bool {
        self.0.strong_count() > 0
    }

    /// Resets the connection: what is queued is dropped, and the socket
    /// closes with a reset (SO_LINGER 0), without a FIN first.
    pub(crate) fn abort(&self, why: &str) {
        if let Some(writer) = self.0.upgrade() {
            writer.abort(why);
        }
    }
}

impl crate::shutdown::GoingAway for Writer {
    fn going_away(&self) {
        // An error already ended the stream: nothing left to half-close.
        let _ = self.request_shutdown();
    }
}

/// The writer task: sends what is queued until the stream is over; once
/// the output stream was dropped, for at most the linger.
async fn drain(writer: Arc<Writer>) {
    let linger_over = async {
        writer.work.wait_until(|| writer.lock().dropped).await;
        tokio::time::sleep(writer.linger).await;
    };
    tokio::select! {
        () = send_queued(&writer) => {}
        () = linger_over => writer.reset(),
    }
}

async fn send_queued(writer: &Writer) {
    loop {
        writer
            .work
            .wait_until(|| {
                let st = writer.lock();
                st.queued > 0 || st.shutdown_requested || st.dropped
            })
            .await;
        let front = writer.lock().queue.front().cloned();
        match front {
            Some(chunk) => {
                let result = match writer.stream.writable().await {
                    Ok(()) => writer.stream.try_write(&chunk),
                    Err(e) => Err(e),
                };
                let mut st = writer.lock();
                match result {
                    Ok(n) => {
                        st.queued -= n;
                        writer.stats.tcp_dequeued(n);
                        if n == chunk.len() {
                            st.queue.pop_front();
                        } else if let Some(f) = st.queue.front_mut() {
                            *f = chunk.slice(n..);
                        }
                        if st.queued == 0 {
                            st.flushing = false;
                        }
                    }
                    Err(e)
                        if e.kind() == io::ErrorKind::WouldBlock
                            || e.kind() == io::ErrorKind::Interrupted =>
                    {
                        continue;
                    }
                    Err(e) => {
                        st.error = Some(e.to_string());
                        st.queue.clear();
                        writer.stats.tcp_dequeued(st.queued);
                        st.queued = 0;
                    }
                }
                drop(st);
                writer.progress.wake();
            }
            None => {
                let st = writer.lock();
                let (shutdown, dropped) = (st.shutdown_requested, st.dropped);
                let failed = st.error.is_some();
                drop(st);
                if failed {
                    // Reset (`abort`), or failed: no FIN.
                    return;
                }
                if shutdown {
                    writer.shutdown_now();
                }
                if shutdown || dropped {
                    return;
                }
            }
        }
        if writer.lock().error.is_some() {
            return;
        }
    }
}

/// The output half of a connection (a `wasi:io` output-stream, or the
/// async interface's outgoing `stream<u8>`).
pub(crate) struct TcpOutput(Arc<Writer>);

impl Drop for TcpOutput {
    fn drop(&mut self) {
        self.0.lock().dropped = true;
        self.0.work.wake();
    }
}

#[async_trait::async_trait]
impl OutputStream for TcpOutput {
    fn write(&mut self, bytes: Bytes) -> StreamResult<()> {
        let w = &self.0;
        let st = w.lock();
        let permit = w.permit(&st)?;
        if bytes.len() > permit {
            return Err(StreamError::trap(
                "write exceeds the permit from check-write",
            ));
        }
        w.write_with(st, &bytes, |n| bytes.slice(n..))
            .map_err(|e| StreamError::LastOperationFailed(e.into()))
    }

    fn flush(&mut self) -> StreamResult<()> {
        let w = &self.0;
        let mut st = w.lock();
        w.permit(&st)?;
        if st.queued > 0 {
            st.flushing = true;
        }
        Ok(())
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        let w = &self.0;
        let st = w.lock();
        w.permit(&st)
    }
}

#[async_trait::async_trait]
impl Pollable for TcpOutput {
    async fn ready(&mut self) {
        self.room().await;
    }
}

/// The output half seen from the async interface (`stream<u8>`, see
/// `crate::p3::tcp`): the same writer, buffer bound and linger.
impl TcpOutput {
    /// Resolves once a write can take at least one byte, or the half
    /// failed or was shut down.
    pub(crate) fn room(&self) -> impl Future<Output = ()> + Send + 'static + use<> {
        let w = self.0.clone();
        async move {
            w.progress
                .wait_until(|| !matches!(w.permit(&w.lock()), Ok(0)))
                .await;
        }
    }

    /// Whether a write takes at least one byte now, or fails.
    pub(crate) fn has_room(&self) -> bool {
        !matches!(self.0.permit(&self.0.lock()), Ok(0))
    }

    /// Takes up to the permit (at most `tcp_write_buffer_bytes` minus what
    /// is queued) from `data`; returns how many bytes it took (0 when the
    /// buffer is full). Errors: the connection failed, or the half was
    /// shut down (`closed`).
    pub(crate) fn write_some(&self, data: &[u8]) -> Result<usize, ErrorCode> {
        let w = &self.0;
        let st = w.lock();
        let permit = match w.permit(&st) {
            Ok(n) => n,
            Err(StreamError::Closed) => return Err(ErrorCode::Closed),
            Err(_) => return Err(write_error(&st)),
        };
        let take = permit.min(data.len());
        if take == 0 {
            return Ok(0);
        }
        let data = &data[..take];
        w.write_with(st, data, |n| Bytes::copy_from_slice(&data[n..]))
            .map_err(|e| net::io_error(&e))?;
        Ok(take)
    }

    /// Half-closes once every byte written before was sent.
    pub(crate) fn shutdown(&self) {
        // An error already ended the half: nothing to half-close.
        let _ = self.0.request_shutdown();
    }

    /// Resolves once the half is over: `ok` once every byte was sent and
    /// the FIN went out, the error that ended it otherwise.
    pub(crate) fn finished(&self) -> impl Future<Output = Result<(), ErrorCode>> + Send + use<> {
        let w = self.0.clone();
        async move {
            w.progress
                .wait_until(|| {
                    let st = w.lock();
                    st.finished || st.error.is_some()
                })
                .await;
            let st = w.lock();
            if st.error.is_some() {
                Err(write_error(&st))
            } else {
                Ok(())
            }
        }
    }
}

fn write_error(st: &WriteState) -> ErrorCode {
    ErrorCode::Other(st.error.clone().unwrap_or_else(|| "write failed".into()))
}

/// The input half of a connection (a `wasi:io` input-stream, or the
/// async interface's incoming `stream<u8>`).
pub(crate) struct TcpInput {
    stream: Arc<TcpStream>,
    /// `tether_received_bytes_total{interface="tcp"}`.
    received_bytes: prometheus_client::metrics::counter::Counter,
    _open: Arc<Open>,
    chunk: usize,
    closed: bool,
}

#[async_trait::async_trait]
impl InputStream for TcpInput {
    fn read(&mut self, size: usize) -> StreamResult<Bytes> {
        if self.closed {
            return Err(StreamError::Closed);
        }
        let want = size.min(self.chunk);
        if want == 0 {
            return Ok(Bytes::new());
        }
        // Uninitialised capacity: no memset of bytes the kernel overwrites.
        let mut buf = bytes::BytesMut::with_capacity(want);
        match self
            .stream
            .try_read_buf(&mut bytes::BufMut::limit(&mut buf, want))
        {
            Ok(0) => {
                self.closed = true;
                Err(StreamError::Closed)
            }
            Ok(n) => {
                self.received_bytes.inc_by(n as u64);
                Ok(buf.freeze())
            }
            Err(e)
                if e.kind() == io::ErrorKind::WouldBlock
                    || e.kind() == io::ErrorKind::Interrupted =>
            {
                Ok(Bytes::new())
            }
            Err(e) => {
                self.closed = true;
                Err(StreamError::LastOperationFailed(e.into()))
            }
        }
    }
}

#[async_trait::async_trait]
impl Pollable for TcpInput {
    /// Ready once `read` returns at least one byte, EOF or an error: never
    /// for an empty read. tokio's readiness is cleared only by a
    /// `WouldBlock`, so after a read that drained the socket it still says
    /// "readable"; a one-byte `MSG_PEEK` checks, and its `WouldBlock` clears
    /// the stale readiness before waiting again.
    ///
    /// It waits with tokio's `readable()`, whose waiters are a list of
    /// their own, not in the socket's single read slot: that slot holds the
    /// waker of the stream's readiness-set registrations
    /// ([`crate::readiness`]'s `read_source`), and a pollable waiting there
    /// took it over, so a guest waiting on both slept through its bytes in
    /// the set (the review of 2026-12-05).
    async fn ready(&mut self) {
        if self.closed {
            return;
        }
        loop {
            // An error: the read reports it.
            if self.stream.readable().await.is_err() || self.peek_ready() {
                return;
            }
        }
    }
}

impl TcpInput {
    /// Ready once a read returns at least one byte, EOF or an error. For
    /// the p3 host, whose guests have no readiness sets: it waits in the
    /// socket's single read slot.
    pub(crate) fn poll_ready(&self, cx: &mut std::task::Context<'_>) -> std::task::Poll<()> {
        use std::task::Poll;
        if self.closed {
            return Poll::Ready(());
        }
        loop {
            match self.stream.poll_read_ready(cx) {
                Poll::Pending => return Poll::Pending,
                Poll::Ready(Err(_)) => return Poll::Ready(()), // the read reports it
                Poll::Ready(Ok(())) => {}
            }
            if self.peek_ready() {
                return Poll::Ready(());
            }
        }
    }

    /// Once tokio says readable: whether a read would return at least one
    /// byte, EOF or an error (a one-byte `MSG_PEEK`); `false` when it would
    /// block, which clears tokio's stale readiness for the next wait.
    fn peek_ready(&self) -> bool {
        let mut probe = [std::mem::MaybeUninit::<u8>::uninit(); 1];
        let sock = socket2::SockRef::from(&*self.stream);
        match self
            .stream
            .try_io(tokio::io::Interest::READABLE, || sock.peek(&mut probe))
        {
            // One byte or more (n > 0), or EOF (n == 0).
            Ok(_) => true,
            Err(e) => !matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::Interrupted
            ),
        }
    }

    /// Reads at most `tcp_read_chunk_bytes` into `buf` straight from the
    /// socket: `Ok(0)` is EOF. Pending (the waker registered) while the
    /// socket has nothing.
    pub(crate) fn poll_read(
        &mut self,
        cx: &mut std::task::Context<'_>,
        buf: &mut [u8],
    ) -> std::task::Poll<io::Result<usize>> {
        use std::task::Poll;
        if self.closed {
            return Poll::Ready(Ok(0));
        }
        let want = buf.len().min(self.chunk);
        loop {
            if let Err(e) = std::task::ready!(self.stream.poll_read_ready(cx)) {
                self.closed = true;
                return Poll::Ready(Err(e));
            }
            match self.stream.try_read(&mut buf[..want]) {
                Ok(n) => {
                    self.closed = n == 0;
                    self.received_bytes.inc_by(n as u64);
                    return Poll::Ready(Ok(n));
                }
                Err(e)
                    if e.kind() == io::ErrorKind::WouldBlock
                        || e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    self.closed = true;
                    return Poll::Ready(Err(e));
                }
            }
        }
    }
}

/// An open TCP connection (the `byte-stream` resource).
pub struct ByteStream {
    writer: Arc<Writer>,
    peer: SocketAddr,
    local: SocketAddr,
    /// Readiness-set registrations on the input stream (`read`).
    read_watchers: crate::readiness::Watchers,
}

impl Drop for ByteStream {
    fn drop(&mut self) {
        self.read_watchers.detach_all();
        self.writer.progress.watchers().detach_all();
    }
}

/// A connection handed to a guest: the `byte-stream` and its two `wasi:io`
/// streams.
pub type Connection = (ByteStream, DynInputStream, DynOutputStream);

/// Wraps a connected socket (TCP_NODELAY already set) and starts its writer
/// task on the current runtime, in a `connection` span (child of the
/// current one) with the `peer` address. `direction`: accepted or dialled
/// (metrics).
pub fn open(
    stream: TcpStream,
    ctx: &HostCtx,
    direction: Direction,
) -> Result<Connection, ErrorCode> {
    let (stream, input, output) = open_halves(stream, ctx, direction, None)?;
    Ok((stream, Box::new(input), Box::new(output)))
}

/// What a connection holds while its socket is open (either half lives):
/// its place in `tether_connections_open`, and an accepted one's place in
/// its source's count (`max_connections_per_source`).
struct Open {
    _metric: OpenConnection,
    _place: Option<SourcePlace>,
}

/// [`open`], with the two halves unboxed (for either ABI). `place`: an
/// accepted connection's place in its source's count, kept until the
/// socket closes.
pub(crate) fn open_halves(
    stream: TcpStream,
    ctx: &HostCtx,
    direction: Direction,
    place: Option<SourcePlace>,
) -> Result<(ByteStream, TcpInput, TcpOutput), ErrorCode> {
    let peer = stream.peer_addr().map_err(|e| net::io_error(&e))?;
    let local = stream.local_addr().map_err(|e| net::io_error(&e))?;
    let stream = Arc::new(stream);
    let limits = &ctx.config.limits;
    let open = Arc::new(Open {
        _metric: ctx.metrics.connection(Interface::Tcp, direction),
        _place: place,
    });
    let writer = Arc::new(Writer {
        stream: stream.clone(),
        stats: ctx.stats.clone(),
        sent_bytes: ctx.metrics.tcp.sent_bytes.clone(),
        _open: open.clone(),
        _sending: ctx.metrics.sending(),
        state: Mutex::new(WriteState::default()),
        limit: limits.tcp_write_buffer_bytes.max(1),
        linger: limits.linger_timeout,
        work: Signal::default(),
        progress: Signal::default(),
    });
    ctx.lifecycle.register(Arc::downgrade(&writer) as _);
    let span =
        tracing::info_span!("connection", interface = "tcp", %peer, direction = direction.as_str());
    tokio::spawn(tracing::Instrument::instrument(drain(writer.clone()), span));
    let input = TcpInput {
        stream,
        received_bytes: ctx.metrics.tcp.received_bytes.clone(),
        _open: open,
        chunk: limits.tcp_read_chunk_bytes.max(1),
        closed: false,
    };
    let output = TcpOutput(writer.clone());
    Ok((
        ByteStream {
            writer,
            peer,
            local,
            read_watchers: Default::default(),
        },
        input,
        output,
    ))
}

impl ByteStream {
    /// The guest's hold on this stream's connection, to reset it if the
    /// guest fails.
    pub(crate) fn handle(&self) -> ByteStreamHandle {
        ByteStreamHandle(Arc::downgrade(&self.writer))
    }

    /// Where a readiness set watches `read` (the input stream has bytes or
    /// its end) or `write` (`check-write` grants more than 0, or fails).
    pub(crate) fn readiness(
        &self,
        interest: crate::readiness::Interest,
    ) -> Option<crate::readiness::Source<'_>> {
        use crate::readiness::{Interest, read_source, signal_source};
        let w = &self.writer;
        match interest {
            Interest::Read => Some(read_source(&self.read_watchers, &w.stream)),
            Interest::Write => Some(signal_source(&w.progress, w, |w| {
                !matches!(w.permit(&w.lock()), Ok(0))
            })),
            _ => None,
        }
    }

    /// Half-closes once every written byte is sent.
    pub fn shutdown_send(&self) -> Result<(), ErrorCode> {
        self.writer.request_shutdown()
    }

    /// The peer's address.
    pub fn peer_addr(&self) -> SocketAddr {
        self.peer
    }

    /// The local address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }
}

/// The `future-byte-stream` resource.
pub type FutureByteStream = Pending<Connection>;

/// A TCP server socket (the `byte-listener` resource).
pub struct ByteListener {
    ctx: Arc<HostCtx>,
    queue: Arc<AcceptQueue<(TcpStream, Option<SourcePlace>)>>,
    local: SocketAddr,
}

impl Drop for ByteListener {
    /// Stops accepting, closes the connections nobody accepted and makes
    /// the listener's pollables ready (they may outlive it).
    fn drop(&mut self) {
        self.queue.close();
    }
}

/// Accepts connections into `queue` while it has room; a connection from
/// a source that holds `max_connections_per_source` already is closed at
/// once (counted in `tether_accept_refusals_total`).
async fn accept_loop(
    ctx: Arc<HostCtx>,
    listener: tokio::net::TcpListener,
    queue: Arc<AcceptQueue<(TcpStream, Option<SourcePlace>)>>,
) {
    let mut errors = net::AcceptErrors::new("TCP listener");
    loop {
        queue.room().await;
        match net::accept(&listener).await {
            Ok((tcp, peer)) => {
                errors.accepted();
                let place = match ctx.connections.take(peer) {
                    Ok(place) => place,
                    Err(refused) => {
                        ctx.metrics.connection_refused(Interface::Tcp, &refused);
                        tracing::debug!(%peer, "refused: {refused}");
                        continue;
                    }
                };
                queue.push((tcp, Some(place)));
            }
            Err(e) => errors.failed(&e).await,
        }
    }
}

impl ByteListener {
    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.local
    }

    /// Takes the next accepted connection and opens its halves, if one is
    /// waiting (the async interface's non-blocking `accept`). A connection
    /// the peer already dropped is skipped. Errors: `closed` once the host
    /// shut down (or the listener was dropped) and every connection
    /// accepted before was taken.
    pub(crate) fn try_accept(
        &self,
    ) -> Result<Option<(ByteStream, TcpInput, TcpOutput)>, ErrorCode> {
        loop {
            let Some((tcp, place)) = self.queue.take()? else {
                return Ok(None);
            };
            match open_halves(tcp, &self.ctx, Direction::Inbound, place) {
                Ok(conn) => return Ok(Some(conn)),
                Err(e) => tracing::debug!("accepted connection already gone: {e:?}"),
            }
        }
    }

    /// Resolves once [`ByteListener::try_accept`] would return something
    /// other than `Ok(None)` (the async interface's `accept-ready`). Takes
    /// nothing, so dropping it loses no connection.
    pub(crate) fn accept_ready(&self) -> impl Future<Output = ()> + Send + use<> {
        self.queue.ready()
    }

    /// Where a readiness set watches `accept`.
    pub(crate) fn readiness(
        &self,
        interest: crate::readiness::Interest,
    ) -> Option<crate::readiness::Source<'_>> {
        (interest == crate::readiness::Interest::Accept).then(|| self.queue.readiness())
    }

    /// Binds and starts accepting. Errors: see the WIT `listen`.
    pub fn bind(ctx: Arc<HostCtx>, address: &str) -> Result<ByteListener, ErrorCode> {
        let listener = net::bind(&ctx, address)?;
        let local = listener.local_addr().map_err(|e| net::io_error(&e))?;
        let queue = AcceptQueue::new(ctx.config.limits.accept_backlog);
        let span = tracing::info_span!("listener", interface = "tcp", %local);
        queue.set_task(
            tokio::spawn(tracing::Instrument::instrument(
                accept_loop(ctx.clone(), listener, queue.clone()),
                span,
            ))
            .abort_handle(),
        );
        ctx.lifecycle.register(Arc::downgrade(&queue) as _);
        Ok(ByteListener { ctx, queue, local })
    }
}

type WitConnection = (
    Resource<ByteStream>,
    Resource<DynInputStream>,
    Resource<DynOutputStream>,
);

/// Hands a connection to the guest (its three resources), tracked so
/// that a failed guest's connections are reset.
fn push_connection(
    view: &mut TetherCtxView<'_>,
    (stream, input, output): Connection,
) -> wasmtime::Result<WitConnection> {
    view.ctx.track_byte_stream(stream.handle());
    let table = &mut *view.table;
    Ok((table.push(stream)?, table.push(input)?, table.push(output)?))
}

impl wit::Host for TetherCtxView<'_> {
    fn connect(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<FutureByteStream>, ErrorCode>> {
        let (host, port) = match net::parse_destination(&address) {
            Ok(hp) => hp,
            Err(e) => return Ok(Err(e)),
        };
        let check = match net::precheck(&self.ctx.host, &host, port) {
            Ok(c) => c,
            Err(e) => return Ok(Err(e)),
        };
        let ctx = self.ctx.host.clone();
        let lookups = self.ctx.lookups.clone();
        let pending = Pending::spawn(async move {
            let tcp = net::dial(&ctx, &lookups, &host, port, check).await?;
            open(tcp, &ctx, Direction::Outbound)
        });
        Ok(Ok(self.table.push(pending)?))
    }

    fn listen(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<ByteListener>, ErrorCode>> {
        match ByteListener::bind(self.ctx.host.clone(), &address) {
            Ok(l) => Ok(Ok(self.table.push(l)?)),
            Err(e) => Ok(Err(e)),
        }
    }
}

impl wit::HostByteStream for TetherCtxView<'_> {
    fn shutdown_send(
        &mut self,
        this: Resource<ByteStream>,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        Ok(self.table.get(&this)?.shutdown_send())
    }

    fn peer_address(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.peer.to_string())
    }

    fn local_address(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.local.to_string())
    }

    fn drop(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl wit::HostFutureByteStream for TetherCtxView<'_> {
    fn subscribe(
        &mut self,
        this: Resource<FutureByteStream>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.table.get(&this)?.pollable();
        pollable(self.table, ready)
    }

    fn get(
        &mut self,
        this: Resource<FutureByteStream>,
    ) -> wasmtime::Result<Option<Result<WitConnection, ErrorCode>>> {
        match self.table.get_mut(&this)?.take() {
            None => Ok(None),
            Some(Ok(conn)) => Ok(Some(Ok(push_connection(self, conn)?))),
            Some(Err(e)) => Ok(Some(Err(e))),
        }
    }

    fn drop(&mut self, this: Resource<FutureByteStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl wit::HostByteListener for TetherCtxView<'_> {
    fn local_address(&mut self, this: Resource<ByteListener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.local.to_string())
    }

    fn accept(
        &mut self,
        this: Resource<ByteListener>,
    ) -> wasmtime::Result<Result<Option<WitConnection>, ErrorCode>> {
        let listener = self.table.get(&this)?;
        let ctx = listener.ctx.clone();
        loop {
            let (tcp, place) = match self.table.get(&this)?.queue.take() {
                Ok(Some(accepted)) => accepted,
                Ok(None) => return Ok(Ok(None)),
                Err(e) => return Ok(Err(e)),
            };
            match open_halves(tcp, &ctx, Direction::Inbound, place) {
                Ok((stream, input, output)) => {
                    let conn: Connection = (stream, Box::new(input), Box::new(output));
                    return Ok(Ok(Some(push_connection(self, conn)?)));
                }
                // The client reset the connection while it waited in the
                // backlog (no peer address any more): it is gone, nothing
                // for the guest to handle; try the next one.
                Err(e) => tracing::debug!("accepted connection already gone: {e:?}"),
            }
        }
    }

    fn subscribe(
        &mut self,
        this: Resource<ByteListener>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let ready = self.table.get(&this)?.queue.pollable();
        pollable(self.table, ready)
    }

    fn drop(&mut self, this: Resource<ByteListener>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
