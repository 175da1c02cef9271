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
//! One source may hold at most `max_per_source` of the places (its
//! address; an IPv6 source by its /64, the block one host gets): an
//! attacker that opens connections faster than one a second per place
//! keeps every place younger than [`EVICT_AFTER`] and would shut everyone
//! out, but from one address it holds only its share, and the other
//! sources find the rest.
//!
//! Cost: O(1) amortised per accept, whatever the number of places (each
//! handshake enters the queue once and leaves it once; the queue is
//! compacted when ended entries outnumber live ones).

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::{IpAddr, Ipv6Addr, SocketAddr};
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

/// The source a handshake counts against: an IPv4 address (also when
/// written as IPv4-mapped IPv6), or an IPv6 address's /64 prefix. (The
/// JMUX guest's `proxy::cli::source_of` counts its proxy clients alike;
/// the host keeps its own copy rather than depend on the JMUX crate.)
pub(crate) fn source_of(peer: SocketAddr) -> IpAddr {
    match peer.ip() {
        IpAddr::V4(v4) => IpAddr::V4(v4),
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let prefix = u128::from(v6) & !((1u128 << 64) - 1);
                IpAddr::V6(Ipv6Addr::from(prefix))
            }
        },
    }
}

/// Takes one off `source`'s count in `held`, and the entry out at 0 (so
/// the map holds only the sources holding something).
pub(crate) fn count_down(held: &mut HashMap<IpAddr, usize>, source: IpAddr) {
    if let std::collections::hash_map::Entry::Occupied(mut n) = held.entry(source) {
        *n.get_mut() -= 1;
        if *n.get() == 0 {
            n.remove();
        }
    }
}

/// What [`Places::make_room`] found for a new connection.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Room {
    /// A place is free.
    Free,
    /// The new connection's source already holds `max_per_source`
    /// places: refuse it (other sources are not affected).
    SourceFull,
    /// The handshake of this peer gave its place up (it is being aborted:
    /// its connection closes).
    Evicted(SocketAddr),
    /// Every place is held by a handshake whose head arrived or that is
    /// younger than [`EVICT_AFTER`]: refuse the connection.
    Full,
}

/// The handshakes a listener runs, at most `max` at once and
/// `max_per_source` from one source (the tasks live here: dropping
/// `Places` aborts them all).
pub(crate) struct Places {
    max: usize,
    max_per_source: usize,
    tasks: JoinSet<()>,
    /// The source of each handshake holding a place, by task id (taken
    /// out when it is joined or evicted), and each source's count.
    source_of_task: HashMap<tokio::task::Id, IpAddr>,
    per_source: HashMap<IpAddr, usize>,
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
    /// Room for `max` handshakes at once (at least 1), `max_per_source`
    /// of them (at least 1) from one source ([`source_of`]).
    pub(crate) fn new(max: usize, max_per_source: usize) -> Places {
        Places {
            max: max.max(1),
            max_per_source: max_per_source.max(1),
            tasks: JoinSet::new(),
            source_of_task: HashMap::new(),
            per_source: HashMap::new(),
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
        self.give_up(id);
    }

    /// Takes a handshake's place off its source's count (once).
    fn give_up(&mut self, id: tokio::task::Id) {
        if let Some(source) = self.source_of_task.remove(&id) {
            count_down(&mut self.per_source, source);
        }
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

    /// Finds a place for a new connection from `peer` at `now`: a free
    /// one, or the place of the oldest handshake without a head
    /// [`EVICT_AFTER`] after its accept (aborted here), or none. When the
    /// source already holds `max_per_source` places, only the oldest
    /// silent handshake may give its place up, and only if it is the
    /// source's own (its count stays the same); else
    /// [`Room::SourceFull`].
    pub(crate) fn make_room(&mut self, peer: SocketAddr, now: Instant) -> Room {
        self.reap();
        let source = source_of(peer);
        let source_full = self.per_source.get(&source).copied().unwrap_or(0) >= self.max_per_source;
        let refused = if source_full {
            Room::SourceFull
        } else {
            Room::Full
        };
        if !source_full && self.live() < self.max {
            return Room::Free;
        }
        while let Some(front) = self.queue.front() {
            if front.task.is_finished() || front.head.arrived() {
                self.queue.pop_front();
                continue;
            }
            if now.duration_since(front.accepted) < EVICT_AFTER
                || (source_full && source_of(front.peer) != source)
            {
                return refused;
            }
            let entry = self.queue.pop_front().expect("front exists");
            if !entry.head.evict() {
                // The head arrived just now: it keeps its place.
                continue;
            }
            entry.task.abort();
            // Still in the set until joined, however it ends.
            self.aborted.insert(entry.task.id());
            self.give_up(entry.task.id());
            return Room::Evicted(entry.peer);
        }
        refused
    }

    /// Runs `handshake` in a place (after [`Places::make_room`] found
    /// one). `head` is the flag the handshake sets once the client's head
    /// arrived.
    pub(crate) fn spawn<F>(&mut self, peer: SocketAddr, head: HeadArrived, handshake: F)
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let task = self.tasks.spawn(handshake);
        let source = source_of(peer);
        self.source_of_task.insert(task.id(), source);
        *self.per_source.entry(source).or_insert(0) += 1;
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

    /// One source holds at most its share of the places and gets places
    /// again as they end; another source finds the rest. At its share,
    /// the oldest silent handshake past the grace gives its place up for
    /// the source only if it is the source's own. IPv6 sources count by
    /// their /64, an IPv4-mapped one as its IPv4 address.
    #[tokio::test]
    async fn one_source_holds_at_most_its_share_of_the_places() {
        let mut places = Places::new(5, 2);
        let a = |port| SocketAddr::from(([10, 0, 0, 1], port));
        let b = |port| SocketAddr::from(([10, 0, 0, 2], port));
        let now = Instant::now();
        let later = now + 2 * EVICT_AFTER;
        let (done, ended) = tokio::sync::oneshot::channel::<()>();
        assert_eq!(places.make_room(b(1), now), Room::Free);
        places.spawn(b(1), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(a(1), now), Room::Free);
        places.spawn(a(1), HeadArrived::default(), async {
            let _ = ended.await;
        });
        assert_eq!(places.make_room(a(2), now), Room::Free);
        places.spawn(a(2), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(a(3), now), Room::SourceFull);
        // The oldest silent one is b's: a may not take it.
        assert_eq!(places.make_room(a(3), later), Room::SourceFull);
        assert_eq!(places.make_room(b(2), now), Room::Free);
        done.send(()).unwrap();
        tokio::task::yield_now().await;
        assert_eq!(
            places.make_room(a(3), now),
            Room::Free,
            "a place of the source ended"
        );
        places.spawn(a(3), HeadArrived::default(), std::future::pending());
        // b's first place is taken by a third source past the grace,
        // which gives b's count back at once; then a's oldest silent one
        // is at the front, and a may take it for its own.
        places.spawn(b(2), HeadArrived::default(), std::future::pending());
        places.spawn(b(3), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(peer(1), later), Room::Evicted(b(1)));
        assert_eq!(places.per_source.get(&source_of(b(0))), Some(&2));
        places.spawn(peer(1), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(a(4), now), Room::SourceFull, "young");
        assert_eq!(places.make_room(a(4), later), Room::Evicted(a(2)));
        places.spawn(a(4), HeadArrived::default(), std::future::pending());
        assert_eq!(places.per_source.get(&source_of(a(0))), Some(&2));
        tokio::task::yield_now().await;
        places.reap();
        assert_eq!(
            places.per_source.get(&source_of(a(0))),
            Some(&2),
            "counted once"
        );
        assert_eq!(places.source_of_task.len(), places.live());
        assert_eq!(places.live(), 5);

        let v6 = |s: &str| SocketAddr::new(s.parse().unwrap(), 1);
        assert_eq!(
            source_of(v6("2001:db8:1:2:aaaa::1")),
            source_of(v6("2001:db8:1:2:bbbb::2"))
        );
        assert_ne!(
            source_of(v6("2001:db8:1:2::1")),
            source_of(v6("2001:db8:1:3::1"))
        );
        assert_eq!(source_of(v6("::ffff:10.0.0.1")), source_of(a(7)));
    }

    /// At the cap: young handshakes and those whose head arrived keep
    /// their places; the oldest silent one past EVICT_AFTER gives its
    /// place up, once; the queue stays bounded under churn.
    #[tokio::test]
    async fn only_the_oldest_silent_handshake_past_the_grace_gives_its_place_up() {
        let mut places = Places::new(3, usize::MAX);
        let heads: Vec<HeadArrived> = (0..3).map(|_| HeadArrived::default()).collect();
        for (i, head) in heads.iter().enumerate() {
            assert_eq!(places.make_room(peer(9), Instant::now()), Room::Free);
            places.spawn(peer(i as u16 + 1), head.clone(), std::future::pending());
        }
        assert_eq!(places.make_room(peer(9), Instant::now()), Room::Full);
        assert!(heads[0].set());
        let later = Instant::now() + EVICT_AFTER;
        // The first one sent its head: the second is the oldest silent one.
        assert_eq!(places.make_room(peer(9), later), Room::Evicted(peer(2)));
        // Its head, arriving now, is too late: the handshake must stop.
        assert!(!heads[1].set());
        assert_eq!(places.live(), 2);
        places.spawn(peer(4), HeadArrived::default(), std::future::pending());
        assert_eq!(places.make_room(peer(9), later), Room::Evicted(peer(3)));
        places.spawn(peer(5), HeadArrived::default(), std::future::pending());
        // The two new ones are younger than the grace; the first one
        // keeps its place.
        assert_eq!(places.make_room(peer(9), later), Room::Full);
        tokio::task::yield_now().await;
        places.reap();
        assert_eq!(places.live(), 3);
        assert_eq!(places.tasks.len(), 3, "the aborted tasks were joined");
        // Handshakes that end at once leave their places free and the
        // queue short.
        let mut places = Places::new(2, usize::MAX);
        for i in 0..10_000u16 {
            assert_eq!(places.make_room(peer(9), Instant::now()), Room::Free);
            places.spawn(peer(i), HeadArrived::default(), async {});
            tokio::task::yield_now().await;
        }
        assert!(places.queue.len() <= 66, "queue {}", places.queue.len());
    }
}
