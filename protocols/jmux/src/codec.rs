//! JMUX wire codec: the seven messages, their exact byte layouts, an
//! incremental [`Decoder`] for a byte stream cut at arbitrary points, and the
//! destination URL type.
//!
//! Source: JMUX spec, "Framing" and "Messages" sections
//! (`/work/shared/spec/jmux.md`, summarising `docs/JMUX-spec.md` of
//! Devolutions Gateway).
//!
//! Every message is `msgType: u8 | msgSize: u16 BE | msgFlags: u8 | body`,
//! where `msgSize` counts the whole message including the 4-byte header.
//! Flags are written as 0 and ignored on read. All integers are big-endian.

use std::fmt;

use bytes::{Buf, Bytes, BytesMut};

/// Length of the common message header in bytes: type u8, size u16, flags u8.
///
/// Source: JMUX spec, "Framing".
pub const HEADER_LEN: usize = 4;

/// Largest possible JMUX message in bytes (header included): `msgSize` is a
/// u16. Source: JMUX spec, "Framing".
pub const MAX_MESSAGE_SIZE: usize = u16::MAX as usize;

/// Bytes a DATA message spends before its payload: 4-byte header plus the
/// 4-byte recipient channel id. The largest DATA payload under a maximum
/// packet size `max` is `max - DATA_OVERHEAD`.
///
/// Source: JMUX spec, "Windows and packet sizes".
pub const DATA_OVERHEAD: usize = HEADER_LEN + 4;

/// Largest DATA payload that fits in one message at all:
/// `65535 - 8 = 65527` bytes.
pub const MAX_DATA_PAYLOAD: usize = MAX_MESSAGE_SIZE - DATA_OVERHEAD;

/// The seven JMUX message type codes.
///
/// Source: JMUX spec, "Messages".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum MessageType {
    /// 100: OPEN, request a new channel.
    Open = 100,
    /// 101: OPEN SUCCESS, the channel request was accepted.
    OpenSuccess = 101,
    /// 102: OPEN FAILURE, the channel request was refused.
    OpenFailure = 102,
    /// 103: WINDOW ADJUST, more send credit for the peer.
    WindowAdjust = 103,
    /// 104: DATA, channel payload.
    Data = 104,
    /// 105: EOF, the sender will send no more DATA on the channel.
    Eof = 105,
    /// 106: CLOSE, the sender is done with the channel.
    Close = 106,
}

impl MessageType {
    /// Maps a wire code (100..=106) to its type; `None` for any other byte.
    pub fn from_u8(code: u8) -> Option<Self> {
        Some(match code {
            100 => Self::Open,
            101 => Self::OpenSuccess,
            102 => Self::OpenFailure,
            103 => Self::WindowAdjust,
            104 => Self::Data,
            105 => Self::Eof,
            106 => Self::Close,
            _ => return None,
        })
    }

    /// Size in bytes of the message's fixed part, header included: the
    /// smallest valid `msgSize` for this type (OPEN 14, OPEN SUCCESS 18,
    /// OPEN FAILURE 12, WINDOW ADJUST 12, DATA 8, EOF 8, CLOSE 8).
    ///
    /// Source: JMUX spec, "Messages" (field table).
    pub fn fixed_size(self) -> usize {
        HEADER_LEN
            + match self {
                Self::Open => 4 + 4 + 2,
                Self::OpenSuccess => 4 + 4 + 4 + 2,
                Self::OpenFailure => 4 + 4,
                Self::WindowAdjust => 4 + 4,
                Self::Data | Self::Eof | Self::Close => 4,
            }
    }

    /// Upper-case spec name, e.g. `"OPEN SUCCESS"`.
    pub fn name(self) -> &'static str {
        match self {
            Self::Open => "OPEN",
            Self::OpenSuccess => "OPEN SUCCESS",
            Self::OpenFailure => "OPEN FAILURE",
            Self::WindowAdjust => "WINDOW ADJUST",
            Self::Data => "DATA",
            Self::Eof => "EOF",
            Self::Close => "CLOSE",
        }
    }
}

impl fmt::Display for MessageType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ({})", self.name(), *self as u8)
    }
}

/// OPEN FAILURE reason code (u32 on the wire).
///
/// Source: JMUX spec, "Messages" (reason codes). Code 7 is not assigned by
/// the spec; it and every other unassigned value decode as
/// [`ReasonCode::Unknown`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReasonCode {
    /// 1: general failure.
    GeneralFailure,
    /// 2: connection not allowed by rule set.
    NotAllowedByRuleSet,
    /// 3: network unreachable.
    NetworkUnreachable,
    /// 4: host unreachable.
    HostUnreachable,
    /// 5: connection refused.
    ConnectionRefused,
    /// 6: TTL expired / connect timeout.
    TtlExpired,
    /// 8: address type not supported (also the natural answer to an
    /// unsupported destination scheme).
    AddressTypeNotSupported,
    /// Any other code, kept verbatim. Never holds one of the assigned
    /// codes when produced by [`ReasonCode::from_u32`].
    Unknown(u32),
}

impl ReasonCode {
    /// Maps a wire value to a reason code (assigned codes to their variant,
    /// anything else to `Unknown(code)`).
    pub fn from_u32(code: u32) -> Self {
        match code {
            1 => Self::GeneralFailure,
            2 => Self::NotAllowedByRuleSet,
            3 => Self::NetworkUnreachable,
            4 => Self::HostUnreachable,
            5 => Self::ConnectionRefused,
            6 => Self::TtlExpired,
            8 => Self::AddressTypeNotSupported,
            other => Self::Unknown(other),
        }
    }

    /// The wire value of this reason code.
    pub fn to_u32(self) -> u32 {
        match self {
            Self::GeneralFailure => 1,
            Self::NotAllowedByRuleSet => 2,
            Self::NetworkUnreachable => 3,
            Self::HostUnreachable => 4,
            Self::ConnectionRefused => 5,
            Self::TtlExpired => 6,
            Self::AddressTypeNotSupported => 8,
            Self::Unknown(code) => code,
        }
    }
}

impl fmt::Display for ReasonCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = match self {
            Self::GeneralFailure => "general failure",
            Self::NotAllowedByRuleSet => "not allowed by rule set",
            Self::NetworkUnreachable => "network unreachable",
            Self::HostUnreachable => "host unreachable",
            Self::ConnectionRefused => "connection refused",
            Self::TtlExpired => "TTL expired / connect timeout",
            Self::AddressTypeNotSupported => "address type not supported",
            Self::Unknown(code) => return write!(f, "unknown reason code {code}"),
        };
        write!(f, "{text} ({})", self.to_u32())
    }
}

/// One JMUX message. Field names follow the spec; channel ids are u32,
/// windows are u32 byte counts, maximum packet sizes are u16 byte counts
/// that include the 8 bytes of DATA header and channel id.
///
/// Source: JMUX spec, "Messages".
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// 100 OPEN: `sender_channel_id u32 | initial_window_size u32 |
    /// maximum_packet_size u16 | destination URL (rest, UTF-8)`.
    ///
    /// The URL is kept as text so that a session can answer a malformed or
    /// unsupported destination with OPEN FAILURE instead of failing the
    /// session; parse it with [`Destination::parse`].
    Open {
        /// The opener's id for the channel; the peer sends to this id.
        sender_channel_id: u32,
        /// Payload bytes the peer may send before a WINDOW ADJUST.
        initial_window_size: u32,
        /// Largest whole DATA message (header included) the opener accepts.
        maximum_packet_size: u16,
        /// Destination URL, e.g. `tcp://google.com:443`.
        destination_url: String,
    },
    /// 101 OPEN SUCCESS: `recipient_channel_id u32 | sender_channel_id u32 |
    /// initial_window_size u32 | maximum_packet_size u16`.
    OpenSuccess {
        /// The opener's id (from OPEN).
        recipient_channel_id: u32,
        /// The accepting side's id for the channel.
        sender_channel_id: u32,
        /// Payload bytes the opener may send before a WINDOW ADJUST.
        initial_window_size: u32,
        /// Largest whole DATA message (header included) the acceptor takes.
        maximum_packet_size: u16,
    },
    /// 102 OPEN FAILURE: `recipient_channel_id u32 | reason_code u32 |
    /// description (rest, UTF-8, may be empty)`.
    ///
    /// Decoding replaces invalid UTF-8 in the description with U+FFFD rather
    /// than failing the session over a cosmetic string.
    OpenFailure {
        /// The opener's id (from OPEN).
        recipient_channel_id: u32,
        /// Why the channel was refused.
        reason_code: ReasonCode,
        /// Human-readable detail, possibly empty.
        description: String,
    },
    /// 103 WINDOW ADJUST: `recipient_channel_id u32 | window_adjustment u32`.
    WindowAdjust {
        /// The receiver's id for the channel.
        recipient_channel_id: u32,
        /// Extra payload bytes the receiver of this message may send.
        window_adjustment: u32,
    },
    /// 104 DATA: `recipient_channel_id u32 | payload (rest)`. The payload is
    /// at most [`MAX_DATA_PAYLOAD`] bytes.
    Data {
        /// The receiver's id for the channel.
        recipient_channel_id: u32,
        /// Channel bytes.
        payload: Bytes,
    },
    /// 105 EOF: `recipient_channel_id u32`.
    Eof {
        /// The receiver's id for the channel.
        recipient_channel_id: u32,
    },
    /// 106 CLOSE: `recipient_channel_id u32`.
    Close {
        /// The receiver's id for the channel.
        recipient_channel_id: u32,
    },
}

impl Message {
    /// The type code of this message.
    pub fn message_type(&self) -> MessageType {
        match self {
            Self::Open { .. } => MessageType::Open,
            Self::OpenSuccess { .. } => MessageType::OpenSuccess,
            Self::OpenFailure { .. } => MessageType::OpenFailure,
            Self::WindowAdjust { .. } => MessageType::WindowAdjust,
            Self::Data { .. } => MessageType::Data,
            Self::Eof { .. } => MessageType::Eof,
            Self::Close { .. } => MessageType::Close,
        }
    }

    /// The channel id this message is addressed to (`recipient_channel_id`),
    /// or `None` for OPEN, which names the sender's id instead.
    pub fn recipient_channel_id(&self) -> Option<u32> {
        match self {
            Self::Open { .. } => None,
            Self::OpenSuccess {
                recipient_channel_id,
                ..
            }
            | Self::OpenFailure {
                recipient_channel_id,
                ..
            }
            | Self::WindowAdjust {
                recipient_channel_id,
                ..
            }
            | Self::Data {
                recipient_channel_id,
                ..
            }
            | Self::Eof {
                recipient_channel_id,
            }
            | Self::Close {
                recipient_channel_id,
            } => Some(*recipient_channel_id),
        }
    }

    /// Encoded length in bytes, header included (the `msgSize` value when it
    /// fits in a u16). May exceed 65535, in which case [`Message::encode`]
    /// fails.
    pub fn encoded_len(&self) -> usize {
        let variable = match self {
            Self::Open {
                destination_url, ..
            } => destination_url.len(),
            Self::OpenFailure { description, .. } => description.len(),
            Self::Data { payload, .. } => payload.len(),
            _ => 0,
        };
        self.message_type().fixed_size() + variable
    }

    /// Appends the exact wire bytes of this message to `buf` (header with
    /// flags 0, then the body).
    ///
    /// Errors: [`EncodeError::TooLarge`] when the message would exceed
    /// 65535 bytes (URL, description or payload too long); `buf` is left
    /// unchanged then.
    ///
    /// Source: JMUX spec, "Framing" and "Messages".
    pub fn encode(&self, buf: &mut Vec<u8>) -> Result<(), EncodeError> {
        let size = self.encoded_len();
        if size > MAX_MESSAGE_SIZE {
            return Err(EncodeError::TooLarge {
                message_type: self.message_type(),
                size,
            });
        }
        buf.reserve(size);
        put_header(buf, self.message_type(), size as u16);
        match self {
            Self::Open {
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
                destination_url,
            } => {
                buf.extend_from_slice(&sender_channel_id.to_be_bytes());
                buf.extend_from_slice(&initial_window_size.to_be_bytes());
                buf.extend_from_slice(&maximum_packet_size.to_be_bytes());
                buf.extend_from_slice(destination_url.as_bytes());
            }
            Self::OpenSuccess {
                recipient_channel_id,
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
            } => {
                buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
                buf.extend_from_slice(&sender_channel_id.to_be_bytes());
                buf.extend_from_slice(&initial_window_size.to_be_bytes());
                buf.extend_from_slice(&maximum_packet_size.to_be_bytes());
            }
            Self::OpenFailure {
                recipient_channel_id,
                reason_code,
                description,
            } => {
                buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
                buf.extend_from_slice(&reason_code.to_u32().to_be_bytes());
                buf.extend_from_slice(description.as_bytes());
            }
            Self::WindowAdjust {
                recipient_channel_id,
                window_adjustment,
            } => {
                buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
                buf.extend_from_slice(&window_adjustment.to_be_bytes());
            }
            Self::Data {
                recipient_channel_id,
                payload,
            } => {
                buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
                buf.extend_from_slice(payload);
            }
            Self::Eof {
                recipient_channel_id,
            }
            | Self::Close {
                recipient_channel_id,
            } => {
                buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
            }
        }
        Ok(())
    }

    /// Decodes exactly one complete message from `bytes` (its first
    /// `msgSize` bytes; anything after them is ignored).
    ///
    /// Errors: every [`DecodeError`] the [`Decoder`] can report, plus
    /// [`DecodeError::Truncated`] when `bytes` is shorter than the header or
    /// than `msgSize`.
    pub fn decode(bytes: &[u8]) -> Result<Message, DecodeError> {
        if bytes.len() < HEADER_LEN {
            return Err(DecodeError::Truncated {
                needed: HEADER_LEN,
                available: bytes.len(),
            });
        }
        let header = Header::parse(bytes, MAX_MESSAGE_SIZE)?;
        if bytes.len() < header.size {
            return Err(DecodeError::Truncated {
                needed: header.size,
                available: bytes.len(),
            });
        }
        decode_body(
            header.message_type,
            Bytes::copy_from_slice(&bytes[HEADER_LEN..header.size]),
        )
    }
}

/// Writes a DATA header (type 104, size `8 + payload_len`, flags 0, then the
/// recipient id) so a caller can append the payload without building a
/// [`Message`]; used by the sender to avoid a copy per message.
///
/// Panics (debug) if `payload_len > MAX_DATA_PAYLOAD`; callers bound it.
pub(crate) fn put_data_header(buf: &mut Vec<u8>, recipient_channel_id: u32, payload_len: usize) {
    debug_assert!(payload_len <= MAX_DATA_PAYLOAD);
    put_header(buf, MessageType::Data, (DATA_OVERHEAD + payload_len) as u16);
    buf.extend_from_slice(&recipient_channel_id.to_be_bytes());
}

fn put_header(buf: &mut Vec<u8>, message_type: MessageType, size: u16) {
    buf.push(message_type as u8);
    buf.extend_from_slice(&size.to_be_bytes());
    buf.push(0); // msgFlags: reserved, written as 0.
}

/// Why a message could not be encoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EncodeError {
    /// The encoded message would be `size` bytes, more than the 65535 that
    /// `msgSize` (u16) can express. Source: JMUX spec, "Framing".
    #[error(
        "{message_type} message would be {size} bytes, more than the 65535 a JMUX message can hold"
    )]
    TooLarge {
        /// Type of the message that did not fit.
        message_type: MessageType,
        /// Its would-be size in bytes, header included.
        size: usize,
    },
}

/// Why the byte stream could not be decoded. Every variant names the
/// offending message type (the raw byte when it is not a known type) and the
/// announced `msgSize`. Any of these ends a JMUX session: the reference
/// implementation does the same (JMUX spec, "Windows and packet sizes",
/// last bullet).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// `msgSize` is below the 4-byte header it includes.
    #[error("message type {message_type}: msgSize {size} is smaller than the 4-byte header")]
    SizeBelowHeader {
        /// Raw type byte of the message.
        message_type: u8,
        /// Announced msgSize in bytes.
        size: u16,
    },
    /// `msgSize` exceeds the decoder's configured maximum (at most 65535).
    #[error("message type {message_type}: msgSize {size} exceeds the accepted maximum {max}")]
    TooLarge {
        /// Raw type byte of the message.
        message_type: u8,
        /// Announced msgSize in bytes.
        size: u16,
        /// Configured maximum message size in bytes.
        max: usize,
    },
    /// The type byte is none of 100..=106.
    #[error("unknown message type {message_type} (msgSize {size})")]
    UnknownType {
        /// Raw type byte.
        message_type: u8,
        /// Announced msgSize in bytes.
        size: u16,
    },
    /// `msgSize` is too small for the type's fixed fields
    /// (see [`MessageType::fixed_size`]).
    #[error("{message_type}: msgSize {size} is smaller than its fixed part of {min} bytes")]
    TooShortForType {
        /// Type of the message.
        message_type: MessageType,
        /// Announced msgSize in bytes.
        size: u16,
        /// Smallest valid msgSize for the type, in bytes.
        min: usize,
    },
    /// A text field that must be UTF-8 is not (the OPEN destination URL).
    #[error("{message_type}: {field} is not valid UTF-8 (valid up to byte {valid_up_to})")]
    InvalidUtf8 {
        /// Type of the message.
        message_type: MessageType,
        /// Name of the field, e.g. `"destination URL"`.
        field: &'static str,
        /// Length of the valid UTF-8 prefix, in bytes.
        valid_up_to: usize,
    },
    /// Only from [`Message::decode`]: the slice holds fewer bytes than the
    /// header or the announced `msgSize`.
    #[error("truncated message: {needed} bytes needed, {available} available")]
    Truncated {
        /// Bytes needed, header included.
        needed: usize,
        /// Bytes given.
        available: usize,
    },
}

#[derive(Debug, Clone, Copy)]
struct Header {
    message_type: MessageType,
    size: usize,
}

impl Header {
    /// Parses and validates a header from the first 4 bytes of `bytes`
    /// (caller guarantees at least 4): size >= 4, size <= max, known type,
    /// size >= the type's fixed part. Flags are ignored.
    fn parse(bytes: &[u8], max: usize) -> Result<Header, DecodeError> {
        let raw_type = bytes[0];
        let size = u16::from_be_bytes([bytes[1], bytes[2]]);
        // bytes[3] is msgFlags: reserved, ignored on read.
        if usize::from(size) < HEADER_LEN {
            return Err(DecodeError::SizeBelowHeader {
                message_type: raw_type,
                size,
            });
        }
        if usize::from(size) > max {
            return Err(DecodeError::TooLarge {
                message_type: raw_type,
                size,
                max,
            });
        }
        let Some(message_type) = MessageType::from_u8(raw_type) else {
            return Err(DecodeError::UnknownType {
                message_type: raw_type,
                size,
            });
        };
        let min = message_type.fixed_size();
        if usize::from(size) < min {
            return Err(DecodeError::TooShortForType {
                message_type,
                size,
                min,
            });
        }
        Ok(Header {
            message_type,
            size: usize::from(size),
        })
    }
}

/// Decodes a body (everything after the header) whose length has already
/// been checked against the type's fixed part. Fixed-size messages ignore
/// trailing bytes inside `msgSize` (framing stays intact; lenient like the
/// reference).
fn decode_body(message_type: MessageType, mut body: Bytes) -> Result<Message, DecodeError> {
    debug_assert!(body.len() + HEADER_LEN >= message_type.fixed_size());
    Ok(match message_type {
        MessageType::Open => {
            let sender_channel_id = body.get_u32();
            let initial_window_size = body.get_u32();
            let maximum_packet_size = body.get_u16();
            let destination_url =
                String::from_utf8(body.to_vec()).map_err(|e| DecodeError::InvalidUtf8 {
                    message_type,
                    field: "destination URL",
                    valid_up_to: e.utf8_error().valid_up_to(),
                })?;
            Message::Open {
                sender_channel_id,
                initial_window_size,
                maximum_packet_size,
                destination_url,
            }
        }
        MessageType::OpenSuccess => Message::OpenSuccess {
            recipient_channel_id: body.get_u32(),
            sender_channel_id: body.get_u32(),
            initial_window_size: body.get_u32(),
            maximum_packet_size: body.get_u16(),
        },
        MessageType::OpenFailure => {
            let recipient_channel_id = body.get_u32();
            let reason_code = ReasonCode::from_u32(body.get_u32());
            let description = match std::str::from_utf8(&body) {
                Ok(s) => s.to_owned(),
                Err(_) => String::from_utf8_lossy(&body).into_owned(),
            };
            Message::OpenFailure {
                recipient_channel_id,
                reason_code,
                description,
            }
        }
        MessageType::WindowAdjust => Message::WindowAdjust {
            recipient_channel_id: body.get_u32(),
            window_adjustment: body.get_u32(),
        },
        MessageType::Data => {
            let recipient_channel_id = body.get_u32();
            Message::Data {
                recipient_channel_id,
                payload: body,
            }
        }
        MessageType::Eof => Message::Eof {
            recipient_channel_id: body.get_u32(),
        },
        MessageType::Close => Message::Close {
            recipient_channel_id: body.get_u32(),
        },
    })
}

/// Incremental JMUX decoder over a byte stream cut at arbitrary points.
///
/// JMUX over WebSocket is not aligned to WebSocket messages (JMUX spec,
/// "Framing"): push every received chunk with [`Decoder::push`] (an empty
/// chunk is harmless), then call [`Decoder::next_message`] until it returns
/// `Ok(None)`.
///
/// Memory: the decoder holds at most one partial message (< 65535 bytes)
/// plus whatever was pushed and not yet taken out. DATA payloads are handed
/// out as [`Bytes`] slices of the internal buffer (no copy); the buffer's
/// allocation is reused once those slices are dropped.
///
/// Errors are sticky: after the first [`DecodeError`] the stream has lost
/// framing and every later call returns the same error.
#[derive(Debug)]
pub struct Decoder {
    buf: BytesMut,
    max_message_size: usize,
    error: Option<DecodeError>,
}

impl Default for Decoder {
    fn default() -> Self {
        Self::new()
    }
}

impl Decoder {
    /// A decoder accepting messages up to 65535 bytes, the JMUX maximum
    /// (the reference's limit since August 2024; JMUX spec, "Windows and
    /// packet sizes").
    pub fn new() -> Self {
        Self::with_max_message_size(MAX_MESSAGE_SIZE)
    }

    /// A decoder that rejects (with [`DecodeError::TooLarge`]) any message
    /// whose `msgSize` exceeds `max` bytes. `max` is clamped to
    /// `4..=65535`.
    pub fn with_max_message_size(max: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            max_message_size: max.clamp(HEADER_LEN, MAX_MESSAGE_SIZE),
            error: None,
        }
    }

    /// The largest accepted message size in bytes.
    pub fn max_message_size(&self) -> usize {
        self.max_message_size
    }

    /// Appends received stream bytes (any length, including 0).
    pub fn push(&mut self, bytes: &[u8]) {
        if self.error.is_none() {
            self.buf.extend_from_slice(bytes);
        }
    }

    /// Bytes pushed but not yet returned as messages.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// Takes the next complete message out of the buffer.
    ///
    /// Returns `Ok(None)` when more bytes are needed. A header is validated
    /// as soon as its 4 bytes are in, so a bad header fails before its body
    /// arrives.
    ///
    /// Errors: [`DecodeError`] (sticky, see the type docs).
    pub fn next_message(&mut self) -> Result<Option<Message>, DecodeError> {
        if let Some(err) = &self.error {
            return Err(err.clone());
        }
        if self.buf.len() < HEADER_LEN {
            return Ok(None);
        }
        let header = match Header::parse(&self.buf, self.max_message_size) {
            Ok(h) => h,
            Err(e) => return Err(self.fail(e)),
        };
        if self.buf.len() < header.size {
            // Make room for the rest of this message in one allocation.
            self.buf.reserve(header.size - self.buf.len());
            return Ok(None);
        }
        let mut frame = self.buf.split_to(header.size).freeze();
        frame.advance(HEADER_LEN);
        match decode_body(header.message_type, frame) {
            Ok(msg) => Ok(Some(msg)),
            Err(e) => Err(self.fail(e)),
        }
    }

    fn fail(&mut self, e: DecodeError) -> DecodeError {
        self.error = Some(e.clone());
        self.buf = BytesMut::new();
        e
    }
}

/// A parsed destination URL `scheme://host:port`.
///
/// Parsing splits at the first `://`, then at the **last** `:`; IPv6
/// literals appear without brackets (`tcp://::1:22` is host `::1`, port 22).
/// One pair of enclosing brackets around the host is tolerated and removed
/// (`tcp://[::1]:22` parses like `tcp://::1:22`) when the host has no
/// other bracket, so a parsed destination prints as a URL that parses to
/// it again. Only the `tcp` scheme is
/// defined by the spec; other schemes parse fine and are for the caller to
/// refuse (with [`ReasonCode::AddressTypeNotSupported`]).
///
/// Source: JMUX spec, "Messages" (destination URL).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Destination {
    /// Scheme before `://`, e.g. `tcp`. Never empty.
    pub scheme: String,
    /// Host name or IP literal (IPv6 without brackets). Never empty.
    pub host: String,
    /// TCP port.
    pub port: u16,
}

impl Destination {
    /// A `tcp://host:port` destination.
    pub fn tcp(host: impl Into<String>, port: u16) -> Self {
        Self {
            scheme: "tcp".to_owned(),
            host: host.into(),
            port,
        }
    }

    /// Whether the scheme is `tcp`, the only one the spec defines.
    pub fn is_tcp(&self) -> bool {
        self.scheme == "tcp"
    }

    /// Parses `scheme://host:port`.
    ///
    /// Errors: [`DestinationError`] naming the URL and what is wrong
    /// (no `://`, empty scheme, no `:port`, empty host, port not a u16).
    pub fn parse(url: &str) -> Result<Self, DestinationError> {
        let err = |kind| DestinationError {
            url: url.to_owned(),
            kind,
        };
        let (scheme, rest) = url
            .split_once("://")
            .ok_or_else(|| err(DestinationErrorKind::MissingScheme))?;
        if scheme.is_empty() {
            return Err(err(DestinationErrorKind::MissingScheme));
        }
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| err(DestinationErrorKind::MissingPort))?;
        // Only an outermost pair goes, so that printing and parsing again
        // gives the same host (`[[a]]` stays as it is, not `[a]` then `a`).
        let host = host
            .strip_prefix('[')
            .and_then(|h| h.strip_suffix(']'))
            .filter(|h| !h.contains(['[', ']']))
            .unwrap_or(host);
        if host.is_empty() {
            return Err(err(DestinationErrorKind::EmptyHost));
        }
        if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
            return Err(err(DestinationErrorKind::InvalidPort));
        }
        let port: u16 = port
            .parse()
            .map_err(|_| err(DestinationErrorKind::InvalidPort))?;
        Ok(Self {
            scheme: scheme.to_owned(),
            host: host.to_owned(),
            port,
        })
    }
}

impl fmt::Display for Destination {
    /// Formats as the wire URL `scheme://host:port` (IPv6 without brackets).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}://{}:{}", self.scheme, self.host, self.port)
    }
}

impl std::str::FromStr for Destination {
    type Err = DestinationError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// A destination URL that is not `scheme://host:port`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid destination URL {url:?}: {kind}")]
pub struct DestinationError {
    /// The URL as received.
    pub url: String,
    /// What is wrong with it.
    pub kind: DestinationErrorKind,
}

/// What is wrong with a destination URL.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum DestinationErrorKind {
    /// No `://`, or nothing before it.
    #[error("missing scheme (expected scheme://host:port)")]
    MissingScheme,
    /// No `:` after the host.
    #[error("missing :port")]
    MissingPort,
    /// Nothing between `://` and the last `:`.
    #[error("empty host")]
    EmptyHost,
    /// The port is not a decimal number in 0..=65535.
    #[error("port is not a number in 0..=65535")]
    InvalidPort,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn hex(s: &str) -> Vec<u8> {
        let s: String = s.chars().filter(|c| c.is_ascii_hexdigit()).collect();
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    /// Every test vector of the JMUX spec ("Test vectors" section), with the
    /// message it encodes.
    fn spec_vectors() -> Vec<(&'static str, Message)> {
        vec![
            (
                "64 0022 00 | 00000001 00000400 0400 | 7463703a2f2f676f6f676c652e636f6d3a343433",
                Message::Open {
                    sender_channel_id: 1,
                    initial_window_size: 0x400,
                    maximum_packet_size: 0x400,
                    destination_url: "tcp://google.com:443".into(),
                },
            ),
            (
                "65 0012 00 | 00000001 00000002 00000400 7FFF",
                Message::OpenSuccess {
                    recipient_channel_id: 1,
                    sender_channel_id: 2,
                    initial_window_size: 0x400,
                    maximum_packet_size: 0x7FFF,
                },
            ),
            (
                "66 0011 00 | 00000001 00000002 6572726f72",
                Message::OpenFailure {
                    recipient_channel_id: 1,
                    reason_code: ReasonCode::NotAllowedByRuleSet,
                    description: "error".into(),
                },
            ),
            (
                "67 000C 00 | 00000001 00000200",
                Message::WindowAdjust {
                    recipient_channel_id: 1,
                    window_adjustment: 0x200,
                },
            ),
            (
                "68 000C 00 | 00000001 0B0C0D0E",
                Message::Data {
                    recipient_channel_id: 1,
                    payload: Bytes::from_static(&[0x0B, 0x0C, 0x0D, 0x0E]),
                },
            ),
            (
                "69 0008 00 | 00000001",
                Message::Eof {
                    recipient_channel_id: 1,
                },
            ),
            (
                "6A 0008 00 | 00000001",
                Message::Close {
                    recipient_channel_id: 1,
                },
            ),
        ]
    }

    #[test]
    fn spec_vectors_encode_byte_for_byte() {
        for (vector, msg) in spec_vectors() {
            let mut buf = Vec::new();
            msg.encode(&mut buf).unwrap();
            assert_eq!(buf, hex(vector), "encoding {msg:?}");
            assert_eq!(buf.len(), msg.encoded_len());
        }
    }

    #[test]
    fn spec_vectors_decode_byte_for_byte() {
        for (vector, msg) in spec_vectors() {
            let bytes = hex(vector);
            assert_eq!(Message::decode(&bytes).unwrap(), msg, "vector {vector}");
            let mut dec = Decoder::new();
            dec.push(&bytes);
            assert_eq!(dec.next_message().unwrap(), Some(msg));
            assert_eq!(dec.next_message().unwrap(), None);
            assert_eq!(dec.buffered(), 0);
        }
    }

    #[test]
    fn spec_vectors_decode_one_byte_at_a_time_concatenated() {
        let mut stream = Vec::new();
        for (vector, _) in spec_vectors() {
            stream.extend(hex(vector));
        }
        let mut dec = Decoder::new();
        let mut got = Vec::new();
        for b in stream {
            dec.push(&[b]);
            while let Some(m) = dec.next_message().unwrap() {
                got.push(m);
            }
        }
        let want: Vec<_> = spec_vectors().into_iter().map(|(_, m)| m).collect();
        assert_eq!(got, want);
    }

    /// Spec vector: header `66 07 10 00` announces an OPEN FAILURE of
    /// 0x0710 = 1808 bytes; the decoder waits for all of them.
    #[test]
    fn spec_vector_header_announces_1808_bytes() {
        let mut dec = Decoder::new();
        dec.push(&hex("66 0710 00"));
        assert_eq!(dec.next_message().unwrap(), None);
        let mut body = vec![0, 0, 0, 7, 0, 0, 0, 5];
        body.resize(1808 - 4, b'x');
        dec.push(&body[..body.len() - 1]);
        assert_eq!(dec.next_message().unwrap(), None);
        dec.push(&body[body.len() - 1..]);
        match dec.next_message().unwrap() {
            Some(Message::OpenFailure {
                recipient_channel_id: 7,
                reason_code: ReasonCode::ConnectionRefused,
                description,
            }) => assert_eq!(description.len(), 1808 - 12),
            other => panic!("unexpected {other:?}"),
        }
        assert_eq!(
            Message::decode(&hex("66 0710 00")),
            Err(DecodeError::Truncated {
                needed: 1808,
                available: 4
            })
        );
    }

    #[test]
    fn flags_are_ignored_on_read() {
        let mut bytes = hex("69 0008 00 | 00000001");
        bytes[3] = 0xFF;
        assert_eq!(
            Message::decode(&bytes).unwrap(),
            Message::Eof {
                recipient_channel_id: 1
            }
        );
    }

    #[test]
    fn decode_errors_name_type_and_reason() {
        let cases: Vec<(&str, DecodeError)> = vec![
            (
                "68 0003 00",
                DecodeError::SizeBelowHeader {
                    message_type: 0x68,
                    size: 3,
                },
            ),
            (
                "07 0008 00 00000000",
                DecodeError::UnknownType {
                    message_type: 7,
                    size: 8,
                },
            ),
            (
                "65 0011 00",
                DecodeError::TooShortForType {
                    message_type: MessageType::OpenSuccess,
                    size: 0x11,
                    min: 18,
                },
            ),
            (
                "64 000D 00",
                DecodeError::TooShortForType {
                    message_type: MessageType::Open,
                    size: 13,
                    min: 14,
                },
            ),
            (
                "69 0007 00",
                DecodeError::TooShortForType {
                    message_type: MessageType::Eof,
                    size: 7,
                    min: 8,
                },
            ),
            (
                "64 0010 00 | 00000001 00000400 0400 | c328",
                DecodeError::InvalidUtf8 {
                    message_type: MessageType::Open,
                    field: "destination URL",
                    valid_up_to: 0,
                },
            ),
        ];
        for (bytes, want) in cases {
            let mut dec = Decoder::new();
            dec.push(&hex(bytes));
            assert_eq!(dec.next_message(), Err(want.clone()), "{bytes}");
            // Sticky.
            dec.push(&hex("69 0008 00 | 00000001"));
            assert_eq!(dec.next_message(), Err(want.clone()));
            assert!(!want.to_string().is_empty());
        }
    }

    #[test]
    fn decoder_max_message_size() {
        let mut dec = Decoder::with_max_message_size(4096);
        dec.push(&hex("68 1001 00"));
        assert_eq!(
            dec.next_message(),
            Err(DecodeError::TooLarge {
                message_type: 0x68,
                size: 4097,
                max: 4096,
            })
        );
    }

    #[test]
    fn open_failure_description_lossy_and_trailing_bytes_ignored() {
        let m = Message::decode(&hex("66 000D 00 | 00000001 00000007 ff")).unwrap();
        assert_eq!(
            m,
            Message::OpenFailure {
                recipient_channel_id: 1,
                reason_code: ReasonCode::Unknown(7),
                description: "\u{FFFD}".into(),
            }
        );
        let m = Message::decode(&hex("6A 000A 00 | 00000001 ffff")).unwrap();
        assert_eq!(
            m,
            Message::Close {
                recipient_channel_id: 1
            }
        );
    }

    #[test]
    fn encode_too_large_fails_cleanly() {
        let m = Message::Data {
            recipient_channel_id: 0,
            payload: Bytes::from(vec![0; MAX_DATA_PAYLOAD + 1]),
        };
        let mut buf = vec![1];
        assert_eq!(
            m.encode(&mut buf),
            Err(EncodeError::TooLarge {
                message_type: MessageType::Data,
                size: 65536
            })
        );
        assert_eq!(buf, vec![1]);
        let m = Message::Data {
            recipient_channel_id: 0,
            payload: Bytes::from(vec![0; MAX_DATA_PAYLOAD]),
        };
        m.encode(&mut buf).unwrap();
        assert_eq!(&buf[1..4], &[104, 0xFF, 0xFF]);
    }

    #[test]
    fn reason_codes_match_spec_values() {
        let all = [
            (ReasonCode::GeneralFailure, 1),
            (ReasonCode::NotAllowedByRuleSet, 2),
            (ReasonCode::NetworkUnreachable, 3),
            (ReasonCode::HostUnreachable, 4),
            (ReasonCode::ConnectionRefused, 5),
            (ReasonCode::TtlExpired, 6),
            (ReasonCode::AddressTypeNotSupported, 8),
            (ReasonCode::Unknown(7), 7),
            (ReasonCode::Unknown(0), 0),
        ];
        for (code, value) in all {
            assert_eq!(code.to_u32(), value);
            assert_eq!(ReasonCode::from_u32(value), code);
        }
    }

    #[test]
    fn destination_parsing() {
        assert_eq!(
            Destination::parse("tcp://google.com:443").unwrap(),
            Destination::tcp("google.com", 443)
        );
        assert_eq!(
            Destination::parse("tcp://::1:22").unwrap(),
            Destination::tcp("::1", 22)
        );
        assert_eq!(
            Destination::parse("tcp://[::1]:22").unwrap(),
            Destination::tcp("::1", 22)
        );
        assert_eq!(
            Destination::parse("tcp://fe80::1%eth0:8080").unwrap(),
            Destination::tcp("fe80::1%eth0", 8080)
        );
        let udp = Destination::parse("udp://10.0.0.1:53").unwrap();
        assert!(!udp.is_tcp());
        assert_eq!(udp.scheme, "udp");
        assert_eq!(Destination::tcp("::1", 22).to_string(), "tcp://::1:22");
        let kind = |s: &str| Destination::parse(s).unwrap_err().kind;
        assert_eq!(kind("google.com:443"), DestinationErrorKind::MissingScheme);
        assert_eq!(
            kind("://google.com:443"),
            DestinationErrorKind::MissingScheme
        );
        assert_eq!(kind("tcp://google.com"), DestinationErrorKind::MissingPort);
        assert_eq!(kind("tcp://:443"), DestinationErrorKind::EmptyHost);
        assert_eq!(kind("tcp://h:65536"), DestinationErrorKind::InvalidPort);
        assert_eq!(kind("tcp://h:"), DestinationErrorKind::InvalidPort);
        assert_eq!(kind("tcp://h:+1"), DestinationErrorKind::InvalidPort);
        // The last-colon rule makes a port-less bracketless IPv6 literal
        // ambiguous; the spec's rule is applied literally.
        assert_eq!(
            Destination::parse("tcp://::1").unwrap(),
            Destination::tcp(":", 1)
        );
    }

    /// Found by the `decode` fuzz target: `tcp://[[a]]:1` parsed to host
    /// `[a]`, which printed as `tcp://[a]:1` and parsed again to `a`.
    #[test]
    fn a_parsed_destination_prints_as_a_url_that_parses_to_it() {
        for url in [
            "tcp://[[a]]:1",
            "tcp://[a]]:1",
            "tcp://[[::1]:2",
            "tcp://[::1]:22",
        ] {
            let d = Destination::parse(url).unwrap();
            assert_eq!(Destination::parse(&d.to_string()), Ok(d), "{url}");
        }
        assert_eq!(Destination::parse("tcp://[[a]]:1").unwrap().host, "[[a]]");
        assert_eq!(Destination::parse("tcp://[a]:1").unwrap().host, "a");
    }

    pub(crate) fn arb_message() -> impl Strategy<Value = Message> {
        let id = any::<u32>();
        prop_oneof![
            (
                id,
                any::<u32>(),
                any::<u16>(),
                proptest::string::string_regex(".{0,64}").unwrap()
            )
                .prop_map(|(a, w, m, u)| Message::Open {
                    sender_channel_id: a,
                    initial_window_size: w,
                    maximum_packet_size: m,
                    destination_url: u,
                }),
            (id, any::<u32>(), any::<u32>(), any::<u16>()).prop_map(|(r, s, w, m)| {
                Message::OpenSuccess {
                    recipient_channel_id: r,
                    sender_channel_id: s,
                    initial_window_size: w,
                    maximum_packet_size: m,
                }
            }),
            (id, any::<u32>(), ".{0,32}").prop_map(|(r, c, d)| Message::OpenFailure {
                recipient_channel_id: r,
                reason_code: ReasonCode::from_u32(c % 10),
                description: d,
            }),
            (id, any::<u32>()).prop_map(|(r, w)| Message::WindowAdjust {
                recipient_channel_id: r,
                window_adjustment: w,
            }),
            (
                id,
                prop_oneof![
                    proptest::collection::vec(any::<u8>(), 0..64),
                    proptest::collection::vec(any::<u8>(), MAX_DATA_PAYLOAD - 2..=MAX_DATA_PAYLOAD),
                ]
            )
                .prop_map(|(r, p)| Message::Data {
                    recipient_channel_id: r,
                    payload: Bytes::from(p),
                }),
            id.prop_map(|r| Message::Eof {
                recipient_channel_id: r
            }),
            id.prop_map(|r| Message::Close {
                recipient_channel_id: r
            }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// encode -> decode is the identity for every message kind, whatever
        /// the chunking of the byte stream.
        #[test]
        fn round_trip_any_chunking(
            msgs in proptest::collection::vec(arb_message(), 1..8),
            cuts in proptest::collection::vec(1usize..200, 1..50),
        ) {
            let mut stream = Vec::new();
            for m in &msgs {
                m.encode(&mut stream).unwrap();
            }
            let mut dec = Decoder::new();
            let mut got = Vec::new();
            let mut pos = 0;
            let mut i = 0;
            while pos < stream.len() {
                let n = cuts[i % cuts.len()].min(stream.len() - pos);
                i += 1;
                dec.push(&stream[pos..pos + n]);
                pos += n;
                while let Some(m) = dec.next_message().unwrap() {
                    got.push(m);
                }
            }
            prop_assert_eq!(dec.buffered(), 0);
            prop_assert_eq!(got, msgs);
        }

        /// Single-message decode agrees with encode.
        #[test]
        fn round_trip_single(m in arb_message()) {
            let mut buf = Vec::new();
            m.encode(&mut buf).unwrap();
            prop_assert_eq!(buf.len(), m.encoded_len());
            prop_assert_eq!(u16::from_be_bytes([buf[1], buf[2]]) as usize, buf.len());
            prop_assert_eq!(buf[3], 0);
            prop_assert_eq!(Message::decode(&buf).unwrap(), m);
        }

        /// The decoder never panics on arbitrary bytes, however they are cut.
        #[test]
        fn decoder_never_panics(
            bytes in proptest::collection::vec(any::<u8>(), 0..2048),
            cut in 1usize..64,
        ) {
            let mut dec = Decoder::new();
            for chunk in bytes.chunks(cut) {
                dec.push(chunk);
                while let Ok(Some(_)) = dec.next_message() {}
            }
            let _ = Message::decode(&bytes);
        }

        /// Decoding arbitrary bytes behind a valid header never panics and,
        /// when it succeeds, re-encodes to a message of the same type.
        #[test]
        fn decode_valid_headers_arbitrary_bodies(
            ty in 100u8..=106,
            body in proptest::collection::vec(any::<u8>(), 0..64),
        ) {
            let mut bytes = vec![ty];
            bytes.extend(((body.len() + 4) as u16).to_be_bytes());
            bytes.push(0);
            bytes.extend(&body);
            if let Ok(m) = Message::decode(&bytes) {
                prop_assert_eq!(m.message_type() as u8, ty);
                let mut out = Vec::new();
                m.encode(&mut out).unwrap();
            }
        }

        /// Destination URLs round-trip through Display and parse, including
        /// bracketless IPv6.
        #[test]
        fn destination_round_trip(
            scheme in "[a-z][a-z0-9+.-]{0,8}",
            host in "[a-zA-Z0-9.:-]{1,40}",
            port in any::<u16>(),
        ) {
            let d = Destination { scheme, host, port };
            prop_assert_eq!(Destination::parse(&d.to_string()).unwrap(), d);
        }
    }
}
