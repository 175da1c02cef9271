//! The places of a listener's handshakes in progress, and which one a new
//! client may take when every place is held.
//!
//! A listener runs at most a fixed number of handshakes at once (a
//! WebSocket listener's `max_handshakes_per_listener`, the metrics
//! server's `max_concurrent_scrapes`). Clients that connect and send
//! nothing would hold every place until their timeout and shut everyone
//! else out (a slowloris). So when every place is held, a new connection
//! takes the place of the oldest client that has not sent its part (its
//! request head) [`EVICT_AFTER`] after its accept; only when there is
//! none is it refused. A client that has sent its head is never pushed
//! out: it waits on the server, not the other way round.
//!
//! Cost: O(1) amortised per accept, whatever the number of places (each
//! handshake enters the queue once and leaves it once; the queue is
//! compacted when ended entries outnumber live ones).

use std::collections::{HashSet, VecDeque};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::time::Duration;

use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;

/// How long after its accept a client that has not sent its request head
/// may lose its place to a new connection (1 s): a real client's head
/// arrives within a round trip of its connect, and a burst of new
/// connections cannot push out one whose head is on its way.
pub(crate) const EVICT_AFTER: Duration = Duration::from_secs(1);

const SILENT: u8 = 0;
const HEAD: u8 = 1;
const EVICTED: u8 = 2;

/// Whether a handshake's request head has arrived, or it gave its place
/// up: one of the two wins, whichever thread each runs on. From the head
/// on, the handshake keeps its place until it ends.
#[derive(Clone, Default)]
pub(crate) struct HeadArrived(Arc<AtomicU8>);

impl HeadArrived {
    /// Marks the head as arrived. Returns `false` if the handshake already
    /// gave its place up (it is being aborted): it must stop at once, and
    /// take nothing (a backlog slot) it would not give back.
    pub(crate) fn set(&self) -> bool {
        self.0
            .compare_exchange(SILENT, HEAD, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    fn arrived(&self) -> bool {
        self.0.load(Ordering::Acquire) == HEAD
    }

    /// Gives the place up, unless the head arrived first.
    fn evict(&self) -> bool {
        self.0
            .compare_exchange(SILENT, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// One handshake in accept order.
struct Entry {
    task: AbortHandle,
    accepted: Instant,
    head: HeadArrived,
    peer: SocketAddr,
}

/// What [`Places::make_room`] found for a new connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// A place is free.
    Free,
    /// The handshake of this peer gave its place up (it is being aborted:
    /// its connection closes).
    Evicted(SocketAddr),
    /// Every place is held by a handshake whose head arrived or that is
    /// younger than [`EVICT_AFTER`]: refuse the connection.
    Full,
}

/// The handshakes a listener runs, at most `max` at once (the tasks live
/// here: dropping `Places` aborts them all).
pub(crate) struct Places {
    max: usize,
    tasks: JoinSet<()>,
    /// Tasks aborted by an eviction that the set has not yet joined: they
    /// hold no place. By task id: an aborted task may still end on its
    /// own (the abort raced its last poll on another thread).
    aborted: HashSet<tokio::task::Id>,
    /// Handshakes that may give their place up, in accept order; entries
    /// whose task ended or whose head arrived are dropped as they reach
    /// the front (or by compaction).
    queue: VecDeque<Entry>,
}

impl Places {
    /// Room for `max` handshakes at once (at least 1).
    pub(crate) fn new(max: usize) -> Places {
        Places {
            max: max.max(1),
            tasks: JoinSet::new(),
            aborted: HashSet::new(),
            queue: VecDeque::new(),
        }
    }

    /// Handshakes holding a place now.
    pub(crate) fn live(&self) -> usize {
        self.tasks.len().saturating_sub(self.aborted.len())
    }

    fn joined(&mut self, result: Result<(tokio::task::Id, ()), tokio::task::JoinError>) {
        let id = match result {
            Ok((id, ())) => id,
            Err(e) => e.id(),
        };
        self.aborted.remove(&id);
    }

    /// Waits until a handshake ends and takes it out (never resolves while
    /// none runs: for a `select!` beside the accept).
    pub(crate) async fn join_next(&mut self) {
        match self.tasks.join_next_with_id().await {
            Some(result) => self.joined(result),
            None => std::future::pending().await,
        }
    }

    /// Takes out every handshake that has ended, without waiting.
    fn reap(&mut self) {
        while let Some(result) = self.tasks.try_join_next_with_id() {
            self.joined(result);
        }
    }

    /// Finds a place for a new connection at `now`: a free one, or the
    /// place of the oldest handshake without a head [`EVICT_AFTER`] after
    /// its accept (aborted here), or none.
    pub(crate) fn make_room(&mut self, now: Instant) -> Room {
        self.reap();
        if self.live() < self.max {
            return Room::Free;
        }
        while let Some(front) = self.queue.front() {
            if front.task.is_finished() || front.head.arrived() {
                self.queue.pop_front();
                continue;
            }
            if now.duration_since(front.accepted) < EVICT_AFTER {
                return Room::Full;
            }
            let entry = self.queue.pop_front().expect("front exists");
            if !entry.head.evict() {
                // The head arrived just now: it keeps its place.
                continue;
            }
            entry.task.abort();
            // Still in the set until joined, however it ends.
            self.aborted.insert(entry.task.id());
            return Room::Evicted(entry.peer);
        }
        Room::Full
    }

    /// Runs `handshake` in a place (after [`Places::make_room`] found
    /// one). `head` is the flag the handshake sets once the client's head
    /// arrived.
    pub(crate) fn spawn<F>(&mut self, peer: SocketAddr, head: HeadArrived, handshake: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = self.tasks.spawn(handshake);
        self.queue.push_back(Entry {
            task,
            accepted: Instant::now(),
            head,
            peer,
        });
        if self.queue.len() > 2 * self.live() + 64 {
            self.queue
                .retain(|e| !e.task.is_finished() && !e.head.arrived());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(port: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], port))
    }

    /// At the cap: young handshakes and those whose head arrived keep
    /// their places; the oldest silent one past EVICT_AFTER gives its
    /// place up, once; the queue stays bounded under churn.
    #[tokio::test]
    async fn only_the_oldest_silent_handshake_past_the_grace_gives_its_place_up() {
        let mut places = Places::new(3);
        let heads: Vec<HeadArrived> = (0..3).map(|_| HeadArrived::default()).collect();
        for (i, head) in heads.iter().enumerate() {
            assert_eq!(places.make_room(Instant::now()), Room::Free);
            places.spawn(peer(i as u16 + 1), head.clone(), std::future::pending());
        }
        assert_eq!(places.make_room(Instant::now()), Room::Full);
        assert!(heads[0].set());
        let later = Instant::now() + EVICT_AFTER;
        // The first one sent its head: the second is the oldest silent one.
        assert_eq!(places.make_room(later), Room::Evicted(peer(2)));
        // Its head, arriving now, is too late: the handshake must stop.
        assert!(!heads[1].set());
        assert_eq!(places.live(), 2);
        places.spawn(peer(4), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(later), Room::Evicted(peer(3)));
        places.spawn(peer(5), HeadArrived::default(), std::future::pending());
        // The two new ones are younger than the grace; the first one
        // keeps its place.
        assert_eq!(places.make_room(later), Room::Full);
        tokio::task::yield_now().await;
        places.reap();
        assert_eq!(places.live(), 3);
        assert_eq!(places.tasks.len(), 3, "the aborted tasks were joined");
        // Handshakes that end at once leave their places free and the
        // queue short.
        let mut places = Places::new(2);
        for i in 0..10_000u16 {
            assert_eq!(places.make_room(Instant::now()), Room::Free);
            places.spawn(peer(i), HeadArrived::default(), async {});
            tokio::task::yield_now().await;
        }
        assert!(places.queue.len() <= 66, "queue {}", places.queue.len());
    }
}
