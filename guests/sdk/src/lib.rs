//! Bindings to the `tether:streams` world for guest components, plus a few
//! helpers that block the guest (and only the guest) on a pollable.
//!
//! A guest is a plain Rust `fn main` built for `wasm32-wasip2`; it imports
//! these interfaces on top of `wasi:cli`, and the monotonic clock (its
//! pollables wait on a deadline in the same `poll` as the streams).

wit_bindgen::generate!({
    path: "../../wit",
    world: "tether:streams/guest",
    generate_all,
});

#[cfg(feature = "p3")]
pub mod p3;

pub use tether::streams::aead;
pub use tether::streams::readiness::{Interest, ReadinessSet};
pub use tether::streams::tcp;
pub use tether::streams::types::ErrorCode;
pub use tether::streams::websocket::{
    self, CloseInfo, ConnectOptions, ListenOptions, Message, MessageStream,
};
pub use wasi::clocks::monotonic_clock;
pub use wasi::io::poll::{Pollable, poll};
pub use wasi::io::streams::{InputStream, OutputStream, StreamError};

/// A one-line description of an error for people.
pub fn describe(e: &ErrorCode) -> String {
    match e {
        ErrorCode::InvalidUrl(s) => format!("invalid URL: {s}"),
        ErrorCode::Denied(s) => format!("denied: {s}"),
        ErrorCode::DnsFailure(s) => format!("DNS failure: {s}"),
        ErrorCode::ConnectionRefused(s) => format!("connection refused: {s}"),
        ErrorCode::Timeout => "timed out".into(),
        ErrorCode::TlsFailure(s) => format!("TLS failure: {s}"),
        ErrorCode::ProtocolError(s) => format!("protocol error: {s}"),
        ErrorCode::Closed => "closed".into(),
        ErrorCode::MessageTooLarge(n) => format!("message too large (limit {n} bytes)"),
        ErrorCode::WouldBlock => "would block".into(),
        ErrorCode::InvalidArgument(s) => format!("invalid argument: {s}"),
        ErrorCode::Other(s) => s.clone(),
    }
}

/// The short name of an error's case (`denied`, `timeout`, ...), for
/// machine-readable output.
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

/// Connects to a `ws://`/`wss://` URL and blocks the guest until the
/// handshake finished. Errors: any `error-code` but `would-block`.
pub fn connect(url: &str, subprotocols: &[&str]) -> Result<MessageStream, ErrorCode> {
    let options = ConnectOptions {
        subprotocols: subprotocols.iter().map(|s| s.to_string()).collect(),
        headers: Vec::new(),
    };
    let future = websocket::connect(url, &options)?;
    let ready = future.subscribe();
    loop {
        if let Some(result) = future.get() {
            return result;
        }
        ready.block();
    }
}

/// Sends `message`, blocking the guest while the host's outbound buffer is
/// full (backpressure). `ready` is the stream's `subscribe-send` pollable.
pub fn send_blocking(
    stream: &MessageStream,
    ready: &Pollable,
    message: &Message,
) -> Result<(), ErrorCode> {
    loop {
        match stream.send(message) {
            Err(ErrorCode::WouldBlock) => ready.block(),
            other => return other,
        }
    }
}

/// Receives the next message, blocking the guest until one arrives.
/// `ready` is the stream's `subscribe-receive` pollable. `Ok(None)` once
/// the stream has closed normally.
pub fn receive_blocking(
    stream: &MessageStream,
    ready: &Pollable,
) -> Result<Option<Message>, ErrorCode> {
    loop {
        match stream.receive() {
            Ok(Some(m)) => return Ok(Some(m)),
            Ok(None) => ready.block(),
            Err(ErrorCode::Closed) => return Ok(None),
            Err(e) => return Err(e),
        }
    }
}

/// A TCP connection: the byte stream and its `wasi:io` streams.
pub struct Connection {
    /// Half-close and addresses.
    pub stream: tcp::ByteStream,
    /// Bytes from the peer.
    pub input: InputStream,
    /// Bytes to the peer.
    pub output: OutputStream,
}

/// Dials `host:port` and blocks the guest until connected.
pub fn tcp_connect(address: &str) -> Result<Connection, ErrorCode> {
    let future = tcp::connect(address)?;
    let ready = future.subscribe();
    loop {
        if let Some(result) = future.get() {
            let (stream, input, output) = result?;
            return Ok(Connection {
                stream,
                input,
                output,
            });
        }
        ready.block();
    }
}

/// Writes all of `bytes`, blocking on backpressure. Errors when the stream
/// is closed or failed.
pub fn write_all(output: &OutputStream, mut bytes: &[u8]) -> Result<(), StreamError> {
    while !bytes.is_empty() {
        let permit = output.check_write()? as usize;
        if permit == 0 {
            output.subscribe().block();
            continue;
        }
        let n = permit.min(bytes.len());
        output.write(&bytes[..n])?;
        bytes = &bytes[n..];
    }
    Ok(())
}

/// Takes up to `max` ready registrations from `set`, blocking the guest
/// until there is at least one. `ready` is the set's `subscribe` pollable
/// (create it once). O(returned) per call, however many registrations the
/// set holds.
pub fn wait_ready(set: &ReadinessSet, ready: &Pollable, max: u32) -> Vec<(u64, Interest)> {
    loop {
        let events = set.take_ready(max);
        if !events.is_empty() {
            return events;
        }
        ready.block();
    }
}

/// Like [`wait_ready`], but gives up at `deadline` (monotonic clock,
/// nanoseconds): returns an empty list then. The set's pollable and one
/// clock pollable are the only two in the `poll` call.
pub fn wait_ready_until(
    set: &ReadinessSet,
    ready: &Pollable,
    max: u32,
    deadline: u64,
) -> Vec<(u64, Interest)> {
    loop {
        let events = set.take_ready(max);
        if !events.is_empty() || monotonic_clock::now() >= deadline {
            return events;
        }
        let timer = monotonic_clock::subscribe_instant(deadline);
        poll(&[ready, &timer]);
    }
}
