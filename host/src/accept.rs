//! The accept queue of a listener, shared by the TCP `byte-listener` and
//! the WebSocket `listener`: what the accept task made and the guest has
//! not taken yet, bounded by `accept_backlog`, with the stop (shutdown) and
//! close (the guest dropped the listener) rules every listener follows.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::task::AbortHandle;
use wasmtime_wasi::p2::Pollable;

use crate::bindings::ErrorCode;
use crate::ready::Signal;

struct State<T> {
    ready: VecDeque<T>,
    /// Backlog slots taken by items still being made (WebSocket upgrades
    /// answering their request): `ready.len() + reserved <= backlog`.
    reserved: usize,
    /// The host shut down: no more accepting; `take` returns `closed` once
    /// `ready` is empty.
    stopped: bool,
    /// The guest dropped the listener: its pollables are ready.
    closed: bool,
}

/// Accepted items (connections, upgraded streams) waiting for the guest.
pub(crate) struct AcceptQueue<T> {
    state: Mutex<State<T>>,
    backlog: usize,
    /// Guest side: an item is ready, or the listener stopped or closed.
    accepted: Signal,
    /// Accept task: the guest took an item or a reservation ended.
    room: Signal,
    /// The accept task (owns the listening socket).
    task: Mutex<Option<AbortHandle>>,
}

impl<T: Send + 'static> AcceptQueue<T> {
    /// An empty queue holding at most `backlog` items (at least 1).
    pub(crate) fn new(backlog: usize) -> Arc<Self> {
        Arc::new(AcceptQueue {
            state: Mutex::new(State {
                ready: VecDeque::new(),
                reserved: 0,
                stopped: false,
                closed: false,
            }),
            backlog: backlog.max(1),
            accepted: Signal::default(),
            room: Signal::default(),
            task: Mutex::new(None),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State<T>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Remembers the accept task, to abort it when the listener stops or
    /// closes.
    pub(crate) fn set_task(&self, task: AbortHandle) {
        *self.task.lock().unwrap_or_else(|e| e.into_inner()) = Some(task);
    }

    fn stop_accepting(&self) {
        if let Some(task) = self.task.lock().unwrap_or_else(|e| e.into_inner()).take() {
            task.abort();
        }
    }

    /// Resolves once the backlog has room for one more item.
    pub(crate) async fn room(&self) {
        self.room
            .wait_until(|| {
                let st = self.lock();
                st.ready.len() + st.reserved < self.backlog
            })
            .await;
    }

    /// Resolves once a backlog slot is free, and takes it for an item still
    /// being made; [`AcceptQueue::fill`] gives it back.
    pub(crate) async fn reserve(&self) {
        self.room
            .wait_until(|| {
                let mut st = self.lock();
                let room = st.ready.len() + st.reserved < self.backlog;
                st.reserved += usize::from(room);
                room
            })
            .await;
    }

    /// Ends a reservation: `item` takes the slot, or (`None`, the item
    /// failed) the slot is free again.
    pub(crate) fn fill(&self, item: Option<T>) {
        let mut st = self.lock();
        st.reserved -= 1;
        match item {
            Some(item) => self.push_locked(st, item),
            None => {
                drop(st);
                self.room.wake();
            }
        }
    }

    /// Adds an accepted item for the guest. Once the listener was dropped
    /// it is dropped at once instead.
    pub(crate) fn push(&self, item: T) {
        self.push_locked(self.lock(), item);
    }

    fn push_locked(&self, mut st: MutexGuard<'_, State<T>>, item: T) {
        if st.closed {
            drop(st);
            drop(item);
            return;
        }
        st.ready.push_back(item);
        drop(st);
        self.accepted.wake();
    }

    /// Takes the next item, if any. Errors: `closed` once the host shut
    /// down and every item accepted before was taken.
    pub(crate) fn take(&self) -> Result<Option<T>, ErrorCode> {
        let mut st = self.lock();
        let item = st.ready.pop_front();
        let stopped = st.stopped;
        drop(st);
        match item {
            Some(item) => {
                self.room.wake();
                Ok(Some(item))
            }
            None if stopped => Err(ErrorCode::Closed),
            None => Ok(None),
        }
    }

    /// Resolves once [`AcceptQueue::take`] would return something other
    /// than `Ok(None)`, or the listener was dropped (the async
    /// interface's `accept-ready`). Takes nothing: dropping it loses no
    /// item.
    pub(crate) fn ready(self: &Arc<Self>) -> impl Future<Output = ()> + Send + use<T> {
        let mut ready = self.pollable();
        async move { ready.ready().await }
    }

    /// The guest dropped the listener: stops accepting, drops what nobody
    /// took (outside the lock: dropping an item runs its own drop code)
    /// and makes the listener's pollables ready (they may outlive it).
    pub(crate) fn close(&self) {
        self.accepted.watchers().detach_all();
        self.stop_accepting();
        let unaccepted = {
            let mut st = self.lock();
            st.closed = true;
            std::mem::take(&mut st.ready)
        };
        drop(unaccepted);
        self.accepted.wake();
    }

    /// Where a readiness set watches `accept`: an item is ready or the
    /// listener stopped.
    pub(crate) fn readiness(self: &Arc<Self>) -> crate::readiness::Source<'_> {
        crate::readiness::signal_source(&self.accepted, self, |q| {
            let st = q.lock();
            !st.ready.is_empty() || st.stopped
        })
    }

    /// The listener's `subscribe` pollable; it may outlive the listener.
    pub(crate) fn pollable(self: &Arc<Self>) -> AcceptReady<T> {
        AcceptReady(self.clone())
    }
}

impl<T: Send + 'static> crate::shutdown::GoingAway for AcceptQueue<T> {
    fn going_away(&self) {
        self.stop_accepting();
        self.lock().stopped = true;
        self.accepted.wake();
    }
}

/// Ready once `accept` returns something other than `none`, or once the
/// listener was dropped.
pub(crate) struct AcceptReady<T>(Arc<AcceptQueue<T>>);

#[async_trait::async_trait]
impl<T: Send + 'static> Pollable for AcceptReady<T> {
    async fn ready(&mut self) {
        let queue = &self.0;
        queue
            .accepted
            .wait_until(|| {
                let st = queue.lock();
                !st.ready.is_empty() || st.stopped || st.closed
            })
            .await;
    }
}
