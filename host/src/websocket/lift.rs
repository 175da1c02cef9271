//! Guest lists the host reads one element at a time, behind the generated
//! bindings: `send-many`'s `list<message>` and the option lists of
//! `connect` and `listen`.
//!
//! The canonical ABI lifts a list whole before the host function runs, and
//! the elements of a `list<message>` or `list<string>` may all point at
//! the same guest bytes: 100,000 elements naming one 1 MiB string ask the
//! host to copy 100 GB out of a guest that holds 1 MiB (wasmtime stops
//! the copy at its hostcall fuel, 128 MiB per call, by trapping). Here the
//! host lifts each element's pointer and length first (a few bytes), and
//! copies the payload only when it takes it:
//!
//! - `send-many` copies the messages it queues (at most
//!   `max_batch_messages` and what fits in `outbound_buffer_bytes`, plus
//!   the one message it reports as `would-block`'s size), so the copy is
//!   bounded by the stream's buffer, not by the list;
//! - `connect` and `listen` options take at most [`MAX_OPTION_ENTRIES`]
//!   entries per list and [`MAX_OPTION_BYTES`] bytes in all, checked
//!   before anything is copied; more is `invalid-argument`.
//!
//! The other way, `receive` and `receive-many` lower each binary payload
//! into the guest straight from the slice of tungstenite's read buffer
//! that holds it ([`Delivered`]): no host copy, no host allocation per
//! message.
//!
//! The functions replace the generated ones in the linker
//! ([`add_to_linker`], after the bindings' own `add_to_linker`), with the
//! same WIT types and the same behaviour otherwise.

use std::sync::Arc;

use tokio_tungstenite::tungstenite::Message as WsMessage;
use wasmtime::component::{ComponentType, Lift, Linker, Lower, Resource, WasmList, WasmStr};
use wasmtime::{AsContextMut, StoreContextMut};

use super::{FutureMessageStream, Listener, MessageStream, Offered, Shared};
use crate::TetherView;
use crate::bindings::ErrorCode;
use crate::bindings::tether::streams::websocket::{ConnectOptions, Host, ListenOptions};

/// Entries one option list of `connect` or `listen` (subprotocols,
/// headers) holds at most; more is `invalid-argument`.
pub const MAX_OPTION_ENTRIES: usize = 64;

/// Bytes the option lists of one `connect` or `listen` hold at most, over
/// every string of every list (the request head they become is bounded by
/// the same 16 KiB, [`super::MAX_REQUEST_HEAD_BYTES`]); more is
/// `invalid-argument`.
pub const MAX_OPTION_BYTES: usize = super::MAX_REQUEST_HEAD_BYTES;

/// The WIT instance the functions belong to.
const INSTANCE: &str = "tether:streams/websocket@0.1.0";

/// A `message` still in guest memory: the variant's case and where its
/// payload is.
#[derive(ComponentType, Lift)]
#[component(variant)]
enum RawMessage {
    #[component(name = "text")]
    Text(WasmStr),
    #[component(name = "binary")]
    Binary(WasmList<u8>),
}

/// A received `message`, lowered from the host's own buffers: a binary
/// payload is the `Bytes` slice tungstenite read it into.
#[derive(ComponentType, Lower)]
#[component(variant)]
enum Delivered {
    #[component(name = "text")]
    Text(String),
    #[component(name = "binary")]
    Binary(bytes::Bytes),
}

impl From<WsMessage> for Delivered {
    fn from(m: WsMessage) -> Self {
        match m {
            WsMessage::Text(t) => Delivered::Text(t.as_str().to_owned()),
            WsMessage::Binary(b) => Delivered::Binary(b),
            _ => unreachable!("only data messages are queued inbound"),
        }
    }
}

/// `connect-options`, its lists still in guest memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct RawConnectOptions {
    subprotocols: WasmList<WasmStr>,
    headers: WasmList<(WasmStr, WasmStr)>,
}

/// `listen-options`, its list still in guest memory.
#[derive(ComponentType, Lift)]
#[component(record)]
struct RawListenOptions {
    subprotocols: WasmList<WasmStr>,
}

/// Replaces the generated `send-many`, `receive`, `receive-many`,
/// `connect` and `listen` of `tether:streams/websocket` in `linker` with
/// the lazy lifts and the lowering above.
pub(crate) fn add_to_linker<T: TetherView + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut ws = linker.instance(INSTANCE)?;
    ws.func_wrap(
        "[method]message-stream.send-many",
        |mut store: StoreContextMut<'_, T>,
         (this, list): (Resource<MessageStream>, WasmList<RawMessage>)| {
            let shared: Arc<Shared> = store.data_mut().tether().table.get(&this)?.sender();
            // Pointers and lengths of what one call can take at most.
            let n = list.len().min(shared.max_batch);
            let mut raw = Vec::with_capacity(n);
            for i in 0..n {
                raw.push(list.get(&mut store, i).expect("index below the length")?);
            }
            let memory = &store;
            let offered = raw.into_iter().map(|m| {
                Ok(match m {
                    RawMessage::Text(t) => Offered::Text(t.to_str(memory)?),
                    RawMessage::Binary(b) => Offered::Binary(b.as_le_slice(memory)),
                })
            });
            Ok((shared.send_offered(offered)?,))
        },
    )?;
    ws.func_wrap(
        "[method]message-stream.receive",
        |mut store: StoreContextMut<'_, T>, (this,): (Resource<MessageStream>,)| {
            let view = store.data_mut().tether();
            let taken: Result<Option<Delivered>, ErrorCode> = view
                .table
                .get(&this)?
                .take_one()
                .map(|m| m.map(Delivered::from));
            Ok((taken,))
        },
    )?;
    ws.func_wrap(
        "[method]message-stream.receive-many",
        |mut store: StoreContextMut<'_, T>,
         (this, max_messages, max_bytes): (Resource<MessageStream>, u32, u64)| {
            let view = store.data_mut().tether();
            let taken: Result<Vec<Delivered>, ErrorCode> = view
                .table
                .get(&this)?
                .take_many(max_messages, max_bytes)
                .map(|ms| ms.into_iter().map(Delivered::from).collect());
            Ok((taken,))
        },
    )?;
    ws.func_wrap(
        "connect",
        |mut store: StoreContextMut<'_, T>, (url, options): (String, RawConnectOptions)| {
            let options = match connect_options(&mut store, &options)? {
                Ok(o) => o,
                Err(e) => return Ok((Err(e),)),
            };
            let mut view = store.data_mut().tether();
            let made: Result<Resource<FutureMessageStream>, ErrorCode> =
                Host::connect(&mut view, url, options)?;
            Ok((made,))
        },
    )?;
    ws.func_wrap(
        "listen",
        |mut store: StoreContextMut<'_, T>, (address, options): (String, RawListenOptions)| {
            let mut budget = Budget::default();
            let subprotocols = match budget.strings(&mut store, &options.subprotocols)? {
                Ok(s) => s,
                Err(e) => return Ok((Err(e),)),
            };
            let mut view = store.data_mut().tether();
            let made: Result<Resource<Listener>, ErrorCode> =
                Host::listen(&mut view, address, ListenOptions { subprotocols })?;
            Ok((made,))
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// What the option lists of one call may still hold.
struct Budget {
    bytes: usize,
}

impl Default for Budget {
    fn default() -> Self {
        Budget {
            bytes: MAX_OPTION_BYTES,
        }
    }
}

impl Budget {
    /// Checks a list's length against [`MAX_OPTION_ENTRIES`].
    fn entries<E: Lift>(list: &WasmList<E>) -> Result<(), ErrorCode> {
        if list.len() > MAX_OPTION_ENTRIES {
            return Err(ErrorCode::InvalidArgument(format!(
                "an option list holds {} entries, at most {MAX_OPTION_ENTRIES}",
                list.len()
            )));
        }
        Ok(())
    }

    /// Copies `s` if it fits what is left of [`MAX_OPTION_BYTES`].
    fn string<T: 'static>(
        &mut self,
        store: &StoreContextMut<'_, T>,
        s: &WasmStr,
    ) -> wasmtime::Result<Result<String, ErrorCode>> {
        let text = s.to_str(store)?;
        if text.len() > self.bytes {
            return Ok(Err(ErrorCode::InvalidArgument(format!(
                "options over {MAX_OPTION_BYTES} bytes in all"
            ))));
        }
        self.bytes -= text.len();
        Ok(Ok(text.into_owned()))
    }

    /// Copies a `list<string>` within the bounds.
    fn strings<T: 'static>(
        &mut self,
        store: &mut StoreContextMut<'_, T>,
        list: &WasmList<WasmStr>,
    ) -> wasmtime::Result<Result<Vec<String>, ErrorCode>> {
        if let Err(e) = Self::entries(list) {
            return Ok(Err(e));
        }
        let mut out = Vec::with_capacity(list.len());
        for i in 0..list.len() {
            let s = list
                .get(store.as_context_mut(), i)
                .expect("index below the length")?;
            match self.string(store, &s)? {
                Ok(s) => out.push(s),
                Err(e) => return Ok(Err(e)),
            }
        }
        Ok(Ok(out))
    }
}

/// Copies `connect-options` within the bounds.
fn connect_options<T: 'static>(
    store: &mut StoreContextMut<'_, T>,
    raw: &RawConnectOptions,
) -> wasmtime::Result<Result<ConnectOptions, ErrorCode>> {
    let mut budget = Budget::default();
    let subprotocols = match budget.strings(store, &raw.subprotocols)? {
        Ok(s) => s,
        Err(e) => return Ok(Err(e)),
    };
    if let Err(e) = Budget::entries(&raw.headers) {
        return Ok(Err(e));
    }
    let mut headers = Vec::with_capacity(raw.headers.len());
    for i in 0..raw.headers.len() {
        let (name, value) = raw
            .headers
            .get(store.as_context_mut(), i)
            .expect("index below the length")?;
        let name = match budget.string(store, &name)? {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        let value = match budget.string(store, &value)? {
            Ok(s) => s,
            Err(e) => return Ok(Err(e)),
        };
        headers.push((name, value));
    }
    Ok(Ok(ConnectOptions {
        subprotocols,
        headers,
    }))
}
