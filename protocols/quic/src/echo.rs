//! [`EchoServer`]: echoes every bidirectional stream (finishing it when the
//! peer finishes) and every datagram, on one [`Link`].
//!
//! Buffers are bounded: a stream holds at most [`ECHO_BUFFER`] bytes read
//! but not yet written back; past that the server stops reading it, so the
//! peer's stream window closes (QUIC flow control is the backpressure).
//! Datagrams wait one at a time; while one is blocked, no more are taken
//! (quinn-proto's own bounded receive buffer holds the rest).

use std::collections::VecDeque;
use std::time::Instant;

use bytes::{Buf, Bytes};
use quinn_proto::{Dir, Event, ReadError, SendDatagramError, StreamId, VarInt, WriteError};

use crate::{App, Link};

/// Bytes a stream may hold between reading and echoing, per stream.
pub const ECHO_BUFFER: usize = 1 << 20;

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
#[derive(Default)]
pub struct EchoServer {
    streams: Vec<EchoStream>,
    datagram: Option<Bytes>,
    stats: EchoStats,
    done: bool,
}

impl EchoServer {
    /// An echo server for one connection.
    pub fn new() -> EchoServer {
        EchoServer::default()
    }

    /// What was echoed so far.
    pub fn stats(&self) -> EchoStats {
        self.stats
    }

    fn pump_stream(s: &mut EchoStream, conn: &mut quinn_proto::Connection, stats: &mut EchoStats) {
        loop {
            // Write back what is buffered.
            while let Some(front) = s.pending.front_mut() {
                match conn.send_stream(s.id).write(front) {
                    Ok(n) => {
                        front.advance(n);
                        s.buffered -= n;
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
            if s.buffered >= ECHO_BUFFER {
                return;
            }
            // Read more, up to the bound.
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
                match chunks.next(ECHO_BUFFER - s.buffered) {
                    Ok(Some(chunk)) => {
                        got = true;
                        s.buffered += chunk.bytes.len();
                        s.pending.push_back(chunk.bytes);
                        if s.buffered >= ECHO_BUFFER {
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
        let Some(conn) = link.connection() else {
            return;
        };
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
        let stats = &mut self.stats;
        for s in &mut self.streams {
            EchoServer::pump_stream(s, conn, stats);
        }
        self.streams.retain(|s| !s.done);
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
