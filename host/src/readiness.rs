//! Readiness sets: the `tether:streams/readiness` interface, `epoll` for
//! guests.
//!
//! A guest registers interests (receive or send on a message stream, accept
//! on a listener or a connect in progress, read or write on a byte stream)
//! once, each under a key it chooses, and then waits on one pollable. The
//! host keeps the ready entries in a queue that the socket tasks fill as
//! they change state (a connect's task, as it ends):
//! every [`Signal`](crate::ready::Signal) carries the registrations
//! ([`Watchers`]) on it, and [`Signal::wake`](crate::ready::Signal::wake)
//! pushes them onto their set's queue. Byte-stream reads have no task; the
//! registration's waker sits in tokio's read-readiness slot of the socket
//! and is woken by the I/O driver.
//!
//! Costs: O(1) per event (a queue push, deduplicated by a flag per entry),
//! O(ready entries returned) per `take-ready`, independent of how many
//! streams are registered; O(1) per `register-*` and `deregister` (a
//! source's registrations are a dense list in which each entry knows its
//! index). A source's wake-up walks only its live registrations. A
//! wake-up through `wasi:io/poll` with every stream's pollable costs
//! O(open streams) instead (one future per pollable per `poll`).
//!
//! Bound: one guest holds at most `readiness_set_entries` registrations
//! in all its sets together ([`Quota`], the same count as its p3 pending
//! calls); a deregistered, replaced or detached entry leaves the source's
//! list and its place in the count at once, and its set's queue within
//! amortised O(1), so the host holds nothing for it beyond that bound.
//!
//! Semantics are level-triggered (like `epoll` without `EPOLLET`):
//! `take-ready` re-checks each queued entry's condition (O(1) each),
//! reports it while it holds and keeps it queued, and drops it from the
//! queue once it does not hold; the next state change queues it again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::task::{Context, Wake, Waker};

use wasmtime::component::Resource;
use wasmtime_wasi::p2::{DynPollable, Pollable, subscribe};

use crate::TetherCtxView;
use crate::bindings::ErrorCode;
use crate::bindings::tether::streams::readiness as wit;
use crate::ready::Signal;
use crate::tcp::{ByteListener, ByteStream, FutureByteStream};
use crate::websocket::{FutureMessageStream, Listener, MessageStream};

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

impl Source<'_> {
    /// The live registrations watching this source, in every set (for
    /// diagnostics and tests).
    pub fn watchers(&self) -> &Watchers {
        self.watchers
    }
}

/// The registrations watching one [`Signal`] (or one socket's read
/// readiness). Woken with the signal; detached when the resource they
/// watch is dropped, so no key outlives its resource. Holds only live
/// registrations: an entry leaves it when it is deregistered, replaced,
/// or its set is dropped (O(1) each).
#[derive(Default)]
pub struct Watchers(OnceLock<Arc<WatchList>>);

/// The list behind [`Watchers`], created at the first registration (a
/// signal nobody registers costs nothing). Dense: `Entry::slot` is each
/// entry's index, kept up to date under the lock, so removal is a
/// `swap_remove`.
#[derive(Default)]
struct WatchList(Mutex<Vec<Arc<Entry>>>);

/// `Entry::slot` of an entry in no list.
const UNLISTED: usize = usize::MAX;

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Watchers({})", self.len())
    }
}

impl WatchList {
    fn lock(&self) -> MutexGuard<'_, Vec<Arc<Entry>>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends `entry` (in no list yet). O(1) amortised.
    fn add(&self, entry: Arc<Entry>) {
        let mut list = self.lock();
        entry.slot.store(list.len(), Ordering::Relaxed);
        list.push(entry);
    }

    /// Removes `entry` if it is in this list. O(1) amortised: the last
    /// entry takes its place; the capacity shrinks once three quarters of
    /// it are unused, so a list that once held many holds no memory for
    /// them afterwards.
    fn remove(&self, entry: &Entry) {
        let mut list = self.lock();
        let i = entry.slot.load(Ordering::Relaxed);
        if !list
            .get(i)
            .is_some_and(|e| std::ptr::eq(Arc::as_ptr(e), entry))
        {
            return;
        }
        entry.slot.store(UNLISTED, Ordering::Relaxed);
        list.swap_remove(i);
        if let Some(moved) = list.get(i) {
            moved.slot.store(i, Ordering::Relaxed);
        }
        if list.capacity() > 64 && list.len() < list.capacity() / 4 {
            let keep = list.len() * 2;
            list.shrink_to(keep);
        }
    }
}

impl Watchers {
    fn list(&self) -> Arc<WatchList> {
        self.0.get_or_init(Arc::default).clone()
    }

    /// Live registrations watching this source.
    pub fn len(&self) -> usize {
        self.0.get().map_or(0, |l| l.lock().len())
    }

    /// Whether no registration watches this source.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Queues every live registration on its set (O(registrations on this
    /// source), usually 0 or 1).
    pub fn wake(&self) {
        if let Some(list) = self.0.get() {
            for entry in list.lock().iter() {
                entry.enqueue();
            }
        }
    }

    /// Removes every registration from its set: the watched resource is
    /// gone. Call from the resource's `Drop`.
    pub fn detach_all(&self) {
        let Some(list) = self.0.get() else { return };
        let taken = std::mem::take(&mut *list.lock());
        for entry in taken {
            entry.slot.store(UNLISTED, Ordering::Relaxed);
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
    /// The source's list this entry is in (weak: the list holds the
    /// entry).
    watchers: Weak<WatchList>,
    /// Index in that list, [`UNLISTED`] when in none; written under the
    /// list's lock.
    slot: AtomicUsize,
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

    /// The watched resource is gone: removes the entry from its set.
    /// The caller took it out of the source's list.
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
                st.forgot(1);
            }
        }
    }

    /// Ends a registration its set has forgotten (deregistered, replaced,
    /// or the set dropped): leaves the source's list. O(1). Call without
    /// the set's lock (a wake-up takes the list's lock, then the set's).
    fn retire(&self) {
        self.live.store(false, Ordering::Release);
        if let Some(list) = self.watchers.upgrade() {
            list.remove(self);
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

struct SetState {
    entries: HashMap<(u64, u8), Arc<Entry>>,
    /// Entries that may be ready, oldest first; each at most once. May
    /// hold forgotten entries until they reach the front, at most about
    /// as many as live ones (see [`SetState::forgot`]).
    queue: VecDeque<Arc<Entry>>,
    /// The guest's count of registrations, which `entries` is part of.
    quota: Quota,
}

impl SetState {
    /// Entries left `entries`: gives `released` places back to the quota
    /// (0 when another entry took the place), and drops forgotten entries
    /// from the queue once they outnumber the live ones (amortised O(1):
    /// each pass at least halves the queue).
    fn forgot(&mut self, released: usize) {
        self.quota.release(released);
        if self.queue.len() > 2 * self.entries.len() + 16 {
            self.queue.retain(|e| e.live.load(Ordering::Acquire));
        }
    }
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

/// What one guest may make the host wait on: at most `max` readiness-set
/// registrations across all its sets, or (a guest of the async interface)
/// `max` pending async calls ([`crate::p3`]). Clones share the count. The
/// host gives each guest one, of `Limits::readiness_set_entries`.
#[derive(Clone, Debug)]
pub struct Quota {
    used: Arc<AtomicUsize>,
    max: usize,
}

impl Quota {
    /// A fresh count with room for `max`.
    pub fn new(max: usize) -> Quota {
        Quota {
            used: Arc::default(),
            max,
        }
    }

    /// How many are taken now.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Acquire)
    }

    /// How many may be taken at once.
    pub fn max(&self) -> usize {
        self.max
    }

    /// Takes one; false (and nothing taken) when `max` are taken.
    pub(crate) fn take(&self) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.max).then_some(n + 1)
            })
            .is_ok()
    }

    /// Gives back `n` taken ones.
    pub(crate) fn release(&self, n: usize) {
        if n > 0 {
            self.used.fetch_sub(n, Ordering::AcqRel);
        }
    }
}

/// A readiness set (the `readiness-set` resource).
pub struct ReadinessSet {
    inner: Arc<SetInner>,
}

impl Drop for ReadinessSet {
    fn drop(&mut self) {
        let entries: Vec<Arc<Entry>> = {
            let mut st = self.inner.lock();
            st.queue.clear();
            let n = st.entries.len();
            st.quota.release(n);
            st.entries
                .drain()
                .map(|(_, e)| {
                    e.live.store(false, Ordering::Release);
                    e
                })
                .collect()
        };
        for entry in entries {
            entry.retire();
        }
    }
}

impl ReadinessSet {
    /// An empty set holding at most `max_entries` registrations (a quota
    /// of its own).
    pub fn new(max_entries: usize) -> ReadinessSet {
        ReadinessSet::with_quota(Quota::new(max_entries))
    }

    /// An empty set whose registrations count against `quota`, which
    /// other sets may share: the host's sets of one guest share the
    /// guest's quota, so `readiness_set_entries` bounds them together.
    pub fn with_quota(quota: Quota) -> ReadinessSet {
        ReadinessSet {
            inner: Arc::new(SetInner {
                state: Mutex::new(SetState {
                    entries: HashMap::new(),
                    queue: VecDeque::new(),
                    quota,
                }),
                signal: Signal::default(),
            }),
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
        let list = source.watchers.list();
        let entry = Arc::new(Entry {
            key,
            interest,
            set: Arc::downgrade(&self.inner),
            queued: AtomicBool::new(false),
            live: AtomicBool::new(true),
            check: source.check,
            watchers: Arc::downgrade(&list),
            slot: AtomicUsize::new(UNLISTED),
        });
        let replaced = {
            let mut st = self.inner.lock();
            let id = (key, interest as u8);
            if !st.entries.contains_key(&id) && !st.quota.take() {
                return Err(ErrorCode::InvalidArgument(format!(
                    "too many readiness registrations: at most {} in all of this guest's readiness sets together (limit readiness_set_entries)",
                    st.quota.max()
                )));
            }
            let replaced = st.entries.insert(id, entry.clone());
            if let Some(old) = &replaced {
                old.live.store(false, Ordering::Release);
                st.forgot(0);
            }
            replaced
        };
        if let Some(old) = replaced {
            old.retire();
        }
        list.add(entry.clone());
        if entry.is_ready() {
            entry.enqueue();
        }
        Ok(())
    }

    /// Registers `interest` on `target` under `key`, replacing an earlier
    /// registration of the same key and interest: `receive` or `send` on a
    /// [`MessageStream`], `accept` on a [`Listener`], [`ByteListener`],
    /// [`FutureMessageStream`] or [`FutureByteStream`] (its connect ended),
    /// `read` (its input stream) or `write` (its output stream) on a
    /// [`ByteStream`]. O(1). Errors: `invalid-argument` for an interest
    /// that does not apply to `target`, or when the set's [`Quota`] is
    /// used up (`readiness_set_entries` for a guest's sets).
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

    /// Removes the registration of `key` and `interest` and gives its
    /// place in the quota back; false when there was none. O(1).
    pub fn deregister(&self, key: u64, interest: Interest) -> bool {
        let removed = {
            let mut st = self.inner.lock();
            let removed = st.entries.remove(&(key, interest as u8));
            if let Some(entry) = &removed {
                entry.live.store(false, Ordering::Release);
                st.forgot(1);
            }
            removed
        };
        match removed {
            Some(entry) => {
                entry.retire();
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
    ByteListener => "byte-listener",
    FutureMessageStream => "future-message-stream",
    FutureByteStream => "future-byte-stream"
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

/// A socket's read readiness as a source. tokio keeps one waker in a
/// socket's read slot (no one else polls it for a p2 guest: its `wasi:io`
/// pollables wait with `readable()`, a waiter list of their own; the p3
/// host's reads poll the slot, but p3 guests have no readiness sets), so
/// the waker placed there is the source's: it queues every registration of
/// `watchers`, each of which then checks for itself. Before, each registration placed its own,
/// replacing the one before: with the stream registered for `read` twice
/// (two sets, or two keys), only the last one checked was ever woken (the
/// scale audit of 2026-12-04h).
pub(crate) fn read_source<'a>(
    watchers: &'a Watchers,
    stream: &Arc<tokio::net::TcpStream>,
) -> Source<'a> {
    let stream = Arc::downgrade(stream);
    let list = Arc::downgrade(&watchers.list());
    Source {
        watchers,
        check: Box::new(move |_| {
            let Some(list) = list.upgrade() else {
                return false;
            };
            let waker = Waker::from(list);
            stream.upgrade().is_some_and(|s| {
                s.poll_read_ready(&mut Context::from_waker(&waker))
                    .is_ready()
            })
        }),
    }
}

/// The waker a socket's read slot holds for [`read_source`]: queues every
/// registration watching the socket (O(registrations on it), usually 1).
impl Wake for WatchList {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        for entry in self.lock().iter() {
            entry.enqueue();
        }
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
        let quota = self.ctx.readiness.clone();
        Ok(self.table.push(ReadinessSet::with_quota(quota))?)
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

    fn register_future_message_stream(
        &mut self,
        this: Resource<ReadinessSet>,
        future: Resource<FutureMessageStream>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let future = self.table.get(&future)?;
        Ok(self.table.get(&this)?.register(future, interest, key))
    }

    fn register_future_byte_stream(
        &mut self,
        this: Resource<ReadinessSet>,
        future: Resource<FutureByteStream>,
        interest: Interest,
        key: u64,
    ) -> wasmtime::Result<Result<(), ErrorCode>> {
        let future = self.table.get(&future)?;
        Ok(self.table.get(&this)?.register(future, interest, key))
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Registrations that are replaced or deregistered over and over on a
    /// source that is always ready, with no `take-ready` in between: the
    /// set's queue and the source's list hold about the live
    /// registrations, not every one ever made (the old code kept each
    /// replaced entry queued until a `take-ready` reached it: 100,000
    /// here).
    #[test]
    fn churn_on_a_ready_source_holds_only_about_the_live_registrations() {
        const KEYS: u64 = 4;
        let signal = Signal::default();
        let state = Arc::new(());
        let set = ReadinessSet::new(KEYS as usize);
        for round in 0..100_000u64 {
            let source = signal_source(&signal, &state, |_| true);
            set.insert(round % KEYS, Interest::Receive, source).unwrap();
            if round % 3 == 0 {
                set.deregister(round % KEYS, Interest::Receive);
            }
            signal.wake();
        }
        let live = set.len();
        let queued = set.inner.lock().queue.len();
        assert!(
            queued <= 2 * live + 17,
            "{queued} entries queued for {live} registrations"
        );
        assert_eq!(signal.watchers().len(), live);
        let mut ready: Vec<u64> = set.take_ready(64).into_iter().map(|(k, _)| k).collect();
        ready.sort_unstable();
        assert_eq!(ready.len(), live, "each live registration once: {ready:?}");
        ready.dedup();
        assert_eq!(ready.len(), live, "each live registration once: {ready:?}");
        drop(set);
        assert_eq!(signal.watchers().len(), 0, "the dropped set's entries left");
    }
}
