//! Readiness sets: the `tether:streams/readiness` interface, `epoll` for
//! guests.
//!
//! A guest registers interests (receive or send on a message stream, accept
//! on a listener, read or write on a byte stream) once, each under a key it
//! chooses, and then waits on one pollable. The host keeps the ready
//! entries in a queue that the socket tasks fill as they change state:
//! every [`Signal`](crate::ready::Signal) carries the registrations
//! ([`Watchers`]) on it, and [`Signal::wake`](crate::ready::Signal::wake)
//! pushes them onto their set's queue. Byte-stream reads have no task; the
//! registration's waker sits in tokio's read-readiness slot of the socket
//! and is woken by the I/O driver.
//!
//! Costs: O(1) per event (a queue push, deduplicated by a flag per entry),
//! O(ready entries returned) per `take-ready`, independent of how many
//! streams are registered. A wake-up through `wasi:io/poll` with every
//! stream's pollable costs O(open streams) instead (one future per
//! pollable per `poll`).
//!
//! Semantics are level-triggered (like `epoll` without `EPOLLET`):
//! `take-ready` re-checks each queued entry's condition (O(1) each),
//! reports it while it holds and keeps it queued, and drops it from the
//! queue once it does not hold; the next state change queues it again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};
use std::task::{Context, Wake, Waker};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::TetherCtxView;
use crate::bindings::ErrorCode;
use crate::bindings::tether::streams::readiness as wit;
use crate::ready::Signal;
use crate::tcp::{ByteListener, ByteStream};
use crate::websocket::{Listener, MessageStream};

pub use wit::Interest;

/// The condition of one interest: true when the operation would not block
/// (`receive` would return something other than `none`, ...). Gets the
/// registration's waker, for sources that keep a waker (tokio's socket
/// readiness); [`Signal`] sources ignore it. O(1), no allocation.
pub(crate) type Check = Box<dyn Fn(&Waker) -> bool + Send + Sync>;

/// Where an interest is watched: the registrations to wake on its state
/// changes, and its condition.
pub struct Source<'a> {
    pub(crate) watchers: &'a Watchers,
    pub(crate) check: Check,
}

/// The registrations watching one [`Signal`] (or one socket's read
/// readiness). Woken with the signal; detached when the resource they
/// watch is dropped, so no key outlives its resource.
#[derive(Default)]
pub struct Watchers(Mutex<Vec<Arc<Entry>>>);

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watchers({})", self.lock().len())
    }
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Entry>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Queues every live registration on its set (O(registrations on this
    /// source), usually 0 or 1).
    pub fn wake(&self) {
        let list = self.lock();
        for entry in list.iter() {
            entry.enqueue();
        }
    }

    /// Adds `entry`, first forgetting deregistered ones, so the list never
    /// holds more than the live registrations plus those deregistered
    /// since the last registration.
    fn add(&self, entry: Arc<Entry>) {
        let mut list = self.lock();
        list.retain(|e| e.live.load(Ordering::Acquire));
        list.push(entry);
    }

    /// Removes every registration from its set: the watched resource is
    /// gone. Call from the resource's `Drop`.
    pub fn detach_all(&self) {
        let list = std::mem::take(&mut *self.lock());
        for entry in list {
            entry.detach();
        }
    }
}

/// One registration: (key, interest) in one set.
pub struct Entry {
    key: u64,
    interest: Interest,
    set: Weak<SetInner>,
    /// In the set's queue (deduplicates wake-ups).
    queued: AtomicBool,
    /// Registered; false once deregistered, replaced, or its resource or
    /// set is gone.
    live: AtomicBool,
    check: Check,
}

impl Entry {
    fn is_ready(self: &Arc<Self>) -> bool {
        let waker = Waker::from(self.clone());
        (self.check)(&waker)
    }

    /// Puts the entry on its set's queue unless it is there already, and
    /// wakes the set's waiter. O(1).
    fn enqueue(self: &Arc<Self>) {
        if !self.live.load(Ordering::Acquire) || self.queued.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Some(set) = self.set.upgrade() {
            set.lock().queue.push_back(self.clone());
            set.signal.wake();
        }
    }

    fn detach(&self) {
        self.live.store(false, Ordering::Release);
        if let Some(set) = self.set.upgrade() {
            let mut st = set.lock();
            let id = (self.key, self.interest as u8);
            if st
                .entries
                .get(&id)
                .is_some_and(|e| std::ptr::eq(Arc::as_ptr(e), self))
            {
                st.entries.remove(&id);
            }
        }
    }
}

impl Wake for Entry {
    fn wake(self: Arc<Self>) {
        self.enqueue();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.enqueue();
    }
}

#[derive(Default)]
struct SetState {
    entries: HashMap<(u64, u8), Arc<Entry>>,
    /// Entries that may be ready, oldest first; each at most once.
    queue: VecDeque<Arc<Entry>>,
}

struct SetInner {
    state: Mutex<SetState>,
    /// The set's waiter: an entry was queued.
    signal: Signal,
}

impl SetInner {
    fn lock(&self) -> MutexGuard<'_, SetState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Takes the front of the queue and re-checks it; puts it back if it
    /// is ready. None when the queue is empty.
    fn pop_checked(&self, back: bool) -> Option<(Arc<Entry>, bool)> {
        let entry = self.lock().queue.pop_front()?;
        // Cleared before the check: a state change after the check queues
        // the entry again, so no wake-up is lost.
        entry.queued.store(false, Ordering::Release);
        let ready = entry.live.load(Ordering::Acquire) && entry.is_ready();
        if ready && !entry.queued.swap(true, Ordering::AcqRel) {
            let mut st = self.lock();
            if back {
                st.queue.push_back(entry.clone());
            } else {
                st.queue.push_front(entry.clone());
            }
        }
        Some((entry, ready))
    }

    /// Whether at least one entry is ready; drops entries that are not
    /// from the front of the queue (amortised O(1)).
    fn has_ready(&self) -> bool {
        while let Some((_, ready)) = self.pop_checked(false) {
            if ready {
                return true;
            }
        }
        false
    }
}

/// A readiness set (the `readiness-set` resource).
pub struct ReadinessSet {
    inner: Arc<SetInner>,
    max_entries: usize,
}

impl Drop for ReadinessSet {
    fn drop(&mut self) {
        let mut st = self.inner.lock();
        for entry in st.entries.values() {
            entry.live.store(false, Ordering::Release);
        }
        st.entries.clear();
        st.queue.clear();
    }
}

impl ReadinessSet {
    /// An empty set holding at most `max_entries` registrations.
    pub fn new(max_entries: usize) -> ReadinessSet {
        ReadinessSet {
            inner: Arc::new(SetInner {
                state: Mutex::default(),
                signal: Signal::default(),
            }),
            max_entries,
        }
    }

    /// Registrations in the set.
    pub fn len(&self) -> usize {
        self.inner.lock().entries.len()
    }

    /// Whether the set has no registrations.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn insert(&self, key: u64, interest: Interest, source: Source<'_>) -> Result<(), ErrorCode> {
        let entry = Arc::new(Entry {
            key,
            interest,
            set: Arc::downgrade(&self.inner),
            queued: AtomicBool::new(false),
            live: AtomicBool::new(true),
            check: source.check,
        });
        {
            let mut st = self.inner.lock();
            let id = (key, interest as u8);
            if st.entries.len() >= self.max_entries && !st.entries.contains_key(&id) {
                return Err(ErrorCode::InvalidArgument(format!(
                    "readiness set is full: at most {} registrations (limit readiness_set_entries)",
                    self.max_entries
                )));
            }
            if let Some(old) = st.entries.insert(id, entry.clone()) {
                old.live.store(false, Ordering::Release);
            }
        }
        source.watchers.add(entry.clone());
        if entry.is_ready() {
            entry.enqueue();
        }
        Ok(())
    }

    /// Registers `interest` on `target` under `key`, replacing an earlier
    /// registration of the same key and interest: `receive` or `send` on a
    /// [`MessageStream`], `accept` on a [`Listener`] or [`ByteListener`],
    /// `read` (its input stream) or `write` (its output stream) on a
    /// [`ByteStream`]. Errors: `invalid-argument` for an interest that does
    /// not apply to `target`, or a full set.
    pub fn register<T: Watchable>(
        &self,
        target: &T,
        interest: Interest,
        key: u64,
    ) -> Result<(), ErrorCode> {
        let source = target.source(interest).ok_or_else(|| {
            ErrorCode::InvalidArgument(format!(
                "interest `{interest:?}` does not apply to a {}",
                T::RESOURCE
            ))
        })?;
        self.insert(key, interest, source)
    }

    /// Removes the registration of `key` and `interest`; false when there
    /// was none.
    pub fn deregister(&self, key: u64, interest: Interest) -> bool {
        let removed = self.inner.lock().entries.remove(&(key, interest as u8));
        match removed {
            Some(entry) => {
                entry.live.store(false, Ordering::Release);
                true
            }
            None => false,
        }
    }

    /// Up to `max` ready registrations, oldest wake-up first, each at most
    /// once. Every one reported stays queued (level-triggered) behind the
    /// others, so a later call sees the rest first. O(returned + dropped
    /// stale entries).
    pub fn take_ready(&self, max: usize) -> Vec<(u64, Interest)> {
        let queued = self.inner.lock().queue.len();
        let mut out = Vec::with_capacity(max.min(queued));
        for _ in 0..queued {
            if out.len() >= max {
                break;
            }
            match self.inner.pop_checked(true) {
                Some((entry, true)) => out.push((entry.key, entry.interest)),
                Some((_, false)) => {}
                None => break,
            }
        }
        out
    }

    /// Resolves once at least one registration is ready (for native
    /// callers; guests wait on `subscribe`).
    pub async fn wait(&self) {
        let inner = &self.inner;
        inner.signal.wait_until(|| inner.has_ready()).await;
    }
}

/// A resource a readiness set can watch.
pub trait Watchable {
    /// The resource's WIT name, for errors.
    const RESOURCE: &'static str;
    /// Where `interest` is watched; `None` when it does not apply.
    #[doc(hidden)]
    fn source(&self, interest: Interest) -> Option<Source<'_>>;
}

macro_rules! watchable {
    ($($ty:ty => $name:literal),*) => {$(
        impl Watchable for $ty {
            const RESOURCE: &'static str = $name;
            fn source(&self, interest: Interest) -> Option<Source<'_>> {
                self.readiness(interest)
            }
        }
    )*};
}

watchable!(
    MessageStream => "message-stream",
    Listener => "listener",
    ByteStream => "byte-stream",
    ByteListener => "byte-listener"
);

/// A [`Signal`]-backed source: `check` runs `cond` on the weakly held
/// state, false once it is gone.
pub(crate) fn signal_source<'a, T: Send + Sync + 'static>(
    signal: &'a Signal,
    state: &Arc<T>,
    cond: impl Fn(&T) -> bool + Send + Sync + 'static,
) -> Source<'a> {
    let state = Arc::downgrade(state);
    Source {
        watchers: signal.watchers(),
        check: Box::new(move |_| state.upgrade().is_some_and(|s| cond(&s))),
    }
}

/// A socket's read readiness as a source: the waker waits in tokio's
/// read slot of the socket (nobody else polls it; `wasi:io` pollables use
/// `readable()`, a separate waiter list).
pub(crate) fn read_source<'a>(
    watchers: &'a Watchers,
    stream: &Arc<tokio::net::TcpStream>,
) -> Source<'a> {
    let stream = Arc::downgrade(stream);
    Source {
        watchers,
        check: Box::new(move |waker| {
            stream.upgrade().is_some_and(|s| {
                s.poll_read_ready(&mut Context::from_waker(waker))
                    .is_ready()
            })
        }),
    }
}

struct SetReady(Arc<SetInner>);

#[async_trait::async_trait]
impl Pollable for SetReady {
    async fn ready(&mut self) {
        let inner = &self.0;
        inner.signal.wait_until(|| inner.has_ready()).await;
    }
}

impl wit::Host for TetherCtxView<'_> {}

impl wit::HostReadinessSet for TetherCtxView<'_> {
    fn new(&mut self) -> wasmtime::Result<Resource<ReadinessSet>> {
        let max = self.ctx.host.config.limits.readiness_set_entries;
        Ok(self.table.push(ReadinessSet::new(max))?)
    }

    fn register_message_stream(
        &mut self,
        this: Resource<ReadinessSet>,
        stream: Resource<MessageStream>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let stream = self.table.get(&stream)?;
        Ok(self.table.get(&this)?.register(stream, interest, key))
    }

    fn register_listener(
        &mut self,
        this: Resource<ReadinessSet>,
        listener: Resource<Listener>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let listener = self.table.get(&listener)?;
        Ok(self.table.get(&this)?.register(listener, interest, key))
    }

    fn register_byte_stream(
        &mut self,
        this: Resource<ReadinessSet>,
        stream: Resource<ByteStream>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let stream = self.table.get(&stream)?;
        Ok(self.table.get(&this)?.register(stream, interest, key))
    }

    fn register_byte_listener(
        &mut self,
        this: Resource<ReadinessSet>,
        listener: Resource<ByteListener>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let listener = self.table.get(&listener)?;
        Ok(self.table.get(&this)?.register(listener, interest, key))
    }

    fn deregister(
        &mut self,
        this: Resource<ReadinessSet>,
        key: u64,
        interest: Interest,
    ) -> wasmtime::Result<bool> {
        Ok(self.table.get(&this)?.deregister(key, interest))
    }

    fn subscribe(
        &mut self,
        this: Resource<ReadinessSet>,
    ) -> wasmtime::Result<Resource<DynPollable>> {
        let inner = self.table.get(&this)?.inner.clone();
        let r = self.table.push(SetReady(inner))?;
        subscribe(self.table, r)
    }

    fn take_ready(
        &mut self,
        this: Resource<ReadinessSet>,
        max: u32,
    ) -> wasmtime::Result<Vec<(u64, Interest)>> {
        Ok(self.table.get(&this)?.take_ready(max as usize))
    }

    fn len(&mut self, this: Resource<ReadinessSet>) -> wasmtime::Result<u32> {
        Ok(self.table.get(&this)?.len() as u32)
    }

    fn drop(&mut self, this: Resource<ReadinessSet>) -> wasmtime::Result<()> {
        self.table.delete(this)?;
        Ok(())
    }
}
