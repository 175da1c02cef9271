//! Accepted connections per source and in all, over every listener of a
//! host (`Limits::max_connections_per_source`, `Limits::max_connections`).
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
//! Loopback clients are not counted per source unless
//! `Limits::count_loopback_connections` says so: on a listener bound to
//! loopback they are the machine's own programs, and behind a reverse
//! proxy on the same machine every client is loopback, so a bound would
//! cut the proxy, not a client.
//!
//! Enough sources together still took every descriptor (80 addresses at
//! 256 each fill 20,000), and then the guests could dial nothing: a JMUX
//! server side whose clients held every descriptor opened no channel for
//! anyone. So every accepted connection, loopback or not, also holds a
//! place of the host's (`Limits::max_connections`, by default three
//! quarters of the process's descriptor limit): past it a new connection
//! is closed at once as above, and the descriptors left serve the guests'
//! dials, files and listeners.
//!
//! Cost: one short lock and a hash-map update per accept and per close.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};

use crate::places::{count_down, source_of};

/// The places every source holds, and the host's, shared by the
/// listeners of one host.
#[derive(Debug)]
pub(crate) struct BySource {
    max: usize,
    max_total: usize,
    count_loopback: bool,
    held: Mutex<Held>,
}

#[derive(Debug, Default)]
struct Held {
    by_source: HashMap<IpAddr, usize>,
    total: usize,
    /// Bytes each counted source has charged to `max_assembling_bytes`
    /// ([`SourceCharge`]); a source at 0 has no entry.
    assembling: HashMap<IpAddr, usize>,
}

/// A connection's place in the host's count and, when its source is
/// counted, in its source's; dropping it gives them back. Kept with the
/// socket (for as long as it is open).
pub(crate) struct SourcePlace {
    counts: Arc<BySource>,
    source: Option<IpAddr>,
}

impl std::fmt::Debug for SourcePlace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("SourcePlace").field(&self.source).finish()
    }
}

/// Why an accepted connection gets no place.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// Its source held `max_connections_per_source` already (the bound).
    SourceFull(usize),
    /// The host held `max_connections` already (the bound).
    HostFull(usize),
}

impl Refused {
    /// The metrics' `bound` label: `per_source` or `host`.
    pub(crate) fn bound(&self) -> &'static str {
        match self {
            Refused::SourceFull(_) => "per_source",
            Refused::HostFull(_) => "host",
        }
    }
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::SourceFull(max) => write!(
                f,
                "this source holds {max} connections (max_connections_per_source)"
            ),
            Refused::HostFull(max) => {
                write!(
                    f,
                    "the host holds {max} accepted connections (max_connections)"
                )
            }
        }
    }
}

impl BySource {
    /// At most `max` (at least 1) connections per source, loopback
    /// clients counted only when `count_loopback`, and at most
    /// `max_total` (at least 1) in all.
    pub(crate) fn new(max: usize, count_loopback: bool, max_total: usize) -> Arc<BySource> {
        Arc::new(BySource {
            max: max.max(1),
            max_total: max_total.max(1),
            count_loopback,
            held: Mutex::new(Held::default()),
        })
    }

    /// Takes a place for a connection from `peer`, while the host holds
    /// fewer than its bound and the peer's source (if counted) fewer than
    /// its own. Errors: [`Refused`].
    pub(crate) fn take(self: &Arc<Self>, peer: SocketAddr) -> Result<SourcePlace, Refused> {
        let source = source_of(peer);
        // `::1`'s source is the /64 `::`: ask the address itself too.
        let counted = self.count_loopback || !(source.is_loopback() || peer.ip().is_loopback());
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if held.total >= self.max_total {
            return Err(Refused::HostFull(self.max_total));
        }
        if counted {
            let n = held.by_source.entry(source).or_insert(0);
            if *n >= self.max {
                return Err(Refused::SourceFull(self.max));
            }
            *n += 1;
        }
        held.total += 1;
        Ok(SourcePlace {
            counts: self.clone(),
            source: counted.then_some(source),
        })
    }

    /// Bytes `peer`'s source has charged to `max_assembling_bytes` (tests).
    #[cfg(test)]
    pub(crate) fn assembling(&self, peer: SocketAddr) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.assembling.get(&source_of(peer)).copied().unwrap_or(0)
    }

    /// Connections `peer`'s source holds now (tests).
    #[cfg(test)]
    pub(crate) fn held(&self, peer: SocketAddr) -> usize {
        let held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        held.by_source.get(&source_of(peer)).copied().unwrap_or(0)
    }
}

impl SourcePlace {
    /// The connection's source's share of `max_assembling_bytes`, when the
    /// source is counted (not loopback, unless `count_loopback`).
    pub(crate) fn source_charge(&self) -> Option<SourceCharge> {
        self.source.map(|source| SourceCharge {
            counts: self.counts.clone(),
            source,
        })
    }
}

/// What one source's connections charge to `max_assembling_bytes`
/// together: a source may hold at most a share of it, so that one address
/// parking unfinished messages on a few connections cannot fail every
/// other client's large messages with 1013 (the red team of 2026-12-04g,
/// left open then). Cost: one short lock per read past a stream's
/// allowance, and per release.
#[derive(Clone)]
pub(crate) struct SourceCharge {
    counts: Arc<BySource>,
    source: IpAddr,
}

impl SourceCharge {
    /// Charges `n` bytes if the source then holds at most `max`.
    pub(crate) fn try_add(&self, n: usize, max: usize) -> bool {
        let mut held = self.counts.held.lock().unwrap_or_else(|e| e.into_inner());
        let now = held.assembling.entry(self.source).or_insert(0);
        if *now + n > max {
            if *now == 0 {
                held.assembling.remove(&self.source);
            }
            return false;
        }
        *now += n;
        true
    }

    /// Gives back `n` bytes charged with [`SourceCharge::try_add`].
    pub(crate) fn sub(&self, n: usize) {
        if n == 0 {
            return;
        }
        let mut held = self.counts.held.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(now) = held.assembling.get_mut(&self.source) {
            *now = now.saturating_sub(n);
            if *now == 0 {
                held.assembling.remove(&self.source);
            }
        }
    }
}

impl Drop for SourcePlace {
    fn drop(&mut self) {
        let mut held = self.counts.held.lock().unwrap_or_else(|e| e.into_inner());
        held.total -= 1;
        if let Some(source) = self.source {
            count_down(&mut held.by_source, source);
        }
    }
}

/// The most `Limits::max_connections` defaults to (65,536): a held
/// WebSocket connection costs the host about 34 KiB (2.2 GiB at this
/// many), and descriptor limits raised to the hard limit (524,288 under
/// systemd, 1,048,576 under Docker) would otherwise let held connections
/// take 13-26 GiB, where the out-of-memory killer ends every guest (the
/// red team of 2026-12-04, fifth round, F3).
pub const DEFAULT_MAX_CONNECTIONS_CAP: usize = 65_536;

/// The default of `Limits::max_connections`: three quarters of the
/// process's soft `RLIMIT_NOFILE` (descriptors), so that a quarter stays
/// for the guests' dials, files and listeners, at least 64 and at most
/// [`DEFAULT_MAX_CONNECTIONS_CAP`]; 49,152 where the limit cannot be read
/// or is unlimited.
pub(crate) fn default_max_connections() -> usize {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` through the pointer.
        let read = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } == 0;
        if read && limit.rlim_cur != libc::RLIM_INFINITY {
            return max_connections_for(Some(
                usize::try_from(limit.rlim_cur).unwrap_or(usize::MAX),
            ));
        }
    }
    max_connections_for(None)
}

/// [`default_max_connections`] for a soft descriptor limit of `soft`
/// (`None`: unlimited or unknown).
fn max_connections_for(soft: Option<usize>) -> usize {
    soft.map_or(49_152, |soft| {
        (soft / 4 * 3).clamp(64, DEFAULT_MAX_CONNECTIONS_CAP)
    })
}

/// Raises the process's soft `RLIMIT_NOFILE` (file descriptors) to its
/// hard limit, as the Go runtime does at start, so that accepted
/// connections are bounded by `Limits::max_connections` (whose default
/// follows the soft limit: call this first) rather than by a soft limit
/// of 1,024, common on Linux, which a few hundred clients exhaust.
/// Returns the soft limit now (`u64::MAX`: unlimited). Errors: the limit
/// could not be read or set (it is left as it was).
pub fn raise_descriptor_limit() -> std::io::Result<u64> {
    #[cfg(unix)]
    {
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        // SAFETY: getrlimit writes one `rlimit` through the pointer.
        if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            let raised = libc::rlimit {
                rlim_cur: limit.rlim_max,
                rlim_max: limit.rlim_max,
            };
            // SAFETY: setrlimit reads one `rlimit` through the pointer.
            if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } != 0 {
                return Err(std::io::Error::last_os_error());
            }
            limit = raised;
        }
        #[allow(clippy::unnecessary_cast)] // rlim_t is u64 on Linux, not everywhere
        let soft = limit.rlim_cur as u64;
        Ok(if limit.rlim_cur == libc::RLIM_INFINITY {
            u64::MAX
        } else {
            soft
        })
    }
    #[cfg(not(unix))]
    Err(std::io::ErrorKind::Unsupported.into())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A source's connections share one assembling charge: at most
    /// `max` together, given back byte for byte; another source has its
    /// own; a loopback source (not counted) has none.
    #[test]
    fn a_sources_connections_share_one_assembling_charge() {
        let counts = BySource::new(8, false, usize::MAX);
        let a = |port| SocketAddr::from(([10, 0, 0, 1], port));
        let b = SocketAddr::from(([10, 0, 0, 2], 1));
        let (one, two) = (counts.take(a(1)).unwrap(), counts.take(a(2)).unwrap());
        let (c1, c2) = (one.source_charge().unwrap(), two.source_charge().unwrap());
        assert!(c1.try_add(600, 1000));
        assert!(!c2.try_add(500, 1000), "past the source's share");
        assert!(c2.try_add(400, 1000));
        assert_eq!(counts.assembling(a(1)), 1000);
        let other = counts.take(b).unwrap().source_charge().unwrap();
        assert!(other.try_add(1000, 1000), "another source has its own");
        c1.sub(600);
        c2.sub(400);
        assert_eq!(counts.assembling(a(1)), 0);
        assert!(counts.held.lock().unwrap().assembling.len() == 1);
        let local = counts.take(SocketAddr::from(([127, 0, 0, 1], 1))).unwrap();
        assert!(local.source_charge().is_none(), "loopback is not counted");
    }

    /// A source holds at most its bound and gets places back as its
    /// connections close; other sources are not affected; loopback counts
    /// only when asked; an IPv6 /64 is one source.
    #[test]
    fn a_source_holds_at_most_its_bound_of_connections() {
        let counts = BySource::new(2, false, usize::MAX);
        let a = |port| SocketAddr::from(([10, 0, 0, 1], port));
        let b = SocketAddr::from(([10, 0, 0, 2], 1));
        let first = counts.take(a(1)).unwrap();
        let _second = counts.take(a(2)).unwrap();
        assert_eq!(counts.take(a(3)).unwrap_err(), Refused::SourceFull(2));
        assert!(counts.take(b).is_ok(), "another source");
        drop(first);
        assert_eq!(counts.held(a(0)), 1);
        let _third = counts.take(a(3)).expect("a place came back");
        let local = SocketAddr::from(([127, 0, 0, 1], 1));
        let exempt: Vec<_> = (0..10).map(|_| counts.take(local)).collect();
        assert!(exempt.iter().all(Result::is_ok), "loopback not counted");
        assert_eq!(counts.held(local), 0);
        for loopback in ["[::1]:1", "[::ffff:127.0.0.9]:1"] {
            let peer: SocketAddr = loopback.parse().unwrap();
            let _place = counts.take(peer).expect("not counted");
            assert_eq!(counts.held(peer), 0, "{loopback} not counted");
        }

        let strict = BySource::new(1, true, usize::MAX);
        let _one = strict.take(local).expect("loopback counted");
        assert!(strict.take(local).is_err());
        let v6 = |s: &str| SocketAddr::new(s.parse().unwrap(), 1);
        let _v6 = strict.take(v6("2001:db8:1:2::1")).unwrap();
        assert!(strict.take(v6("2001:db8:1:2:ffff::9")).is_err(), "same /64");
        assert!(strict.take(v6("2001:db8:1:3::1")).is_ok(), "another /64");
        drop(_one);
        let held = strict.held.lock().unwrap();
        assert!(!held.by_source.contains_key(&source_of(local)));
    }

    /// Every accepted connection, of a counted source or not, holds one
    /// of the host's places: past `max_connections` any source is refused
    /// until one closes.
    #[test]
    fn the_host_holds_at_most_its_bound_of_connections() {
        let counts = BySource::new(2, false, 3);
        let peer = |last, port| SocketAddr::from(([10, 0, 0, last], port));
        let local = SocketAddr::from(([127, 0, 0, 1], 1));
        let first = counts.take(peer(1, 1)).unwrap();
        let _second = counts.take(peer(2, 1)).unwrap();
        let _loopback = counts.take(local).unwrap();
        assert_eq!(counts.take(peer(3, 1)).unwrap_err(), Refused::HostFull(3));
        assert_eq!(counts.take(local).unwrap_err(), Refused::HostFull(3));
        assert_eq!(counts.held(peer(3, 1)), 0, "a refusal holds nothing");
        drop(first);
        let _fourth = counts.take(peer(3, 1)).expect("a place came back");
        assert_eq!(counts.held.lock().unwrap().total, 3);
    }

    /// The default leaves a quarter of the descriptors, and is at least 64
    /// and at most 65,536 however high the limit (a million descriptors
    /// held would take tens of GiB).
    #[test]
    fn the_default_bound_leaves_a_quarter_of_the_descriptors() {
        assert_eq!(max_connections_for(Some(20_000)), 15_000);
        assert_eq!(max_connections_for(Some(1_024)), 768);
        assert_eq!(max_connections_for(Some(50)), 64);
        assert_eq!(max_connections_for(Some(1 << 20)), 65_536);
        assert_eq!(max_connections_for(None), 49_152);
        let mut limit = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        assert_eq!(
            unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) },
            0
        );
        assert_eq!(
            default_max_connections(),
            max_connections_for(Some(limit.rlim_cur as usize))
        );
    }
}
