//! The `bindgen!` call for the `tether:streams` WIT package, and nothing else.
//!
//! `wasi:io` types map onto wasmtime-wasi's own, so the input and output
//! streams and pollables Tether hands out are ordinary `wasi:io` resources.

wasmtime::component::bindgen!({
    path: "../wit",
    world: "tether:streams/imports",
    imports: { default: trappable },
    with: {
        "wasi:io": wasmtime_wasi::p2::bindings::io,
        "tether:streams/websocket.message-stream": crate::websocket::MessageStream,
        "tether:streams/websocket.future-message-stream": crate::websocket::FutureMessageStream,
        "tether:streams/websocket.listener": crate::websocket::Listener,
        "tether:streams/tcp.byte-stream": crate::tcp::ByteStream,
        "tether:streams/tcp.future-byte-stream": crate::tcp::FutureByteStream,
        "tether:streams/tcp.byte-listener": crate::tcp::ByteListener,
        "tether:streams/readiness.readiness-set": crate::readiness::ReadinessSet,
        "tether:streams/aead.packet-key": crate::aead::PacketKey,
    },
    require_store_data_send: true,
});

pub use tether::streams::types::ErrorCode;

/// One line for people: the error's kind in words, then its payload
/// (`invalid URL: `x`: relative URL without a base`).
pub fn describe(e: &ErrorCode) -> String {
    match e {
        ErrorCode::InvalidUrl(m) => format!("invalid URL: {m}"),
        ErrorCode::Denied(m) => format!("denied by policy: {m}"),
        ErrorCode::DnsFailure(m) => format!("DNS failure: {m}"),
        ErrorCode::ConnectionRefused(m) => format!("connection refused: {m}"),
        ErrorCode::Timeout => "timed out (connect, TLS or WebSocket handshake deadline)".into(),
        ErrorCode::TlsFailure(m) => format!("TLS failure: {m}"),
        ErrorCode::ProtocolError(m) => format!("protocol error: {m}"),
        ErrorCode::Closed => "closed".into(),
        ErrorCode::MessageTooLarge(n) => format!("message too large (limit {n} bytes)"),
        ErrorCode::WouldBlock => "would block".into(),
        ErrorCode::InvalidArgument(m) => format!("invalid argument: {m}"),
        ErrorCode::Other(m) => m.clone(),
    }
}
