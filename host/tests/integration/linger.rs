//! Bounded linger (`linger_timeout`): a connection the guest let go of, or
//! closed, is torn down at most that long after, even toward a peer that
//! never reads or never answers the close; its socket is reset (no orphan
//! left in the kernel) and the bytes the host queued for it are freed.

use std::net::SocketAddr;
use std::sync::Mutex;
use std::sync::mpsc::channel;
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::common::*;

const LINGER: Duration = Duration::from_millis(500);
/// Scheduling slack on a loaded 2-core machine.
const SLACK: Duration = Duration::from_millis(1000);

/// A host whose linger is [`LINGER`] and whose handshake deadline is long,
/// so only the linger can end a connection within the tests' bounds.
fn linger_config() -> tether_host::Config {
    let mut c = local_config();
    c.limits.linger_timeout = LINGER;
    c.limits.handshake_timeout = Duration::from_secs(10);
    c.limits.tcp_write_buffer_bytes = 64 << 10;
    c.limits.outbound_buffer_bytes = 64 << 10;
    c
}

/// Asserts that within [`LINGER`] + [`SLACK`] the connection between
/// `peer` and `host_end` was reset (both sockets gone) and `queued()`, the
/// host's counter of bytes queued for it, is back to 0.
async fn reset_and_freed(
    case: &str,
    peer: SocketAddr,
    host_end: SocketAddr,
    queued: impl Fn() -> usize,
) {
    let gone = time_until(LINGER + SLACK, || {
        sockets_between(peer, host_end).is_empty() && queued() == 0
    })
    .await;
    assert!(
        gone.is_some(),
        "{case}: {} B still queued and sockets {:?} still there {:?} later",
        queued(),
        sockets_between(peer, host_end),
        LINGER + SLACK
    );
}

/// The guest writes to a peer that accepts and never reads until
/// `check-write` stays 0, then returns (dropping the connection with 64 KiB
/// still queued). The host keeps it for the linger, then resets it: both
/// sockets gone, the queued bytes freed.
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_tcp_stream_toward_a_peer_that_never_reads_is_reset_after_the_linger() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (tx, rx) = channel();
        let tx = Mutex::new(tx);
        let addr = tcp_server(move |tcp| {
            // Never read; the test holds the socket open.
            let host_end = tcp.peer_addr().unwrap();
            let _ = tx.lock().unwrap().send((tcp, host_end));
            async {}
        });
        let runner = runner(linger_config());
        let out = probe(
            &runner,
            &["tcp-stuck", &addr.to_string(), &(256 << 20).to_string()],
        )
        .await;
        assert!(
            out.stdout_text().contains("ok blocked-after="),
            "{}",
            show(&out)
        );
        let (peer, host_end) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        let stats = runner.host().stats.clone();
        let queued = stats.tcp_queued_bytes();
        assert!(queued > 0, "the guest left nothing queued: {}", show(&out));
        tokio::time::sleep(LINGER / 2).await;
        assert_eq!(
            sockets_between(addr, host_end).len(),
            2,
            "the host did not give the peer its linger"
        );
        reset_and_freed("tcp", addr, host_end, || stats.tcp_queued_bytes()).await;
        drop(peer);
    })
    .await
    .expect("test deadline");
}

/// A WebSocket peer that upgrades and then never reads: the guest sends
/// until `send` stays would-block, then drops the stream (close queued
/// behind 64 KiB that never leaves) or closes it and waits for the end.
/// Either way the host resets the connection at the linger and frees what
/// it queued; a guest waiting on a closed stream sees it end (1006).
#[tokio::test(flavor = "current_thread")]
async fn a_dropped_or_closed_message_stream_toward_a_peer_that_never_reads_is_reset_after_the_linger()
 {
    tokio::time::timeout(Duration::from_secs(60), async {
        let runner = runner(linger_config());
        for then in ["drop", "close"] {
            let (tx, rx) = channel();
            let tx = Mutex::new(tx);
            let addr = ws_server(move |ws| {
                // Never read; the test holds the stream open. The host's
                // address now: once reset, the socket no longer knows it.
                let host_end = ws.get_ref().peer_addr().unwrap();
                let _ = tx.lock().unwrap().send((ws, host_end));
                async {}
            });
            let url = format!("ws://{addr}/");
            let out = probe(&runner, &["ws-stuck", &url, then]).await;
            let text = out.stdout_text();
            assert!(text.contains("ok blocked-after="), "{then}: {}", show(&out));
            let (peer, host_end) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let stats = runner.host().stats.clone();
            if then == "close" {
                // The guest saw its stream end, after the linger.
                let ms: u64 = text
                    .split("after-ms=")
                    .nth(1)
                    .and_then(|r| r.split_whitespace().next())
                    .and_then(|n| n.parse().ok())
                    .unwrap_or_else(|| panic!("the closed stream never ended: {}", show(&out)));
                let took = Duration::from_millis(ms);
                assert!(
                    took >= LINGER - Duration::from_millis(50) && took <= LINGER + SLACK,
                    "the close took {took:?}, linger {LINGER:?}: {}",
                    show(&out)
                );
                assert!(
                    text.contains("ok ended closed") && text.contains("code=Some(1006)"),
                    "{}",
                    show(&out)
                );
            } else {
                assert!(
                    stats.buffered_bytes() > 0,
                    "the guest left nothing queued: {}",
                    show(&out)
                );
            }
            reset_and_freed(then, addr, host_end, || stats.buffered_bytes()).await;
            drop(peer);
        }
    })
    .await
    .expect("test deadline");
}

/// A WebSocket peer that reads everything but never answers the close
/// frame and never closes: the guest closes and waits for the end. The
/// host resets the connection at the linger (the peer reads a reset, not
/// an orderly end) and the guest sees 1006.
#[tokio::test(flavor = "current_thread")]
async fn a_peer_that_never_answers_the_close_is_reset_after_the_linger() {
    tokio::time::timeout(Duration::from_secs(60), async {
        let (tx, rx) = channel::<(Duration, std::io::Result<()>)>();
        let tx = Mutex::new(tx);
        let addr = ws_server(move |mut ws| {
            let tx = tx.lock().unwrap().clone();
            async move {
                // Raw reads under tungstenite: nothing answers the close.
                let tcp: &mut TcpStream = ws.get_mut();
                let mut buf = vec![0u8; 4096];
                let mut since: Option<Instant> = None;
                let end = loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) => break Ok(()),
                        Ok(_) => {
                            since.get_or_insert_with(Instant::now);
                        }
                        Err(e) => break Err(e),
                    }
                };
                let took = since.map(|t| t.elapsed()).unwrap_or_default();
                let _ = tx.send((took, end));
            }
        });
        let runner = runner(linger_config());
        let out = probe(&runner, &["connect", &format!("ws://{addr}/")]).await;
        assert!(
            out.stdout_text().contains("ok closed code=1006"),
            "{}",
            show(&out)
        );
        let (took, end) = tokio::task::spawn_blocking(move || rx.recv_timeout(LINGER + SLACK))
            .await
            .unwrap()
            .expect("the peer's connection never ended");
        assert!(
            took >= LINGER - Duration::from_millis(50) && took <= LINGER + SLACK,
            "the connection ended {took:?} after the close frame, linger {LINGER:?}"
        );
        assert_eq!(
            end.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::ConnectionReset),
            "the peer saw an orderly end, not a reset"
        );
        assert_eq!(runner.host().stats.buffered_bytes(), 0);
    })
    .await
    .expect("test deadline");
}
