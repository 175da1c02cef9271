//! Accepted connections per source, over every listener of a host
//! (`Limits::max_connections_per_source`).
//!
//! A listener's handshake places bound what clients hold while they
//! upgrade; once upgraded (or, on a TCP `byte-listener`, once accepted) a
//! connection is the guest's, and nothing bounded how many one client
//! kept. One address that opens connections and keeps them open took
//! every file descriptor of the process (then `accept` fails with EMFILE
//! for everyone and the guests' own dials fail too) and the host memory
//! each one holds. Now a connection holds a place of its source (an IPv4
//! address, an IPv6 /64: [`crate::places::source_of`]) from its accept
//! until its socket closes, and a source at its bound has its new
//! connections closed at once (a WebSocket client gets 503 first) while
//! other sources are served.
//!
//! Loopback clients are not counted unless
//! `Limits::count_loopback_connections` says so: on a listener bound to
//! loopback they are the machine's own programs, and behind a reverse
//! proxy on the same machine every client is loopback, so a bound would
//! cut the proxy, not a client.
//!
//! Cost: one short lock and a hash-map update per accept and per close.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::places::{count_down, source_of};

/// The places every source holds, shared by the listeners of one host.
#[derive(Debug)]
pub(crate) struct BySource {
    max: usize,
    count_loopback: bool,
    held: Mutex<HashMap<IpAddr, usize>>,
}

/// A connection's place in its source's count; dropping it gives the
/// place back. Kept with the socket (for as long as it is open).
pub(crate) struct SourcePlace {
    counts: Arc<BySource>,
    source: IpAddr,
}

impl std::fmt::Debug for SourcePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SourcePlace").field(&self.source).finish()
    }
}

/// A source already held its bound of connections.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct SourceFull {
    /// The bound (`max_connections_per_source`).
    pub(crate) max: usize,
}

impl BySource {
    /// At most `max` (at least 1) connections per source; loopback
    /// clients count only when `count_loopback`.
    pub(crate) fn new(max: usize, count_loopback: bool) -> Arc<BySource> {
        Arc::new(BySource {
            max: max.max(1),
            count_loopback,
            held: Mutex::new(HashMap::new()),
        })
    }

    /// Takes a place for a connection from `peer`: `Ok(None)` when its
    /// source is not counted (loopback), `Ok(Some(place))` while the
    /// source holds fewer than the bound. Errors: [`SourceFull`].
    pub(crate) fn take(
        self: &Arc<Self>,
        peer: SocketAddr,
    ) -> Result<Option<SourcePlace>, SourceFull> {
        let source = source_of(peer);
        // `::1`'s source is the /64 `::`: ask the address itself too.
        if (source.is_loopback() || peer.ip().is_loopback()) && !self.count_loopback {
            return Ok(None);
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        let n = held.entry(source).or_insert(0);
        if *n >= self.max {
            return Err(SourceFull { max: self.max });
        }
        *n += 1;
        Ok(Some(SourcePlace {
            counts: self.clone(),
            source,
        }))
    }

    /// Connections `peer`'s source holds now (tests).
    #[cfg(test)]
    pub(crate) fn held(&self, peer: SocketAddr) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.get(&source_of(peer)).copied().unwrap_or(0)
    }
}

impl Drop for SourcePlace {
    fn drop(&mut self) {
        let mut held = self.counts.held.lock().unwrap_or_else(|e| e.into_inner());
        count_down(&mut held, self.source);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source holds at most its bound and gets places back as its
    /// connections close; other sources are not affected; loopback counts
    /// only when asked; an IPv6 /64 is one source.
    #[test]
    fn a_source_holds_at_most_its_bound_of_connections() {
        let counts = BySource::new(2, false);
        let a = |port| SocketAddr::from(([10, 0, 0, 1], port));
        let b = SocketAddr::from(([10, 0, 0, 2], 1));
        let first = counts.take(a(1)).unwrap().expect("counted");
        let _second = counts.take(a(2)).unwrap().expect("counted");
        assert_eq!(counts.take(a(3)).unwrap_err(), SourceFull { max: 2 });
        assert!(counts.take(b).unwrap().is_some(), "another source");
        drop(first);
        assert_eq!(counts.held(a(0)), 1);
        let _third = counts.take(a(3)).unwrap().expect("a place came back");
        let local = SocketAddr::from(([127, 0, 0, 1], 1));
        let exempt: Vec<_> = (0..10).map(|_| counts.take(local).unwrap()).collect();
        assert!(exempt.iter().all(Option::is_none), "loopback not counted");
        assert_eq!(counts.held(local), 0);
        for loopback in ["[::1]:1", "[::ffff:127.0.0.9]:1"] {
            let peer: SocketAddr = loopback.parse().unwrap();
            assert!(
                counts.take(peer).unwrap().is_none(),
                "{loopback} not counted"
            );
        }

        let strict = BySource::new(1, true);
        let _one = strict.take(local).unwrap().expect("loopback counted");
        assert!(strict.take(local).is_err());
        let v6 = |s: &str| SocketAddr::new(s.parse().unwrap(), 1);
        let _v6 = strict.take(v6("2001:db8:1:2::1")).unwrap();
        assert!(strict.take(v6("2001:db8:1:2:ffff::9")).is_err(), "same /64");
        assert!(strict.take(v6("2001:db8:1:3::1")).is_ok(), "another /64");
        drop(_one);
        assert!(strict.held.lock().unwrap().get(&source_of(local)).is_none());
    }
}
