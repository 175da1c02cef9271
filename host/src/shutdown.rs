//! Graceful shutdown: one call on the host context ([`crate::HostCtx::shutdown`])
//! winds down every guest of that host.
//!
//! What a shutdown does, to every object the host made for any guest, live
//! or made afterwards:
//! - a WebSocket or TCP listener stops accepting (its socket closes, so new
//!   connections are refused); the guest can still take what was accepted
//!   already, then `accept` returns `closed` and the listener's pollable is
//!   ready;
//! - a message stream queues a close frame with 1001 (going away, RFC 6455
//!   section 7.4.1) after every message already queued;
//! - a TCP byte stream half-closes (FIN) after every byte already written,
//!   as `shutdown-send` does; reading goes on.
//!
//! Guests see their streams end and their listeners close, and return. The
//! deadline for that is the caller's ([`crate::runner::Runner`] stops a
//! guest still running `shutdown_timeout` after the shutdown started).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, Weak};

use crate::ready::Signal;

/// A host object that takes part in a graceful shutdown.
pub(crate) trait GoingAway: Send + Sync {
    /// Starts this object's part of the shutdown. Called once per object,
    /// never under the registry's lock being held by the object itself.
    fn going_away(&self);
}

#[derive(Default)]
struct Registry {
    live: Vec<Weak<dyn GoingAway>>,
    /// Prune dead entries once the list reaches this length (twice the
    /// live count after the last prune): O(1) amortized per registration.
    prune_at: usize,
}

/// The shutdown state of one host: whether it started, and weak handles to
/// every object that must wind down when it does.
#[derive(Default)]
pub(crate) struct Shutdown {
    started: AtomicBool,
    signal: Signal,
    registry: Mutex<Registry>,
}

impl std::fmt::Debug for Shutdown {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shutdown")
            .field("started", &self.is_started())
            .finish_non_exhaustive()
    }
}

impl Shutdown {
    /// Remembers `object`; if the shutdown has started already, starts the
    /// object's part at once instead.
    pub(crate) fn register(&self, object: Weak<dyn GoingAway>) {
        let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
        if self.is_started() {
            drop(reg);
            if let Some(o) = object.upgrade() {
                o.going_away();
            }
            return;
        }
        if reg.live.len() >= reg.prune_at.max(64) {
            reg.live.retain(|w| w.strong_count() > 0);
            reg.prune_at = reg.live.len() * 2;
        }
        reg.live.push(object);
    }

    /// Starts the shutdown. Returns false when it had started already.
    pub(crate) fn start(&self) -> bool {
        let live = {
            let mut reg = self.registry.lock().unwrap_or_else(|e| e.into_inner());
            if self.started.swap(true, Ordering::SeqCst) {
                return false;
            }
            std::mem::take(&mut reg.live)
        };
        for object in live.iter().filter_map(Weak::upgrade) {
            object.going_away();
        }
        self.signal.wake();
        true
    }

    pub(crate) fn is_started(&self) -> bool {
        self.started.load(Ordering::SeqCst)
    }

    /// Resolves once the shutdown has started.
    pub(crate) async fn started(&self) {
        self.signal.wait_until(|| self.is_started()).await;
    }

    /// Objects registered and not yet pruned (tests).
    #[cfg(test)]
    fn registered(&self) -> usize {
        self.registry.lock().unwrap().live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;

    struct Counter(AtomicUsize);
    impl GoingAway for Counter {
        fn going_away(&self) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn every_live_object_winds_down_once_and_late_ones_at_once() {
        let s = Shutdown::default();
        let a = Arc::new(Counter(AtomicUsize::new(0)));
        let gone = Arc::new(Counter(AtomicUsize::new(0)));
        s.register(Arc::downgrade(&a) as Weak<dyn GoingAway>);
        s.register(Arc::downgrade(&gone) as Weak<dyn GoingAway>);
        drop(gone);
        assert!(s.start());
        assert!(!s.start(), "a second start is a no-op");
        assert_eq!(a.0.load(Ordering::SeqCst), 1);
        let late = Arc::new(Counter(AtomicUsize::new(0)));
        s.register(Arc::downgrade(&late) as Weak<dyn GoingAway>);
        assert_eq!(
            late.0.load(Ordering::SeqCst),
            1,
            "registered after the start"
        );
    }

    #[test]
    fn dead_entries_are_pruned_so_the_registry_stays_bounded() {
        let s = Shutdown::default();
        let keep: Vec<_> = (0..100)
            .map(|_| Arc::new(Counter(AtomicUsize::new(0))))
            .collect();
        for k in &keep {
            s.register(Arc::downgrade(k) as Weak<dyn GoingAway>);
        }
        for _ in 0..100_000 {
            let t = Arc::new(Counter(AtomicUsize::new(0)));
            s.register(Arc::downgrade(&t) as Weak<dyn GoingAway>);
        }
        assert!(
            s.registered() <= 2 * 101 + 64,
            "{} entries for 100 live objects",
            s.registered()
        );
    }
}
