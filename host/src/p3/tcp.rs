//! TCP byte streams of the async interface (`tether:streams-async/tcp`) as
//! component-model `stream<u8>`s, wired the way wasmtime-wasi's WASIp3
//! `wasi:sockets` host wires `tcp-socket.send` and `receive`: a
//! [`StreamConsumer`] takes the guest's outgoing bytes, a
//! [`StreamProducer`] gives it the incoming ones, and each direction ends
//! with a `future<result<_, error-code>>`.
//!
//! Both halves are the halves of [`crate::tcp`] (one core, two ABIs): the
//! same writer task, `tcp_write_buffer_bytes` bound, linger, TCP_NODELAY
//! and destination policy as the `wasi:io` interface.
//!
//! Backpressure: the consumer takes bytes only while the writer's buffer
//! has room (at most the permit), so a full buffer leaves the guest's
//! write pending; the producer reads the socket only while the guest has a
//! read pending, straight into the guest's buffer.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use wasmtime::StoreContextMut;
use wasmtime::component::{
    Access, Accessor, Destination, FutureReader, Resource, Source, StreamConsumer, StreamProducer,
    StreamReader, StreamResult,
};

use super::{ErrorCode, HasTetherAsync, error};
use crate::metrics::Direction;
use crate::tcp::{ByteListener, TcpInput, TcpOutput};
use crate::{TetherCtxView, net, tcp};

use super::generated::tether::streams_async::tcp as wit;

/// An open TCP connection of the async interface (the `byte-stream`
/// resource): the halves the guest has not taken yet.
pub struct ByteStream {
    core: tcp::ByteStream,
    input: Option<TcpInput>,
    output: Option<TcpOutput>,
}

impl ByteStream {
    fn new((core, input, output): (tcp::ByteStream, TcpInput, TcpOutput)) -> ByteStream {
        ByteStream {
            core,
            input: Some(input),
            output: Some(output),
        }
    }
}

/// Default capacity when the reader is the host rather than guest memory.
const HOST_READ_CAPACITY: usize = 8192;

/// The incoming half as a `stream<u8>`; sends the half's end to the
/// `receive` future when it finishes (or is dropped).
struct Incoming {
    input: TcpInput,
    result: Option<tokio::sync::oneshot::Sender<Result<(), ErrorCode>>>,
}

impl Incoming {
    fn finish(&mut self, result: Result<(), ErrorCode>) {
        if let Some(tx) = self.result.take() {
            let _ = tx.send(result);
        }
    }
}

impl Drop for Incoming {
    fn drop(&mut self) {
        self.finish(Ok(()));
    }
}

impl<D> StreamProducer<D> for Incoming {
    type Item = u8;
    type Buffer = wasmtime::component::VecBuffer<u8>;

    fn poll_produce<'a>(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut store: StoreContextMut<'a, D>,
        dst: Destination<'a, u8, Self::Buffer>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        if self.result.is_none() {
            return Poll::Ready(Ok(StreamResult::Dropped));
        }
        // A zero-length read is a readiness check: at least one byte or
        // the end is there.
        if dst.remaining(&mut store) == Some(0) {
            return match self.input.poll_ready(cx) {
                Poll::Ready(()) => Poll::Ready(Ok(StreamResult::Completed)),
                Poll::Pending if finish => Poll::Ready(Ok(StreamResult::Cancelled)),
                Poll::Pending => Poll::Pending,
            };
        }
        let mut dst = dst.as_direct(store, HOST_READ_CAPACITY);
        match self.input.poll_read(cx, dst.remaining()) {
            Poll::Ready(Ok(0)) => {
                self.finish(Ok(()));
                Poll::Ready(Ok(StreamResult::Dropped))
            }
            Poll::Ready(Ok(n)) => {
                dst.mark_written(n);
                Poll::Ready(Ok(StreamResult::Completed))
            }
            Poll::Ready(Err(e)) => {
                self.finish(Err(error(net::io_error(&e))));
                Poll::Ready(Ok(StreamResult::Dropped))
            }
            Poll::Pending if finish => Poll::Ready(Ok(StreamResult::Cancelled)),
            Poll::Pending => Poll::Pending,
        }
    }
}

type RoomFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// The outgoing half as a `stream<u8>`. The end of the guest's stream
/// drops it, which half-closes once every byte is sent.
struct Outgoing {
    output: Arc<TcpOutput>,
    /// Waiting for room in the writer's buffer.
    room: Option<RoomFuture>,
    failed: bool,
}

impl Drop for Outgoing {
    fn drop(&mut self) {
        self.output.shutdown();
    }
}

impl<D> StreamConsumer<D> for Outgoing {
    type Item = u8;

    fn poll_consume(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        store: StoreContextMut<D>,
        src: Source<u8>,
        finish: bool,
    ) -> Poll<wasmtime::Result<StreamResult>> {
        if self.failed {
            return Poll::Ready(Ok(StreamResult::Dropped));
        }
        let mut src = src.as_direct(store);
        loop {
            if let Some(room) = self.room.as_mut() {
                match room.as_mut().poll(cx) {
                    Poll::Ready(()) => self.room = None,
                    Poll::Pending if finish => return Poll::Ready(Ok(StreamResult::Cancelled)),
                    Poll::Pending => return Poll::Pending,
                }
            }
            let data = src.remaining();
            if data.is_empty() {
                // A zero-length write is a readiness check: ready once the
                // next write takes at least one byte (or fails).
                if self.output.has_room() {
                    return Poll::Ready(Ok(StreamResult::Completed));
                }
                self.room = Some(Box::pin(self.output.room()));
                continue;
            }
            match self.output.write_some(data) {
                Ok(0) => self.room = Some(Box::pin(self.output.room())),
                Ok(n) => {
                    src.mark_read(n);
                    return Poll::Ready(Ok(StreamResult::Completed));
                }
                // The `send` future reports the error.
                Err(_) => {
                    self.failed = true;
                    return Poll::Ready(Ok(StreamResult::Dropped));
                }
            }
        }
    }
}

impl wit::Host for TetherCtxView<'_> {
    fn listen(
        &mut self,
        address: String,
    ) -> wasmtime::Result<Result<Resource<ByteListener>, ErrorCode>> {
        match ByteListener::bind(self.ctx.host.clone(), &address) {
            Ok(l) => Ok(Ok(self.table.push(l)?)),
            Err(e) => Ok(Err(error(e))),
        }
    }
}

impl<T> wit::HostWithStore<T> for HasTetherAsync {
    async fn connect(
        store: &Accessor<T, Self>,
        address: String,
    ) -> wasmtime::Result<Result<Resource<ByteStream>, ErrorCode>> {
        let _pending = super::pending_call!(store);
        let (host, port) = match net::parse_destination(&address) {
            Ok(hp) => hp,
            Err(e) => return Ok(Err(error(e))),
        };
        let (ctx, lookups) = store.with(|mut s| {
            let c = &s.get().ctx;
            (c.host.clone(), c.lookups.clone())
        });
        let check = match net::precheck(&ctx, &host, port) {
            Ok(c) => c,
            Err(e) => return Ok(Err(error(e))),
        };
        let opened = match net::dial(&ctx, &lookups, &host, port, check).await {
            Ok(socket) => tcp::open_halves(socket, &ctx, Direction::Outbound, None),
            Err(e) => Err(e),
        };
        match opened {
            Ok(halves) => Ok(Ok(store.with(|mut s| {
                let view = s.get();
                view.ctx.track_byte_stream(halves.0.handle());
                view.table.push(ByteStream::new(halves))
            })?)),
            Err(e) => Ok(Err(error(e))),
        }
    }
}

impl<T> wit::HostByteStreamWithStore<T> for HasTetherAsync {
    fn send(
        mut store: Access<'_, T, Self>,
        this: Resource<ByteStream>,
        mut data: StreamReader<u8>,
    ) -> wasmtime::Result<FutureReader<Result<(), ErrorCode>>> {
        let Some(output) = store.get().table.get_mut(&this)?.output.take() else {
            data.close(&mut store)?;
            return FutureReader::new(&mut store, async {
                Ok::<_, wasmtime::Error>(Err(ErrorCode::InvalidArgument(
                    "send was already called on this byte-stream".into(),
                )))
            });
        };
        let output = Arc::new(output);
        let finished = output.finished();
        let hold = output.clone();
        data.pipe(
            &mut store,
            Outgoing {
                output,
                room: None,
                failed: false,
            },
        )?;
        FutureReader::new(&mut store, async move {
            let result = finished.await.map_err(error);
            // The output half counts as held (no linger) while the guest
            // may still wait on this future.
            drop(hold);
            Ok::<_, wasmtime::Error>(result)
        })
    }

    fn receive(
        mut store: Access<'_, T, Self>,
        this: Resource<ByteStream>,
    ) -> wasmtime::Result<(StreamReader<u8>, FutureReader<Result<(), ErrorCode>>)> {
        let Some(input) = store.get().table.get_mut(&this)?.input.take() else {
            return Ok((
                StreamReader::new(&mut store, std::iter::empty())?,
                FutureReader::new(&mut store, async {
                    Ok::<_, wasmtime::Error>(Err(ErrorCode::InvalidArgument(
                        "receive was already called on this byte-stream".into(),
                    )))
                })?,
            ));
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let incoming = Incoming {
            input,
            result: Some(tx),
        };
        Ok((
            StreamReader::new(&mut store, incoming)?,
            FutureReader::new(&mut store, async move {
                Ok::<_, wasmtime::Error>(rx.await.unwrap_or(Ok(())))
            })?,
        ))
    }
}

impl wit::HostByteStream for TetherCtxView<'_> {
    fn peer_address(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.core.peer_addr().to_string())
    }

    fn local_address(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.core.local_addr().to_string())
    }

    fn drop(&mut self, this: Resource<ByteStream>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}

impl<T> wit::HostByteListenerWithStore<T> for HasTetherAsync {
    async fn accept_ready(
        store: &Accessor<T, Self>,
        this: Resource<ByteListener>,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let _pending = super::pending_call!(store);
        let ready = store.with(|mut s| s.get().table.get(&this).map(|l| l.accept_ready()))?;
        ready.await;
        Ok(Ok(()))
    }
}

impl wit::HostByteListener for TetherCtxView<'_> {
    fn accept(
        &mut self,
        this: Resource<ByteListener>,
    ) -> wasmtime::Result<Result<Option<Resource<ByteStream>>, ErrorCode>> {
        match self.table.get(&this)?.try_accept() {
            Ok(Some(halves)) => {
                self.ctx.track_byte_stream(halves.0.handle());
                Ok(Ok(Some(self.table.push(ByteStream::new(halves))?)))
            }
            Ok(None) => Ok(Ok(None)),
            Err(e) => Ok(Err(error(e))),
        }
    }

    fn local_address(&mut self, this: Resource<ByteListener>) -> wasmtime::Result<String> {
        Ok(self.table.get(&this)?.local_addr().to_string())
    }

    fn drop(&mut self, this: Resource<ByteListener>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
