//! Sans-IO JMUX session: many channels over one byte pipe.
//!
//! Bytes from the pipe go in through [`Session::handle_input`]; what happened
//! comes out of [`Session::poll_event`]; bytes for the pipe come out of
//! [`Session::transmit`] once [`Session::poll_flush`] says a flush is due;
//! the next wake-up time comes out of [`Session::next_deadline`]. Time is
//! always an argument; nothing here reads a clock or does I/O (the quinn-proto
//! style, see `/work/shared/style.md`).
//!
//! Sources: JMUX spec, "Messages", "Windows and packet sizes", "Channel life
//! cycle" and "Known weak points of the reference (do better)".

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::time::{Duration, Instant};

use bytes::{Buf, BytesMut};

use crate::channel::{Channel, ChannelId, ChannelInfo, Phase};
use crate::codec::{
    DATA_OVERHEAD, DecodeError, Decoder, Destination, DestinationError, MAX_DATA_PAYLOAD,
    MAX_MESSAGE_SIZE, Message, MessageType, ReasonCode,
};
use crate::sender::{PushError, Sender, SenderConfig};

/// The least window (bytes) a channel is granted, in OPEN, OPEN SUCCESS and
/// top-ups, however spent the receive budget (unless
/// [`Config::initial_window`] is smaller). The reference (jetsocat,
/// Devolutions Gateway) takes an opener's initial window as its own receive
/// window and sends WINDOW ADJUST only once more than 4096 bytes of it were
/// consumed, so a window of 4096 bytes or less stalls a channel to it for
/// good (measured: 35 of 100 concurrent channels through a Tether client
/// and a jetsocat server, opened with one 4088-byte payload). Twice that
/// threshold, and more than one maximum-size DATA payload of 4096-byte
/// packets.
///
/// Source: JMUX spec, "Windows and packet sizes"; jetsocat 2026.2.4.
pub const MIN_WINDOW: u32 = 2 * 4096;

/// [`Config::half_close_timeout`]'s default: 30 s.
pub const DEFAULT_HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(30);

/// [`Config::idle_timeout`]'s default: 1 h.
pub const DEFAULT_IDLE_TIMEOUT: Duration = Duration::from_secs(3600);

/// The largest window the spec allows, bytes: "The window MUST NOT be
/// increased above 2^32 - 1 bytes" (JMUX spec, "Data Transfer").
const MAX_WINDOW: u64 = u32::MAX as u64;

/// A drained receive buffer keeps at most this much allocated (bytes) for
/// the next DATA; a larger allocation is freed. So a drained channel (idle,
/// or closed and held by the driver) costs at most this much guest memory
/// (64 MiB at 1024 channels) on top of the bytes the receive budget
/// counts. (Checked on the whole allocation: `capacity()` counts only from
/// the read position, so a buffer drained to its end looked empty and kept
/// up to a whole window, 1 MiB, per channel.)
const RX_KEEP_CAPACITY: usize = 64 * 1024;

/// Session limits. Sizes in bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Config {
    /// Receive window we grant on every channel while the receive budget
    /// has room, in payload bytes (default 1048576 = 1 MiB). It bounds each
    /// channel's receive buffer; [`Config::receive_budget`] bounds their
    /// sum. The reference advertises 64 MiB per channel and has no overall
    /// bound, which is meaningless for a guest with a memory limit. 1 MiB allows ~1 GB/s per channel at
    /// 1 ms RTT and ~100 MB/s at 10 ms; with 256 KiB a loopback tunnel was
    /// window-bound (bulk 540-720 MB/s against 780-970 MB/s, and 30% more
    /// CPU per GB, measured side by side). Must be > 0.
    ///
    /// Source: JMUX spec, "Windows and packet sizes".
    pub initial_window: u32,
    /// Maximum packet size we advertise: the largest whole DATA message
    /// (8 bytes of header and id included) the peer should send us
    /// (default 4096, like the reference). Must be > 8.
    pub max_packet_size: u16,
    /// Largest incoming message accepted by the decoder (default 65535).
    /// Larger DATA than we advertised is still accepted when it fits this
    /// limit and the window (counted in [`Stats::oversized_data`]).
    pub max_message_size: usize,
    /// WINDOW ADJUST is queued once more than this many consumed bytes have
    /// accumulated on a channel (default 32768 = 32 KiB, 1/32 of the
    /// window; the reference uses 4096 with its 64 MiB window). The
    /// effective threshold is `min(this, initial_window / 2)` so a small
    /// window can never stall.
    pub window_adjust_threshold: u32,
    /// Most payload bytes the peer may have in flight to us or buffered
    /// here, over all channels: the sum of every channel's granted window
    /// left and its unconsumed input (default 67108864 = 64 MiB). While
    /// there is room, a new channel gets the full `initial_window`; past
    /// it, a new channel gets what room is left but at least the window
    /// floor (the larger of [`MIN_WINDOW`] and one maximum-size DATA
    /// payload, `max_packet_size - 8`; never more than `initial_window`),
    /// and WINDOW ADJUST waits until reading, a peer's EOF or CLOSE, or a
    /// freed channel makes room (retried round robin), except that a
    /// channel is always topped up to the floor (so every channel makes
    /// progress). A window opened small grows back to `initial_window` in
    /// its next WINDOW ADJUSTs once there is room.
    /// Buffered input is therefore bounded by `receive_budget + open
    /// channels * floor` (8 KiB by default), not by `initial_window * open
    /// channels` (1 GiB at 1024 channels of 1 MiB). Must be > 0.
    pub receive_budget: u64,
    /// Most channels in use at once, both directions (default 1024). An
    /// incoming OPEN beyond it is answered with OPEN FAILURE (reason 1,
    /// general failure: the spec has no resource-shortage code, and the
    /// reference answers "no more ID available" the same way) without an
    /// event; [`Session::open`] fails. A channel is in use from its OPEN
    /// until it is freed ([`Event::Closed`]): CLOSE went both ways, its
    /// buffered input was consumed or dropped, and the driver released it
    /// if it held it ([`Session::hold`]: a socket still holding a closed
    /// channel's bytes keeps counting). A refused OPEN counts until its
    /// OPEN FAILURE is in the output buffer.
    pub max_channels: u32,
    /// How long an OPEN may wait for its answer before the session reports
    /// [`Event::OpenFailed`] with [`ReasonCode::TtlExpired`] (default
    /// `None`: wait forever, like the reference). A late answer is then
    /// handled silently (OPEN SUCCESS is answered with CLOSE).
    pub open_timeout: Option<Duration>,
    /// How long a half-closed channel (EOF went one way only, no CLOSE
    /// yet) may stay idle, no payload byte sent, received or consumed,
    /// before the session ends it: CLOSE as [`Session::abort`] sends it,
    /// and [`Event::HalfCloseTimeout`] for the driver (default 30 s;
    /// `None`: never). Idleness is checked once per period, so a channel
    /// ends after between one and two periods of silence; a channel that
    /// keeps moving bytes one way after the other's EOF is never cut, and
    /// backpressure is not idleness: a channel whose received bytes wait
    /// for the driver (its local socket takes them slowly), or whose
    /// [`Session::send_data`] waits for the peer's window, is kept. What
    /// the driver already wrote out is out of sight: a reader slower than
    /// the bytes it has buffered locally per period may still be cut.
    ///
    /// Why: a half-close is legitimate TCP, but a client that sends EOF
    /// and leaves, towards a target that never closes its half, held its
    /// channel for ever; 1,023 of them, opened and dropped at 100 a second
    /// by one SOCKS5 client, took every channel of a tunnel and kept them
    /// (the red team of 2026-12-03, eighth round). HAProxy's `timeout
    /// client-fin` / `timeout server-fin` are the same bound.
    ///
    /// Source: JMUX spec, "Channel life cycle" (EOF, then CLOSE both ways).
    pub half_close_timeout: Option<Duration>,
    /// How long any other open channel may stay idle, by the same measure
    /// as [`Config::half_close_timeout`] (no payload byte moving, no
    /// backpressure), before the session ends it: CLOSE, and
    /// [`Event::IdleTimeout`] for the driver (default 1 h, Envoy's TCP
    /// proxy `idle_timeout`; `None`: never). A channel waiting for its OPEN
    /// to be answered or accepted is not idle. Bounds what an abandoned
    /// channel holds: clients that open channels to targets that stay
    /// silent and never close held them for ever (the red team of
    /// 2026-12-04, two sources each at their per-source share).
    pub idle_timeout: Option<Duration>,
    /// Most bytes of control messages (OPEN SUCCESS/FAILURE, WINDOW
    /// ADJUST, EOF, CLOSE, encoded size) waiting for room in the output
    /// buffer (default 262144 = 256 KiB). Past it,
    /// [`Session::handle_input`] stops decoding (the rest stays buffered)
    /// and [`Session::wants_input`] is `false` until the pipe took enough:
    /// a peer that sends without reading (e.g. OPENs that are all refused)
    /// is held back instead of growing the queue of answers. Legitimate
    /// traffic stays far below it: one answer per channel and a WINDOW
    /// ADJUST per adjust threshold consumed (~40 KiB at 1024 channels
    /// with the whole budget consumed). Must be > 0.
    pub max_control_backlog: usize,
    /// Most events waiting for [`Session::poll_event`] (default 4096).
    /// Past it, [`Session::handle_input`] stops decoding (the rest stays
    /// buffered) and [`Session::wants_input`] is `false` until the driver
    /// took events and called [`Session::resume_input`]. So however much
    /// input one call hands over, the queue holds at most this many
    /// events: a peer's 32 MiB WebSocket message of 8-byte CLOSEs for
    /// unknown channels made 4 million events, about eight times the
    /// message in guest memory, and stopped the JMUX guest at its memory
    /// limit (the red team of 2026-12-03, fourth round). Must be > 0.
    pub max_pending_events: usize,
    /// Most [`Event::OpenRequest`]s waiting for [`Session::poll_event`]
    /// (default 64). Past it, decoding pauses as for
    /// [`Config::max_pending_events`]. An OPEN holds one of
    /// [`Config::max_channels`] from its decoding until the driver rejects
    /// it, so without this bound OPENs the driver will refuse (a target
    /// outside its allow list) filled every channel before the driver saw
    /// the first: 1,023 of them in one 36 KB write made the next OPEN fail
    /// with "too many channels" (the red team of 2026-12-03, fourth
    /// round). Now OPENs waiting for a decision hold at most this many.
    /// Must be > 0.
    pub max_pending_open_requests: usize,
    /// The coalescing sender's limits (64 KiB buffer, 16 KiB threshold,
    /// 50 us drain spacing, 1 ms backstop). `capacity` must be >= 1024.
    pub sender: SenderConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            initial_window: 1024 * 1024,
            max_packet_size: 4096,
            max_message_size: MAX_MESSAGE_SIZE,
            window_adjust_threshold: 32 * 1024,
            receive_budget: 64 << 20,
            max_channels: 1024,
            open_timeout: None,
            half_close_timeout: Some(DEFAULT_HALF_CLOSE_TIMEOUT),
            idle_timeout: Some(DEFAULT_IDLE_TIMEOUT),
            max_control_backlog: 256 * 1024,
            max_pending_events: 4096,
            max_pending_open_requests: 64,
            sender: SenderConfig::default(),
        }
    }
}

/// An invalid [`Config`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// `initial_window` is 0: the peer could never send.
    #[error("initial window must be > 0")]
    ZeroWindow,
    /// `max_packet_size` <= 8 leaves no room for payload (JMUX spec,
    /// "Windows and packet sizes": never advertise a maximum of 8 or less).
    #[error("maximum packet size {0} must be > 8 bytes")]
    MaxPacketTooSmall(u16),
    /// `max_channels` is 0.
    #[error("max_channels must be > 0")]
    ZeroChannels,
    /// `receive_budget` is 0.
    #[error("receive budget must be > 0")]
    ZeroBudget,
    /// `sender.capacity` below 1024 bytes.
    #[error("sender capacity {0} must be >= 1024 bytes")]
    SenderTooSmall(usize),
    /// `max_control_backlog` is 0.
    #[error("max_control_backlog must be > 0")]
    ZeroControlBacklog,
    /// `max_pending_events` is 0.
    #[error("max_pending_events must be > 0")]
    ZeroPendingEvents,
    /// `max_pending_open_requests` is 0.
    #[error("max_pending_open_requests must be > 0")]
    ZeroPendingOpenRequests,
}

/// Something the driver must act on, from [`Session::poll_event`]. Events for
/// one channel come in protocol order; an id appears in a new
/// [`Event::OpenRequest`] only after the [`Event::Closed`] of its previous
/// use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The peer sent OPEN. Answer with [`Session::accept`] or
    /// [`Session::reject`]; an unparsable URL or a scheme other than `tcp`
    /// should be rejected (e.g. with [`ReasonCode::AddressTypeNotSupported`])
    /// so the opener does not wait forever (JMUX spec, "Known weak points").
    OpenRequest {
        /// Our id for the requested channel.
        id: ChannelId,
        /// The parsed destination, or why it does not parse.
        destination: Result<Destination, DestinationError>,
    },
    /// Our OPEN was accepted; the channel is open and writable.
    Opened {
        /// The channel.
        id: ChannelId,
    },
    /// Our OPEN was refused (or timed out locally, with
    /// [`ReasonCode::TtlExpired`]). The id is no longer the caller's.
    OpenFailed {
        /// The channel.
        id: ChannelId,
        /// The peer's reason code.
        reason: ReasonCode,
        /// The peer's description (possibly empty).
        description: String,
    },
    /// New bytes are readable on the channel ([`Session::recv`] /
    /// [`Session::peek`]). Emitted when DATA arrives and the reader has not
    /// consumed since the previous `Data` event: read until empty.
    Data {
        /// The channel.
        id: ChannelId,
    },
    /// The peer sent EOF: after the buffered bytes, nothing more will come.
    /// Half-close the local target (FIN) once they are written.
    Eof {
        /// The channel.
        id: ChannelId,
    },
    /// The channel stayed half-closed and idle for
    /// [`Config::half_close_timeout`]: the session sent CLOSE and dropped
    /// its buffered input, as [`Session::abort`] does. Drop the local
    /// socket (its bytes have nowhere to go) and [`Session::release`] the
    /// channel if held; [`Event::Closed`] follows once the peer's CLOSE
    /// came.
    HalfCloseTimeout {
        /// The channel.
        id: ChannelId,
    },
    /// The channel stayed idle for [`Config::idle_timeout`]: handled as
    /// [`Event::HalfCloseTimeout`] (CLOSE sent, input dropped; drop the
    /// local socket and release).
    IdleTimeout {
        /// The channel.
        id: ChannelId,
    },
    /// The channel is finished: CLOSE went both ways, its buffered bytes
    /// were consumed (or dropped by [`Session::abort`]) and the driver
    /// released it if it held it ([`Session::hold`]). The id is free and
    /// may be reused. Emitted once for every channel that was opened or
    /// accepted.
    Closed {
        /// The channel.
        id: ChannelId,
    },
    /// A [`Session::send_data`] call that was cut short can make progress
    /// again (send credit and output room are available).
    Writable {
        /// The channel.
        id: ChannelId,
    },
    /// A message was dropped: addressed to an unknown channel, or not
    /// expected in the channel's state. For logging; the session goes on
    /// (JMUX spec, "Channel life cycle": "log and drop").
    Dropped {
        /// The recipient channel id the message carried.
        recipient_channel_id: u32,
        /// The message type.
        message_type: MessageType,
        /// Why it was dropped.
        reason: DropReason,
    },
}

/// Why a message was dropped ([`Event::Dropped`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropReason {
    /// No channel has this id (or the peer cannot know it yet).
    UnknownChannel,
    /// The message does not fit the channel's state (e.g. DATA after the
    /// peer's EOF, OPEN SUCCESS for a channel that is not opening).
    UnexpectedInState,
}

/// A fatal session error: the driver must end the session (close the pipe).
/// Sticky: every later `handle_*` call returns it again.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionError {
    /// The input stream is not valid JMUX.
    #[error("JMUX decode error: {0}")]
    Decode(#[from] DecodeError),
    /// The peer sent more DATA than the window we granted (JMUX spec,
    /// "Windows and packet sizes").
    #[error("{id}: DATA of {len} bytes exceeds the granted window of {window} bytes")]
    WindowExceeded {
        /// The channel.
        id: ChannelId,
        /// Payload bytes in the offending DATA.
        len: usize,
        /// Window left before it, in bytes.
        window: u64,
    },
}

/// A per-channel API call that cannot be honoured. The session goes on.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChannelError {
    /// No live channel has this id.
    #[error("{0} does not exist")]
    UnknownChannel(ChannelId),
    /// The channel is not open yet (opening or not yet accepted).
    #[error("{0} is not open")]
    NotOpen(ChannelId),
    /// `accept`/`reject` on a channel that is not a pending OPEN request.
    #[error("{0} is not a pending open request")]
    NotRequested(ChannelId),
    /// The sending side is finished: we sent EOF or CLOSE, or the peer sent
    /// CLOSE.
    #[error("{0} can no longer send")]
    SendClosed(ChannelId),
    /// All `max_channels` ids are in use.
    #[error("too many channels (max {max})")]
    TooManyChannels {
        /// The configured limit.
        max: u32,
    },
    /// The destination URL does not fit in one OPEN message (65521 bytes).
    #[error("destination URL of {len} bytes does not fit in an OPEN message")]
    DestinationTooLong {
        /// URL length in bytes.
        len: usize,
    },
}

/// Counters for logging and tests.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stats {
    /// Messages decoded from the peer.
    pub messages_received: u64,
    /// DATA payload bytes accepted into receive buffers.
    pub data_bytes_received: u64,
    /// DATA payload bytes queued for the peer.
    pub data_bytes_sent: u64,
    /// Messages dropped (with or without an [`Event::Dropped`]; DATA racing
    /// our own CLOSE is dropped silently).
    pub dropped_messages: u64,
    /// Payload bytes in dropped DATA messages.
    pub dropped_data_bytes: u64,
    /// DATA larger than the maximum packet size we advertised (accepted).
    pub oversized_data: u64,
    /// Incoming OPENs refused by the session itself (too many channels,
    /// the peer's maximum packet size <= 8, or a sender channel id the
    /// peer already uses for a live channel).
    pub auto_rejected_opens: u64,
    /// WINDOW ADJUSTs that would have raised our send credit above
    /// 2^32 - 1 bytes (the credit stops there; JMUX spec, "Data
    /// Transfer").
    pub window_overflows: u64,
    /// Channels ended by [`Config::half_close_timeout`].
    pub half_close_timeouts: u64,
    /// Channels ended by [`Config::idle_timeout`].
    pub idle_timeouts: u64,
}

/// The JMUX session state machine (see the module docs).
#[derive(Debug)]
pub struct Session {
    config: Config,
    adjust_threshold: u64,
    /// The least window a channel is granted or topped up to, whatever the
    /// receive budget: [`MIN_WINDOW`] or one maximum-size DATA payload,
    /// whichever is larger (or the whole `initial_window` if smaller).
    window_floor: u64,
    /// The channels whose last grant was cut short by the receive budget
    /// (the ones [`Session::grant_waiting`] retries), so a retry costs
    /// O(channels it serves), not O(channels).
    waiting: BTreeSet<u32>,
    /// Where the next retry of waiting grants starts (round robin).
    grant_cursor: usize,
    /// What the receive budget bounds, kept up to date: the sum of
    /// [`Channel::exposure`] over all channels.
    exposure: u64,
    channels: Vec<Option<Channel>>,
    /// How many live channels use each of the peer's sender ids (channels
    /// in `Requested` or `Open` whose CLOSE has not come: [`counts_remote`]),
    /// so the duplicate-id check on OPEN is O(1); it walked every channel.
    remote_ids: HashMap<u32, u32>,
    /// Free ids below `channels.len()`.
    free_ids: BTreeSet<u32>,
    live: u32,
    decoder: Decoder,
    sender: Sender,
    /// Control messages waiting for output room, in order. Nothing is
    /// dropped; DATA is only accepted while this is empty, so order holds.
    control: VecDeque<Message>,
    /// Encoded bytes in `control`.
    control_bytes: usize,
    /// `handle_input` stopped decoding at the control backlog bound; input
    /// waits in the decoder.
    input_paused: bool,
    events: VecDeque<Event>,
    /// [`Event::OpenRequest`]s in `events`.
    pending_open_requests: usize,
    /// Channels whose `send_data` was cut short by output room.
    waiting_for_room: VecDeque<u32>,
    /// Channels woken from `waiting_for_room`, with the turn of their
    /// grant, oldest first; pruned at each turn's end ([`Session::end_turn`]).
    granted: VecDeque<(u32, u64)>,
    /// Driver turns ended so far.
    turn: u64,
    /// Channels holding a grant they have not used (nor lost) yet.
    live_grants: usize,
    /// Open timeouts of our OPENs still waiting for an answer (not
    /// abandoned), earliest first: [`Session::next_deadline`] and
    /// [`Session::handle_timeout`] cost O(log channels), not O(channels).
    open_deadlines: BTreeSet<(Instant, u32)>,
    /// Idle checks of channels ([`Config::idle_timeout`],
    /// [`Config::half_close_timeout`], [`Channel::idle_check`]), earliest
    /// first; an entry leaves when its channel is freed, its check runs or
    /// a shorter one replaces it, so it holds at most one entry per
    /// channel.
    idle_deadlines: BTreeSet<(Instant, u32)>,
    /// Channels whose CLOSE arrived from the peer since the driver last
    /// asked ([`Session::poll_peer_closed`]); ids leave when freed.
    peer_closed: BTreeSet<u32>,
    error: Option<SessionError>,
    stats: Stats,
}

impl Session {
    /// A session with no channels.
    ///
    /// Errors: [`ConfigError`] for a zero window, a maximum packet size
    /// <= 8, zero `max_channels` or a sender capacity below 1024 bytes.
    pub fn new(config: Config) -> Result<Self, ConfigError> {
        if config.initial_window == 0 {
            return Err(ConfigError::ZeroWindow);
        }
        if usize::from(config.max_packet_size) <= DATA_OVERHEAD {
            return Err(ConfigError::MaxPacketTooSmall(config.max_packet_size));
        }
        if config.max_channels == 0 {
            return Err(ConfigError::ZeroChannels);
        }
        if config.receive_budget == 0 {
            return Err(ConfigError::ZeroBudget);
        }
        if config.sender.capacity < 1024 {
            return Err(ConfigError::SenderTooSmall(config.sender.capacity));
        }
        if config.max_control_backlog == 0 {
            return Err(ConfigError::ZeroControlBacklog);
        }
        if config.max_pending_events == 0 {
            return Err(ConfigError::ZeroPendingEvents);
        }
        if config.max_pending_open_requests == 0 {
            return Err(ConfigError::ZeroPendingOpenRequests);
        }
        let adjust_threshold = u64::from(
            config
                .window_adjust_threshold
                .min(config.initial_window / 2),
        );
        let window_floor = u64::from(config.initial_window).min(
            ((usize::from(config.max_packet_size) - DATA_OVERHEAD) as u64)
                .max(u64::from(MIN_WINDOW)),
        );
        Ok(Self {
            adjust_threshold,
            window_floor,
            waiting: BTreeSet::new(),
            grant_cursor: 0,
            exposure: 0,
            channels: Vec::new(),
            remote_ids: HashMap::new(),
            free_ids: BTreeSet::new(),
            live: 0,
            decoder: Decoder::with_max_message_size(config.max_message_size),
            sender: Sender::new(config.sender.clone()),
            control: VecDeque::new(),
            control_bytes: 0,
            input_paused: false,
            events: VecDeque::new(),
            pending_open_requests: 0,
            waiting_for_room: VecDeque::new(),
            granted: VecDeque::new(),
            turn: 0,
            live_grants: 0,
            open_deadlines: BTreeSet::new(),
            idle_deadlines: BTreeSet::new(),
            peer_closed: BTreeSet::new(),
            error: None,
            stats: Stats::default(),
            config,
        })
    }

    /// The configuration in force.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// Counters.
    pub fn stats(&self) -> &Stats {
        &self.stats
    }

    /// The fatal error, once one happened.
    pub fn error(&self) -> Option<&SessionError> {
        self.error.as_ref()
    }

    /// Channels in use (any state).
    pub fn channel_count(&self) -> usize {
        self.live as usize
    }

    /// A snapshot of one channel, `None` if the id is not in use.
    pub fn channel(&self, id: ChannelId) -> Option<ChannelInfo> {
        self.get(id).map(Channel::info)
    }

    /// The output sender (read-only: buffer level, flush reasons).
    pub fn sender(&self) -> &Sender {
        &self.sender
    }

    // ----- channel table ---------------------------------------------------

    fn get(&self, id: ChannelId) -> Option<&Channel> {
        self.channels.get(id.0 as usize)?.as_ref()
    }

    fn get_mut(&mut self, id: ChannelId) -> Option<&mut Channel> {
        self.channels.get_mut(id.0 as usize)?.as_mut()
    }

    fn alloc(&mut self, channel: Channel) -> Option<ChannelId> {
        if self.live >= self.config.max_channels {
            return None;
        }
        let id = match self.free_ids.pop_first() {
            Some(id) => id,
            None => {
                let id = u32::try_from(self.channels.len()).ok()?;
                self.channels.push(None);
                id
            }
        };
        self.exposure += channel.exposure();
        self.channels[id as usize] = Some(channel);
        self.live += 1;
        Some(ChannelId(id))
    }

    fn free(&mut self, id: ChannelId) {
        self.forget_open_deadline(id);
        if let Some((deadline, _)) = self.get(id).and_then(|ch| ch.idle_check) {
            self.idle_deadlines.remove(&(deadline, id.0));
        }
        self.peer_closed.remove(&id.0);
        if let Some(ch) = self.channels[id.0 as usize].take() {
            self.live_grants -= usize::from(ch.room_grant.is_some());
            self.waiting.remove(&id.0);
            if counts_remote(&ch) {
                self.remote_gone(ch.remote_id);
            }
            self.exposure -= ch.exposure();
            self.live -= 1;
            self.free_ids.insert(id.0);
            if ch.visible {
                self.events.push_back(Event::Closed { id });
            }
            if !self.waiting.is_empty() {
                self.grant_waiting();
            }
        }
        // Keep the table short when the highest ids are free.
        while let Some(None) = self.channels.last() {
            let last = (self.channels.len() - 1) as u32;
            self.channels.pop();
            self.free_ids.remove(&last);
        }
    }

    /// A channel stopped using the peer's sender id `remote` (its CLOSE
    /// came, or it was freed while live): one less in [`Session::remote_ids`].
    fn remote_gone(&mut self, remote: u32) {
        if let std::collections::hash_map::Entry::Occupied(mut e) = self.remote_ids.entry(remote) {
            *e.get_mut() -= 1;
            if *e.get() == 0 {
                e.remove();
            }
        } else {
            debug_assert!(false, "remote id {remote} was not counted");
        }
    }

    /// Changes a channel with `f`, keeping the session's exposure count in
    /// step with the channel's.
    fn update_channel(&mut self, id: ChannelId, f: impl FnOnce(&mut Channel)) {
        if let Some(Some(ch)) = self.channels.get_mut(id.0 as usize) {
            let before = ch.exposure();
            f(ch);
            let after = ch.exposure();
            self.exposure = self.exposure - before + after;
            if after < before && !self.waiting.is_empty() {
                self.grant_waiting();
            }
        }
    }

    /// Removes the channel's open timeout from [`Session::open_deadlines`]
    /// (its OPEN was answered, abandoned, or the channel is freed).
    fn forget_open_deadline(&mut self, id: ChannelId) {
        if let Some(Phase::Opening {
            deadline: Some(deadline),
            ..
        }) = self.get(id).map(|ch| ch.phase)
        {
            self.open_deadlines.remove(&(deadline, id.0));
        }
    }

    /// The idle timeout that applies to a channel now: the half-close one
    /// while half-closed, the general one until CLOSE went either way.
    fn idle_timeout_for(&self, ch: &Channel) -> Option<Duration> {
        if ch.half_closed() {
            self.config.half_close_timeout
        } else if ch.close_sent || ch.close_received {
            None
        } else {
            self.config.idle_timeout
        }
    }

    /// Starts (or brings forward) the idle check of a channel that was
    /// created or just became half-closed ([`Config::idle_timeout`],
    /// [`Config::half_close_timeout`]).
    fn arm_idle(&mut self, id: ChannelId, now: Instant) {
        let Some(ch) = self.get(id) else { return };
        let Some(timeout) = self.idle_timeout_for(ch) else {
            return;
        };
        let deadline = now + timeout;
        let ch = self.channels[id.0 as usize].as_mut().expect("checked");
        match ch.idle_check {
            Some((armed, _)) if armed <= deadline => {}
            armed => {
                if let Some((old, _)) = armed {
                    self.idle_deadlines.remove(&(old, id.0));
                }
                ch.idle_check = Some((deadline, ch.moved));
                self.idle_deadlines.insert((deadline, id.0));
            }
        }
    }

    fn free_if_finished(&mut self, id: ChannelId) {
        if self.get(id).is_some_and(Channel::finished) {
            self.free(id);
        }
    }

    // ----- outgoing --------------------------------------------------------

    fn queue(&mut self, msg: Message) {
        self.control_bytes += msg.encoded_len();
        self.control.push_back(msg);
    }

    /// Moves queued control messages into the sender while they fit.
    fn pump_control(&mut self, now: Instant) {
        while let Some(msg) = self.control.front() {
            let len = msg.encoded_len();
            match self.sender.push(now, msg) {
                Ok(()) => {}
                Err(PushError::Full { .. }) => break,
                Err(PushError::Encode(e)) => {
                    // Every queued message is size-checked when built.
                    debug_assert!(false, "unencodable control message: {e}");
                }
            }
            self.control.pop_front();
            self.control_bytes -= len;
        }
    }

    fn room_for_writers(&self) -> bool {
        let room = self.sender.room();
        self.control.is_empty()
            && room > DATA_OVERHEAD
            && (room >= self.writable_room() || self.sender.is_empty())
    }

    /// The output room at which channels cut short by room get
    /// [`Event::Writable`], bytes: a quarter of the output buffer's
    /// capacity (or any room once the buffer is empty). A driver that
    /// waits for more room than this before it sends is woken with less
    /// than it waits for, again at every drain, and spins: it should
    /// want at most this much (`guests/jmux` waits for one packet, capped
    /// here; a peer's 65,535-byte packets spun it at 100% of a core, red
    /// team 2026-12-08 F1).
    pub fn writable_room(&self) -> usize {
        self.sender.config().capacity / 4
    }

    /// Whether `id` may take output room now: no channel waits for room,
    /// or `id` was woken for it ([`Event::Writable`] from the wait list).
    /// While channels wait, the others wait behind them, in order, so
    /// channels that keep moving do not take all the room a drain frees
    /// before the woken ones run (red team 2026-12-08 F2: behind a pipe
    /// read at 4 MiB/s, 16 of 64 channels took everything for 60 s).
    /// [`Session::send_room`] is 0 and [`Session::send_data`] takes
    /// nothing without the turn; a driver then waits for `Writable`
    /// ([`Session::wait_writable`]). `false` for an unknown channel.
    pub fn room_turn(&self, id: ChannelId) -> bool {
        self.get(id).is_some_and(|ch| {
            ch.room_grant.is_some() || (self.waiting_for_room.is_empty() && self.live_grants == 0)
        })
    }

    /// The driver ended a turn (handled what was ready and flushed). A
    /// channel woken for room that has not sent by the end of the next
    /// turn loses its grant, so one with nothing to send does not hold
    /// the others back; grants used or lost leave the list here.
    /// Amortised O(1): each grant enters and leaves the list once.
    pub fn end_turn(&mut self) {
        self.turn += 1;
        while let Some(&(raw, turn)) = self.granted.front() {
            let live = turn + 1 >= self.turn;
            let id = ChannelId(raw);
            if let Some(ch) = self.get_mut(id)
                && ch.room_grant == Some(turn)
            {
                if live {
                    break;
                }
                ch.room_grant = None;
                self.live_grants -= 1;
            }
            self.granted.pop_front();
        }
    }

    /// Gives channel `raw` its turn at the room ([`Session::room_turn`])
    /// from this driver turn on; [`Session::end_turn`] takes it back if
    /// unused.
    fn grant_room(&mut self, raw: u32) {
        let turn = self.turn;
        let Some(ch) = self.get_mut(ChannelId(raw)) else {
            return;
        };
        if ch.room_grant.replace(turn).is_none() {
            self.live_grants += 1;
        }
        self.granted.push_back((raw, turn));
    }

    /// Emits `Writable` for channels cut short by output room, once there is
    /// a useful amount of room again: in the order they were cut short, only
    /// as many as the room takes a packet each (at most their credit and the
    /// peer's max packet size). The rest stay queued, in order, for the next
    /// drain: the driver's next flush (each turn, while it has events) wakes
    /// them if the woken ones left room. Waking every waiting channel on
    /// each drain cost O(channels waiting) per drain though one or two took
    /// all the room (the red team of 2026-12-04h, F1: 6-9x the CPU per byte
    /// at 1,000 channels as at 10, for a slow pipe).
    fn wake_writers(&mut self) {
        if !self.room_for_writers() {
            return;
        }
        let mut room = self.sender.room();
        while room > DATA_OVERHEAD {
            let Some(raw) = self.waiting_for_room.pop_front() else {
                break;
            };
            let id = ChannelId(raw);
            let Some(ch) = self.get_mut(id) else { continue };
            ch.queued_for_room = false;
            if ch.want_writable && ch.can_send() && ch.credit > 0 {
                ch.want_writable = false;
                let packet = usize::try_from(ch.credit)
                    .unwrap_or(usize::MAX)
                    .min(ch.max_send_payload);
                room = room.saturating_sub(packet + DATA_OVERHEAD);
                self.grant_room(raw);
                self.events.push_back(Event::Writable { id });
            }
        }
    }

    /// Requests a channel to `destination` (queues OPEN granting our
    /// `initial_window` and advertising our `max_packet_size`). The answer
    /// comes as [`Event::Opened`] or [`Event::OpenFailed`]. `now` starts the
    /// optional open timeout.
    ///
    /// Errors: [`ChannelError::TooManyChannels`],
    /// [`ChannelError::DestinationTooLong`].
    ///
    /// Source: JMUX spec, "Messages" (OPEN).
    pub fn open(
        &mut self,
        destination: &Destination,
        now: Instant,
    ) -> Result<ChannelId, ChannelError> {
        let url = destination.to_string();
        if url.len() + MessageType::Open.fixed_size() > MAX_MESSAGE_SIZE {
            return Err(ChannelError::DestinationTooLong { len: url.len() });
        }
        let deadline = self.config.open_timeout.map(|t| now + t);
        let window = self.new_window();
        let channel = Channel::new(
            Phase::Opening {
                deadline,
                abandoned: false,
            },
            window,
            now,
        );
        let id = self.alloc(channel).ok_or(ChannelError::TooManyChannels {
            max: self.config.max_channels,
        })?;
        if let Some(deadline) = deadline {
            self.open_deadlines.insert((deadline, id.0));
        }
        self.arm_idle(id, now);
        self.queue(Message::Open {
            sender_channel_id: id.0,
            initial_window_size: window,
            maximum_packet_size: self.config.max_packet_size,
            destination_url: url,
        });
        Ok(id)
    }

    /// Accepts a pending [`Event::OpenRequest`]: queues OPEN SUCCESS with
    /// our id, our `initial_window` and our `max_packet_size`. The channel
    /// is open and writable at once.
    ///
    /// Errors: [`ChannelError::UnknownChannel`],
    /// [`ChannelError::NotRequested`].
    pub fn accept(&mut self, id: ChannelId) -> Result<(), ChannelError> {
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        if ch.phase != Phase::Requested {
            return Err(ChannelError::NotRequested(id));
        }
        ch.phase = Phase::Open;
        ch.visible = true;
        let msg = Message::OpenSuccess {
            recipient_channel_id: ch.remote_id,
            sender_channel_id: id.0,
            // Nothing can arrive before OPEN SUCCESS: the window is whole.
            initial_window_size: u32::try_from(ch.rx_window).unwrap_or(u32::MAX),
            maximum_packet_size: self.config.max_packet_size,
        };
        self.queue(msg);
        Ok(())
    }

    /// Refuses a pending [`Event::OpenRequest`]: queues OPEN FAILURE with
    /// `reason` and `description` (UTF-8, truncated at a character boundary
    /// to fit one message) and frees the id at once (no `Closed` event).
    ///
    /// Errors: [`ChannelError::UnknownChannel`],
    /// [`ChannelError::NotRequested`].
    pub fn reject(
        &mut self,
        id: ChannelId,
        reason: ReasonCode,
        description: &str,
    ) -> Result<(), ChannelError> {
        let ch = self.get(id).ok_or(ChannelError::UnknownChannel(id))?;
        if ch.phase != Phase::Requested {
            return Err(ChannelError::NotRequested(id));
        }
        let recipient = ch.remote_id;
        self.queue(open_failure(recipient, reason, description));
        self.free(id);
        Ok(())
    }

    /// Sends up to `data.len()` bytes on an open channel at time `now` and
    /// returns how many were accepted (possibly 0). Acceptance is limited by
    /// the peer's credit window and by room in the bounded output buffer;
    /// the bytes are cut into DATA messages whose payload never exceeds the
    /// peer's maximum packet size - 8. When fewer than `data.len()` bytes
    /// are accepted, [`Event::Writable`] follows once progress is possible.
    ///
    /// Errors: [`ChannelError::UnknownChannel`], [`ChannelError::NotOpen`],
    /// [`ChannelError::SendClosed`] (after our EOF/CLOSE or the peer's
    /// CLOSE).
    ///
    /// Source: JMUX spec, "Windows and packet sizes".
    pub fn send_data(
        &mut self,
        id: ChannelId,
        data: &[u8],
        now: Instant,
    ) -> Result<usize, ChannelError> {
        self.check_sendable(id)?;
        self.pump_control(now);
        let control_blocked = !self.control.is_empty();
        let turn = self.room_turn(id);
        let Self {
            channels,
            sender,
            waiting_for_room,
            stats,
            live_grants,
            ..
        } = self;
        let ch = channels[id.0 as usize].as_mut().expect("checked above");
        let mut sent = 0;
        let granted = ch.room_grant.take().is_some();
        *live_grants -= usize::from(granted);
        if !control_blocked && turn {
            while sent < data.len() && ch.credit > 0 {
                let room = sender.room();
                if room <= DATA_OVERHEAD {
                    break;
                }
                let n = (data.len() - sent)
                    .min(usize::try_from(ch.credit).unwrap_or(usize::MAX))
                    .min(ch.max_send_payload)
                    .min(room - DATA_OVERHEAD);
                if sender
                    .push_data(now, ch.remote_id, &data[sent..sent + n])
                    .is_err()
                {
                    break;
                }
                ch.credit -= n as u64;
                sent += n;
            }
        }
        stats.data_bytes_sent += sent as u64;
        ch.moved = ch.moved.wrapping_add(sent as u64);
        if sent < data.len() {
            Self::want_room(ch, id, sender, waiting_for_room);
            if granted && sent == 0 && waiting_for_room.back() == Some(&id.0) {
                // Woken, but others took the room first: it keeps its
                // place at the front (`want_room` just queued it last).
                waiting_for_room.pop_back();
                waiting_for_room.push_front(id.0);
            }
        }
        Ok(sent)
    }

    /// How many bytes [`Session::send_data`] would accept on `id` at time
    /// `now`, at most `limit`: the peer's credit window, cut into packets
    /// of at most its maximum packet size - 8 bytes, within the room left
    /// in the bounded output buffer once queued control messages (which go
    /// first) are in. A driver sizes its reads from the channel's source
    /// with it, so what cannot go now stays in the source (a socket's
    /// receive buffer, where TCP pushes the sender back), not in the
    /// driver's memory. 0: nothing can go now; [`Session::wait_writable`]
    /// asks for [`Event::Writable`].
    ///
    /// Errors: as [`Session::send_data`].
    ///
    /// Source: JMUX spec, "Windows and packet sizes".
    pub fn send_room(
        &mut self,
        id: ChannelId,
        limit: usize,
        now: Instant,
    ) -> Result<usize, ChannelError> {
        self.check_sendable(id)?;
        self.pump_control(now);
        if !self.control.is_empty() || !self.room_turn(id) {
            return Ok(0);
        }
        let ch = self.get(id).expect("checked above");
        let mut credit = usize::try_from(ch.credit).unwrap_or(usize::MAX);
        let mut room = self.sender.room();
        let mut total = 0;
        while total < limit && credit > 0 && room > DATA_OVERHEAD {
            let n = (limit - total)
                .min(credit)
                .min(ch.max_send_payload)
                .min(room - DATA_OVERHEAD);
            total += n;
            credit -= n;
            room -= n + DATA_OVERHEAD;
        }
        Ok(total)
    }

    /// Asks for [`Event::Writable`] on `id` once [`Session::send_data`]
    /// can take bytes again, as a send cut short does: after the peer's
    /// next WINDOW ADJUST when the credit is spent, else once the output
    /// buffer has drained (a flush is made due at once). For a driver
    /// that found [`Session::send_room`] at 0 and so read nothing.
    ///
    /// Errors: as [`Session::send_data`].
    pub fn wait_writable(&mut self, id: ChannelId) -> Result<(), ChannelError> {
        self.check_sendable(id)?;
        let Self {
            channels,
            sender,
            waiting_for_room,
            ..
        } = self;
        let ch = channels[id.0 as usize].as_mut().expect("checked above");
        Self::want_room(ch, id, sender, waiting_for_room);
        Ok(())
    }

    /// `id` is open and may still send. Errors: as [`Session::send_data`].
    fn check_sendable(&self, id: ChannelId) -> Result<(), ChannelError> {
        let ch = self.get(id).ok_or(ChannelError::UnknownChannel(id))?;
        if ch.phase != Phase::Open {
            return Err(ChannelError::NotOpen(id));
        }
        if !ch.can_send() {
            return Err(ChannelError::SendClosed(id));
        }
        Ok(())
    }

    /// `ch` (`id`) was cut short: it wants [`Event::Writable`], after a
    /// WINDOW ADJUST when its credit is spent, else once the output buffer
    /// drains ([`Session::wake_writers`], in the order channels were cut
    /// short), which makes a flush due at once.
    fn want_room(
        ch: &mut Channel,
        id: ChannelId,
        sender: &mut Sender,
        waiting_for_room: &mut VecDeque<u32>,
    ) {
        ch.want_writable = true;
        if ch.credit > 0 {
            sender.mark_full();
            if !ch.queued_for_room {
                ch.queued_for_room = true;
                waiting_for_room.push_back(id.0);
            }
        }
    }

    /// The local source reached end of stream: queues EOF, or CLOSE instead
    /// when the peer already sent EOF. Idempotent; later `send_data` fails.
    /// A channel left half-closed starts its idle check at `now`
    /// ([`Config::half_close_timeout`]).
    ///
    /// Errors: [`ChannelError::UnknownChannel`], [`ChannelError::NotOpen`].
    ///
    /// Source: JMUX spec, "Channel life cycle".
    pub fn shutdown(&mut self, id: ChannelId, now: Instant) -> Result<(), ChannelError> {
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        if ch.phase != Phase::Open {
            return Err(ChannelError::NotOpen(id));
        }
        if ch.eof_sent || ch.close_sent {
            return Ok(());
        }
        ch.eof_sent = true;
        ch.want_writable = false;
        let recipient_channel_id = ch.remote_id;
        if ch.eof_received {
            ch.close_sent = true;
            self.queue(Message::Close {
                recipient_channel_id,
            });
            self.free_if_finished(id);
        } else {
            self.queue(Message::Eof {
                recipient_channel_id,
            });
            self.arm_idle(id, now);
        }
        Ok(())
    }

    /// The driver holds a local resource for this open channel (its target
    /// or client socket): the channel stays in use, counted against
    /// [`Config::max_channels`] with its id kept from reuse, until
    /// [`Session::release`], even after CLOSE went both ways and its
    /// buffered bytes were consumed. [`Event::Closed`] comes only then.
    ///
    /// Why: bytes consumed from the session may still wait in the socket
    /// (the host's write buffer, the kernel's); a channel freed at CLOSE
    /// would let a peer that fills windows towards a target that never
    /// reads, then closes, open sockets without bound. A driver that
    /// holds releases once the socket is gone or has taken every byte.
    /// Idempotent.
    ///
    /// Errors: [`ChannelError::UnknownChannel`], [`ChannelError::NotOpen`]
    /// (hold once the channel is open: after [`Session::accept`] or on
    /// [`Event::Opened`]).
    ///
    /// Source: JMUX spec, "Channel life cycle" (a party *may* reuse an id
    /// once CLOSE went both ways; "it is RECOMMENDED that all data sent
    /// before [CLOSE] be delivered to the actual destination").
    pub fn hold(&mut self, id: ChannelId) -> Result<(), ChannelError> {
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        if ch.phase != Phase::Open {
            return Err(ChannelError::NotOpen(id));
        }
        ch.held = true;
        Ok(())
    }

    /// The driver's local resource for the channel is gone (see
    /// [`Session::hold`]). A channel whose CLOSE went both ways and whose
    /// buffered bytes were consumed is freed now ([`Event::Closed`]);
    /// otherwise it is freed when that happens. Idempotent.
    ///
    /// Errors: [`ChannelError::UnknownChannel`].
    pub fn release(&mut self, id: ChannelId) -> Result<(), ChannelError> {
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        ch.held = false;
        self.free_if_finished(id);
        Ok(())
    }

    /// Abnormal end (local read or write error): queues CLOSE at once
    /// without EOF, drops the receive buffer and refuses further sends. The
    /// id is freed once the peer's CLOSE arrives ([`Event::Closed`] then). On
    /// a channel still opening, the open is abandoned silently (a late OPEN
    /// SUCCESS is answered with CLOSE); on a pending request it is
    /// [`Session::reject`] with general failure. Idempotent.
    ///
    /// Errors: [`ChannelError::UnknownChannel`].
    ///
    /// Source: JMUX spec, "Channel life cycle".
    pub fn abort(&mut self, id: ChannelId) -> Result<(), ChannelError> {
        self.forget_open_deadline(id);
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        match ch.phase {
            Phase::Opening { deadline, .. } => {
                ch.phase = Phase::Opening {
                    deadline,
                    abandoned: true,
                };
                Ok(())
            }
            Phase::Requested => self.reject(id, ReasonCode::GeneralFailure, "aborted"),
            Phase::Open => {
                ch.want_writable = false;
                if !ch.close_sent {
                    ch.close_sent = true;
                    let recipient_channel_id = ch.remote_id;
                    self.queue(Message::Close {
                        recipient_channel_id,
                    });
                }
                self.update_channel(id, |ch| {
                    // Dropped unread: as good as consumed for the window.
                    ch.rx_consumed += ch.rx.len() as u64;
                    ch.rx = BytesMut::new();
                    ch.rx_allocated = 0;
                });
                self.free_if_finished(id);
                Ok(())
            }
        }
    }

    // ----- receiving side of channels --------------------------------------

    /// The buffered bytes of a channel, without consuming them (for writing
    /// straight from the session's buffer; follow with
    /// [`Session::consume`]). Empty when nothing is buffered.
    ///
    /// Errors: [`ChannelError::UnknownChannel`].
    pub fn peek(&self, id: ChannelId) -> Result<&[u8], ChannelError> {
        self.get(id)
            .map(|ch| &ch.rx[..])
            .ok_or(ChannelError::UnknownChannel(id))
    }

    /// Consumes the first `n` buffered bytes (clamped) of a channel. Once
    /// more than the adjust threshold (32 KiB by default) of consumed bytes has
    /// accumulated, queues a WINDOW ADJUST granting them back. Consuming the
    /// last byte of a channel whose CLOSE went both ways frees it
    /// ([`Event::Closed`]).
    ///
    /// Errors: [`ChannelError::UnknownChannel`].
    ///
    /// Source: JMUX spec, "Windows and packet sizes".
    pub fn consume(&mut self, id: ChannelId, n: usize) -> Result<(), ChannelError> {
        let ch = self.get_mut(id).ok_or(ChannelError::UnknownChannel(id))?;
        let n = n.min(ch.rx.len());
        ch.rx.advance(n);
        self.exposure -= n as u64;
        let ch = self.get_mut(id).expect("checked");
        // Reclaiming the space before the read position (free when empty)
        // shows the whole allocation; past the bound, give it back.
        if ch.rx.is_empty() && ch.rx.try_reclaim(RX_KEEP_CAPACITY + 1) {
            ch.rx = BytesMut::new();
            ch.rx_allocated = 0;
        }
        ch.readable_notified = false;
        ch.rx_consumed += n as u64;
        ch.moved = ch.moved.wrapping_add(n as u64);
        if n > 0 {
            self.grant(id);
            if !self.waiting.is_empty() {
                self.grant_waiting();
            }
        }
        self.free_if_finished(id);
        Ok(())
    }

    /// [`Session::exposure`] recomputed from the channels (for checks).
    fn exposure_recount(&self) -> u64 {
        self.channels.iter().flatten().map(Channel::exposure).sum()
    }

    /// Room left in the receive budget, bytes.
    fn budget_room(&self) -> u64 {
        debug_assert_eq!(self.exposure, self.exposure_recount());
        self.config.receive_budget.saturating_sub(self.exposure)
    }

    /// The window for a new channel: `initial_window` while the receive
    /// budget has room for it, else what room is left, but at least the
    /// window floor.
    fn new_window(&self) -> u32 {
        let window = self
            .budget_room()
            .min(u64::from(self.config.initial_window))
            .max(self.window_floor);
        u32::try_from(window).unwrap_or(u32::MAX)
    }

    /// Queues a WINDOW ADJUST for `id` once more than its threshold of
    /// consumed bytes has accumulated, as far as the receive budget allows
    /// (a channel is always topped up to the window floor). Sets
    /// the channel in `waiting` when some of the grant has to wait.
    ///
    /// Source: JMUX spec, "Windows and packet sizes".
    fn grant(&mut self, id: ChannelId) {
        let floor = self.window_floor;
        // Back on the waiting list below if the budget cuts this grant short.
        self.waiting.remove(&id.0);
        let Some(ch) = self.get(id) else { return };
        if ch.phase != Phase::Open
            || ch.eof_received
            || ch.close_received
            || ch.close_sent
            || ch.rx_consumed == 0
        {
            return;
        }
        let threshold = self.adjust_threshold.min(ch.window_size / 2);
        if ch.rx_consumed <= threshold {
            return;
        }
        let own = ch.exposure();
        let room = self.budget_room();
        let owed = ch.rx_consumed;
        let mut grant = owed.min(room.max(floor.saturating_sub(own)));
        // A window opened small under pressure grows back towards
        // `initial_window` once the budget has room again.
        let growth = (u64::from(self.config.initial_window).saturating_sub(ch.window_size))
            .min(room.saturating_sub(grant));
        if grant < owed {
            self.waiting.insert(id.0);
        }
        grant = (grant + growth).min(u64::from(u32::MAX));
        if grant == 0 {
            return;
        }
        self.exposure += grant;
        let ch = self.get_mut(id).expect("checked");
        let paid = grant.min(owed);
        ch.rx_consumed -= paid;
        ch.window_size += grant - paid;
        ch.rx_window += grant;
        let msg = Message::WindowAdjust {
            recipient_channel_id: ch.remote_id,
            window_adjustment: grant as u32,
        };
        self.queue(msg);
    }

    /// Retries the WINDOW ADJUSTs that waited for room in the receive
    /// budget, round robin from where the last retry stopped, until the
    /// budget has no room left: O(channels served), however many are open
    /// (it walked every channel on every consume under budget pressure).
    fn grant_waiting(&mut self) {
        if self.budget_room() == 0 {
            // Only top-ups to the window floor could go out, and each
            // channel got those when it consumed.
            return;
        }
        let start = u32::try_from(self.grant_cursor).unwrap_or(u32::MAX);
        let (mut from, mut wrapped) = (start, false);
        loop {
            let next = if wrapped {
                self.waiting.range(from..start).next().copied()
            } else {
                self.waiting.range(from..).next().copied()
            };
            let Some(id) = next else {
                if wrapped {
                    break;
                }
                (from, wrapped) = (0, true);
                continue;
            };
            // Each waiting channel once per retry (a grant cut short puts
            // it back, behind `from`).
            match id.checked_add(1) {
                Some(after) => from = after,
                None if wrapped => break,
                None => (from, wrapped) = (0, true),
            }
            let before = self.exposure;
            self.grant(ChannelId(id));
            if self.exposure > before {
                // The next retry starts after the last channel served.
                self.grant_cursor = id as usize + 1;
            }
            if self.budget_room() == 0 {
                break;
            }
        }
    }

    /// Copies up to `buf.len()` buffered bytes of a channel into `buf`,
    /// consumes them (see [`Session::consume`]) and returns how many. `0`
    /// means nothing is buffered right now (check [`Session::channel`] or
    /// wait for [`Event::Data`] / [`Event::Eof`]).
    ///
    /// Errors: [`ChannelError::UnknownChannel`].
    pub fn recv(&mut self, id: ChannelId, buf: &mut [u8]) -> Result<usize, ChannelError> {
        let src = self.peek(id)?;
        let n = src.len().min(buf.len());
        buf[..n].copy_from_slice(&src[..n]);
        self.consume(id, n)?;
        Ok(n)
    }

    // ----- incoming --------------------------------------------------------

    /// Feeds bytes received from the pipe (any chunking; JMUX over WebSocket
    /// is not message-aligned) and handles every complete message in them
    /// at time `now`. Events queue up for [`Session::poll_event`].
    ///
    /// Decoding stops while control messages over
    /// [`Config::max_control_backlog`] wait for output room, or
    /// [`Config::max_pending_events`] events (or
    /// [`Config::max_pending_open_requests`] OPENs) wait for the driver
    /// (the rest of the input stays buffered, [`Session::wants_input`] turns
    /// `false`); [`Session::resume_input`] goes on once the pipe took the
    /// answers and the driver the events.
    ///
    /// Errors: [`SessionError`] (fatal and sticky): malformed input, or DATA
    /// beyond the granted window.
    pub fn handle_input(&mut self, now: Instant, bytes: &[u8]) -> Result<(), SessionError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.decoder.push(bytes);
        self.input_paused = false;
        loop {
            if self.must_pause_input() {
                self.input_paused = true;
                break;
            }
            match self.decoder.next_message() {
                Ok(Some(msg)) => self.handle_message(now, msg)?,
                Ok(None) => break,
                Err(e) => {
                    let e = SessionError::Decode(e);
                    self.error = Some(e.clone());
                    return Err(e);
                }
            }
        }
        self.pump_control(now);
        Ok(())
    }

    /// Handles one decoded message at time `now` (for drivers with their
    /// own [`Decoder`]; [`Session::handle_input`] calls this). Such a
    /// driver applies the input bounds itself: it stops handing messages
    /// while [`Session::control_backlog`] exceeds
    /// [`Config::max_control_backlog`], and while the events it has not
    /// taken yet reach [`Config::max_pending_events`] (or its OPEN
    /// requests [`Config::max_pending_open_requests`]).
    ///
    /// Errors: [`SessionError::WindowExceeded`] (fatal and sticky).
    pub fn handle_message(&mut self, now: Instant, msg: Message) -> Result<(), SessionError> {
        if let Some(e) = &self.error {
            return Err(e.clone());
        }
        self.stats.messages_received += 1;
        match msg {
            Message::Open {
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
                destination_url,
            } => self.on_open(
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
                &destination_url,
                now,
            ),
            Message::OpenSuccess {
                recipient_channel_id,
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
            } => self.on_open_success(
                recipient_channel_id,
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
            ),
            Message::OpenFailure {
                recipient_channel_id,
                reason_code,
                description,
            } => self.on_open_failure(recipient_channel_id, reason_code, description),
            Message::WindowAdjust {
                recipient_channel_id,
                window_adjustment,
            } => self.on_window_adjust(recipient_channel_id, window_adjustment),
            Message::Data {
                recipient_channel_id,
                payload,
            } => self.on_data(recipient_channel_id, &payload)?,
            Message::Eof {
                recipient_channel_id,
            } => self.on_eof(recipient_channel_id, now),
            Message::Close {
                recipient_channel_id,
            } => self.on_close(recipient_channel_id),
        }
        self.pump_control(now);
        Ok(())
    }

    fn dropped(
        &mut self,
        recipient_channel_id: u32,
        message_type: MessageType,
        reason: DropReason,
    ) {
        self.stats.dropped_messages += 1;
        self.events.push_back(Event::Dropped {
            recipient_channel_id,
            message_type,
            reason,
        });
    }

    /// Looks up an established (Open) channel for a message from the peer;
    /// reports and returns `None` otherwise. Requested channels are unknown
    /// to the peer (it has not learnt our id yet).
    fn open_channel_for(&mut self, raw: u32, message_type: MessageType) -> Option<ChannelId> {
        let id = ChannelId(raw);
        match self.get(id).map(|ch| ch.phase) {
            Some(Phase::Open) => Some(id),
            Some(Phase::Opening { .. }) => {
                self.dropped(raw, message_type, DropReason::UnexpectedInState);
                None
            }
            Some(Phase::Requested) | None => {
                self.dropped(raw, message_type, DropReason::UnknownChannel);
                None
            }
        }
    }

    fn on_open(&mut self, remote_id: u32, window: u32, max_packet: u16, url: &str, now: Instant) {
        if usize::from(max_packet) <= DATA_OVERHEAD {
            self.stats.auto_rejected_opens += 1;
            self.queue(open_failure(
                remote_id,
                ReasonCode::GeneralFailure,
                "maximum packet size must be more than 8 bytes",
            ));
            return;
        }
        // The peer may reuse its id only once CLOSE went both ways (JMUX
        // spec, "Closing a Channel"); a second OPEN from an id still live
        // here would make two channels the peer cannot tell apart.
        let duplicate = self.remote_ids.contains_key(&remote_id);
        debug_assert_eq!(
            duplicate,
            self.channels
                .iter()
                .flatten()
                .any(|ch| counts_remote(ch) && ch.remote_id == remote_id),
            "remote_ids out of step"
        );
        if duplicate {
            self.stats.auto_rejected_opens += 1;
            self.queue(open_failure(
                remote_id,
                ReasonCode::GeneralFailure,
                &format!("sender channel id {remote_id} is already in use"),
            ));
            return;
        }
        let mut ch = Channel::new(Phase::Requested, self.new_window(), now);
        ch.remote_id = remote_id;
        ch.credit = u64::from(window);
        ch.max_send_payload = (usize::from(max_packet) - DATA_OVERHEAD).min(MAX_DATA_PAYLOAD);
        match self.alloc(ch) {
            Some(id) => {
                *self.remote_ids.entry(remote_id).or_default() += 1;
                self.arm_idle(id, now);
                self.pending_open_requests += 1;
                self.events.push_back(Event::OpenRequest {
                    id,
                    destination: Destination::parse(url),
                });
            }
            None => {
                self.stats.auto_rejected_opens += 1;
                self.queue(open_failure(
                    remote_id,
                    ReasonCode::GeneralFailure,
                    TOO_MANY_CHANNELS,
                ));
            }
        }
    }

    fn on_open_success(&mut self, raw: u32, remote_id: u32, window: u32, max_packet: u16) {
        let id = ChannelId(raw);
        self.forget_open_deadline(id);
        let abandoned = match self.get(id).map(|ch| ch.phase) {
            None => {
                self.dropped(raw, MessageType::OpenSuccess, DropReason::UnknownChannel);
                return;
            }
            Some(Phase::Opening { abandoned, .. }) => abandoned,
            Some(_) => {
                self.dropped(raw, MessageType::OpenSuccess, DropReason::UnexpectedInState);
                return;
            }
        };
        // Open from here on, with the peer's id (no CLOSE can have come).
        *self.remote_ids.entry(remote_id).or_default() += 1;
        let ch = self.get_mut(id).expect("checked");
        ch.phase = Phase::Open;
        ch.remote_id = remote_id;
        ch.credit = u64::from(window);
        ch.max_send_payload = usize::from(max_packet)
            .saturating_sub(DATA_OVERHEAD)
            .min(MAX_DATA_PAYLOAD);
        if abandoned || ch.max_send_payload == 0 {
            // Close the channel the peer just opened for us.
            ch.close_sent = true;
            self.queue(Message::Close {
                recipient_channel_id: remote_id,
            });
            if !abandoned {
                self.events.push_back(Event::OpenFailed {
                    id,
                    reason: ReasonCode::GeneralFailure,
                    description: "peer maximum packet size is 8 bytes or less".to_owned(),
                });
            }
            return;
        }
        ch.visible = true;
        self.events.push_back(Event::Opened { id });
    }

    fn on_open_failure(&mut self, raw: u32, reason: ReasonCode, description: String) {
        let id = ChannelId(raw);
        let Some(ch) = self.get(id) else {
            self.dropped(raw, MessageType::OpenFailure, DropReason::UnknownChannel);
            return;
        };
        let Phase::Opening { abandoned, .. } = ch.phase else {
            self.dropped(raw, MessageType::OpenFailure, DropReason::UnexpectedInState);
            return;
        };
        if !abandoned {
            self.events.push_back(Event::OpenFailed {
                id,
                reason,
                description,
            });
        }
        self.free(id);
    }

    fn on_window_adjust(&mut self, raw: u32, adjustment: u32) {
        let Some(id) = self.open_channel_for(raw, MessageType::WindowAdjust) else {
            return;
        };
        let room = self.room_for_writers();
        let none_waiting = self.waiting_for_room.is_empty();
        let ch = self.get_mut(id).expect("checked");
        // The window must never exceed 2^32 - 1 bytes (JMUX spec, "Data
        // Transfer"): a peer's excess is not credit, and is counted.
        let credit = ch.credit + u64::from(adjustment);
        ch.credit = credit.min(MAX_WINDOW);
        if credit > MAX_WINDOW {
            self.stats.window_overflows += 1;
        }
        let ch = self.get_mut(id).expect("checked");
        if ch.want_writable && ch.can_send() && ch.credit > 0 {
            // Behind channels waiting for room it waits in the list too
            // (woken at the next drain, made due at once).
            if room && none_waiting {
                ch.want_writable = false;
                self.grant_room(id.0);
                self.events.push_back(Event::Writable { id });
            } else if !ch.queued_for_room {
                ch.queued_for_room = true;
                self.waiting_for_room.push_back(id.0);
                if room {
                    self.sender.mark_full();
                }
            }
        }
    }

    fn on_data(&mut self, raw: u32, payload: &[u8]) -> Result<(), SessionError> {
        let Some(id) = self.open_channel_for(raw, MessageType::Data) else {
            self.stats.dropped_data_bytes += payload.len() as u64;
            return Ok(());
        };
        let max_payload = usize::from(self.config.max_packet_size) - DATA_OVERHEAD;
        let ch = self.get_mut(id).expect("checked");
        if ch.close_sent {
            // In flight when we closed: normal race, drop quietly.
            self.stats.dropped_messages += 1;
            self.stats.dropped_data_bytes += payload.len() as u64;
            return Ok(());
        }
        if ch.eof_received || ch.close_received {
            self.stats.dropped_data_bytes += payload.len() as u64;
            self.dropped(raw, MessageType::Data, DropReason::UnexpectedInState);
            return Ok(());
        }
        let len = payload.len();
        if len as u64 > ch.rx_window {
            let e = SessionError::WindowExceeded {
                id,
                len,
                window: ch.rx_window,
            };
            self.error = Some(e.clone());
            return Err(e);
        }
        if len == 0 {
            return Ok(());
        }
        ch.rx_window -= len as u64;
        reserve_within_window(&mut ch.rx, &mut ch.rx_allocated, len, ch.rx_window);
        ch.rx.extend_from_slice(payload);
        ch.moved = ch.moved.wrapping_add(len as u64);
        let notify = !ch.readable_notified;
        ch.readable_notified = true;
        self.stats.data_bytes_received += len as u64;
        if len > max_payload {
            self.stats.oversized_data += 1;
        }
        if notify {
            self.events.push_back(Event::Data { id });
        }
        Ok(())
    }

    fn on_eof(&mut self, raw: u32, now: Instant) {
        let Some(id) = self.open_channel_for(raw, MessageType::Eof) else {
            return;
        };
        let ch = self.get(id).expect("checked");
        if ch.eof_received || ch.close_received {
            self.dropped(raw, MessageType::Eof, DropReason::UnexpectedInState);
            return;
        }
        self.update_channel(id, |ch| ch.eof_received = true);
        let ch = self.get_mut(id).expect("checked");
        if ch.close_sent {
            // We aborted; the application no longer cares.
            return;
        }
        let reply_close = ch.eof_sent;
        let recipient_channel_id = ch.remote_id;
        if reply_close {
            ch.close_sent = true;
        }
        self.events.push_back(Event::Eof { id });
        if reply_close {
            self.queue(Message::Close {
                recipient_channel_id,
            });
        } else {
            self.arm_idle(id, now);
        }
        self.free_if_finished(id);
    }

    fn on_close(&mut self, raw: u32) {
        let Some(id) = self.open_channel_for(raw, MessageType::Close) else {
            return;
        };
        if self.get(id).expect("checked").close_received {
            self.dropped(raw, MessageType::Close, DropReason::UnexpectedInState);
            return;
        }
        let remote = self.get(id).expect("checked").remote_id;
        self.remote_gone(remote);
        self.update_channel(id, |ch| ch.close_received = true);
        self.peer_closed.insert(id.0);
        let ch = self.get_mut(id).expect("checked");
        ch.want_writable = false;
        if !ch.close_sent {
            // Stop writing; our side is done as far as the pipe goes (DATA
            // already queued stays ahead of this CLOSE).
            ch.close_sent = true;
            let recipient_channel_id = ch.remote_id;
            self.queue(Message::Close {
                recipient_channel_id,
            });
        }
        self.free_if_finished(id);
    }

    /// Handles protocol timers due at `now`: the optional open timeout and
    /// the channels' idle checks ([`Config::idle_timeout`],
    /// [`Config::half_close_timeout`]). Call when
    /// [`Session::next_deadline`] has passed; harmless otherwise.
    pub fn handle_timeout(&mut self, now: Instant) {
        self.check_idle(now);
        while let Some(&(deadline, raw)) = self.open_deadlines.first() {
            if now < deadline {
                break;
            }
            self.open_deadlines.pop_first();
            let Some(ch) = self.channels.get_mut(raw as usize).and_then(Option::as_mut) else {
                continue;
            };
            // Kept in step with the phase (see `forget_open_deadline`).
            debug_assert_eq!(
                ch.phase,
                Phase::Opening {
                    deadline: Some(deadline),
                    abandoned: false
                }
            );
            ch.phase = Phase::Opening {
                deadline: None,
                abandoned: true,
            };
            self.events.push_back(Event::OpenFailed {
                id: ChannelId(raw),
                reason: ReasonCode::TtlExpired,
                description: "no answer to OPEN before the open timeout".to_owned(),
            });
        }
    }

    /// Runs the idle checks due at `now`: a channel whose bytes moved
    /// since its check was set, that is held back by backpressure or that
    /// is not open yet gets a new check a period later; one that stayed
    /// silent is ended ([`Event::HalfCloseTimeout`],
    /// [`Event::IdleTimeout`]). O(log channels) per check.
    fn check_idle(&mut self, now: Instant) {
        while let Some(&(deadline, raw)) = self.idle_deadlines.first() {
            if now < deadline {
                break;
            }
            self.idle_deadlines.pop_first();
            let Some(ch) = self.channels.get(raw as usize).and_then(Option::as_ref) else {
                continue;
            };
            let Some((armed, mark)) = ch.idle_check else {
                continue;
            };
            debug_assert_eq!(armed, deadline, "one entry per channel");
            let Some(timeout) = self.idle_timeout_for(ch) else {
                // CLOSE went (or the bound is off): nothing to bound.
                self.channels[raw as usize]
                    .as_mut()
                    .expect("live")
                    .idle_check = None;
                continue;
            };
            let half_closed = ch.half_closed();
            // Input the driver has not taken (its local socket is not
            // taking bytes), a send waiting for the peer's window (the far
            // end's reader is slow), or an OPEN not answered yet:
            // backpressure or a wait, not idleness.
            let busy = ch.moved != mark
                || !ch.rx.is_empty()
                || ch.want_writable
                || ch.phase != Phase::Open;
            let ch = self.channels[raw as usize].as_mut().expect("live");
            if busy {
                let next = now + timeout;
                ch.idle_check = Some((next, ch.moved));
                self.idle_deadlines.insert((next, raw));
                continue;
            }
            ch.idle_check = None;
            let id = ChannelId(raw);
            if half_closed {
                self.stats.half_close_timeouts += 1;
                self.events.push_back(Event::HalfCloseTimeout { id });
            } else {
                self.stats.idle_timeouts += 1;
                self.events.push_back(Event::IdleTimeout { id });
            }
            let _ = self.abort(id);
        }
    }

    /// Since when channel `id` has moved no payload byte (sent, received
    /// or consumed), as far as calls to this method can tell: it compares
    /// the channel's byte count with the one seen at the previous call (at
    /// first, at the channel's creation), and a change makes the answer
    /// `now`. So a channel silent since its creation reports its creation,
    /// and one that moved since the last call reports `now`: it never
    /// reports a channel quieter than it is, and costs the data path
    /// nothing. A channel held back by backpressure (input the driver has
    /// not taken, a send waiting for the peer's window) is moving: `now`.
    /// `None` when the channel is not open (its OPEN unanswered, or CLOSE
    /// went either way) or the id is unknown. For a driver choosing which
    /// channel to give up for a new one (the JMUX guest's fair share).
    pub fn quiet_since(&mut self, id: ChannelId, now: Instant) -> Option<Instant> {
        let ch = self.get_mut(id)?;
        if ch.moved != ch.quiet.1 {
            ch.quiet = (now, ch.moved);
        }
        if ch.phase != Phase::Open || ch.close_sent || ch.close_received {
            return None;
        }
        if !ch.rx.is_empty() || ch.want_writable {
            return Some(now);
        }
        Some(ch.quiet.0)
    }

    /// A channel whose CLOSE arrived from the peer since the last call
    /// (lowest id first), once each; `None` when there is none. No
    /// [`Event`] reports it: a driver that keeps the channel's socket after
    /// CLOSE ([`Session::hold`]) learns here, without visiting every
    /// channel, that CLOSE may have gone both ways (check
    /// [`Session::channel`]). Ids of freed channels leave the set, so it
    /// holds at most the channels in use.
    ///
    /// Source: JMUX spec, "Closing a Channel".
    pub fn poll_peer_closed(&mut self) -> Option<ChannelId> {
        self.peer_closed.pop_first().map(ChannelId)
    }

    /// The next event, in order; `None` when there is none.
    pub fn poll_event(&mut self) -> Option<Event> {
        let event = self.events.pop_front();
        if let Some(Event::OpenRequest { .. }) = event {
            self.pending_open_requests -= 1;
        }
        event
    }

    // ----- output to the pipe ----------------------------------------------

    /// Drain point: the driver has handled all ready input and local work.
    /// Moves queued control messages into the output buffer and applies the
    /// coalescing rules (see [`crate::sender`]): returns `true` when
    /// [`Session::transmit`] holds bytes to write to the pipe now.
    pub fn poll_flush(&mut self, now: Instant) -> bool {
        self.pump_control(now);
        self.wake_writers();
        self.sender.poll_flush(now)
    }

    /// Like [`Session::poll_flush`] for a driver that is still busy (not a
    /// drain point): only the 1 ms backstop, a held-back drain flush that
    /// became due, or a full buffer make a flush due. Call it inside long
    /// loops (e.g. after each `send_data`) and on a deadline wake-up.
    pub fn poll_flush_busy(&mut self, now: Instant) -> bool {
        self.pump_control(now);
        self.wake_writers();
        self.sender.poll_flush_busy(now)
    }

    /// Bytes to write to the pipe now, in order (empty when no flush is
    /// due). For a WebSocket pipe send them as one binary message; never
    /// send an empty one (JMUX spec, "Framing").
    pub fn transmit(&self) -> &[u8] {
        self.sender.pending()
    }

    /// Reports that the first `n` bytes of [`Session::transmit`] were
    /// written. Frees output room and may emit [`Event::Writable`].
    pub fn advance_transmit(&mut self, n: usize) {
        self.sender.advance(n);
        self.wake_writers();
    }

    /// When the driver must wake up even if no I/O happens: the earliest of
    /// the sender's flush deadline (held-back drain flush at +50 us, backstop
    /// at +1 ms from the first unflushed byte), open timeouts and the
    /// channels' idle checks. A time in
    /// the past means "now". On wake-up call [`Session::handle_timeout`]
    /// and [`Session::poll_flush_busy`] (or `poll_flush` at a drain point).
    /// `None`: sleep until I/O. Control messages queued since the last call
    /// taking `now` are not covered: call `poll_flush` before sleeping.
    pub fn next_deadline(&self) -> Option<Instant> {
        let opens = self.open_deadlines.first().map(|&(deadline, _)| deadline);
        let idle = self.idle_deadlines.first().map(|&(deadline, _)| deadline);
        [self.sender.next_deadline(), opens, idle]
            .into_iter()
            .flatten()
            .min()
    }

    /// Whether control messages are waiting for output room (backpressure
    /// on the pipe). A driver may stop reading input while this holds.
    pub fn is_output_blocked(&self) -> bool {
        !self.control.is_empty()
    }

    /// Encoded bytes of control messages waiting for room in the output
    /// buffer (see [`Config::max_control_backlog`]).
    pub fn control_backlog(&self) -> usize {
        self.control_bytes
    }

    /// Whether the driver should read more input from the pipe: `false`
    /// while decoding is paused at [`Config::max_control_backlog`] (the
    /// peer sends without reading our answers),
    /// [`Config::max_pending_events`] or
    /// [`Config::max_pending_open_requests`]. Take the events, write the pipe,
    /// then call [`Session::resume_input`]; do not wait for pipe input
    /// meanwhile.
    pub fn wants_input(&self) -> bool {
        !self.input_paused
    }

    /// Decodes the input held back by [`Config::max_control_backlog`] or
    /// [`Config::max_pending_events`] once there is room again (moving
    /// queued control messages to the output first); a no-op when input
    /// is not paused.
    ///
    /// Errors: as [`Session::handle_input`].
    pub fn resume_input(&mut self, now: Instant) -> Result<(), SessionError> {
        if !self.input_paused {
            return Ok(());
        }
        self.pump_control(now);
        if self.must_pause_input() {
            return Ok(());
        }
        self.handle_input(now, &[])
    }

    /// Whether decoding must wait: too many answers wait for output room
    /// ([`Config::max_control_backlog`]) or too many events for the
    /// driver ([`Config::max_pending_events`],
    /// [`Config::max_pending_open_requests`]).
    fn must_pause_input(&self) -> bool {
        self.control_bytes > self.config.max_control_backlog
            || self.events.len() >= self.config.max_pending_events
            || self.pending_open_requests >= self.config.max_pending_open_requests
    }
}

/// Makes room for `len` more bytes in a receive buffer without letting its
/// capacity pass what the channel can hold now: its bytes plus `len` plus
/// the window left. (Doubling alone took a 1 MiB window's buffer to 2 MiB
/// of capacity when filled by 4088-byte payloads, so buffered input could
/// cost twice the receive budget in guest memory.) Space before the read
/// position is reused first, without allocating.
fn reserve_within_window(rx: &mut BytesMut, allocated: &mut usize, len: usize, window_left: u64) {
    if rx.capacity() - rx.len() >= len || rx.try_reclaim(len) {
        return;
    }
    let need = rx.len() + len;
    let most = need.saturating_add(usize::try_from(window_left).unwrap_or(usize::MAX));
    let capacity = (2 * rx.capacity()).max(need).min(most);
    let mut grown = BytesMut::with_capacity(capacity);
    grown.extend_from_slice(rx);
    *rx = grown;
    *allocated = rx.capacity();
}

/// The description of the OPEN FAILURE (reason 1, general failure) a
/// session sends for an OPEN that finds every one of its
/// [`Config::max_channels`] ids in use (its peer's channels count until
/// their CLOSE went both ways, a lingering one included). The JMUX spec has
/// no reason code for it; a Tether peer that sees this description knows
/// the OPEN may succeed later, once a channel closes.
pub const TOO_MANY_CHANNELS: &str = "too many channels";

/// Builds an OPEN FAILURE whose description is cut (at a character boundary)
/// to fit one message.
fn open_failure(recipient_channel_id: u32, reason: ReasonCode, description: &str) -> Message {
    let max = MAX_MESSAGE_SIZE - MessageType::OpenFailure.fixed_size();
    let mut end = description.len().min(max);
    while !description.is_char_boundary(end) {
        end -= 1;
    }
    Message::OpenFailure {
        recipient_channel_id,
        reason_code: reason,
        description: description[..end].to_owned(),
    }
}

/// Whether a channel holds the peer's sender id in the peer's view:
/// requested by the peer or open, and its CLOSE has not come (JMUX spec,
/// "Closing a Channel": the peer may reuse an id only once CLOSE went both
/// ways). What [`Session::remote_ids`] counts.
fn counts_remote(ch: &Channel) -> bool {
    matches!(ch.phase, Phase::Requested | Phase::Open) && !ch.close_received
}
