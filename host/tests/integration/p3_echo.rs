//! The echo guest's p3 build (`echo-p3`, `tether:streams-async`): its
//! server echoes on many WebSocket connections and TCP byte streams at
//! once (one future per stream, woken through the waitable set), its
//! client mode keeps every message, and its `ping` mode (what `tether
//! bench echo` runs) measures against a native echo server. The p2 build's
//! tests are in `websocket.rs` and `readiness.rs`.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

fn p3_runner() -> tether_host::p3::Runner {
    tether_host::p3::Runner::new(local_config()).expect("p3 runner")
}

/// Connections the server test holds open at once.
const CONNECTIONS: usize = 200;
/// TCP byte streams it echoes meanwhile.
const TCP_STREAMS: usize = 4;
/// Bytes each TCP stream sends before it half-closes.
const TCP_BYTES: usize = 300_000;

/// The message connection `conn` sends in `round` (text on even rounds,
/// binary of a size and content that name both on odd ones).
fn message(conn: usize, round: usize) -> Message {
    if round.is_multiple_of(2) {
        Message::Text(format!("conn {conn} round {round} ✓").into())
    } else {
        let len = 1 + (conn * 131 + round * 17) % 3000;
        Message::Binary(
            (0..len)
                .map(|b| (b + conn + round) as u8)
                .collect::<Vec<u8>>()
                .into(),
        )
    }
}

/// The p3 echo server with 200 WebSocket connections open at once: each
/// round sends 3 messages on every connection before reading any echo, so
/// the guest must serve all of them concurrently (a server that served one
/// stream at a time would stall on the first and the test would hit its
/// deadline). Meanwhile 4 TCP byte streams send 300,000 bytes each and
/// half-close; each gets its bytes back in order, then the guest's FIN.
/// The guest ends by itself after the 204 streams (its MAX_CONNECTIONS).
#[tokio::test(flavor = "current_thread")]
async fn p3_echo_server_echoes_on_200_connections_at_once() {
    let runner = p3_runner();
    let listen = format!("127.0.0.1:{}", closed_port());
    let tcp_listen = format!("127.0.0.1:{}", closed_port());
    let total = (CONNECTIONS + TCP_STREAMS).to_string();
    let guest = echo_p3(&runner, &["server", &listen, &total, "--tcp", &tcp_listen]);
    let url = format!("ws://{listen}/");
    let tcp_addr = tcp_listen.clone();
    let clients = peer_runtime().spawn(async move {
        let connect = || async {
            for _ in 0..500 {
                if let Ok((ws, _)) = tokio_tungstenite::connect_async(&url).await {
                    return ws;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the p3 echo guest never accepted a connection at {url}");
        };
        let mut conns = vec![connect().await];
        // 64 handshakes in flight at most: under the accept backlog.
        let more = futures_util::stream::iter(1..CONNECTIONS)
            .map(|_| connect())
            .buffer_unordered(64)
            .collect::<Vec<_>>()
            .await;
        conns.extend(more);
        let tcp = (0..TCP_STREAMS).map(|k| {
            let addr = tcp_addr.clone();
            tokio::spawn(async move {
                let data: Vec<u8> = (0..TCP_BYTES).map(|i| (i * 7 + k) as u8).collect();
                let tcp = tokio::net::TcpStream::connect(&addr).await.unwrap();
                let (mut r, mut w) = tcp.into_split();
                let writer = async {
                    w.write_all(&data).await.unwrap();
                    w.shutdown().await.unwrap();
                };
                let mut back = Vec::new();
                let reader = r.read_to_end(&mut back);
                let ((), read) = tokio::join!(writer, reader);
                read.unwrap();
                back == data
            })
        });
        let tcp: Vec<_> = tcp.collect();
        for round in (0..6).step_by(3) {
            for (i, ws) in conns.iter_mut().enumerate() {
                for r in round..round + 3 {
                    ws.feed(message(i, r)).await.unwrap();
                }
                ws.flush().await.unwrap();
            }
            for (i, ws) in conns.iter_mut().enumerate() {
                for r in round..round + 3 {
                    let back = ws.next().await.unwrap().unwrap();
                    assert_eq!(back, message(i, r), "connection {i}, message {r}");
                }
            }
        }
        for ws in &mut conns {
            ws.close(None).await.unwrap();
        }
        for ws in &mut conns {
            while ws.next().await.is_some() {}
        }
        let mut tcp_ok = Vec::new();
        for t in tcp {
            tcp_ok.push(t.await.unwrap());
        }
        tcp_ok
    });
    let (out, tcp_ok) =
        tokio::time::timeout(GUEST_DEADLINE, async { tokio::join!(guest, clients) })
            .await
            .expect("the p3 server run took over 120 s");
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        tcp_ok.unwrap(),
        vec![true; TCP_STREAMS],
        "every TCP stream's bytes come back in order, then FIN"
    );
}

/// Idle TCP connections cost the p3 echo server no buffer each: it waits
/// for bytes with a zero-length read and takes its 64 KiB buffer only
/// once they are there. 500 idle connections under a 24 MiB memory
/// limit, then a 501st connection is echoed and every one half-closes;
/// the guest ends by itself, successfully. Before, each connection's
/// pending read held 64 KiB of guest memory (31 MiB here), and the guest
/// was stopped at its limit with every connection (a scale audit of
/// 2026-12-05: 4,000 idle connections ended it at the default 256 MiB).
#[tokio::test(flavor = "current_thread")]
async fn p3_echo_idle_tcp_connections_hold_no_read_buffer() {
    const IDLE: usize = 500;
    let mut config = local_config();
    config.limits.max_memory_bytes = 24 << 20;
    let runner = tether_host::p3::Runner::new(config).expect("p3 runner");
    let listen = format!("127.0.0.1:{}", closed_port());
    let tcp_listen = format!("127.0.0.1:{}", closed_port());
    let total = (IDLE + 1).to_string();
    let guest = echo_p3(&runner, &["server", &listen, &total, "--tcp", &tcp_listen]);
    let addr = tcp_listen.clone();
    let clients = peer_runtime().spawn(async move {
        let connect = || async {
            for _ in 0..500 {
                if let Ok(tcp) = tokio::net::TcpStream::connect(&addr).await {
                    return tcp;
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
            panic!("the p3 echo guest never accepted a connection at {addr}");
        };
        let mut idle = Vec::new();
        for _ in 0..IDLE {
            idle.push(connect().await);
        }
        // Time for the guest to accept them all and wait on each.
        tokio::time::sleep(Duration::from_millis(500)).await;
        let mut last = connect().await;
        last.write_all(b"still serving").await.unwrap();
        last.shutdown().await.unwrap();
        let mut back = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(10), last.read_to_end(&mut back)).await;
        for tcp in &mut idle {
            let _ = tcp.shutdown().await;
        }
        for tcp in &mut idle {
            let mut rest = Vec::new();
            let _ = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut rest)).await;
        }
        (read.map(|r| r.is_ok()), back)
    });
    let (out, clients) =
        tokio::time::timeout(GUEST_DEADLINE, async { tokio::join!(guest, clients) })
            .await
            .expect("the p3 server run took over 120 s");
    assert!(out.success(), "{}", show(&out));
    let (read, back) = clients.unwrap();
    assert_eq!(read, Ok(true), "the last connection never ended");
    assert_eq!(back, b"still serving", "{}", show(&out));
}

/// The p3 client mode echoes 200 mixed messages and reports the server's
/// close code, like the p2 build (`websocket.rs`).
#[tokio::test(flavor = "current_thread")]
async fn p3_echo_client_keeps_every_message() {
    let (addr, done_rx) = mixed_messages_server();
    let runner = p3_runner();
    let out = echo_p3(&runner, &["client", &format!("ws://{addr}/x")]).await;
    assert_mixed_messages_echoed(&out, done_rx).await;
}

/// The p3 `ping` mode (what `tether bench echo` runs) against a native
/// echo server: every phase prints its line with the counts asked for,
/// and the pipeline checks each echo's size.
#[tokio::test(flavor = "current_thread")]
async fn p3_echo_ping_runs_every_phase() {
    let addr = ws_server(echo_ws);
    let runner = p3_runner();
    let url = format!("ws://{addr}/");
    let out = echo_p3(
        &runner,
        &[
            "ping",
            &url,
            "rtt:50:1",
            "rtt:50:70000",
            "nagle:20:16",
            "pipeline:2000:128:16",
            "pipeline:20:1048576:4",
        ],
    )
    .await;
    assert!(out.success(), "{}", show(&out));
    let stdout = out.stdout_text();
    let lines: Vec<Vec<&str>> = stdout
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    let counts: Vec<(&str, usize)> = lines.iter().map(|w| (w[0], w.len() - 1)).collect();
    assert_eq!(
        counts,
        [
            ("rtt", 50),
            ("rtt", 50),
            ("nagle", 20),
            ("pipeline", 3),
            ("pipeline", 3)
        ],
        "{}",
        show(&out)
    );
    assert_eq!(&lines[3][1..3], ["2000", "128"], "{}", show(&out));
    assert_eq!(&lines[4][1..3], ["20", "1048576"], "{}", show(&out));
}

/// Messages the cancellation test sends.
const RACED: usize = 20_000;

/// The cancellation test's message `seq`: its number, then a filler that
/// names it, 8 to 4,003 bytes long.
fn numbered(seq: usize) -> Vec<u8> {
    let len = 8 + (seq * 37) % 3996;
    let mut m = (seq as u64).to_le_bytes().to_vec();
    m.extend((8..len).map(|i| (i ^ seq) as u8));
    m
}

/// Cancellation is safe (issue 12): the p3 echo guest's `race` mode races
/// every receive and every send against a tick stream whose peer sends a
/// tick every 0-1 ms, and drops the loser (cancelling its pending host
/// call). A peer sends 20,000 numbered messages of 8 B to 4 KiB and reads
/// the echoes slowly (1 ms pause every 20 messages), so the host's
/// outbound buffer (32 KiB here) fills and sends wait too. Every message
/// must come back exactly once and in order, and the race must have
/// cancelled waits on both sides. With `receive` and `send` as `async
/// func`s carrying the message (the interface before this test), a
/// receive cancelled after the host returned lost its message.
#[tokio::test(flavor = "current_thread")]
async fn p3_cancelled_receives_and_sends_lose_nothing() {
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticking = done.clone();
    let tick_addr = ws_server(move |mut ws| {
        let done = ticking.clone();
        async move {
            let mut k = 0u64;
            while !done.load(std::sync::atomic::Ordering::Relaxed) {
                k += 1;
                if k.is_multiple_of(4) {
                    tokio::task::yield_now().await;
                } else {
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                if ws.send(Message::text("tick")).await.is_err() {
                    return;
                }
            }
            let _ = ws.close(None).await;
        }
    });
    let (verdict_tx, verdict_rx) = tokio::sync::oneshot::channel();
    let verdict_tx = std::sync::Mutex::new(Some(verdict_tx));
    let data_addr = ws_server(move |ws| {
        let verdict = verdict_tx.lock().unwrap().take();
        async move {
            let (mut tx, mut rx) = ws.split();
            let writer = tokio::spawn(async move {
                for seq in 0..RACED {
                    if tx.send(Message::binary(numbered(seq))).await.is_err() {
                        return tx;
                    }
                }
                tx
            });
            let mut got = 0usize;
            let mut problem = None;
            while got < RACED {
                let Ok(next) = tokio::time::timeout(Duration::from_secs(10), rx.next()).await
                else {
                    problem = Some(format!("after {got} echoes, none for 10 s"));
                    break;
                };
                match next {
                    Some(Ok(Message::Binary(b))) => {
                        if b[..] != numbered(got)[..] {
                            let seq = u64::from_le_bytes(b[..8].try_into().unwrap());
                            problem = Some(format!("echo {got} is message {seq}"));
                            break;
                        }
                        got += 1;
                        if got.is_multiple_of(20) {
                            tokio::time::sleep(Duration::from_millis(1)).await;
                        }
                    }
                    other => {
                        problem = Some(format!("after {got} echoes: {other:?}"));
                        break;
                    }
                }
            }
            // The verdict first: after a loss the guest may wait forever.
            if let Some(v) = verdict {
                let _ = v.send((got, problem));
            }
            let mut tx = writer.await.unwrap();
            let _ = tx.close().await;
        }
    });
    let mut config = local_config();
    config.limits.outbound_buffer_bytes = 32 << 10;
    let runner = tether_host::p3::Runner::new(config).expect("p3 runner");
    let (data_url, tick_url) = (format!("ws://{data_addr}/"), format!("ws://{tick_addr}/"));
    let mut guest = std::pin::pin!(echo_p3(&runner, &["race", &data_url, &tick_url]));
    let (got, problem) = tokio::select! {
        verdict = verdict_rx => verdict.expect("the data peer's verdict"),
        out = &mut guest => panic!("the guest ended before the peer had every echo: {}", show(&out)),
    };
    assert_eq!(problem, None, "the guest lost or doubled a message");
    assert_eq!(got, RACED);
    let out = guest.await;
    done.store(true, std::sync::atomic::Ordering::Relaxed);
    assert!(out.success(), "{}", show(&out));
    let stdout = out.stdout_text();
    let counts: Vec<u64> = stdout
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|w| w.parse().ok())
        .collect();
    eprintln!("{}", stdout.trim());
    assert_eq!(counts.len(), 3, "{stdout}");
    assert_eq!(counts[0], RACED as u64, "{stdout}");
    assert!(
        counts[1] >= 100 && counts[2] >= 1,
        "the race cancelled too few waits to test anything: {stdout}"
    );
}
