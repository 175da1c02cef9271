//! Event-driven readiness: the one place where host tasks wake guests.
//!
//! There is no periodic tick here: a guest blocked in `wasi:io/poll` sleeps
//! in [`Signal::wait_until`] until a socket task calls [`Signal::wake`]
//! after changing the state the guest waits on.

use std::sync::Arc;

use futures_util::FutureExt;
use tokio::sync::Notify;
use tokio::task::AbortHandle;
use wasmtime::component::{Linker, Resource, ResourceTable, ResourceType};
use wasmtime_wasi::p2::{
    DynInputStream, DynOutputStream, DynPollable, InputStream, OutputStream, Pollable, StreamError,
    StreamResult, subscribe,
};

use crate::bindings::ErrorCode;
use crate::{TetherCtxView, TetherView};

/// A condition variable for async tasks: waiters re-check their condition
/// whenever the producer wakes them, so no wake-up is ever lost.
/// It also carries the readiness-set registrations watching it
/// ([`crate::readiness`]): a wake queues them on their sets.
#[derive(Default, Debug)]
pub struct Signal(Notify, crate::readiness::Watchers);

impl Signal {
    /// Resolves once `cond()` is true; `cond` is re-checked after every
    /// [`Signal::wake`].
    pub async fn wait_until(&self, mut cond: impl FnMut() -> bool) {
        // Already true: no waiter to enlist (a message stream's reader asks
        // this once per message read).
        if cond() {
            return;
        }
        loop {
            let notified = self.0.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            if cond() {
                return;
            }
            notified.await;
        }
    }

    /// Wakes every current waiter so it re-checks its condition.
    pub fn wake(&self) {
        self.0.notify_waiters();
        self.1.wake();
    }

    /// The readiness-set registrations watching this signal.
    pub(crate) fn watchers(&self) -> &crate::readiness::Watchers {
        &self.1
    }
}

enum Slot<T> {
    Running,
    Ready(Result<T, ErrorCode>),
    Taken,
    /// The `future-*` resource was dropped (the task was aborted).
    Dropped,
}

struct PendingShared<T> {
    slot: std::sync::Mutex<Slot<T>>,
    done: Signal,
}

impl<T> PendingShared<T> {
    fn lock(&self) -> std::sync::MutexGuard<'_, Slot<T>> {
        self.slot.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_running(&self) -> bool {
        matches!(*self.lock(), Slot::Running)
    }
}

/// The result of a host task the guest started (a connect): a `future-*`
/// resource. Dropping it cancels the task (and drops a result nobody took).
///
/// Its pollable ([`Pending::pollable`]) holds only the shared slot, not
/// the resource: it outlives the resource and is ready once the task ended
/// or the resource was dropped (the drop rule in `wit/tether.wit`).
pub struct Pending<T> {
    shared: Arc<PendingShared<T>>,
    task: AbortHandle,
}

impl<T: Send + 'static> Pending<T> {
    /// Runs `work` on the current tokio runtime.
    pub fn spawn(work: impl Future<Output = Result<T, ErrorCode>> + Send + 'static) -> Self {
        let shared = Arc::new(PendingShared {
            slot: std::sync::Mutex::new(Slot::Running),
            done: Signal::default(),
        });
        // In the caller's span (the guest's): the work's log lines carry
        // the guest id.
        let task = tokio::spawn(tracing::Instrument::in_current_span({
            let shared = shared.clone();
            async move {
                let result = std::panic::AssertUnwindSafe(work)
                    .catch_unwind()
                    .await
                    .unwrap_or_else(|_| Err(ErrorCode::Other("host task failed".into())));
                let mut slot = shared.lock();
                if matches!(*slot, Slot::Running) {
                    *slot = Slot::Ready(result);
                    drop(slot);
                    shared.done.wake();
                }
            }
        }))
        .abort_handle();
        Pending { shared, task }
    }

    /// `None` while running; then the result once, then `closed`.
    pub fn take(&mut self) -> Option<Result<T, ErrorCode>> {
        let mut slot = self.shared.lock();
        match std::mem::replace(&mut *slot, Slot::Taken) {
            Slot::Running => {
                *slot = Slot::Running;
                None
            }
            Slot::Ready(result) => Some(result),
            Slot::Taken | Slot::Dropped => Some(Err(ErrorCode::Closed)),
        }
    }

    /// The readiness of [`Pending::take`] as a pollable that does not
    /// borrow this resource: ready once `take` returns `Some`, or once this
    /// resource is dropped.
    pub fn pollable(&self) -> impl Pollable + use<T> {
        PendingReady(self.shared.clone())
    }

    /// Where a readiness set watches `accept`: true once
    /// [`Pending::take`] returns `Some` (the task ended). The task's end
    /// queues the registration (O(1)); a dropped `Pending` detaches it.
    pub(crate) fn readiness(
        &self,
        interest: crate::readiness::Interest,
    ) -> Option<crate::readiness::Source<'_>> {
        (interest == crate::readiness::Interest::Accept).then(|| {
            crate::readiness::signal_source(&self.shared.done, &self.shared, |s| !s.is_running())
        })
    }
}

struct PendingReady<T>(Arc<PendingShared<T>>);

#[async_trait::async_trait]
impl<T: Send + 'static> Pollable for PendingReady<T> {
    async fn ready(&mut self) {
        let shared = &self.0;
        shared.done.wait_until(|| !shared.is_running()).await;
    }
}

impl<T> Drop for Pending<T> {
    fn drop(&mut self) {
        self.task.abort();
        // Outside the lock: dropping a connection runs its own drop code.
        let unclaimed = std::mem::replace(&mut *self.shared.lock(), Slot::Dropped);
        drop(unclaimed);
        // Its readiness-set keys are never reported again (the drop rule);
        // pollables from `subscribe` wake and see it ended.
        self.shared.done.watchers().detach_all();
        self.shared.done.wake();
    }
}

/// Hands `p` to the guest as a pollable of its own: not a child of the
/// resource it watches, so it may outlive it (the drop rule in
/// `wit/tether.wit`: once that resource is dropped the pollable is ready).
pub(crate) fn pollable<P: Pollable>(
    table: &mut ResourceTable,
    p: P,
) -> wasmtime::Result<Resource<DynPollable>> {
    let r = table.push(p)?;
    subscribe(table, r)
}

/// A `wasi:io` stream whose resource the guest dropped while a pollable
/// from its `subscribe` was still alive: the pollable's table entry points
/// here. Always ready; reads and writes say `closed`.
struct Ended;

#[async_trait::async_trait]
impl Pollable for Ended {
    async fn ready(&mut self) {}
}

impl InputStream for Ended {
    fn read(&mut self, _size: usize) -> StreamResult<bytes::Bytes> {
        Err(StreamError::Closed)
    }
}

#[async_trait::async_trait]
impl OutputStream for Ended {
    fn write(&mut self, _bytes: bytes::Bytes) -> StreamResult<()> {
        Err(StreamError::Closed)
    }

    fn flush(&mut self) -> StreamResult<()> {
        Err(StreamError::Closed)
    }

    fn check_write(&mut self) -> StreamResult<usize> {
        Err(StreamError::Closed)
    }
}

/// A table entry left behind by a stream dropped before its pollables
/// (see [`Ended`]), deleted once no pollable points at it.
pub(crate) enum Orphan {
    Input(u32),
    Output(u32),
}

impl Orphan {
    /// Deletes the entry when its last pollable is gone; true if deleted.
    fn reap(&self, table: &mut ResourceTable) -> wasmtime::Result<bool> {
        fn reap<T: 'static>(table: &mut ResourceTable, rep: u32) -> wasmtime::Result<bool> {
            let r = Resource::<T>::new_own(rep);
            if table.iter_children(&r)?.next().is_some() {
                return Ok(false);
            }
            table.delete(r)?;
            Ok(true)
        }
        match *self {
            Orphan::Input(rep) => reap::<DynInputStream>(table, rep),
            Orphan::Output(rep) => reap::<DynOutputStream>(table, rep),
        }
    }
}

/// Takes a `wasi:io` stream out of the table by the one drop rule for
/// every resource: with no pollable alive its entry is deleted as usual;
/// with pollables alive the entry becomes `ended` (an [`Ended`] stream), so
/// those pollables are ready and say `closed`, instead of wasmtime-wasi's
/// anonymous "resource has children" trap. Either way the stream itself
/// is returned, to be cancelled and dropped now (its socket half, its
/// buffers). Also deletes earlier entries whose pollables are all gone.
fn detach<B: Send + 'static>(
    view: TetherCtxView<'_>,
    rep: u32,
    orphan: Orphan,
    ended: B,
) -> wasmtime::Result<B> {
    let TetherCtxView { ctx, table } = view;
    let mut kept = Vec::with_capacity(ctx.orphans.len());
    for o in ctx.orphans.drain(..) {
        if !o.reap(table)? {
            kept.push(o);
        }
    }
    ctx.orphans = kept;
    let r = Resource::<B>::new_own(rep);
    if table.iter_children(&r)?.next().is_some() {
        ctx.orphans.push(orphan);
        Ok(std::mem::replace(table.get_mut(&r)?, ended))
    } else {
        Ok(table.delete(r)?)
    }
}

/// Replaces the destructors of `wasi:io/streams` `input-stream` and
/// `output-stream` that `wasmtime_wasi::p2::add_to_linker_async` defined
/// (it must have run first) with [`detach`], then wasmtime-wasi's own
/// `cancel`.
pub(crate) fn add_stream_drops_to_linker<T: TetherView + 'static>(
    linker: &mut Linker<T>,
) -> wasmtime::Result<()> {
    linker.allow_shadowing(true);
    let mut streams = linker.instance(WASI_IO_STREAMS)?;
    streams.resource_async(
        "input-stream",
        ResourceType::host::<DynInputStream>(),
        |mut store, rep| {
            Box::new(async move {
                let ended: DynInputStream = Box::new(Ended);
                detach(store.data_mut().tether(), rep, Orphan::Input(rep), ended)?
                    .cancel()
                    .await;
                Ok(())
            })
        },
    )?;
    streams.resource_async(
        "output-stream",
        ResourceType::host::<DynOutputStream>(),
        |mut store, rep| {
            Box::new(async move {
                let ended: DynOutputStream = Box::new(Ended);
                detach(store.data_mut().tether(), rep, Orphan::Output(rep), ended)?
                    .cancel()
                    .await;
                Ok(())
            })
        },
    )?;
    linker.allow_shadowing(false);
    Ok(())
}

/// The `wasi:io/streams` instance wasmtime-wasi defines (its WIT version).
const WASI_IO_STREAMS: &str = "wasi:io/streams@0.2.12";
