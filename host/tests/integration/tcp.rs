//! Byte streams: echo through a guest, half-close, order, listener,
//! refused and denied connects.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 253) as u8).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn guest_client_echoes_8_mib_in_order_and_half_closes() {
    const N: usize = 8 << 20;
    let (tx, rx) = tokio::sync::oneshot::channel::<(bool, bool)>();
    let tx = std::sync::Mutex::new(Some(tx));
    let addr = tcp_server(move |tcp| {
        let tx = tx.lock().unwrap().take();
        async move {
            let (mut r, mut w) = tcp.into_split();
            let writer = tokio::spawn(async move {
                w.write_all(&pattern(N)).await.unwrap();
                // Half-close: the guest sees EOF and then half-closes too.
                w.shutdown().await.unwrap();
            });
            let mut back = Vec::with_capacity(N);
            r.read_to_end(&mut back).await.unwrap();
            writer.await.unwrap();
            let _ = tx.unwrap().send((back == pattern(N), true));
        }
    });
    let runner = runner(local_config());
    let out = probe(&runner, &["tcp-echo", &addr.to_string()]).await;
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text().contains(&format!("ok echoed {N}")),
        "{}",
        show(&out)
    );
    let (same, eof) = rx.await.unwrap();
    assert!(same && eof, "echo differs from what was sent");
}

#[tokio::test(flavor = "current_thread")]
async fn guest_listener_accepts_and_echoes() {
    let runner = runner(local_config());
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = probe(&runner, &["tcp-serve", &listen]);
    let client = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tcp = tokio::net::TcpStream::connect(&listen).await.unwrap();
        let local = tcp.local_addr().unwrap();
        // Give the host's accept loop (on this thread) a moment to run.
        tokio::time::sleep(Duration::from_millis(100)).await;
        // The accepted socket: its peer is our client and its own address
        // the guest's listener (another test's socket may have the same
        // peer address, as Linux shares ephemeral ports across
        // destinations: this matched two sockets once in CI).
        let nodelay = nodelay_of_sockets_between(local, Some(listen.parse().unwrap()));
        let (mut r, mut w) = tcp.into_split();
        let data = pattern(1 << 20);
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut back = Vec::new();
        r.read_to_end(&mut back).await.unwrap();
        writer.await.unwrap();
        (back == expected, nodelay)
    };
    let (out, (same, nodelay)) = tokio::join!(guest, client);
    assert!(out.success(), "{}", show(&out));
    assert!(same, "echo differs");
    assert_eq!(
        nodelay,
        vec![true],
        "accepted byte stream must have TCP_NODELAY"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn connect_errors() {
    let runner = runner(local_config());
    let out = probe(
        &runner,
        &["tcp-connect", &format!("127.0.0.1:{}", closed_port())],
    )
    .await;
    assert!(
        out.stdout_text().starts_with("error connection-refused"),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["tcp-connect", "192.0.2.1:22"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["tcp-connect", "no-port"]).await;
    assert!(
        out.stdout_text().starts_with("error invalid-url"),
        "{}",
        show(&out)
    );
    // Only name rules: a name no rule matches is denied before any DNS.
    let mut config = local_config();
    config.policy.allow = vec!["*.invalid:*".parse().unwrap()];
    let dns = crate::common::runner(config);
    let out = probe(&dns, &["tcp-connect", "example.com:80"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    let out = probe(&dns, &["tcp-connect", "no-such-host.invalid:80"]).await;
    assert!(
        out.stdout_text().starts_with("error dns-failure"),
        "{}",
        show(&out)
    );
}

/// Sends `n` bytes one at a time, `gap` apart, then closes.
async fn trickle(tcp: tokio::net::TcpStream, n: usize, gap: Duration) {
    let mut tcp = tcp;
    for i in 0..n {
        if tcp.write_all(&[i as u8]).await.is_err() {
            return;
        }
        tokio::time::sleep(gap).await;
    }
    let _ = tcp.shutdown().await;
}

fn wakeups(stdout: &str) -> (u64, u64) {
    let line = stdout
        .lines()
        .find(|l| l.starts_with("ok bytes="))
        .unwrap_or_else(|| panic!("no result line: {stdout}"));
    let field = |name: &str| -> u64 {
        line.split_whitespace()
            .find_map(|f| f.strip_prefix(name))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line}"))
    };
    (field("bytes="), field("spurious="))
}

/// A ready input-stream pollable means at least one byte or EOF: the read
/// after it is never empty, byte by byte and over many connections at once.
/// (tokio keeps a socket "readable" after a read that drained it until a
/// read returns WouldBlock; without the check each byte cost an empty read.)
#[tokio::test(flavor = "current_thread")]
async fn a_ready_input_pollable_never_gives_an_empty_read() {
    let runner = runner(local_config());
    let one = tcp_server(|tcp| trickle(tcp, 1000, Duration::from_micros(300)));
    let out = probe(&runner, &["tcp-wakeups", &one.to_string(), "1"]).await;
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        wakeups(&out.stdout_text()),
        (1000, 0),
        "(bytes, empty reads) for 1000 bytes sent one at a time: {}",
        show(&out)
    );
    let many = tcp_server(|tcp| trickle(tcp, 10, Duration::from_millis(2)));
    let out = probe(&runner, &["tcp-wakeups", &many.to_string(), "200"]).await;
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        wakeups(&out.stdout_text()),
        (2000, 0),
        "(bytes, empty reads) over 200 connections: {}",
        show(&out)
    );
}

/// Against a peer that never reads, `check-write` reaches 0 and stays 0
/// (its pollable stays not ready), and no output stream ever queues more than
/// `tcp_write_buffer_bytes`.
#[tokio::test(flavor = "current_thread")]
async fn check_write_reaches_zero_and_the_queue_stays_bounded() {
    const LIMIT: usize = 64 << 10;
    let (hold_tx, hold_rx) = std::sync::mpsc::channel();
    let hold_tx = std::sync::Mutex::new(hold_tx);
    let addr = tcp_server(move |tcp| {
        // Never read; keep the socket open until the test ends.
        let _ = hold_tx.lock().unwrap().send(tcp);
        async {}
    });
    let mut config = local_config();
    config.limits.tcp_write_buffer_bytes = LIMIT;
    let runner = runner(config);
    let out = probe(
        &runner,
        &["tcp-stuck", &addr.to_string(), &(256 << 20).to_string()],
    )
    .await;
    drop(hold_rx);
    assert!(out.success(), "{}", show(&out));
    let text = out.stdout_text();
    let written: usize = text
        .strip_prefix("ok blocked-after=")
        .and_then(|r| r.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("check-write never reached 0: {}", show(&out)));
    // The kernel's send and receive buffers on loopback hold a few MiB at
    // most: the host took no more than them plus its bound.
    assert!(
        written < 32 << 20,
        "wrote {written} bytes into a stuck peer"
    );
    let peak = runner.host().stats.peak_tcp_queued_bytes();
    assert!(
        peak <= LIMIT && peak > 0,
        "peak queued bytes {peak}, bound {LIMIT}"
    );
}

/// `accept_backlog`: with the guest not accepting, the host takes exactly
/// that many connections from the kernel (the rest wait in the kernel's
/// accept queue); then the guest accepts every one of them.
#[tokio::test(flavor = "current_thread")]
async fn byte_listener_holds_at_most_the_backlog() {
    const BACKLOG: usize = 3;
    const CLIENTS: usize = 8;
    let mut config = local_config();
    config.limits.accept_backlog = BACKLOG;
    let runner = runner(config);
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = probe(
        &runner,
        &["tcp-backlog", &listen, "1500", &CLIENTS.to_string()],
    );
    let clients = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut held = Vec::new();
        for _ in 0..CLIENTS {
            held.push(tokio::net::TcpStream::connect(&listen).await.unwrap());
        }
        // The host's accept loop runs on this thread: let it.
        tokio::time::sleep(Duration::from_millis(300)).await;
        (accept_queue_len(port), held)
    };
    let (out, (queued, _held)) = tokio::join!(guest, clients);
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        queued,
        Some(CLIENTS - BACKLOG),
        "connections left in the kernel's accept queue"
    );
    assert!(
        out.stdout_text()
            .contains(&format!("ok accepted {CLIENTS}")),
        "{}",
        show(&out)
    );
}
