//! The component-model-async (WASIp3-style) variant of the interface:
//! `tether:streams-async` (`wit-p3/tether.wit`), where waiting happens in
//! `async func`s (`connect`, `receive-ready`, `send-ready`,
//! `accept-ready`) instead of through `wasi:io` pollables.
//!
//! It is a thin layer over the same [`MessageStream`] the p2-style
//! interface uses (same tasks, buffers, limits and wake-ups). Nothing the
//! host hands over travels in an async call's result, so a guest can
//! cancel any call without losing a message or a stream: the `-ready`
//! calls await the stream's or listener's readiness future outside the
//! store and return nothing, and the non-blocking `send`, `receive` and
//! `accept` move the data. WebSocket listeners share the accept queue of
//! the p2-style listener; TCP byte streams (`tcp.rs`) are `stream<u8>`s
//! over the halves of [`crate::tcp`].
//!
//! Embedding: [`add_to_linker`] next to `wasmtime_wasi::p2::add_to_linker_async`
//! on an engine with `wasm_component_model_async(true)`, or [`Runner`].

mod aead;
mod runner;
mod tcp;

pub use runner::Runner;
pub use tcp::ByteStream;

use wasmtime::component::{Accessor, HasData, Linker, Resource};

use crate::readiness::Quota;
use crate::websocket::{Listener, MessageStream};
use crate::{TetherCtxView, TetherView, bindings as p2, net, websocket};

mod generated {
    wasmtime::component::bindgen!({
        path: "../wit-p3",
        world: "tether:streams-async/command",
        imports: {
            "tether:streams-async/tcp.[method]byte-stream.send": store | trappable,
            "tether:streams-async/tcp.[method]byte-stream.receive": store | trappable,
            default: trappable,
        },
        exports: { default: async | store },
        with: {
            "tether:streams-async/websocket.message-stream": crate::websocket::MessageStream,
            "tether:streams-async/websocket.listener": crate::websocket::Listener,
            "tether:streams-async/tcp.byte-stream": crate::p3::tcp::ByteStream,
            "tether:streams-async/tcp.byte-listener": crate::tcp::ByteListener,
            "tether:streams-async/aead.packet-key": crate::aead::PacketKey,
        },
        require_store_data_send: true,
    });
}

pub use generated::Command;
pub use generated::tether::streams_async::types::ErrorCode;
use generated::tether::streams_async::websocket::{
    self as wit, CloseInfo, ConnectOptions, ListenOptions, Message,
};

/// Marks the `tether:streams-async` host implementation (its store data
/// is the same [`TetherCtxView`] as the p2-style interface's).
pub struct HasTetherAsync;

impl HasData for HasTetherAsync {
    type Data<'a> = TetherCtxView<'a>;
}

/// Adds `tether:streams-async` (types, websocket, tcp) to `linker`.
pub fn add_to_linker<T: TetherView + 'static>(linker: &mut Linker<T>) -> wasmtime::Result<()> {
    use generated::tether::streams_async::{aead, tcp, types, websocket};
    types::add_to_linker::<T, HasTetherAsync>(linker, T::tether)?;
    websocket::add_to_linker::<T, HasTetherAsync>(linker, T::tether)?;
    tcp::add_to_linker::<T, HasTetherAsync>(linker, T::tether)?;
    aead::add_to_linker::<T, HasTetherAsync>(linker, T::tether)
}

/// One pending async call (`connect`, a `-ready` wait) of a
/// guest, counted while its host future lives: from the call until it
/// returns or the guest cancels it (dropping the subtask drops the host
/// future, and with it this guard).
///
/// The p3 counterpart of a readiness set's entries: a guest waits on many
/// streams at once by keeping many calls pending in the component model's
/// waitable set, and each costs the host a future. A guest may have at
/// most `readiness_set_entries` (default 65,536) pending at once; one more
/// returns `invalid-argument` naming the limit at once, and nothing else
/// changes.
pub(crate) struct PendingCall(Quota);

impl PendingCall {
    /// Counts a new pending call of the guest behind `store`, or the
    /// `invalid-argument` error when it has `readiness_set_entries` already.
    pub(crate) fn start<T>(store: &Accessor<T, HasTetherAsync>) -> Result<PendingCall, ErrorCode> {
        let quota = store.with(|mut s| s.get().ctx.readiness.clone());
        if quota.take() {
            Ok(PendingCall(quota))
        } else {
            Err(ErrorCode::InvalidArgument(format!(
                "too many pending calls: at most {} at once (limit readiness_set_entries)",
                quota.max()
            )))
        }
    }
}

impl Drop for PendingCall {
    fn drop(&mut self) {
        self.0.release(1);
    }
}

/// Starts a [`PendingCall`] or returns its error from the enclosing host
/// function.
macro_rules! pending_call {
    ($store:expr) => {
        match $crate::p3::PendingCall::start($store) {
            Ok(guard) => guard,
            Err(e) => return Ok(Err(e)),
        }
    };
}
pub(crate) use pending_call;

fn error(e: p2::ErrorCode) -> ErrorCode {
    use p2::ErrorCode as E;
    match e {
        E::InvalidUrl(s) => ErrorCode::InvalidUrl(s),
        E::Denied(s) => ErrorCode::Denied(s),
        E::DnsFailure(s) => ErrorCode::DnsFailure(s),
        E::ConnectionRefused(s) => ErrorCode::ConnectionRefused(s),
        E::Timeout => ErrorCode::Timeout,
        E::TlsFailure(s) => ErrorCode::TlsFailure(s),
        E::ProtocolError(s) => ErrorCode::ProtocolError(s),
        E::Closed => ErrorCode::Closed,
        E::MessageTooLarge(n) => ErrorCode::MessageTooLarge(n),
        E::WouldBlock => ErrorCode::WouldBlock,
        E::InvalidArgument(s) => ErrorCode::InvalidArgument(s),
        E::Other(s) => ErrorCode::Other(s),
    }
}

fn to_p2(m: Message) -> p2::tether::streams::websocket::Message {
    use p2::tether::streams::websocket::Message as M;
    match m {
        Message::Text(t) => M::Text(t),
        Message::Binary(b) => M::Binary(b),
    }
}

fn from_p2(m: p2::tether::streams::websocket::Message) -> Message {
    use p2::tether::streams::websocket::Message as M;
    match m {
        M::Text(t) => Message::Text(t),
        M::Binary(b) => Message::Binary(b),
    }
}

impl generated::tether::streams_async::types::Host for TetherCtxView<'_> {}

impl wit::Host for TetherCtxView<'_> {
    fn listen(
        &mut self,
        address: String,
        options: ListenOptions,
    ) -> wasmtime::Result<Result<Resource<Listener>, ErrorCode>> {
        let options = p2::tether::streams::websocket::ListenOptions {
            subprotocols: options.subprotocols,
        };
        match Listener::bind(self.ctx.host.clone(), &address, options) {
            Ok(l) => Ok(Ok(self.table.push(l)?)),
            Err(e) => Ok(Err(error(e))),
        }
    }
}

impl<T> wit::HostListenerWithStore<T> for HasTetherAsync {
    async fn accept_ready(
        store: &Accessor<T, Self>,
        this: Resource<Listener>,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let _pending = pending_call!(store);
        let ready = store.with(|mut s| s.get().table.get(&this).map(|l| l.accept_ready()))?;
        ready.await;
        Ok(Ok(()))
    }
}

impl wit::HostListener for TetherCtxView<'_> {
    fn accept(
        &mut self,
        this: Resource<Listener>,
    ) -> wasmtime::Result<Result<Option<Resource<MessageStream>>, ErrorCode>> {
        match self.table.get(&this)?.accept() {
            Ok(Some(stream)) => Ok(Ok(Some(websocket::hand_over(
                self.ctx, self.table, stream,
            )?))),
            Ok(None) => Ok(Ok(None)),
            Err(e) => Ok(Err(error(e))),
        }
    }

    fn local_address(&mut self, this: Resource<Listener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.local_addr().to_string())
    }

    fn drop(&mut self, this: Resource<Listener>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl<T> wit::HostWithStore<T> for HasTetherAsync {
    async fn connect(
        store: &Accessor<T, Self>,
        url: String,
        options: ConnectOptions,
    ) -> wasmtime::Result<Result<Resource<MessageStream>, ErrorCode>> {
        let _pending = pending_call!(store);
        let target = match websocket::parse_ws_url(&url) {
            Ok(t) => t,
            Err(e) => return Ok(Err(error(e))),
        };
        let (host, lookups) = store.with(|mut s| {
            let ctx = &s.get().ctx;
            (ctx.host.clone(), ctx.lookups.clone())
        });
        let check = match net::precheck(&host, &target.dest, target.port) {
            Ok(c) => c,
            Err(e) => return Ok(Err(error(e))),
        };
        let options = p2::tether::streams::websocket::ConnectOptions {
            subprotocols: options.subprotocols,
            headers: options.headers,
        };
        match websocket::dial(host, lookups, target, options, check).await {
            Ok(stream) => Ok(Ok(store.with(|mut s| {
                let view = s.get();
                websocket::hand_over(view.ctx, view.table, stream)
            })?)),
            Err(e) => Ok(Err(error(e))),
        }
    }
}

impl<T> wit::HostMessageStreamWithStore<T> for HasTetherAsync {
    async fn receive_ready(
        store: &Accessor<T, Self>,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let _pending = pending_call!(store);
        let ready = store.with(|mut s| {
            s.get()
                .table
                .get(&this)
                .map(|stream| stream.receive_ready())
        })?;
        ready.await;
        Ok(Ok(()))
    }

    async fn send_ready(
        store: &Accessor<T, Self>,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let _pending = pending_call!(store);
        let ready =
            store.with(|mut s| s.get().table.get(&this).map(|stream| stream.send_ready()))?;
        ready.await;
        Ok(Ok(()))
    }
}

impl wit::HostMessageStream for TetherCtxView<'_> {
    fn send(
        &mut self,
        this: Resource<MessageStream>,
        message: Message,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        Ok(self.table.get(&this)?.send(to_p2(message)).map_err(error))
    }

    fn receive(
        &mut self,
        this: Resource<MessageStream>,
    ) -> wasmtime::Result<Result<Option<Message>, ErrorCode>> {
        Ok(self
            .table
            .get(&this)?
            .receive()
            .map(|m| m.map(from_p2))
            .map_err(error))
    }

    fn close(
        &mut self,
        this: Resource<MessageStream>,
        code: u16,
        reason: String,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        Ok(self.table.get(&this)?.close(code, &reason).map_err(error))
    }

    fn close_info(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<Option<CloseInfo>> {
        Ok(self.table.get(&this)?.close_info().map(|c| CloseInfo {
            code: c.code,
            reason: c.reason,
        }))
    }

    fn subprotocol(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<Option<String>> {
        use p2::tether::streams::websocket::HostMessageStream;
        HostMessageStream::subprotocol(self, this)
    }

    fn peer_address(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<String> {
        use p2::tether::streams::websocket::HostMessageStream;
        HostMessageStream::peer_address(self, this)
    }

    fn path(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<String> {
        use p2::tether::streams::websocket::HostMessageStream;
        HostMessageStream::path(self, this)
    }

    fn drop(&mut self, this: Resource<MessageStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
