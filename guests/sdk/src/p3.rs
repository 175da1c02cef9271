//! Bindings of the async interface (`tether:streams-async`, `wit-p3`) and
//! waits over them that are safe to cancel.
//!
//! A p3 guest generates its own `command` world and maps these interfaces
//! onto this module, so that every p3 guest shares one set of types and
//! helpers:
//!
//! ```ignore
//! wit_bindgen::generate!({
//!     path: "../../wit-p3",
//!     world: "tether:streams-async/command",
//!     with: {
//!         "tether:streams-async/types@0.1.0": tether_guest_sdk::p3::types,
//!         "tether:streams-async/websocket@0.1.0": tether_guest_sdk::p3::websocket,
//!         "tether:streams-async/tcp@0.1.0": tether_guest_sdk::p3::tcp,
//!     },
//! });
//! ```
//!
//! The waits ([`MessageStream::next_message`], [`MessageStream::send_message`],
//! [`Listener::next_stream`], [`ByteListener::next_connection`]) loop over
//! the interface's non-blocking call and its `-ready` wait. The data moves
//! only in the non-blocking call, in the poll that then returns, so
//! dropping one of these futures at any point (racing it against a timer,
//! say) loses nothing.

wit_bindgen::generate!({
    path: "../../wit-p3",
    world: "tether:streams-async/imports",
});

pub use tether::streams_async::tcp::{self, ByteListener, ByteStream};
pub use tether::streams_async::types::{self, ErrorCode};
pub use tether::streams_async::websocket::{
    self, CloseInfo, ConnectOptions, ListenOptions, Listener, Message, MessageStream,
};

/// The short name of an error's case (`denied`, `timeout`, ...), for
/// machine-readable output; the same names as [`crate::error_kind`].
pub fn error_kind(e: &ErrorCode) -> &'static str {
    match e {
        ErrorCode::InvalidUrl(_) => "invalid-url",
        ErrorCode::Denied(_) => "denied",
        ErrorCode::DnsFailure(_) => "dns-failure",
        ErrorCode::ConnectionRefused(_) => "connection-refused",
        ErrorCode::Timeout => "timeout",
        ErrorCode::TlsFailure(_) => "tls-failure",
        ErrorCode::ProtocolError(_) => "protocol-error",
        ErrorCode::Closed => "closed",
        ErrorCode::MessageTooLarge(_) => "message-too-large",
        ErrorCode::WouldBlock => "would-block",
        ErrorCode::InvalidArgument(_) => "invalid-argument",
        ErrorCode::Other(_) => "other",
    }
}

/// `kind: details`, for messages to people.
pub fn describe(e: &ErrorCode) -> String {
    format!("{}: {e:?}", error_kind(e))
}

/// The payload length of a message, in bytes.
pub fn message_len(m: &Message) -> usize {
    match m {
        Message::Text(t) => t.len(),
        Message::Binary(b) => b.len(),
    }
}

impl MessageStream {
    /// Waits for and takes the next message: `Ok(Some(_))`, `Ok(None)`
    /// once the stream closed normally and every message was taken, the
    /// error that ended the stream otherwise (`invalid-argument` when the
    /// guest has too many async calls pending). Cancel-safe: a message
    /// leaves the host only in the poll that returns it.
    pub async fn next_message(&self) -> Result<Option<Message>, ErrorCode> {
        loop {
            match self.receive() {
                Ok(Some(m)) => return Ok(Some(m)),
                Ok(None) => self.receive_ready().await?,
                Err(ErrorCode::Closed) => return Ok(None),
                Err(e) => return Err(e),
            }
        }
    }

    /// Queues `message`, waiting while the host's outbound buffer is full
    /// (backpressure). Errors: as `send` (`closed`, `message-too-large`,
    /// what ended the stream). Cancel-safe: the message was queued if and
    /// only if this returned `Ok`; a future dropped earlier queued nothing.
    pub async fn send_message(&self, message: &Message) -> Result<(), ErrorCode> {
        loop {
            match self.send(message) {
                Err(ErrorCode::WouldBlock) => self.send_ready().await?,
                done => return done,
            }
        }
    }
}

impl Listener {
    /// Waits for and takes the next upgraded stream. Errors: `closed` once
    /// the host stopped accepting and every stream was taken. Cancel-safe:
    /// a stream leaves the queue only in the poll that returns it.
    pub async fn next_stream(&self) -> Result<MessageStream, ErrorCode> {
        loop {
            match self.accept()? {
                Some(stream) => return Ok(stream),
                None => self.accept_ready().await?,
            }
        }
    }
}

impl ByteListener {
    /// Waits for and takes the next accepted connection. Errors: `closed`
    /// once the host stopped accepting and every connection was taken.
    /// Cancel-safe, as [`Listener::next_stream`].
    pub async fn next_connection(&self) -> Result<ByteStream, ErrorCode> {
        loop {
            match self.accept()? {
                Some(stream) => return Ok(stream),
                None => self.accept_ready().await?,
            }
        }
    }
}
