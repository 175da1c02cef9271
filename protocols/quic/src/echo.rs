//! [`EchoServer`]: echoes every bidirectional stream (finishing it when the
//! peer finishes) and every datagram, on one [`Link`].
//!
//! Buffers are bounded: a stream holds at most [`ECHO_BUFFER`] bytes read
//! but not yet written back; past that the server stops reading it, so the
//! peer's stream window closes (QUIC flow control is the backpressure).
//! Datagrams wait one at a time; while one is blocked, no more are taken
//! (quinn-proto's own bounded receive buffer holds the rest).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bytes::{Buf, Bytes};
use quinn_proto::{Dir, Event, ReadError, SendDatagramError, StreamId, VarInt, WriteError};

use crate::{App, Link};

/// Bytes a stream may hold between reading and echoing, per stream.
pub const ECHO_BUFFER: usize = 1 << 20;

/// Bytes all streams of a connection may hold together between reading
/// and echoing, by default ([`EchoServer::with_budget`] sets another).
/// Past it the server reads no stream of the connection until the echo
/// drains, so the peer's connection window closes. Before, only
/// [`ECHO_BUFFER`] per stream bounded it: 100 MiB for a peer that opened
/// 100 streams and never read (the red team of 2026-12-04i, F1).
pub const ECHO_CONNECTION_BUDGET: usize = 2 << 20;

/// Chunks read under this size are copied out of the datagram they
/// arrived in, bytes: a chunk is a slice of that datagram (up to 16 KiB)
/// and would keep all of it alive, so many tiny chunks would hold far more
/// than their count. A larger chunk holds at most 4 times its size.
const COPY_BELOW: usize = 4096;

/// What one connection may make the echo server hold, bytes: its
/// connection-wide receive window (`MAX_DATA`), its send window
/// (unacknowledged echo) and its echo budget (read, not yet written back).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Windows {
    /// Connection-wide receive window ([`crate::Options::receive_window`]).
    pub receive: u64,
    /// Send window ([`crate::Options::send_window`]).
    pub send: u64,
    /// Echo budget ([`EchoServer::with_budget`]).
    pub echo: usize,
}

impl Windows {
    /// What a connection gets while the server's [`SharedBudget`] has no
    /// room for a full share: 16 KiB each way and 8 KiB of echo, so 1,024
    /// connections hold at most 40 MiB this way. Slow, never refused.
    pub const FLOOR: Windows = Windows {
        receive: 16 << 10,
        send: 16 << 10,
        echo: 8 << 10,
    };

    /// The windows of `options` and the default echo budget
    /// ([`ECHO_CONNECTION_BUDGET`]).
    pub fn of(options: &crate::Options) -> Windows {
        Windows {
            receive: options.receive_window,
            send: options.send_window,
            echo: ECHO_CONNECTION_BUDGET,
        }
    }

    /// The bytes these windows let a connection make the server hold.
    pub fn bytes(&self) -> u64 {
        self.receive + self.send + self.echo as u64
    }
}

/// Memory the connections of one echo server share, bytes: a connection
/// takes a full share of [`Windows`] from it once its handshake completes
/// and gives it back when it ends; while the budget has no room, a
/// connection keeps [`Windows::FLOOR`]. So what a server of many
/// connections holds is at most the budget plus the floor per connection,
/// however many connections a peer opens and fills (the red team of
/// 2026-12-04i, F1: without it, connections x windows passed the guest's
/// memory limit, and the guest was stopped with every connection in it).
/// Cloning shares the same budget.
#[derive(Clone, Debug)]
pub struct SharedBudget(Arc<AtomicU64>);

impl SharedBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: u64) -> SharedBudget {
        SharedBudget(Arc::new(AtomicU64::new(bytes)))
    }

    /// Bytes not taken.
    pub fn free(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }

    /// Takes `n` bytes if they are free.
    fn take(&self, n: u64) -> bool {
        self.0
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |free| {
                free.checked_sub(n)
            })
            .is_ok()
    }

    fn give_back(&self, n: u64) {
        self.0.fetch_add(n, Ordering::Relaxed);
    }
}

/// A server's share of its [`SharedBudget`]: the full windows it asks
/// for, and whether it holds them.
struct Share {
    budget: SharedBudget,
    full: Windows,
    held: bool,
}

/// What the server echoed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct EchoStats {
    /// Bidirectional streams accepted.
    pub streams: u64,
    /// Stream bytes echoed.
    pub bytes: u64,
    /// Datagrams echoed.
    pub datagrams: u64,
    /// Streams the peer reset or stopped (the echo is abandoned, the
    /// connection goes on).
    pub aborted_streams: u64,
}

struct EchoStream {
    id: StreamId,
    pending: VecDeque<Bytes>,
    buffered: usize,
    fin: bool,
    done: bool,
}

/// The echo application; see the module docs.
pub struct EchoServer {
    streams: Vec<EchoStream>,
    datagram: Option<Bytes>,
    stats: EchoStats,
    done: bool,
    /// Bytes all streams may hold between reading and echoing.
    budget: usize,
    /// Bytes they hold (the sum of each stream's `buffered`).
    held: usize,
    /// The connection's share of a server-wide budget, if any.
    share: Option<Share>,
}

impl Drop for EchoServer {
    fn drop(&mut self) {
        if let Some(share) = &self.share
            && share.held
        {
            share.budget.give_back(share.full.bytes());
        }
    }
}

impl Default for EchoServer {
    fn default() -> Self {
        EchoServer::with_budget(ECHO_CONNECTION_BUDGET)
    }
}

impl EchoServer {
    /// An echo server for one connection, holding at most
    /// [`ECHO_CONNECTION_BUDGET`] bytes between reading and echoing.
    pub fn new() -> EchoServer {
        EchoServer::default()
    }

    /// An echo server for one connection whose streams hold at most
    /// `budget` bytes together between reading and echoing (each at most
    /// [`ECHO_BUFFER`]). A server of many connections gives each a share
    /// of its memory. `budget` of 0 is taken as 1.
    pub fn with_budget(budget: usize) -> EchoServer {
        EchoServer {
            streams: Vec::new(),
            datagram: None,
            stats: EchoStats::default(),
            done: false,
            budget: budget.max(1),
            held: 0,
            share: None,
        }
    }

    /// An echo server for one connection of many, which share `budget`:
    /// it starts with [`Windows::FLOOR`] (the link's options must grant no
    /// more: `receive_window` and `send_window` at most the floor's) and
    /// takes the `full` windows from `budget` once the handshake has
    /// completed, as soon as they are free (asked at each pump until then),
    /// raising the connection's windows (a `MAX_DATA` goes out at once).
    /// Dropping the server gives them back.
    pub fn sharing(budget: SharedBudget, full: Windows) -> EchoServer {
        let mut e = EchoServer::with_budget(Windows::FLOOR.echo);
        e.share = Some(Share {
            budget,
            full,
            held: false,
        });
        e
    }

    /// Whether this server holds a full share of its [`SharedBudget`].
    pub fn holds_full_share(&self) -> bool {
        self.share.as_ref().is_some_and(|s| s.held)
    }

    /// What was echoed so far.
    pub fn stats(&self) -> EchoStats {
        self.stats
    }

    /// Echoes what `s` holds, then reads more while it and the connection
    /// (`held` of `budget`) have room.
    fn pump_stream(
        s: &mut EchoStream,
        conn: &mut quinn_proto::Connection,
        stats: &mut EchoStats,
        held: &mut usize,
        budget: usize,
    ) {
        loop {
            // Write back what is buffered.
            while let Some(front) = s.pending.front_mut() {
                match conn.send_stream(s.id).write(front) {
                    Ok(n) => {
                        front.advance(n);
                        s.buffered -= n;
                        *held -= n;
                        stats.bytes += n as u64;
                        if front.is_empty() {
                            s.pending.pop_front();
                        }
                    }
                    Err(WriteError::Blocked) => break,
                    Err(WriteError::Stopped(_) | WriteError::ClosedStream) => {
                        let _ = conn.recv_stream(s.id).stop(VarInt::from_u32(0));
                        stats.aborted_streams += 1;
                        s.done = true;
                        return;
                    }
                }
            }
            if s.fin {
                if s.pending.is_empty() {
                    let _ = conn.send_stream(s.id).finish();
                    s.done = true;
                }
                return;
            }
            if s.buffered >= ECHO_BUFFER || *held >= budget {
                return;
            }
            // Read more, up to the bounds.
            let mut recv = conn.recv_stream(s.id);
            let mut chunks = match recv.read(true) {
                Ok(c) => c,
                Err(_) => {
                    s.done = true;
                    return;
                }
            };
            let mut got = false;
            loop {
                let room = (ECHO_BUFFER - s.buffered).min(budget.saturating_sub(*held));
                match chunks.next(room) {
                    Ok(Some(chunk)) => {
                        got = true;
                        let n = chunk.bytes.len();
                        s.buffered += n;
                        *held += n;
                        s.pending.push_back(if n < COPY_BELOW {
                            Bytes::copy_from_slice(&chunk.bytes)
                        } else {
                            chunk.bytes
                        });
                        if s.buffered >= ECHO_BUFFER || *held >= budget {
                            break;
                        }
                    }
                    Ok(None) => {
                        s.fin = true;
                        got = true;
                        break;
                    }
                    Err(ReadError::Blocked) => break,
                    Err(ReadError::Reset(code)) => {
                        let _ = chunks.finalize();
                        let _ = conn.send_stream(s.id).reset(code);
                        stats.aborted_streams += 1;
                        s.done = true;
                        return;
                    }
                }
            }
            let _ = chunks.finalize();
            if !got {
                return;
            }
        }
    }
}

impl App for EchoServer {
    fn pump(&mut self, link: &mut Link, now: Instant) {
        while let Some(event) = link.poll_event(now) {
            if let Event::ConnectionLost { .. } = event {
                self.done = true;
            }
        }
        if link.is_closed() {
            self.done = true;
        }
        let connected = link.is_connected();
        let Some(conn) = link.connection() else {
            return;
        };
        // Asked for at each pump until granted: a connection that came
        // while the budget was spent gets its share once one is given back.
        if let Some(share) = &mut self.share
            && connected
            && !share.held
            && share.budget.take(share.full.bytes())
        {
            share.held = true;
            conn.set_receive_window(VarInt::from_u64(share.full.receive).unwrap_or(VarInt::MAX));
            conn.set_send_window(share.full.send);
            self.budget = share.full.echo.max(self.budget);
        }
        while let Some(id) = conn.streams().accept(Dir::Bi) {
            self.stats.streams += 1;
            self.streams.push(EchoStream {
                id,
                pending: VecDeque::new(),
                buffered: 0,
                fin: false,
                done: false,
            });
        }
        // Unidirectional streams have nowhere to echo to: refuse them.
        while let Some(id) = conn.streams().accept(Dir::Uni) {
            let _ = conn.recv_stream(id).stop(VarInt::from_u32(0));
        }
        let (stats, held, budget) = (&mut self.stats, &mut self.held, self.budget);
        for s in &mut self.streams {
            EchoServer::pump_stream(s, conn, stats, held, budget);
        }
        // An abandoned stream's bytes are dropped with it.
        self.streams.retain(|s| {
            if s.done {
                *held -= s.buffered;
            }
            !s.done
        });
        loop {
            if let Some(d) = self.datagram.take() {
                match conn.datagrams().send(d, false) {
                    Ok(()) => self.stats.datagrams += 1,
                    Err(SendDatagramError::Blocked(d)) => {
                        self.datagram = Some(d);
                        break;
                    }
                    // Too large for the peer, or datagrams disabled: an
                    // unreliable datagram that cannot go back is dropped.
                    Err(_) => {}
                }
            }
            match conn.datagrams().recv() {
                Some(d) => self.datagram = Some(d),
                None => break,
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        None
    }

    fn is_done(&self) -> bool {
        self.done
    }
}
