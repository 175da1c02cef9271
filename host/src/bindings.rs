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
    },
    require_store_data_send: true,
});

pub use tether::streams::types::ErrorCode;
