//! Per-channel state: ids, flow-control windows, the receive buffer and the
//! Streaming -> Eof -> Closed life cycle of each side.
//!
//! Source: JMUX spec, "Windows and packet sizes" and "Channel life cycle".
//! The [`crate::Session`] drives these; this module holds the state and the
//! read-only view ([`ChannelInfo`]) it exposes.

use std::fmt;
use std::time::Instant;

use bytes::BytesMut;

/// A channel as this side knows it: our local channel id (u32).
///
/// It is the id we announce to the peer (OPEN `sender channel id`, or OPEN
/// SUCCESS `sender channel id`), so it is the `recipient channel id` of every
/// message the peer sends us on this channel. Ids start at 0 and the lowest
/// free id is reused; an id is free again once CLOSE was both sent and
/// received, the local reader drained what was buffered, and the driver
/// released the channel if it held it ([`crate::Session::hold`]).
///
/// Source: JMUX spec, "Channel life cycle".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ChannelId(pub u32);

impl fmt::Display for ChannelId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "channel {}", self.0)
    }
}

/// Coarse state of a channel, for [`ChannelInfo`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChannelState {
    /// We sent OPEN and wait for OPEN SUCCESS or OPEN FAILURE.
    Opening,
    /// The peer sent OPEN; waiting for [`crate::Session::accept`] or
    /// [`crate::Session::reject`].
    Requested,
    /// Established: DATA may flow (subject to the EOF/CLOSE flags).
    Open,
}

/// Read-only snapshot of one channel ([`crate::Session::channel`]).
/// Byte counts are payload bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChannelInfo {
    /// Coarse state.
    pub state: ChannelState,
    /// The peer's id for the channel, once known.
    pub remote_id: Option<u32>,
    /// Payload bytes we may still send before the peer's next WINDOW ADJUST.
    pub send_credit: u64,
    /// Largest DATA payload we send on this channel: peer maximum packet
    /// size - 8, in bytes.
    pub max_send_payload: usize,
    /// Payload bytes received and buffered, not yet consumed locally.
    pub readable: usize,
    /// Bytes allocated for the receive buffer (at most what the channel
    /// can hold: its buffered bytes plus its window left, once grown).
    pub buffer_capacity: usize,
    /// Payload bytes the peer may still send before our next WINDOW ADJUST.
    pub recv_window: u64,
    /// We sent EOF (our sending side is finished).
    pub eof_sent: bool,
    /// The peer sent EOF.
    pub eof_received: bool,
    /// We sent CLOSE.
    pub close_sent: bool,
    /// The peer sent CLOSE.
    pub close_received: bool,
    /// The driver holds a local resource for the channel (its target
    /// socket, see [`crate::Session::hold`]): the id stays in use until
    /// [`crate::Session::release`].
    pub held: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// OPEN sent. `abandoned`: the local side gave up (abort or open
    /// timeout); a late OPEN SUCCESS is answered with CLOSE, silently.
    Opening {
        deadline: Option<Instant>,
        abandoned: bool,
    },
    Requested,
    Open,
}

#[derive(Debug)]
pub(crate) struct Channel {
    pub phase: Phase,
    /// The peer's id (valid in Requested and Open).
    pub remote_id: u32,
    /// Whether the application knows this channel as live, so that
    /// `Event::Closed` is due when it is freed.
    pub visible: bool,

    // Sending side.
    /// Peer window left, in payload bytes (at most 2^32 - 1: WINDOW ADJUST
    /// beyond that is clamped, JMUX spec "Data Transfer").
    pub credit: u64,
    /// Largest payload per DATA message: peer maximum packet size - 8.
    pub max_send_payload: usize,
    pub eof_sent: bool,
    pub close_sent: bool,
    /// A `send_data` call was cut short; `Event::Writable` is owed.
    pub want_writable: bool,
    /// In the session's list of channels waiting for output room.
    pub queued_for_room: bool,
    /// Woken from that list for room, in this driver turn: may take room
    /// while other channels still wait in it, until its next `send_data`
    /// or the end of the turn after this one.
    pub room_grant: Option<u64>,

    // Receiving side.
    pub rx: BytesMut,
    /// Bytes allocated for `rx` (its `capacity()` counts only from the
    /// read position).
    pub rx_allocated: usize,
    /// Payload bytes the peer may still send (our granted window left).
    pub rx_window: u64,
    /// Bytes consumed locally and not yet granted back by WINDOW ADJUST.
    pub rx_consumed: u64,
    /// The channel's full window: what it was opened with, plus what it
    /// grew by after opening small under a full receive budget. Always
    /// `rx_window + rx.len() + rx_consumed`; its WINDOW ADJUST threshold is
    /// at most half of it.
    pub window_size: u64,
    pub eof_received: bool,
    pub close_received: bool,
    /// The driver still holds the channel's local resource
    /// ([`crate::Session::hold`]).
    pub held: bool,
    /// `Event::Data` was emitted and the reader has not consumed since.
    pub readable_notified: bool,
    /// Payload bytes moved either way (sent, received, consumed), wrapping:
    /// what the idle check compares.
    pub moved: u64,
    /// Under an idle or half-close timeout: the deadline of the next idle
    /// check and `moved` when it was set.
    pub idle_check: Option<(Instant, u64)>,
    /// When `moved` was last seen to change, and its value then
    /// ([`crate::Session::quiet_since`]); the channel's creation at first.
    pub quiet: (Instant, u64),
}

impl Channel {
    pub fn new(phase: Phase, recv_window: u32, now: Instant) -> Self {
        Self {
            phase,
            remote_id: 0,
            visible: false,
            credit: 0,
            max_send_payload: 0,
            eof_sent: false,
            close_sent: false,
            want_writable: false,
            queued_for_room: false,
            room_grant: None,
            rx: BytesMut::new(),
            rx_allocated: 0,
            rx_window: u64::from(recv_window),
            rx_consumed: 0,
            window_size: u64::from(recv_window),
            eof_received: false,
            close_received: false,
            held: false,
            readable_notified: false,
            moved: 0,
            idle_check: None,
            quiet: (now, 0),
        }
    }

    /// Payload bytes of this channel that count against the session's
    /// receive budget: the window the peer may still use (none after its
    /// EOF or CLOSE) plus what is buffered and not yet consumed.
    pub fn exposure(&self) -> u64 {
        let window = if self.eof_received || self.close_received {
            0
        } else {
            self.rx_window
        };
        window + self.rx.len() as u64
    }

    /// Whether the local side may still send DATA.
    pub fn can_send(&self) -> bool {
        self.phase == Phase::Open && !self.eof_sent && !self.close_sent && !self.close_received
    }

    /// EOF went one way only and no CLOSE either way: one side still
    /// talks, the other finished.
    pub fn half_closed(&self) -> bool {
        self.phase == Phase::Open
            && self.eof_sent != self.eof_received
            && !self.close_sent
            && !self.close_received
    }

    /// Whether the id can be released: CLOSE both ways, nothing left for
    /// the local reader, and not held by the driver.
    pub fn finished(&self) -> bool {
        self.close_sent && self.close_received && self.rx.is_empty() && !self.held
    }

    pub fn info(&self) -> ChannelInfo {
        let (state, remote_id) = match self.phase {
            Phase::Opening { .. } => (ChannelState::Opening, None),
            Phase::Requested => (ChannelState::Requested, Some(self.remote_id)),
            Phase::Open => (ChannelState::Open, Some(self.remote_id)),
        };
        ChannelInfo {
            state,
            remote_id,
            send_credit: self.credit,
            max_send_payload: self.max_send_payload,
            readable: self.rx.len(),
            buffer_capacity: self.rx_allocated,
            recv_window: self.rx_window,
            eof_sent: self.eof_sent,
            eof_received: self.eof_received,
            close_sent: self.close_sent,
            close_received: self.close_received,
            held: self.held,
        }
    }
}
