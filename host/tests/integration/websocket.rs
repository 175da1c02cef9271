//! Message streams: real servers, bad input, TLS, backpressure, wake-ups.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

#[tokio::test(flavor = "current_thread")]
async fn echo_client_against_embedded_server_keeps_every_message() {
    let (addr, done_rx) = mixed_messages_server();
    let runner = runner(local_config());
    let out = echo(&runner, &["client", &format!("ws://{addr}/x")]).await;
    assert_mixed_messages_echoed(&out, done_rx).await;
}

#[tokio::test(flavor = "current_thread")]
async fn third_party_python_websockets_server() {
    let server = PythonServer::start();
    let runner = runner(local_config());
    let url = format!("ws://127.0.0.1:{}/", server.port);
    // Round trips of several sizes, verified by the guest.
    let out = echo(
        &runner,
        &[
            "ping",
            &url,
            "rtt:50:1",
            "rtt:50:70000",
            "nagle:20:16",
            "pipeline:500:128:16",
        ],
    )
    .await;
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        out.stdout_text()
            .lines()
            .filter(|l| l.starts_with("rtt "))
            .count(),
        2
    );
    // Subprotocol negotiation with a server from another project.
    let out = probe(&runner, &["connect", &url, "superchat", "chat"]).await;
    assert!(
        out.stdout_text()
            .contains("ok connected protocol=superchat"),
        "{}",
        show(&out)
    );
    assert!(
        out.stdout_text().contains("ok closed code=1000 reason=bye"),
        "{}",
        show(&out)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn bad_urls_are_clear_errors() {
    let runner = runner(local_config());
    for url in [
        "not a url",
        "http://127.0.0.1:1/",
        "ws://",
        "ws://127.0.0.1:1/#frag",
    ] {
        let out = probe(&runner, &["connect", url]).await;
        assert!(
            out.stdout_text().starts_with("error invalid-url"),
            "{url}: {}",
            show(&out)
        );
    }
}

#[tokio::test(flavor = "current_thread")]
async fn refused_and_denied_connections() {
    let runner = runner(local_config());
    let out = probe(
        &runner,
        &["connect", &format!("ws://127.0.0.1:{}/", closed_port())],
    )
    .await;
    assert!(
        out.stdout_text().starts_with("error connection-refused"),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["connect", "ws://10.0.0.1:80/"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    // Deny by default: an empty policy refuses even loopback.
    let closed = runner_with(|c| c.policy = Default::default());
    let out = probe(&closed, &["connect", "ws://127.0.0.1:9/"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    let out = probe(&closed, &["listen", "127.0.0.1:0"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    // A name resolving into a denied block is refused after DNS.
    let rebind = runner_with(|c| {
        c.policy.allow = vec!["*:*".parse().unwrap()];
        c.policy.deny = vec!["127.0.0.0/8:*".parse().unwrap(), "[::1]:*".parse().unwrap()];
    });
    let out = probe(&rebind, &["connect", "ws://localhost:9/"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
}

fn runner_with(change: impl FnOnce(&mut tether_host::Config)) -> tether_host::runner::Runner {
    let mut c = local_config();
    change(&mut c);
    runner(c)
}

#[tokio::test(flavor = "current_thread")]
async fn handshake_timeout_redirect_and_rejection() {
    let runner = runner(local_config());
    // Accepts TCP, never answers the upgrade.
    let stall = tcp_server(|mut tcp| async move {
        let mut buf = [0u8; 1024];
        while tcp.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
    });
    let t0 = Instant::now();
    let out = probe(&runner, &["connect", &format!("ws://{stall}/")]).await;
    assert!(
        out.stdout_text().starts_with("error timeout"),
        "{}",
        show(&out)
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    // Redirects are reported, never followed.
    let redirect = tcp_server(|mut tcp| async move {
        let mut buf = [0u8; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(
                b"HTTP/1.1 302 Found\r\nLocation: ws://example.com/\r\nContent-Length: 0\r\n\r\n",
            )
            .await;
    });
    let out = probe(&runner, &["connect", &format!("ws://{redirect}/")]).await;
    let text = out.stdout_text();
    assert!(
        text.starts_with("error protocol-error")
            && text.contains("302")
            && text.contains("not followed"),
        "{}",
        show(&out)
    );
    let forbidden = tcp_server(|mut tcp| async move {
        let mut buf = [0u8; 1024];
        let _ = tcp.read(&mut buf).await;
        let _ = tcp
            .write_all(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            .await;
    });
    let out = probe(&runner, &["connect", &format!("ws://{forbidden}/")]).await;
    assert!(out.stdout_text().contains("403"), "{}", show(&out));
}

#[tokio::test(flavor = "current_thread")]
async fn tls_with_generated_ca() {
    let dir = scratch_dir("tls");
    let ca = TestCa::new(&dir, &["localhost"]);
    let addr = wss_echo_server(ca.server_config.clone());
    let url = format!("wss://localhost:{}/", addr.port());
    // Trusted through --ca-file: round trips work.
    let mut config = local_config();
    config.tls.extra_ca_files = vec![ca.ca_file.clone()];
    let trusted = runner(config.clone());
    let out = echo(&trusted, &["ping", &url, "rtt:20:100"]).await;
    assert!(out.success(), "{}", show(&out));
    // Name mismatch: the certificate is for localhost, not 127.0.0.1.
    let out = probe(
        &trusted,
        &["connect", &format!("wss://127.0.0.1:{}/", addr.port())],
    )
    .await;
    assert!(
        out.stdout_text().starts_with("error tls-failure")
            && out.stdout_text().contains("not valid for name"),
        "{}",
        show(&out)
    );
    // Without the CA: unknown issuer.
    let untrusted = runner(local_config());
    let out = probe(&untrusted, &["connect", &url]).await;
    assert!(
        out.stdout_text().starts_with("error tls-failure")
            && out.stdout_text().to_lowercase().contains("unknownissuer"),
        "{}",
        show(&out)
    );
    // wss:// to a plain WebSocket server: a TLS error, not a hang.
    let plain = ws_server(echo_ws);
    let out = probe(
        &trusted,
        &["connect", &format!("wss://localhost:{}/", plain.port())],
    )
    .await;
    assert!(
        out.stdout_text().starts_with("error tls-failure"),
        "{}",
        show(&out)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn every_host_socket_has_tcp_nodelay() {
    // Plain, TLS: the guest's sockets are read back with getsockopt while
    // the connection is open.
    let dir = scratch_dir("nodelay");
    let ca = TestCa::new(&dir, &["localhost"]);
    let plain = ws_server(|ws| async move {
        tokio::time::sleep(Duration::from_millis(600)).await;
        drop(ws);
    });
    let tls = wss_echo_server(ca.server_config.clone());
    let mut config = local_config();
    config.tls.extra_ca_files = vec![ca.ca_file.clone()];
    let runner = runner(config);
    for (url, addr) in [
        (format!("ws://{plain}/"), plain),
        (format!("wss://localhost:{}/", tls.port()), tls),
    ] {
        let guest = echo(&runner, &["client", &url]);
        let check = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            nodelay_of_sockets_at(addr)
        };
        let (out, flags) = tokio::join!(
            async { tokio::time::timeout(Duration::from_millis(1200), guest).await },
            check
        );
        assert!(!flags.is_empty(), "no socket to {addr} found; {out:?}");
        assert!(
            flags.iter().all(|&f| f),
            "TCP_NODELAY missing on a socket to {addr}: {flags:?}"
        );
    }
    // Accepted sockets: the guest listens, a native client connects.
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = echo(&runner, &["server", &listen, "1"]);
    let client = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{listen}/"))
            .await
            .unwrap();
        let local = {
            let tokio_tungstenite::MaybeTlsStream::Plain(s) = ws.get_ref() else {
                unreachable!()
            };
            s.local_addr().unwrap()
        };
        ws.send(Message::Text("x".into())).await.unwrap();
        ws.next().await.unwrap().unwrap();
        let flags = nodelay_of_sockets_between(local, Some(listen.parse().unwrap()));
        ws.close(None).await.unwrap();
        flags
    };
    let (out, flags) = tokio::join!(guest, client);
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        flags,
        vec![true],
        "the accepted socket must have TCP_NODELAY"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn idle_guest_sleeps_and_wakes_within_a_millisecond() {
    // The guest (and its socket tasks) run on this thread. While it waits
    // on a quiet stream for a second, this thread must use (near) no CPU;
    // then the server measures 200 round trips through it.
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (tx, rx) = tokio::sync::oneshot::channel::<Vec<Duration>>();
    let slot = std::sync::Mutex::new(Some((go_rx, tx)));
    let addr = ws_server(move |mut ws| {
        let (go, tx) = slot.lock().unwrap().take().unwrap();
        async move {
            go.await.unwrap();
            let mut rtts = Vec::new();
            for i in 0..200u32 {
                let t0 = Instant::now();
                ws.send(Message::Binary(i.to_be_bytes().to_vec().into()))
                    .await
                    .unwrap();
                ws.next().await.unwrap().unwrap();
                rtts.push(t0.elapsed());
            }
            let _ = ws.close(None).await;
            let _ = tx.send(rtts);
        }
    });
    let runner = runner(local_config());
    let url = format!("ws://{addr}/");
    let idle = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let cpu0 = thread_cpu_time();
        tokio::time::sleep(Duration::from_secs(1)).await;
        let idle_cpu = thread_cpu_time() - cpu0;
        go_tx.send(()).unwrap();
        idle_cpu
    };
    let (out, idle_cpu) = tokio::join!(echo(&runner, &["client", &url]), idle);
    assert!(out.success(), "{}", show(&out));
    let mut rtts = rx.await.unwrap();
    assert!(
        idle_cpu < Duration::from_millis(5),
        "the idle guest's thread burned {idle_cpu:?} of CPU in 1 s: something polls"
    );
    rtts.sort();
    let median = rtts[rtts.len() / 2];
    assert!(
        median < Duration::from_micros(500),
        "median round trip through the guest {median:?}, want well under 1 ms"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn slow_reader_gets_every_byte_in_order_with_bounded_memory() {
    const TOTAL: usize = 64 << 20;
    let (tx, rx) = tokio::sync::oneshot::channel::<(usize, bool)>();
    let tx = std::sync::Mutex::new(Some(tx));
    let addr = ws_server(move |mut ws| {
        let tx = tx.lock().unwrap().take();
        async move {
            let (mut offset, mut in_order) = (0usize, true);
            while let Some(Ok(m)) = ws.next().await {
                if let Message::Binary(b) = m {
                    in_order &= b
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == ((offset + i) % 251) as u8);
                    offset += b.len();
                    // A deliberately slow reader: ~2 ms per 64 KiB.
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            }
            let _ = tx.unwrap().send((offset, in_order));
        }
    });
    let runner = runner(local_config());
    let out = probe(
        &runner,
        &[
            "send-bulk",
            &format!("ws://{addr}/"),
            &TOTAL.to_string(),
            "65536",
        ],
    )
    .await;
    assert!(out.success(), "{}", show(&out));
    let (received, in_order) = rx.await.unwrap();
    assert_eq!(received, TOTAL, "bytes lost");
    assert!(in_order, "bytes out of order");
    let blocked: u64 = out
        .stdout_text()
        .split("wouldblock=")
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        blocked > 0,
        "the guest never saw backpressure: {}",
        show(&out)
    );
    // Unbounded queues would hold most of the 64 MiB; the host's never
    // held more than its outbound bound.
    let peak = runner.host().stats.peak_buffered_bytes();
    let bound = runner.host().config.limits.outbound_buffer_bytes;
    assert!(
        peak > 0 && peak <= bound,
        "host buffered up to {peak} bytes, bound {bound}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn inbound_burst_is_paused_not_dropped() {
    // The server writes 2000 x 16 KiB (32 MiB); the guest reads nothing
    // for its first 600 ms, then everything. While the host's 64 KiB
    // inbound buffer is full it stops reading the socket, so the kernel
    // buffers fill and the server's sends block: it gets through far fewer
    // than 2000 messages in its first 400 ms.
    const LIMIT: usize = 64 << 10;
    const SIZE: usize = 16 << 10;
    let (tx, rx) = std::sync::mpsc::channel();
    let tx = std::sync::Mutex::new(tx);
    let addr = ws_server(move |mut ws| {
        let tx = tx.lock().unwrap().clone();
        async move {
            let t0 = Instant::now();
            let mut sent_early = 0u32;
            for i in 0..2000u32 {
                let mut m = vec![(i % 256) as u8; SIZE];
                m[..4].copy_from_slice(&i.to_be_bytes());
                if ws.send(Message::Binary(m.into())).await.is_err() {
                    return;
                }
                if t0.elapsed() < Duration::from_millis(400) {
                    sent_early = i + 1;
                }
            }
            let _ = tx.send(sent_early);
            let _ = ws.close(None).await;
            while ws.next().await.is_some() {}
        }
    });
    let mut config = local_config();
    config.limits.inbound_buffer_bytes = LIMIT;
    let runner = runner(config);
    let out = probe(&runner, &["recv-all", &format!("ws://{addr}/"), "600"]).await;
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text()
            .contains(&format!("ok received 2000 {} close=1005", 2000 * SIZE)),
        "{}",
        show(&out)
    );
    let sent_early = rx.try_recv().expect("the server finished");
    assert!(
        sent_early < 1000,
        "the server sent {sent_early} of 2000 messages before the guest read: not paused"
    );
    // The bound, plus the one message read while below it.
    let peak = runner.host().stats.peak_buffered_bytes();
    assert!(
        (LIMIT..LIMIT + SIZE).contains(&peak),
        "peak inbound buffering {peak} bytes, bound {LIMIT} + one {SIZE}-byte message"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn message_size_limits_both_ways() {
    let mut config = local_config();
    config.limits.max_message_bytes = 1 << 20;
    let runner = runner(config);
    let addr = ws_server(echo_ws);
    let out = probe(
        &runner,
        &[
            "send-big",
            &format!("ws://{addr}/"),
            &((1 << 20) + 1).to_string(),
        ],
    )
    .await;
    assert!(
        out.stdout_text().starts_with(&format!(
            "error message-too-large message too large (limit {} bytes)",
            1 << 20
        )),
        "{}",
        show(&out)
    );
    // The peer sends more than the limit: the stream ends with 1009.
    let big = ws_server(|mut ws| async move {
        let _ = ws.send(Message::Binary(vec![7u8; 2 << 20].into())).await;
        while ws.next().await.is_some() {}
    });
    let out = probe(&runner, &["recv-all", &format!("ws://{big}/")]).await;
    assert!(
        out.stdout_text().contains("close=1009")
            && out.stdout_text().contains("error message-too-large"),
        "{}",
        show(&out)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn abrupt_close_mid_message_is_abnormal_1006() {
    let addr = tcp_server(|tcp| async move {
        let (mut ws, _) = (tokio_tungstenite::accept_async(tcp).await.unwrap(), ());
        ws.send(Message::Text("first".into())).await.unwrap();
        // Half a frame: a 100-byte binary header with 10 bytes, then RST.
        let tcp = ws.get_mut();
        tcp.write_all(&[0x82, 100, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10])
            .await
            .unwrap();
        socket2::SockRef::from(&*tcp)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    });
    let runner = runner(local_config());
    let out = probe(&runner, &["recv-all", &format!("ws://{addr}/")]).await;
    let text = out.stdout_text();
    assert!(
        text.contains("ok received 1 5 close=1006"),
        "{}",
        show(&out)
    );
    assert!(text.contains("error protocol-error"), "{}", show(&out));
}

#[tokio::test(flavor = "current_thread")]
async fn a_failed_stream_closes_its_socket_at_once() {
    // The peer sends a text frame that is not UTF-8 (RFC 6455 section 8.1:
    // fail the connection), then times how long the host keeps the TCP
    // connection open after the guest let go of the stream.
    let (tx, rx) = std::sync::mpsc::channel::<Option<Duration>>();
    let tx = std::sync::Mutex::new(tx);
    let addr = tcp_server(move |tcp| {
        let tx = tx.lock().unwrap().clone();
        async move {
            let mut ws = tokio_tungstenite::accept_async(tcp).await.unwrap();
            let tcp = ws.get_mut();
            tcp.write_all(&[0x81, 0x02, 0xc0, 0xaf]).await.unwrap();
            let t0 = Instant::now();
            let mut buf = [0u8; 1024];
            let closed = tokio::time::timeout(Duration::from_secs(8), async {
                loop {
                    match tcp.read(&mut buf).await {
                        Ok(0) | Err(_) => break,
                        Ok(_) => continue,
                    }
                }
            })
            .await;
            let _ = tx.send(closed.ok().map(|()| t0.elapsed()));
        }
    });
    // A long handshake timeout: the linger after a drop must not hold a
    // failed connection open for it.
    let runner = runner_with(|c| {
        c.limits.handshake_timeout = Duration::from_secs(10);
        c.limits.linger_timeout = Duration::from_secs(10);
    });
    let out = probe(&runner, &["recv-all", &format!("ws://{addr}/")]).await;
    assert!(out.stdout_text().contains("error"), "{}", show(&out));
    let closed = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(10)))
        .await
        .unwrap()
        .expect("the peer reported");
    let elapsed = closed.expect("the host kept the failed connection open for 8 s");
    assert!(
        elapsed < Duration::from_secs(1),
        "the failed connection closed after {elapsed:?}"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn close_rules_and_idempotence() {
    let addr = ws_server(echo_ws);
    let runner = runner(local_config());
    let out = probe(&runner, &["close-rules", &format!("ws://{addr}/")]).await;
    let text = out.stdout_text();
    assert!(out.success(), "{}", show(&out));
    assert_eq!(text.matches("ok rejected").count(), 5, "{text}");
    for want in [
        "ok idempotent",
        "ok send-after-close closed",
        "ok receive-after-close closed",
        "ok close-info Some(4000)",
    ] {
        assert!(text.contains(want), "missing `{want}`: {text}");
    }
    assert!(!text.contains("error"), "{text}");
}

#[tokio::test(flavor = "current_thread")]
async fn server_guest_accepts_and_negotiates() {
    let runner = runner(local_config());
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = echo(&runner, &["server", &listen, "2"]);
    let clients = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let mut total = 0;
        for n in 0..2 {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{listen}/room/{n}"))
                .await
                .unwrap();
            for i in 0..100 {
                let m = Message::Text(format!("{n}-{i}").into());
                ws.send(m.clone()).await.unwrap();
                if ws.next().await.unwrap().unwrap() == m {
                    total += 1;
                }
            }
            ws.close(None).await.unwrap();
            while ws.next().await.is_some() {}
        }
        total
    };
    let (out, total) = tokio::join!(guest, clients);
    assert!(out.success(), "{}", show(&out));
    assert_eq!(total, 200);
}

/// `accept_backlog` for the WebSocket listener: with the guest not
/// accepting, the host upgrades and holds exactly that many connections
/// (the clients past it wait); then the guest accepts every one.
#[tokio::test(flavor = "current_thread")]
async fn listener_holds_at_most_the_backlog() {
    const BACKLOG: usize = 3;
    const CLIENTS: usize = 8;
    let mut config = local_config();
    config.limits.accept_backlog = BACKLOG;
    let runner = runner(config);
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = probe(
        &runner,
        &["ws-backlog", &listen, "1500", &CLIENTS.to_string()],
    );
    let clients = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let upgraded = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let mut tasks = Vec::new();
        for _ in 0..CLIENTS {
            let tcp = tokio::net::TcpStream::connect(&listen).await.unwrap();
            let url = format!("ws://{listen}/");
            let upgraded = upgraded.clone();
            tasks.push(tokio::spawn(async move {
                let (ws, _) = tokio_tungstenite::client_async(url, tcp).await.unwrap();
                upgraded.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                ws
            }));
        }
        tokio::time::sleep(Duration::from_millis(600)).await;
        let early = upgraded.load(std::sync::atomic::Ordering::SeqCst);
        let mut streams = Vec::new();
        for t in tasks {
            streams.push(t.await.unwrap());
        }
        (early, streams.len())
    };
    let (out, (early, all)) = tokio::join!(guest, clients);
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        early, BACKLOG,
        "upgrades completed while the guest accepted nothing"
    );
    assert_eq!(all, CLIENTS);
    assert!(
        out.stdout_text()
            .contains(&format!("ok accepted {CLIENTS}")),
        "{}",
        show(&out)
    );
}

/// RFC 6455 section 4.1 (the client's checks of the server's handshake):
/// a server that selects none of the offered subprotocols leaves out
/// `Sec-WebSocket-Protocol`, and the client goes on without one. The guest
/// sees `none`, on the p2 and the p3 interface alike, and the stream works.
#[tokio::test(flavor = "current_thread")]
async fn connect_goes_on_when_the_server_selects_no_subprotocol() {
    // tokio-tungstenite's accept selects no subprotocol.
    let addr = ws_server(echo_ws);
    let peer = format!("ws={addr}");
    let case = "subprotocol.none-accepted";
    let p2 = runner(local_config());
    let component = p2
        .compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE)
        .unwrap();
    let args = ["conformance-suite", "--peer", &peer, case];
    let out = tokio::time::timeout(
        GUEST_DEADLINE,
        p2.run(
            &component,
            &args,
            tether_host::runner::GuestIo::Capture(1 << 20),
        ),
    )
    .await
    .expect("p2 guest still running at its deadline");
    assert!(out.success(), "p2: {}", show(&out));
    assert!(
        out.stdout_text().contains("agreed None"),
        "p2: {}",
        show(&out)
    );
    let p3 = tether_host::p3::Runner::new(local_config()).unwrap();
    let component = p3
        .compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE_P3)
        .unwrap();
    let args = ["conformance-suite-p3", "--peer", &peer, case];
    let out = tokio::time::timeout(
        GUEST_DEADLINE,
        p3.run(
            &component,
            &args,
            tether_host::runner::GuestIo::Capture(1 << 20),
        ),
    )
    .await
    .expect("p3 guest still running at its deadline");
    assert!(out.success(), "p3: {}", show(&out));
}

/// RFC 6455 section 4.1, the client's check 5: a server whose 101 turns on
/// an extension the request did not offer fails the connect, naming the
/// extension (the red team of 2026-12-07, F3: the connect succeeded, and
/// the stream failed with 1002 at the first compressed frame). A made-up
/// extension alike.
#[tokio::test(flavor = "current_thread")]
async fn an_extension_the_request_did_not_offer_fails_the_connect() {
    let runner = runner(local_config());
    for extension in ["permessage-deflate", "x-evil; a=1"] {
        let server = tcp_server(move |mut tcp| async move {
            let mut head = Vec::new();
            let mut buf = [0u8; 1024];
            while !head.ends_with(b"\r\n\r\n") {
                match tcp.read(&mut buf).await {
                    Ok(n) if n > 0 => head.extend_from_slice(&buf[..n]),
                    _ => return,
                }
            }
            let head = String::from_utf8_lossy(&head).to_string();
            let key = head
                .lines()
                .find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("sec-websocket-key")
                        .then(|| value.trim().to_string())
                })
                .expect("a key");
            let accept =
                tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
            let answer = format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\nSec-WebSocket-Extensions: {extension}\r\n\r\n"
            );
            let _ = tcp.write_all(answer.as_bytes()).await;
            // A text frame "hello", then wait for the client to go.
            let _ = tcp.write_all(b"\x81\x05hello").await;
            while tcp.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
        });
        let out = probe(&runner, &["connect", &format!("ws://{server}/")]).await;
        let text = out.stdout_text();
        let name = extension.split(';').next().unwrap();
        assert!(
            text.starts_with("error protocol-error")
                && text.contains(name)
                && text.contains("did not offer"),
            "{extension}: {}",
            show(&out)
        );
    }
}
