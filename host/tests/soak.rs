//! Soak: thousands of connect / echo / close cycles through one server
//! guest must leave nothing behind. A test binary of its own, so that the
//! process's file descriptors, tasks and RSS are this test's alone.
//!
//! The cycles are mixed: a clean close, a peer that resets the connection
//! after its echo, a peer that goes away with its echo still queued, and a
//! handshake abandoned halfway. Afterwards the process's open file
//! descriptors and the guest runtime's live tasks are back to their
//! baseline exactly, the host buffers 0 bytes, and RSS is within 5% of
//! where it stood after the first half of the run (at least 1,000 cycles;
//! the allocator and the guest's memory warm up over the first few
//! thousand).
//!
//! `TETHER_SOAK_CYCLES` sets the number of cycles (default 20,000, the CI
//! run, about 5 s; the full run is 100,000).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Runner};
use tether_host::{Config, Limits};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

/// Cycles in flight at once.
const CONCURRENCY: usize = 16;

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

fn rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .expect("VmRSS in /proc/self/status")
}

/// One cycle of kind `i % 4` against the echo server at `addr`.
async fn cycle(addr: SocketAddr, i: usize) {
    let url = format!("ws://{addr}/");
    match i % 4 {
        // Clean: echo, then the closing handshake.
        0 => {
            let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            ws.send(Message::binary(vec![7u8; 32])).await.unwrap();
            let echoed = ws.next().await.unwrap().unwrap();
            assert_eq!(echoed.len(), 32);
            ws.close(None).await.unwrap();
            while let Some(Ok(_)) = ws.next().await {}
        }
        // Peer reset after the echo (RST, no close frame).
        1 => {
            let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            ws.send(Message::binary(vec![1u8; 32])).await.unwrap();
            let _ = ws.next().await.unwrap().unwrap();
            let tcp = ws.into_inner();
            if let tokio_tungstenite::MaybeTlsStream::Plain(tcp) = tcp {
                // SO_LINGER 0: the close sends RST.
                socket2::SockRef::from(&tcp)
                    .set_linger(Some(Duration::ZERO))
                    .unwrap();
            }
        }
        // The peer goes away with its echo still on the way.
        2 => {
            let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
            ws.send(Message::binary(vec![2u8; 4096])).await.unwrap();
            drop(ws);
        }
        // A handshake abandoned halfway.
        _ => {
            let mut tcp = TcpStream::connect(addr).await.unwrap();
            tcp.write_all(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\n")
                .await
                .unwrap();
            drop(tcp);
        }
    }
}

/// Waits (at most `limit`) until `done()` holds; returns whether it did.
async fn settle(limit: Duration, mut done: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < limit {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    done()
}

#[test]
fn cycles_leave_no_fds_tasks_buffers_or_memory_behind() {
    let cycles: usize = std::env::var("TETHER_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let config = Config {
        policy: Policy {
            listen: vec!["127.0.0.1:*".parse().unwrap()],
            ..Policy::default()
        },
        limits: Limits {
            // Abandoned handshakes and unanswered closes end quickly.
            handshake_timeout: Duration::from_millis(500),
            linger_timeout: Duration::from_millis(500),
            ..Limits::default()
        },
        ..Config::default()
    };
    let runner = Arc::new(Runner::new(config, EngineKind::Cranelift).unwrap());
    let component = runner
        .compile(tether_guest_artifacts::ECHO)
        .expect("compile the echo guest");

    // The guest on its own thread and current-thread runtime, as `tether
    // run` does; the clients on another runtime.
    let guest_rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let guest_handle = guest_rt.handle().clone();
    let guest = {
        let runner = runner.clone();
        std::thread::spawn(move || {
            guest_rt.block_on(async {
                let args = ["echo", "server", &addr.to_string(), "0"];
                runner
                    .run(&component, &args, GuestIo::Capture(1 << 20))
                    .await
            })
        })
    };
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    clients.block_on(async {
        // Wait for the listener (a WebSocket client that completes).
        let t0 = Instant::now();
        loop {
            if tokio_tungstenite::connect_async(format!("ws://{addr}/"))
                .await
                .is_ok()
            {
                break;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "no listener");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let quiet = |fds: usize, tasks: usize| {
            let rt = guest_handle.clone();
            let host = runner.host().clone();
            move || {
                open_fds() == fds
                    && rt.metrics().num_alive_tasks() == tasks
                    && host.stats.buffered_bytes() == 0
            }
        };
        // Baseline: the probe connection above is gone.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let fds0 = open_fds();
        let tasks0 = guest_handle.metrics().num_alive_tasks();

        let started = Instant::now();
        let mut rss_at_1000 = None;
        // The allocator and the guest's memory warm up over the first few
        // thousand cycles (60,000 cycles: 28.9 MB after 1,000, 31.34 MB
        // after 10,000, 31.38 MB after 60,000): growth is measured from
        // half of the run on.
        let warm_up = (cycles / 2).max(1_000.min(cycles));
        let mut rss_warm = None;
        let mut done = 0;
        while done < cycles {
            let batch = CONCURRENCY.min(cycles - done);
            let runs: Vec<_> = (done..done + batch)
                .map(|i| tokio::spawn(tokio::time::timeout(Duration::from_secs(10), cycle(addr, i))))
                .collect();
            for run in runs {
                run.await.unwrap().expect("a cycle took over 10 s");
            }
            done += batch;
            if done % 10_000 == 0 {
                eprintln!("soak: {done} cycles, RSS {} KiB", rss_kib());
            }
            if rss_at_1000.is_none() && done >= 1_000.min(cycles) {
                settle(Duration::from_secs(5), quiet(fds0, tasks0)).await;
                rss_at_1000 = Some(rss_kib());
            }
            if rss_warm.is_none() && done >= warm_up {
                settle(Duration::from_secs(5), quiet(fds0, tasks0)).await;
                rss_warm = Some(rss_kib());
            }
        }
        let took = started.elapsed();
        let settled = settle(Duration::from_secs(10), quiet(fds0, tasks0)).await;
        let (fds, tasks, buffered) = (
            open_fds(),
            guest_handle.metrics().num_alive_tasks(),
            runner.host().stats.buffered_bytes(),
        );
        let (rss1000, warm, rss) = (rss_at_1000.unwrap(), rss_warm.unwrap(), rss_kib());
        eprintln!(
            "soak: {cycles} cycles in {took:?}; fds {fds0} -> {fds}, guest tasks {tasks0} -> {tasks}, \
             buffered {buffered} B, RSS {rss1000} KiB after 1,000, {warm} KiB after {warm_up}, \
             {rss} KiB at the end"
        );
        assert!(settled, "left behind: fds {fds0} -> {fds}, tasks {tasks0} -> {tasks}, buffered {buffered} B");
        assert!(
            (rss as f64) <= warm as f64 * 1.05,
            "RSS grew from {warm} KiB after {warm_up} cycles to {rss} KiB"
        );
    });
    runner.host().shutdown();
    let outcome = guest.join().unwrap();
    assert!(
        matches!(
            outcome.result,
            Ok(()) | Err(tether_host::runner::RunError::Exit(_))
        ),
        "{:?}",
        outcome.result
    );
}
