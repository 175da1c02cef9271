//! `tether-jmux`: a sans-IO implementation of JMUX, the channel multiplexer
//! of Devolutions Gateway and `jetsocat` (many TCP channels over one reliable
//! byte pipe, e.g. a WebSocket).
//!
//! No I/O, no async runtime, no clock reads: bytes and the current time go
//! in as arguments, bytes and events come out (the quinn-proto style). It
//! builds for `wasm32-wasip2`, so a guest component can drive it.
//!
//! Three pieces, one file each:
//! - [`codec`]: the seven messages with their exact byte layouts, the
//!   incremental [`Decoder`], [`Destination`] URLs and [`ReasonCode`]s
//!   (JMUX spec, "Framing" and "Messages").
//! - [`session`] (with [`channel`]): the [`Session`] state machine for many
//!   channels: ids, per-channel windows and packet sizes, receive buffers,
//!   the EOF/CLOSE life cycle (JMUX spec, "Windows and packet sizes",
//!   "Channel life cycle").
//! - [`sender`]: the coalescing write policy ([`Sender`]): flush on drain
//!   with 50 us spacing, 1 ms backstop from the first unflushed byte, a
//!   bounded buffer that pushes back instead of dropping (latency lessons 1
//!   and 4).
//! - [`proxy`]: the jetsocat-style front end of a JMUX proxy, also without
//!   I/O: the `jmux-proxy` command line, the target filter (`--allow`), and
//!   the SOCKS5 and HTTP proxy handshakes of its listeners.
//!
//! # Driving a session
//!
//! ```
//! use std::time::Instant;
//! use tether_jmux::{Config, Destination, Event, Session};
//!
//! let mut session = Session::new(Config::default()).unwrap();
//! let now = Instant::now();
//! let id = session.open(&Destination::tcp("example.com", 443), now).unwrap();
//! // ... after reading bytes from the pipe: session.handle_input(now, &bytes)?;
//! while let Some(event) = session.poll_event() {
//!     match event {
//!         Event::Opened { id } => { /* session.send_data(id, ..., now) */ }
//!         _ => {}
//!     }
//! }
//! // Drain point: everything ready was handled.
//! if session.poll_flush(now) {
//!     let out = session.transmit().to_vec(); // write to the pipe
//!     session.advance_transmit(out.len());
//!     assert_eq!(out[0], 100); // OPEN
//! }
//! // Input paused (too many events or answers waiting) goes on once they
//! // were taken: then handle the new events; read the pipe only while
//! // `wants_input()`.
//! session.resume_input(now).unwrap();
//! assert!(session.wants_input());
//! // Sleep until I/O or this deadline, then poll_flush_busy / handle_timeout.
//! let _wake_at = session.next_deadline();
//! # let _ = id;
//! ```

#![warn(missing_docs)]

pub mod channel;
pub mod codec;
pub mod proxy;
pub mod sender;
pub mod session;

pub use channel::{ChannelId, ChannelInfo, ChannelState};
pub use codec::{
    DATA_OVERHEAD, DecodeError, Decoder, Destination, DestinationError, DestinationErrorKind,
    EncodeError, HEADER_LEN, MAX_DATA_PAYLOAD, MAX_MESSAGE_SIZE, Message, MessageType, ReasonCode,
};
pub use sender::{FlushReason, PushError, Sender, SenderConfig};
pub use session::{
    ChannelError, Config, ConfigError, DropReason, Event, MIN_WINDOW, Session, SessionError, Stats,
    TOO_MANY_CHANNELS,
};
