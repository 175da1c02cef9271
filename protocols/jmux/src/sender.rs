//! The coalescing write policy for the JMUX output byte stream, as a pure
//! state machine with time passed in.
//!
//! Source: JMUX spec, "Known weak points of the reference (do better)"
//! (third bullet) and latency lesson 1 ("A flush timer that restarts on
//! every message is an idle timer"). The rules:
//!
//! 1. Write everything queued: encoded messages are appended to one bounded
//!    output buffer ([`Sender::push`], [`Sender::push_data`]).
//! 2. Flush when the producer's queue is empty (a *drain point*, signalled by
//!    [`Sender::poll_flush`]), with at most one drain-triggered flush per
//!    [`SenderConfig::drain_spacing`] (50 us). A drain flush held back by the
//!    spacing becomes due exactly when the spacing has passed, not at the
//!    backstop.
//! 3. A backstop deadline ([`SenderConfig::backstop`], 1 ms) counted from the
//!    first unflushed byte; later messages never push it back.
//! 4. The buffer is bounded ([`SenderConfig::capacity`]); when it is full a
//!    push is refused ([`PushError::Full`]) and the caller keeps the message:
//!    backpressure, never a drop (latency lesson 4). A refused push, or
//!    [`SenderConfig::flush_threshold`] bytes buffered, makes a flush due at
//!    once.
//!
//! "Flush" means: hand the buffered bytes to the transport (for JMUX over
//! WebSocket, one binary WebSocket message; never an empty one). The driver
//! takes them from [`Sender::pending`] and reports what it wrote with
//! [`Sender::advance`], so partial writes are fine and no buffer is
//! allocated per flush (latency lesson 5).

use std::time::{Duration, Instant};

use crate::codec::{self, DATA_OVERHEAD, EncodeError, MAX_DATA_PAYLOAD, Message};

/// Limits and timings of the coalescing sender. All sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SenderConfig {
    /// Bound of the output buffer in bytes (default 65536 = 64 KiB). A push
    /// that does not fit is refused; one message larger than the capacity is
    /// accepted only into an empty buffer, so buffered bytes never exceed
    /// `max(capacity, 65535)`.
    pub capacity: usize,
    /// Buffered bytes at which a flush is due at once, whatever the spacing
    /// (default 16384 = 16 KiB, the write buffer of the reference sender
    /// that kept bulk throughput). Clamped to `1..=capacity`.
    pub flush_threshold: usize,
    /// Minimum spacing between two drain-triggered flushes (default 50 us).
    pub drain_spacing: Duration,
    /// Longest time a byte may wait in the buffer before a flush is due,
    /// counted from the first unflushed byte (default 1 ms).
    pub backstop: Duration,
}

impl Default for SenderConfig {
    fn default() -> Self {
        Self {
            capacity: 64 * 1024,
            flush_threshold: 16 * 1024,
            drain_spacing: Duration::from_micros(50),
            backstop: Duration::from_millis(1),
        }
    }
}

/// A message could not be appended to the output buffer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PushError {
    /// Backpressure: the message needs `needed` bytes and only `room` are
    /// free. Nothing was written and nothing was dropped; flush, write out
    /// [`Sender::pending`], then retry.
    #[error("output buffer full: {needed} bytes needed, {room} free")]
    Full {
        /// Encoded size of the refused message, in bytes.
        needed: usize,
        /// Free bytes in the buffer.
        room: usize,
    },
    /// The message cannot be encoded at all (larger than 65535 bytes).
    #[error(transparent)]
    Encode(#[from] EncodeError),
}

/// Why a flush became due; returned by [`Sender::last_flush_reason`] for
/// diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushReason {
    /// The producer's queue drained and the spacing allowed it.
    Drain,
    /// A drain flush held back by the spacing, released when the spacing
    /// passed.
    DelayedDrain,
    /// The backstop deadline from the first unflushed byte passed.
    Backstop,
    /// The buffer reached the flush threshold, or a push was refused.
    Full,
}

/// Bounded, coalescing output buffer (see the module docs for the rules).
///
/// Bytes move through three stages: *unflushed* (pushed, no flush decided
/// yet), *pending* (a flush was decided; the driver should write them now)
/// and written (removed by [`Sender::advance`]).
#[derive(Debug)]
pub struct Sender {
    config: SenderConfig,
    buf: Vec<u8>,
    /// Offset of the first byte not yet written out.
    head: usize,
    /// End offset of the bytes a flush has been decided for.
    committed: usize,
    /// When the first unflushed byte (after `committed`) was pushed.
    first_unflushed: Option<Instant>,
    /// When the last drain-triggered flush happened.
    last_drain_flush: Option<Instant>,
    /// A drain flush held back by spacing is due at this time.
    drain_due: Option<Instant>,
    /// A push was refused since the last flush decision.
    refused: bool,
    last_reason: Option<FlushReason>,
    flushes: u64,
}

impl Default for Sender {
    fn default() -> Self {
        Self::new(SenderConfig::default())
    }
}

impl Sender {
    /// A sender with the given limits (`flush_threshold` is clamped to
    /// `1..=capacity`, `capacity` to at least 1).
    pub fn new(mut config: SenderConfig) -> Self {
        config.capacity = config.capacity.max(1);
        config.flush_threshold = config.flush_threshold.clamp(1, config.capacity);
        Self {
            buf: Vec::with_capacity(config.capacity.min(64 * 1024)),
            config,
            head: 0,
            committed: 0,
            first_unflushed: None,
            last_drain_flush: None,
            drain_due: None,
            refused: false,
            last_reason: None,
            flushes: 0,
        }
    }

    /// The effective configuration.
    pub fn config(&self) -> &SenderConfig {
        &self.config
    }

    /// Bytes held (unflushed plus pending), at most `max(capacity, 65535)`.
    pub fn buffered(&self) -> usize {
        self.buf.len() - self.head
    }

    /// Free bytes: `capacity - buffered`, saturating at 0.
    pub fn room(&self) -> usize {
        self.config.capacity.saturating_sub(self.buffered())
    }

    /// Whether a message of `len` encoded bytes would be accepted now: it
    /// fits in [`Sender::room`], or the buffer is empty.
    pub fn has_room(&self, len: usize) -> bool {
        len <= self.room() || self.buffered() == 0
    }

    /// Whether nothing is buffered at all.
    pub fn is_empty(&self) -> bool {
        self.buffered() == 0
    }

    fn reserve(&mut self, now: Instant, len: usize) -> Result<(), PushError> {
        if !self.has_room(len) {
            self.refused = true;
            return Err(PushError::Full {
                needed: len,
                room: self.room(),
            });
        }
        if self.first_unflushed.is_none() {
            self.first_unflushed = Some(now);
        }
        Ok(())
    }

    /// Encodes `msg` at the end of the buffer at time `now`.
    ///
    /// Errors: [`PushError::Full`] (backpressure; the caller keeps `msg`,
    /// and a flush is due at once) or [`PushError::Encode`] for a message
    /// over 65535 bytes. On error nothing is written.
    pub fn push(&mut self, now: Instant, msg: &Message) -> Result<(), PushError> {
        let len = msg.encoded_len();
        if len > codec::MAX_MESSAGE_SIZE {
            return Err(PushError::Encode(EncodeError::TooLarge {
                message_type: msg.message_type(),
                size: len,
            }));
        }
        self.reserve(now, len)?;
        msg.encode(&mut self.buf)?;
        Ok(())
    }

    /// Appends one DATA message (`8 + payload.len()` bytes) for
    /// `recipient_channel_id` without building a [`Message`] (one copy of
    /// the payload, straight into the buffer).
    ///
    /// Errors: as [`Sender::push`]; a payload over 65527 bytes is
    /// [`PushError::Encode`].
    pub fn push_data(
        &mut self,
        now: Instant,
        recipient_channel_id: u32,
        payload: &[u8],
    ) -> Result<(), PushError> {
        let len = DATA_OVERHEAD + payload.len();
        if payload.len() > MAX_DATA_PAYLOAD {
            return Err(PushError::Encode(EncodeError::TooLarge {
                message_type: codec::MessageType::Data,
                size: len,
            }));
        }
        self.reserve(now, len)?;
        codec::put_data_header(&mut self.buf, recipient_channel_id, payload.len());
        self.buf.extend_from_slice(payload);
        Ok(())
    }

    /// Records that the producer has more to write than fits (as a refused
    /// push does): a flush is due at once, whatever the spacing.
    pub fn mark_full(&mut self) {
        if self.first_unflushed.is_some() {
            self.refused = true;
        }
    }

    /// Drain point: the producer has nothing more to push right now. Decides
    /// whether a flush is due at `now` and returns `true` when
    /// [`Sender::pending`] holds bytes to write now.
    ///
    /// A flush is due when bytes are unflushed and any of: the spacing since
    /// the last drain flush (50 us) has passed; a held-back drain flush has
    /// become due; the backstop (1 ms from the first unflushed byte) has
    /// passed; the flush threshold is reached or a push was refused. When
    /// only the spacing holds the flush back, it becomes due at
    /// `last drain flush + spacing`, reported by [`Sender::next_deadline`].
    pub fn poll_flush(&mut self, now: Instant) -> bool {
        self.decide(now, true)
    }

    /// Like [`Sender::poll_flush`] but for a producer that still has queued
    /// messages (not a drain point): only the backstop, a due held-back
    /// drain flush, the threshold or a refused push make a flush due. Call
    /// it in long producer loops so the 1 ms backstop holds even when
    /// messages keep coming.
    pub fn poll_flush_busy(&mut self, now: Instant) -> bool {
        self.decide(now, false)
    }

    fn decide(&mut self, now: Instant, drained: bool) -> bool {
        if let Some(first) = self.first_unflushed {
            let forced =
                if self.refused || self.buf.len() - self.head >= self.config.flush_threshold {
                    Some(FlushReason::Full)
                } else if now >= first + self.config.backstop {
                    Some(FlushReason::Backstop)
                } else {
                    None
                };
            let reason = forced.or_else(|| {
                if self.drain_due.is_some_and(|due| now >= due) {
                    Some(FlushReason::DelayedDrain)
                } else if drained && self.spacing_allows(now) {
                    Some(FlushReason::Drain)
                } else {
                    None
                }
            });
            match reason {
                Some(reason) => {
                    if matches!(reason, FlushReason::Drain | FlushReason::DelayedDrain) {
                        self.last_drain_flush = Some(now);
                    }
                    self.committed = self.buf.len();
                    self.first_unflushed = None;
                    self.drain_due = None;
                    self.refused = false;
                    self.last_reason = Some(reason);
                    self.flushes += 1;
                }
                None if drained && self.drain_due.is_none() => {
                    // Only the spacing holds this drain flush back.
                    self.drain_due = self
                        .last_drain_flush
                        .map(|last| last + self.config.drain_spacing);
                }
                None => {}
            }
        }
        self.committed > self.head
    }

    fn spacing_allows(&self, now: Instant) -> bool {
        self.last_drain_flush
            .is_none_or(|last| now >= last + self.config.drain_spacing)
    }

    /// When the driver must call [`Sender::poll_flush_busy`] (or
    /// [`Sender::poll_flush`]) again even if nothing else happens: the
    /// earlier of the backstop (first unflushed byte + 1 ms) and a held-back
    /// drain flush (last drain flush + 50 us). A time in the past when a
    /// flush is already due (threshold reached, push refused). `None` when
    /// no byte is unflushed.
    pub fn next_deadline(&self) -> Option<Instant> {
        let first = self.first_unflushed?;
        if self.refused || self.buf.len() - self.head >= self.config.flush_threshold {
            return Some(first);
        }
        let backstop = first + self.config.backstop;
        Some(match self.drain_due {
            Some(due) => due.min(backstop),
            None => backstop,
        })
    }

    /// Bytes a flush has been decided for and that the driver should write
    /// to the transport now, in order. Empty when nothing is due.
    pub fn pending(&self) -> &[u8] {
        &self.buf[self.head..self.committed]
    }

    /// Reports that the first `n` bytes of [`Sender::pending`] were written
    /// (clamped to its length). Frees their room.
    pub fn advance(&mut self, n: usize) {
        let n = n.min(self.committed - self.head);
        self.head += n;
        if self.head == self.buf.len() {
            self.buf.clear();
            self.head = 0;
            self.committed = 0;
        } else if self.head >= self.buf.capacity() / 2 {
            // Compact so the allocation is reused instead of growing.
            self.buf.drain(..self.head);
            self.committed -= self.head;
            self.head = 0;
        }
    }

    /// Why the most recent flush was decided, if any.
    pub fn last_flush_reason(&self) -> Option<FlushReason> {
        self.last_reason
    }

    /// Number of flush decisions so far.
    pub fn flush_count(&self) -> u64 {
        self.flushes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::Decoder;
    use bytes::Bytes;

    const US: Duration = Duration::from_micros(1);

    fn eof(id: u32) -> Message {
        Message::Eof {
            recipient_channel_id: id,
        }
    }

    fn open() -> Message {
        Message::Open {
            sender_channel_id: 0,
            initial_window_size: 65536,
            maximum_packet_size: 4096,
            destination_url: "tcp://example.com:443".into(),
        }
    }

    fn drain_all(s: &mut Sender) -> Vec<u8> {
        let out = s.pending().to_vec();
        s.advance(out.len());
        out
    }

    #[test]
    fn lone_open_is_flushable_immediately() {
        let t0 = Instant::now();
        let mut s = Sender::default();
        assert!(!s.poll_flush(t0));
        assert_eq!(s.next_deadline(), None);
        s.push(t0, &open()).unwrap();
        assert!(s.poll_flush(t0), "no timer wait for a lone message");
        assert_eq!(s.last_flush_reason(), Some(FlushReason::Drain));
        let bytes = drain_all(&mut s);
        assert_eq!(Message::decode(&bytes).unwrap(), open());
        assert!(s.is_empty());
        assert_eq!(s.next_deadline(), None);
    }

    #[test]
    fn held_back_drain_flush_due_at_exactly_50us() {
        let t0 = Instant::now();
        let mut s = Sender::default();
        s.push(t0, &eof(1)).unwrap();
        assert!(s.poll_flush(t0));
        drain_all(&mut s);

        s.push(t0 + 10 * US, &eof(2)).unwrap();
        assert!(!s.poll_flush(t0 + 10 * US), "spacing holds the drain back");
        assert_eq!(s.next_deadline(), Some(t0 + 50 * US), "not the backstop");
        // More messages and drain points before the deadline change nothing.
        s.push(t0 + 20 * US, &eof(3)).unwrap();
        assert!(!s.poll_flush(t0 + 20 * US));
        assert_eq!(s.next_deadline(), Some(t0 + 50 * US));
        assert!(!s.poll_flush_busy(t0 + 49 * US));
        assert!(s.poll_flush_busy(t0 + 50 * US), "due exactly at +50 us");
        assert_eq!(s.last_flush_reason(), Some(FlushReason::DelayedDrain));
        let mut d = Decoder::new();
        d.push(&drain_all(&mut s));
        assert_eq!(d.next_message().unwrap(), Some(eof(2)));
        assert_eq!(d.next_message().unwrap(), Some(eof(3)));
        assert_eq!(d.next_message().unwrap(), None);

        // The delayed flush counts as a drain flush for the spacing.
        s.push(t0 + 60 * US, &eof(4)).unwrap();
        assert!(!s.poll_flush(t0 + 60 * US));
        assert_eq!(s.next_deadline(), Some(t0 + 100 * US));
        assert!(s.poll_flush(t0 + 100 * US));
    }

    #[test]
    fn backstop_fires_1ms_after_first_byte_despite_steady_arrivals() {
        let t0 = Instant::now();
        let mut s = Sender::default();
        let mut t = t0;
        let mut flushed_at = None;
        for i in 0..200u32 {
            s.push(t, &eof(i)).unwrap();
            // Messages keep arriving every 10 us: the queue never drains.
            assert_eq!(s.next_deadline(), Some(t0 + Duration::from_millis(1)));
            if s.poll_flush_busy(t) {
                flushed_at = Some(t);
                break;
            }
            t += 10 * US;
        }
        assert_eq!(flushed_at, Some(t0 + Duration::from_millis(1)));
        assert_eq!(s.last_flush_reason(), Some(FlushReason::Backstop));
        assert_eq!(s.pending().len(), 101 * 8);
        drain_all(&mut s);
        // The next backstop counts from the next first byte.
        s.push(t + 5 * US, &eof(0)).unwrap();
        assert_eq!(
            s.next_deadline(),
            Some(t + 5 * US + Duration::from_millis(1))
        );
    }

    #[test]
    fn backstop_applies_at_drain_points_too() {
        // Drain flush at t0; then the spacing is huge so only the backstop
        // can release the next bytes.
        let t0 = Instant::now();
        let mut s = Sender::new(SenderConfig {
            drain_spacing: Duration::from_millis(5),
            ..SenderConfig::default()
        });
        s.push(t0, &eof(0)).unwrap();
        assert!(s.poll_flush(t0));
        drain_all(&mut s);
        s.push(t0 + 100 * US, &eof(1)).unwrap();
        assert!(!s.poll_flush(t0 + 100 * US));
        assert_eq!(s.next_deadline(), Some(t0 + 1100 * US));
        assert!(s.poll_flush(t0 + 1100 * US));
        assert_eq!(s.last_flush_reason(), Some(FlushReason::Backstop));
    }

    #[test]
    fn full_buffer_refuses_without_dropping_and_keeps_order() {
        let t0 = Instant::now();
        let mut s = Sender::new(SenderConfig {
            capacity: 100,
            flush_threshold: 100,
            ..SenderConfig::default()
        });
        let data = |i: u8| Message::Data {
            recipient_channel_id: u32::from(i),
            payload: Bytes::from(vec![i; 22]),
        }; // 30 bytes each
        let mut sent = Vec::new();
        let mut wire = Vec::new();
        let mut next = 0u8;
        let mut refusals = 0;
        let mut t = t0;
        while next < 20 {
            match s.push(t, &data(next)) {
                Ok(()) => {
                    sent.push(data(next));
                    next += 1;
                }
                Err(PushError::Full { needed, room }) => {
                    refusals += 1;
                    assert_eq!(needed, 30);
                    assert!(room < 30);
                    // A refused push makes a flush due at once, even
                    // without a drain point and inside the spacing.
                    assert!(s.next_deadline().unwrap() <= t);
                    assert!(s.poll_flush_busy(t));
                    assert_eq!(s.last_flush_reason(), Some(FlushReason::Full));
                    wire.extend(drain_all(&mut s));
                }
                Err(e) => panic!("{e}"),
            }
            assert!(s.buffered() <= 100);
            t += US;
        }
        assert!(s.poll_flush(t + Duration::from_millis(2)));
        wire.extend(drain_all(&mut s));
        assert!(refusals >= 6);
        let mut d = Decoder::new();
        d.push(&wire);
        let mut got = Vec::new();
        while let Some(m) = d.next_message().unwrap() {
            got.push(m);
        }
        assert_eq!(got, sent, "nothing dropped, order preserved");
    }

    #[test]
    fn threshold_forces_flush_inside_spacing() {
        let t0 = Instant::now();
        let mut s = Sender::new(SenderConfig {
            flush_threshold: 64,
            ..SenderConfig::default()
        });
        s.push(t0, &eof(0)).unwrap();
        assert!(s.poll_flush(t0));
        drain_all(&mut s);
        for i in 0..7 {
            s.push(t0 + US, &eof(i)).unwrap();
        }
        assert!(!s.poll_flush_busy(t0 + US));
        s.push(t0 + US, &eof(8)).unwrap();
        assert!(s.poll_flush_busy(t0 + US));
        assert_eq!(s.last_flush_reason(), Some(FlushReason::Full));
    }

    #[test]
    fn partial_writes_and_oversized_message_into_empty_buffer() {
        let t0 = Instant::now();
        let mut s = Sender::new(SenderConfig {
            capacity: 16,
            ..SenderConfig::default()
        });
        let big = Message::Data {
            recipient_channel_id: 9,
            payload: Bytes::from(vec![7; 100]),
        };
        s.push(t0, &big).unwrap(); // larger than capacity, buffer empty
        assert!(s.push(t0, &eof(1)).is_err());
        assert!(s.poll_flush(t0));
        let mut wire = Vec::new();
        while !s.pending().is_empty() {
            let n = s.pending().len().min(7);
            wire.extend_from_slice(&s.pending()[..n]);
            s.advance(n);
        }
        assert_eq!(Message::decode(&wire).unwrap(), big);
        assert!(s.is_empty());
        s.push(t0, &eof(1)).unwrap();
    }

    #[test]
    fn push_data_matches_message_encoding() {
        let t0 = Instant::now();
        let mut s = Sender::default();
        s.push_data(t0, 5, b"hello").unwrap();
        let mut want = Vec::new();
        Message::Data {
            recipient_channel_id: 5,
            payload: Bytes::from_static(b"hello"),
        }
        .encode(&mut want)
        .unwrap();
        assert!(s.poll_flush(t0));
        assert_eq!(s.pending(), &want[..]);
        assert!(matches!(
            s.push_data(t0, 5, &vec![0; MAX_DATA_PAYLOAD + 1]),
            Err(PushError::Encode(_))
        ));
    }
}
