//! A hostile QUIC client against the [`EchoServer`], in memory with a
//! simulated clock: it opens every stream the server allows, writes on all
//! of them as fast as the server's windows let it, and never reads the
//! echo. The server's echo writes block on the client's flow control, its
//! echo buffers fill, and from then on everything the client sends waits
//! in the server. A counting allocator measures what the process holds.
//! Before the connection-wide bounds (the red team of 2026-12-04i, F1) one
//! such connection made the server hold 100 streams x (4 MiB window + 1
//! MiB echo buffer), past the guest's 256 MiB memory limit: the guest was
//! stopped and every connection it served went with it.

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::VecDeque;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use tether_quic::quinn_proto::{Dir, StreamId};
use tether_quic::{App, EchoServer, Identity, Link, Options, SharedBudget, Windows};

/// The system allocator, counting the bytes live.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const MIB: isize = 1 << 20;

/// Opens every bidirectional stream the server allows and writes on each
/// as much as it may; never reads.
#[derive(Default)]
struct Flood {
    streams: Vec<StreamId>,
    written: u64,
}

impl App for Flood {
    fn pump(&mut self, link: &mut Link, now: Instant) {
        while link.poll_event(now).is_some() {}
        if !link.is_connected() {
            return;
        }
        let Some(conn) = link.connection() else {
            return;
        };
        while let Some(id) = conn.streams().open(Dir::Bi) {
            self.streams.push(id);
        }
        let chunk = [0x5a; 16 * 1024];
        for &id in &self.streams {
            while let Ok(n) = conn.send_stream(id).write(&chunk) {
                if n == 0 {
                    break;
                }
                self.written += n as u64;
            }
        }
    }
    fn poll_timeout(&self) -> Option<Instant> {
        None
    }
    fn is_done(&self) -> bool {
        false
    }
}

/// Runs the flood against `echo` with `server` options for `simulated`
/// time (or until the process holds `give_up` bytes more than at the
/// start); returns (peak bytes held over the start, bytes the client
/// wrote, streams it opened).
fn flood(
    server: &Options,
    echo: &mut EchoServer,
    simulated: Duration,
    give_up: isize,
) -> (isize, u64, usize) {
    let identity = Identity::generate(&["localhost"]).unwrap();
    let client_options = Options {
        // The echo comes back 1 KiB a stream and is never read.
        stream_window: 1024,
        send_window: 1 << 20,
        ..Options::default()
    };
    let start = LIVE.load(Ordering::Relaxed);
    let mut now = Instant::now();
    let begin = now;
    let mut client = Link::client(now, &identity.cert_der, "localhost", &client_options).unwrap();
    let mut server = Link::server(now, &identity, server).unwrap();
    let mut attack = Flood::default();
    let delay = Duration::from_micros(50);
    let (mut to_server, mut to_client) = (VecDeque::new(), VecDeque::new());
    let mut peak = 0;
    while now - begin < simulated {
        while to_server.front().is_some_and(|(t, _)| *t <= now) {
            let (_, d): (Instant, Vec<u8>) = to_server.pop_front().unwrap();
            server.handle_datagram(now, &d);
        }
        while to_client.front().is_some_and(|(t, _)| *t <= now) {
            let (_, d): (Instant, Vec<u8>) = to_client.pop_front().unwrap();
            client.handle_datagram(now, &d);
        }
        for link in [&mut client, &mut server] {
            if link.poll_timeout().is_some_and(|t| t <= now) {
                link.handle_timeout(now);
            }
        }
        attack.pump(&mut client, now);
        echo.pump(&mut server, now);
        while let Some(d) = client.poll_transmit(now) {
            to_server.push_back((now + delay, d.to_vec()));
        }
        while let Some(d) = server.poll_transmit(now) {
            to_client.push_back((now + delay, d.to_vec()));
        }
        peak = peak.max(LIVE.load(Ordering::Relaxed) - start);
        if peak > give_up {
            break;
        }
        let next = [
            to_server.front().map(|(t, _)| *t),
            to_client.front().map(|(t, _)| *t),
            client.poll_timeout(),
            server.poll_timeout(),
        ]
        .into_iter()
        .flatten()
        .min();
        match next {
            Some(t) if t > now => now = t,
            Some(_) => {}
            None => break,
        }
    }
    assert!(client.is_connected(), "the flood never connected");
    (peak, attack.written, attack.streams.len())
}

/// One connection that never reads its echo makes the server hold at most
/// its connection-wide receive window, its send window and its echo
/// budget (plus the client's own 1 MiB and QUIC's state): not a window
/// and an echo buffer per stream.
#[test]
fn a_client_that_never_reads_its_echo_is_bounded_by_the_connection_windows() {
    let server = Options::default();
    let bound = (server.receive_window + server.send_window) as isize
        + tether_quic::echo::ECHO_CONNECTION_BUDGET as isize
        + 8 * MIB;
    let mut echo = EchoServer::new();
    let (peak, written, streams) = flood(&server, &mut echo, Duration::from_secs(5), 4 * bound);
    assert!(streams >= 100, "{streams} streams opened");
    assert!(
        peak <= bound,
        "the server held {} MiB for a client that wrote {} MiB on {streams} streams and never read (bound {} MiB)",
        peak / MIB,
        written >> 20,
        bound / MIB
    );
}

/// A server's options for connections that share a budget: no more than
/// the floor until a connection takes its share.
fn floor_options() -> Options {
    Options {
        receive_window: Windows::FLOOR.receive,
        send_window: Windows::FLOOR.send,
        datagram_buffer: 16 << 10,
        ..Options::default()
    }
}

/// A connection of a server whose shared budget is spent keeps the floor
/// windows: the flood gets 16 KiB in and 8 KiB of echo, not a full share.
#[test]
fn past_the_shared_budget_a_connection_keeps_the_floor_windows() {
    let budget = SharedBudget::new(0);
    let mut echo = EchoServer::sharing(budget.clone(), Windows::of(&Options::default()));
    let (peak, written, _) = flood(
        &floor_options(),
        &mut echo,
        Duration::from_secs(5),
        64 * MIB,
    );
    assert!(!echo.holds_full_share());
    // What the server holds, plus what it echoed into the client's 1 KiB
    // stream windows (at most its send window).
    let floor = Windows::FLOOR.bytes();
    assert!(
        written <= floor,
        "the client wrote {written} bytes past a floor of {floor}"
    );
    // Both endpoints' own state (TLS, QUIC, the client's 1 MiB send
    // window) is most of it.
    assert!(peak <= 8 * MIB, "{} KiB held at the floor", peak >> 10);
}

/// The first connection takes its full share once its handshake is done
/// (the flood then gets its full windows in), and gives it back when it
/// ends.
#[test]
fn a_connection_takes_its_share_and_gives_it_back() {
    let full = Windows::of(&Options::default());
    let budget = SharedBudget::new(full.bytes());
    let mut echo = EchoServer::sharing(budget.clone(), full);
    let (_, written, _) = flood(
        &floor_options(),
        &mut echo,
        Duration::from_secs(5),
        64 * MIB,
    );
    assert!(echo.holds_full_share());
    assert_eq!(budget.free(), 0);
    // Far more than the floor's windows went in, and no more than the
    // full ones allow.
    assert!(
        written > 64 * Windows::FLOOR.bytes() && written <= full.bytes(),
        "the client wrote {written} bytes with full windows of {}",
        full.bytes()
    );
    drop(echo);
    assert_eq!(budget.free(), full.bytes(), "given back");
}

/// A datagram of 1,200 bytes with a long header and a version no QUIC
/// endpoint supports (a reserved one, RFC 9000 section 15): the server
/// answers each with a Version Negotiation packet.
fn unsupported_version_datagram(i: u32) -> Vec<u8> {
    let mut d = vec![0xc0];
    d.extend_from_slice(&0x0a0a_0a0au32.to_be_bytes());
    d.push(8);
    d.extend_from_slice(&u64::from(i).to_be_bytes());
    d.push(8);
    d.extend_from_slice(&[7; 8]);
    d.resize(1200, 0);
    d
}

/// A peer that sends datagrams the endpoint answers by itself and never
/// takes the answers (the red team of 2026-12-07, F1: the link kept one
/// answer per datagram, and the guest was stopped at its memory limit
/// after about 2 million): the link holds at most
/// `MAX_QUEUED_RESPONSES` of them and drops the rest, then answers again
/// once the pipe takes them.
#[test]
fn endpoint_answers_a_pipe_does_not_take_are_bounded() {
    let identity = Identity::generate(&["localhost"]).unwrap();
    let now = Instant::now();
    let mut server = Link::server(now, &identity, &Options::default()).unwrap();
    let sent = 200_000u32;
    for i in 0..sent {
        server.handle_datagram(now, &unsupported_version_datagram(i));
    }
    let mut answers = 0usize;
    while let Some(d) = server.poll_transmit(now) {
        assert_eq!(&d[1..5], &[0, 0, 0, 0], "a Version Negotiation packet");
        answers += 1;
    }
    assert!(answers > 0, "the server answered nothing");
    assert!(
        answers <= tether_quic::link::MAX_QUEUED_RESPONSES,
        "the link held {answers} answers for {sent} datagrams"
    );
    let stats = server.stats();
    assert_eq!(stats.responses_dropped, u64::from(sent) - answers as u64);
    // Taken, the queue has room again.
    server.handle_datagram(now, &unsupported_version_datagram(0));
    assert!(server.poll_transmit(now).is_some());
}
