//! Dialling and binding TCP sockets under the guest's policy. Every socket
//! that leaves here has TCP_NODELAY set (latency lesson 2: Nagle plus
//! delayed ACK costs ~40 ms per back-to-back small write).

use std::io;
use std::net::{IpAddr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

use crate::HostCtx;
use crate::bindings::ErrorCode;
use crate::policy::{Host, NameCheck, parse_host};

/// Splits `host:port` (IPv6 literals in brackets) into its parts.
///
/// Errors: `invalid-url` naming what is missing.
pub fn split_host_port(address: &str) -> Result<(String, u16), ErrorCode> {
    let (host, port) = parse_destination(address)?;
    let host = match host {
        Host::Ip {
            addr: IpAddr::V6(a),
            zone: Some(z),
        } => format!("{a}%{z}"),
        Host::Ip { addr, .. } => addr.to_string(),
        Host::Name(n) => n,
    };
    Ok((host, port))
}

/// Parses a `host:port` destination into its canonical host
/// ([`crate::policy::parse_host`]: every spelling of an address is that
/// address) and its port (decimal).
///
/// Errors: `invalid-url` naming what is wrong.
pub fn parse_destination(address: &str) -> Result<(Host, u16), ErrorCode> {
    let bad = |why: &str| ErrorCode::InvalidUrl(format!("`{address}`: {why} (expected host:port)"));
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("missing port"))?;
    if port.is_empty() || !port.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad("bad port"));
    }
    let port: u16 = port.parse().map_err(|_| bad("port above 65535"))?;
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    let host = parse_host(host).map_err(|e| bad(&e.to_string()))?;
    Ok((host, port))
}

/// Maps an I/O error of connect/accept/read/write to the guest's error code.
pub fn io_error(e: &io::Error) -> ErrorCode {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorCode::ConnectionRefused(e.to_string()),
        io::ErrorKind::TimedOut => ErrorCode::Timeout,
        _ => ErrorCode::Other(e.to_string()),
    }
}

/// Checks `host:port` against the policy before any DNS (the cheap,
/// synchronous half of [`dial`], so a denied connect fails at once; an IP
/// address is decided here in full).
///
/// Errors: `denied`, naming the rule or the reason.
pub fn precheck(ctx: &HostCtx, host: &Host, port: u16) -> Result<NameCheck, ErrorCode> {
    let local = match host {
        Host::Ip { .. } => local_addresses(),
        Host::Name(_) => Arc::default(),
    };
    ctx.config
        .policy
        .check_name_on(host, port, &local)
        .map_err(|why| denied(ctx, why))
}

/// How long [`local_addresses`] reuses what it read.
const LOCAL_ADDRESSES_MAX_AGE: Duration = Duration::from_secs(1);

/// This machine's interface addresses (`getifaddrs`), which the policy
/// treats as the local host ([`crate::policy::Policy::check_ip_on`]): a
/// connect to the host's own public address reaches services bound to
/// `0.0.0.0` just as `127.0.0.1` does. Read again at a decision once the
/// last read is older than [`LOCAL_ADDRESSES_MAX_AGE`] (1 s), so an
/// address added to an interface counts within a second; no timer. If
/// the read fails the last list stays (empty at first: then only the
/// loopback rules protect the host), with a warning once per failure run.
pub fn local_addresses() -> Arc<[IpAddr]> {
    /// The last read: when, what, and whether reading failed since.
    struct Read {
        at: Instant,
        list: Arc<[IpAddr]>,
        failing: bool,
    }
    static CACHE: Mutex<Option<Read>> = Mutex::new(None);
    let mut cache = CACHE.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(read) = cache.as_ref()
        && read.at.elapsed() < LOCAL_ADDRESSES_MAX_AGE
    {
        return read.list.clone();
    }
    let (list, failing) = match if_addrs::get_if_addrs() {
        Ok(ifs) => (ifs.into_iter().map(|i| i.ip()).collect(), false),
        Err(e) => {
            let (old, was_failing) = cache
                .as_ref()
                .map(|r| (r.list.clone(), r.failing))
                .unwrap_or_default();
            if !was_failing {
                tracing::warn!(error = %e, "cannot read this machine's interface addresses; the policy knows only the last list ({} addresses)", old.len());
            }
            (old, true)
        }
    };
    *cache = Some(Read {
        at: Instant::now(),
        list: Arc::clone(&list),
        failing,
    });
    list
}

/// The `denied` error for `why`, counted in `tether_policy_denials_total`.
fn denied(ctx: &HostCtx, why: String) -> ErrorCode {
    ctx.metrics.policy_denied(&why);
    ErrorCode::Denied(why)
}

/// The interface index of an IPv6 zone id: a number as is, a name through
/// `if_nametoindex`.
///
/// Errors: `invalid-url` for an interface that does not exist.
fn scope_id(zone: &str) -> Result<u32, ErrorCode> {
    if let Ok(n) = zone.parse::<u32>() {
        return Ok(n);
    }
    let name = std::ffi::CString::new(zone)
        .map_err(|_| ErrorCode::InvalidUrl(format!("bad zone id `{zone}`")))?;
    // SAFETY: `name` is a valid NUL-terminated string that outlives the
    // call; if_nametoindex only reads it.
    match unsafe { libc::if_nametoindex(name.as_ptr()) } {
        0 => Err(ErrorCode::InvalidUrl(format!(
            "zone id `{zone}`: no such interface"
        ))),
        n => Ok(n),
    }
}

/// Resolves `host` (a name only: an address is used as is, with its zone)
/// in one of the guest's `lookups` places and one of the host's (see
/// [`lookup_places`]), keeps the addresses the policy admits, and connects
/// to the first that answers, within `limits.connect_timeout` overall. Each socket connects
/// to exactly an address that was checked: names are resolved once.
///
/// Errors: `denied`, `dns-failure`, `connection-refused`, `timeout`,
/// `invalid-url` (an unknown zone id), `other`.
pub async fn dial(
    ctx: &HostCtx,
    lookups: &Arc<Semaphore>,
    host: &Host,
    port: u16,
    check: NameCheck,
) -> Result<TcpStream, ErrorCode> {
    let deadline = ctx.config.limits.connect_timeout;
    let work = async {
        let addrs: Vec<SocketAddr> = match host {
            Host::Ip { addr, zone } => {
                let scope = zone.as_deref().map(scope_id).transpose()?.unwrap_or(0);
                vec![match addr {
                    IpAddr::V4(a) => SocketAddr::V4(SocketAddrV4::new(*a, port)),
                    IpAddr::V6(a) => SocketAddr::V6(SocketAddrV6::new(*a, port, 0, scope)),
                }]
            }
            Host::Name(name) => lookup(ctx, lookups, name, port).await?,
        };
        if addrs.is_empty() {
            return Err(ErrorCode::DnsFailure(format!("{host}: no addresses")));
        }
        let addrs = ctx
            .config
            .policy
            .check_resolved_on(host, check, addrs, &local_addresses())
            .map_err(|why| denied(ctx, why))?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true).map_err(|e| io_error(&e))?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        let e = last.expect("at least one address was tried");
        Err(match io_error(&e) {
            // The kind already says "refused"; name what refused.
            ErrorCode::ConnectionRefused(_) => {
                ErrorCode::ConnectionRefused(format!("{host}:{port}"))
            }
            other => other,
        })
    };
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or(Err(ErrorCode::Timeout))
}

/// `n` places for name lookups in flight (at least 1): the host's
/// (`max_dns_lookups`) or one guest's (`max_dns_lookups_per_guest`).
pub(crate) fn lookup_places(n: usize) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(n.clamp(1, Semaphore::MAX_PERMITS)))
}

/// Resolves `name` on a blocking thread, holding one of the guest's
/// places (`lookups`, `max_dns_lookups_per_guest`) and one of the host's
/// (`max_dns_lookups`) until getaddrinfo returns: a caller that gives up
/// (the connect timeout) frees its wait, not the places, so lookups a
/// resolver never answers hold at most `max_dns_lookups` threads, one
/// guest at most its share of them, and the rest wait in order.
///
/// Errors: `dns-failure` naming the name; `other` if the lookup thread
/// panicked.
async fn lookup(
    ctx: &HostCtx,
    lookups: &Arc<Semaphore>,
    name: &str,
    port: u16,
) -> Result<Vec<SocketAddr>, ErrorCode> {
    let owned = name.to_owned();
    resolve_in_place([lookups, &ctx.lookups], name, move || {
        std::net::ToSocketAddrs::to_socket_addrs(&(owned.as_str(), port)).map(Vec::from_iter)
    })
    .await
}

/// Runs `resolve` (a blocking lookup of `name`) on a blocking thread once
/// each of `places` (the guest's, then the host's) has a place for it,
/// which it keeps until `resolve` returns.
async fn resolve_in_place<F>(
    places: [&Arc<Semaphore>; 2],
    name: &str,
    resolve: F,
) -> Result<Vec<SocketAddr>, ErrorCode>
where
    F: FnOnce() -> io::Result<Vec<SocketAddr>> + Send + 'static,
{
    let closed = |_| ErrorCode::Other("name lookups are closed".into());
    let guest = places[0].clone().acquire_owned().await.map_err(closed)?;
    let host = places[1].clone().acquire_owned().await.map_err(closed)?;
    let found = tokio::task::spawn_blocking(move || {
        let _places = (guest, host);
        resolve()
    })
    .await
    .map_err(|e| ErrorCode::Other(format!("name lookup of {name}: {e}")))?;
    found.map_err(|e| ErrorCode::DnsFailure(format!("{name}: {e}")))
}

/// Parses and policy-checks a bind address, then binds a listener. An
/// IPv6 listener is IPv6 only (`IPV6_V6ONLY`): a dual-stack `[::]` would
/// also listen on every IPv4 address, which a rule covering only `[::]`
/// does not allow (the red team of 2026-12-04g, F3); bind `0.0.0.0` too
/// for both. An IPv4-mapped address (`[::ffff:a.b.c.d]`) is that IPv4
/// address and binds as such.
///
/// Errors: `invalid-url` (not `ip:port`), `denied` (no `--listen` rule),
/// `other` (bind failed, e.g. address in use).
pub fn bind(ctx: &HostCtx, address: &str) -> Result<TcpListener, ErrorCode> {
    let addr: SocketAddr = address.parse().map_err(|_| {
        ErrorCode::InvalidUrl(format!("`{address}` is not an ip:port bind address"))
    })?;
    ctx.config
        .policy
        .check_listen(addr)
        .map_err(|why| denied(ctx, why))?;
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(|e| io_error(&e))?;
    socket.set_reuseaddr(true).map_err(|e| io_error(&e))?;
    if let SocketAddr::V6(v6) = addr
        && v6.ip().to_ipv4_mapped().is_none()
    {
        socket2::SockRef::from(&socket)
            .set_only_v6(true)
            .map_err(|e| io_error(&e))?;
    }
    socket
        .bind(addr)
        .map_err(|e| ErrorCode::Other(format!("bind {addr}: {e}")))?;
    socket.listen(1024).map_err(|e| io_error(&e))
}

/// Accepts the next connection on `listener` with TCP_NODELAY set: every
/// listener the host runs (WebSocket, TCP, metrics) accepts through this,
/// so no accepted socket, even one answered with a refusal, waits on
/// Nagle. A connection whose option cannot be set (reset meanwhile) is
/// dropped and the next one taken. Cancel-safe, as `TcpListener::accept`.
///
/// Errors: the listener's own accept errors (EMFILE, ENFILE, ...).
pub async fn accept(listener: &TcpListener) -> io::Result<(TcpStream, SocketAddr)> {
    loop {
        let (tcp, peer) = listener.accept().await?;
        match tcp.set_nodelay(true) {
            Ok(()) => return Ok((tcp, peer)),
            Err(e) => {
                tracing::debug!(%peer, "accepted connection dropped: TCP_NODELAY failed: {e}")
            }
        }
    }
}

/// How long a listener waits after a failed accept (EMFILE, ENFILE,
/// ENOBUFS: not a dead listener) before it tries again, so it never spins.
pub(crate) const ACCEPT_BACKOFF: std::time::Duration = std::time::Duration::from_millis(50);

/// At most one log line of each kind (accepts failing, accepting again)
/// per this interval while a listener's accepts keep failing.
pub const ACCEPT_ERROR_LOG_INTERVAL: std::time::Duration = std::time::Duration::from_secs(10);

/// A listener's failed accepts, logged at a bounded rate: the first
/// failure at once, then at most one line per [`ACCEPT_ERROR_LOG_INTERVAL`]
/// with the count of failures since the last line, and at most one line
/// per interval when accepts work again (both warn). A peer that holds the
/// process's descriptors, or frees and retakes them one at a time, costs
/// two lines per 10 s, not one per retry.
pub(crate) struct AcceptErrors {
    /// Who accepts, for the log ("WebSocket listener", "metrics").
    what: &'static str,
    /// Failures since the last accept that worked.
    failures: u64,
    /// Failures no line reported yet.
    unreported: u64,
    last_failure_line: Option<std::time::Instant>,
    last_recovery_line: Option<std::time::Instant>,
}

/// Whether a line last written at `last` may be written at `now`.
fn line_due(last: Option<std::time::Instant>, now: std::time::Instant) -> bool {
    last.is_none_or(|t| now.duration_since(t) >= ACCEPT_ERROR_LOG_INTERVAL)
}

impl AcceptErrors {
    pub(crate) fn new(what: &'static str) -> AcceptErrors {
        AcceptErrors {
            what,
            failures: 0,
            unreported: 0,
            last_failure_line: None,
            last_recovery_line: None,
        }
    }

    /// Records a failed accept at `now`; returns the failures the line due
    /// now reports (`None`: no line is due).
    fn record_failure(&mut self, now: std::time::Instant) -> Option<u64> {
        self.failures += 1;
        self.unreported += 1;
        line_due(self.last_failure_line, now).then(|| {
            self.last_failure_line = Some(now);
            std::mem::take(&mut self.unreported)
        })
    }

    /// Records an accept that worked at `now`; returns the failures before
    /// it when a recovery line is due.
    fn record_accept(&mut self, now: std::time::Instant) -> Option<u64> {
        let failures = std::mem::take(&mut self.failures);
        (failures > 0 && line_due(self.last_recovery_line, now)).then(|| {
            self.last_recovery_line = Some(now);
            failures
        })
    }

    /// Logs `e` if a line is due, then backs off [`ACCEPT_BACKOFF`].
    pub(crate) async fn failed(&mut self, e: &io::Error) {
        if let Some(n) = self.record_failure(std::time::Instant::now()) {
            let what = self.what;
            if n == 1 {
                tracing::warn!("{what}: accept failed: {e} (retrying every 50 ms)");
            } else {
                tracing::warn!("{what}: accept failed {n} times since the last report: {e}");
            }
        }
        tokio::time::sleep(ACCEPT_BACKOFF).await;
    }

    /// An accept worked.
    pub(crate) fn accepted(&mut self) {
        if self.failures > 0
            && let Some(n) = self.record_accept(std::time::Instant::now())
        {
            let what = self.what;
            tracing::warn!("{what}: accepting again after {n} failed accepts");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A listener on `[::]` under a rule for `[::]` alone reaches IPv6
    /// only: before, the socket was dual-stack and an IPv4 client on
    /// 127.0.0.1 reached it, though no rule allowed listening on IPv4
    /// (the red team of 2026-12-04g, F3). A rule for `0.0.0.0` is needed
    /// for that, and a bind of its own.
    #[test]
    fn an_ipv6_listener_does_not_reach_ipv4() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let mut config = crate::Config::default();
            config.policy.listen = vec!["[::]:*".parse().unwrap()];
            let ctx = HostCtx::new(config).unwrap();
            let listener = bind(&ctx, "[::]:0").expect("[::] is allowed");
            let port = listener.local_addr().unwrap().port();
            let accept = async {
                loop {
                    let _ = listener.accept().await;
                }
            };
            let dials = async {
                let v6 = TcpStream::connect(("::1", port)).await;
                let v4 = TcpStream::connect(("127.0.0.1", port)).await;
                (v6.is_ok(), v4.map(|_| ()))
            };
            let (v6, v4) = tokio::select! {
                r = dials => r,
                _ = accept => unreachable!(),
            };
            assert!(v6, "[::1] did not reach the [::] listener");
            assert!(
                v4.is_err(),
                "127.0.0.1 reached a listener on [::] under a rule for [::] alone"
            );
            // An IPv4-mapped bind is the IPv4 address.
            let mut config = crate::Config::default();
            config.policy.listen = vec!["127.0.0.1:*".parse().unwrap()];
            let ctx = HostCtx::new(config).unwrap();
            let mapped = bind(&ctx, "[::ffff:127.0.0.1]:0").expect("mapped loopback");
            let port = mapped.local_addr().unwrap().port();
            assert!(TcpStream::connect(("127.0.0.1", port)).await.is_ok());
        });
    }

    /// This machine's own interface addresses (eth0's here) are the local
    /// host to the policy: with loopback denied, a connect to one is denied
    /// at once and never dialled, even where a rule allows that address,
    /// while a listener on `0.0.0.0` / `[::]` would have answered it (the
    /// red team of 2026-12-03, third round: under `--allow '*:*' --deny
    /// internal` a guest reached such a listener through 192.0.2.2).
    #[test]
    fn this_machines_own_addresses_are_the_local_host_to_the_policy() {
        let own: Vec<IpAddr> = local_addresses()
            .iter()
            .copied()
            .filter(|a| {
                !a.is_loopback() && !matches!(a, IpAddr::V6(v6) if v6.is_unicast_link_local())
            })
            .collect();
        assert!(
            !own.is_empty(),
            "this machine has no interface address but loopback and link-local; the test needs one (eth0's)"
        );
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let listener = TcpListener::bind("[::]:0")
                .await
                .or(TcpListener::bind("0.0.0.0:0").await)
                .unwrap();
            let port = listener.local_addr().unwrap().port();
            for addr in own {
                let mut config = crate::Config::default();
                let exact = match addr {
                    IpAddr::V4(a) => format!("{a}:*"),
                    IpAddr::V6(a) => format!("[{a}]:*"),
                };
                config.policy.allow = vec!["*:*".parse().unwrap(), exact.parse().unwrap()];
                config.policy.deny = vec![
                    "127.0.0.0/8:*".parse().unwrap(),
                    "[::1]/128:*".parse().unwrap(),
                ];
                let ctx = HostCtx::new(config).unwrap();
                let host = Host::Ip { addr, zone: None };
                match precheck(&ctx, &host, port) {
                    Err(ErrorCode::Denied(why)) => {
                        assert!(why.contains("address of this host"), "{addr}: {why}")
                    }
                    other => panic!("{addr} under {exact}: {other:?}"),
                }
                // The dial decides on the same list (a name that resolves
                // to the address takes this path).
                let lookups = lookup_places(1);
                match dial(&ctx, &lookups, &host, port, NameCheck::Named).await {
                    Err(ErrorCode::Denied(why)) => {
                        assert!(why.contains("address of this host"), "{addr}: {why}")
                    }
                    other => panic!("{addr} was dialled: {other:?}"),
                }
            }
        });
    }

    /// Every address of this machine is in [`local_addresses`], IPv6
    /// link-local ones included (the kernel's own list,
    /// `/proc/net/if_inet6`): `if-addrs` drops `fe80::/10` unless asked,
    /// and a guest then reached the host through its link-local address
    /// with loopback denied (the red team of 2026-12-03, fourth round).
    #[test]
    fn local_addresses_include_every_ipv6_address_of_the_machine() {
        let text = std::fs::read_to_string("/proc/net/if_inet6").expect("/proc/net/if_inet6");
        let kernel: Vec<IpAddr> = text
            .lines()
            .filter_map(|l| l.split_whitespace().next())
            .map(|hex| IpAddr::V6(u128::from_str_radix(hex, 16).expect("hex address").into()))
            .collect();
        assert!(
            kernel
                .iter()
                .any(|a| matches!(a, IpAddr::V6(v6) if v6.is_unicast_link_local())),
            "no link-local address on this machine: {kernel:?}"
        );
        let ours = local_addresses();
        for a in &kernel {
            assert!(ours.contains(a), "{a} is missing from {ours:?}");
        }
    }

    /// Lookups a resolver never answers hold at most `max_dns_lookups`
    /// threads: callers past the bound wait (and give up at their timeout)
    /// without starting a lookup, and a caller that gives up while its
    /// lookup runs leaves the place taken until the lookup returns. Before,
    /// every lookup took a blocking thread at once (the red team of
    /// 2026-12-03: 1,000 OPENs to names behind a silent resolver, 516
    /// threads, and `localhost` waited 9 s).
    #[test]
    fn lookups_in_flight_are_bounded_and_keep_their_place_until_they_return() {
        use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let places = Arc::new(tokio::sync::Semaphore::new(4));
        let guest = Arc::new(tokio::sync::Semaphore::new(64));
        let (started, running, peak) = (
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
            Arc::new(AtomicUsize::new(0)),
        );
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        rt.block_on(async {
            let mut callers = Vec::new();
            for i in 0..20 {
                let (guest, places, started, running, peak, held) = (
                    guest.clone(),
                    places.clone(),
                    started.clone(),
                    running.clone(),
                    peak.clone(),
                    held.clone(),
                );
                callers.push(tokio::spawn(async move {
                    let slow = move || {
                        started.fetch_add(1, SeqCst);
                        let now = running.fetch_add(1, SeqCst) + 1;
                        peak.fetch_max(now, SeqCst);
                        // A resolver that answers only when the test says.
                        let _ = held.lock().unwrap().recv();
                        running.fetch_sub(1, SeqCst);
                        Ok(Vec::new())
                    };
                    let name = format!("n{i}.example");
                    tokio::time::timeout(
                        Duration::from_millis(200),
                        resolve_in_place([&guest, &places], &name, slow),
                    )
                    .await
                }));
            }
            for c in callers {
                assert!(c.await.unwrap().is_err(), "every caller gave up");
            }
            assert_eq!(started.load(SeqCst), 4, "lookups started");
            assert_eq!(peak.load(SeqCst), 4);
            // The callers are gone, the lookups still run: no place is free.
            assert_eq!(places.available_permits(), 0);
            drop(release);
            let deadline = Instant::now() + Duration::from_secs(10);
            while places.available_permits() < 4 {
                assert!(Instant::now() < deadline, "places not given back");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            // A lookup that answers goes through.
            let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let got = resolve_in_place([&guest, &places], "x", move || Ok(vec![addr])).await;
            assert_eq!(got.unwrap(), vec![addr]);
            assert_eq!(guest.available_permits(), 64);
        });
    }

    /// A guest whose lookups never end holds at most its share of the
    /// host's places: another guest's lookup still goes through at once.
    #[test]
    fn one_guests_lookups_leave_places_for_the_others() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let host = Arc::new(tokio::sync::Semaphore::new(4));
        let (a, b) = (
            Arc::new(tokio::sync::Semaphore::new(2)),
            Arc::new(tokio::sync::Semaphore::new(2)),
        );
        let (release, held) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(std::sync::Mutex::new(held));
        rt.block_on(async {
            for i in 0..10 {
                let (a, host, held) = (a.clone(), host.clone(), held.clone());
                tokio::spawn(async move {
                    let name = format!("stuck{i}.example");
                    resolve_in_place([&a, &host], &name, move || {
                        let _ = held.lock().unwrap().recv();
                        Ok(Vec::new())
                    })
                    .await
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            assert_eq!(a.available_permits(), 0);
            assert_eq!(host.available_permits(), 2, "guest A holds only its share");
            let addr: SocketAddr = "127.0.0.1:1".parse().unwrap();
            let got = tokio::time::timeout(
                Duration::from_secs(5),
                resolve_in_place([&b, &host], "ok.example", move || Ok(vec![addr])),
            )
            .await
            .expect("guest B's lookup does not wait for guest A's");
            assert_eq!(got.unwrap(), vec![addr]);
            drop(release);
        });
    }

    #[test]
    fn host_port_forms() {
        assert_eq!(split_host_port("a.b:80").unwrap(), ("a.b".into(), 80));
        assert_eq!(split_host_port("[::1]:22").unwrap(), ("::1".into(), 22));
        assert_eq!(split_host_port("A.b.:80").unwrap(), ("a.b".into(), 80));
        assert_eq!(
            split_host_port("0x7f.1:80").unwrap(),
            ("127.0.0.1".into(), 80)
        );
        assert_eq!(
            split_host_port("[::ffff:7f00:1]:80").unwrap(),
            ("::ffff:127.0.0.1".into(), 80)
        );
        assert_eq!(
            split_host_port("[fe80::1%2]:80").unwrap(),
            ("fe80::1%2".into(), 80)
        );
        for bad in [
            "nohost",
            ":80",
            "a:b",
            "a:99999",
            "a:+80",
            "a:",
            "[zz::]:1",
            "::1:22:x",
            "%31.0.0.1:80",
            "256.1:80",
            "a b:80",
        ] {
            assert!(
                matches!(split_host_port(bad), Err(ErrorCode::InvalidUrl(_))),
                "{bad}"
            );
        }
    }

    #[test]
    fn accept_failures_are_logged_once_per_interval() {
        let mut errors = AcceptErrors::new("test");
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        // 30 s of failures, one per backoff.
        let lines: Vec<u64> = (0..600)
            .filter_map(|i| errors.record_failure(at(50 * i)))
            .collect();
        assert_eq!(
            lines,
            vec![1, 200, 200],
            "one line at once, then one per 10 s"
        );
        assert_eq!(errors.record_accept(at(30_000)), Some(600));
        // Descriptors freed and retaken one at a time: failures and
        // accepts alternate, and each kind of line stays at one per 10 s.
        let (mut failure_lines, mut recovery_lines) = (0, 0);
        for i in 0..390u64 {
            failure_lines += errors.record_failure(at(30_050 + 50 * i)).is_some() as u32;
            recovery_lines += errors.record_accept(at(30_075 + 50 * i)).is_some() as u32;
        }
        assert_eq!((failure_lines, recovery_lines), (2, 1), "over 19.5 s");
    }
}
