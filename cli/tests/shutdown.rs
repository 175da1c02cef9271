//! Graceful shutdown of `tether run` and `tether jmux` on SIGTERM / SIGINT:
//! listeners stop accepting, message streams close with 1001 after what
//! they queued, byte streams half-close, the process exits 0 within
//! `--shutdown-timeout-ms`, and a second signal exits at once. And when
//! the guest returns by itself: what the host took still goes out.

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use tungstenite::protocol::frame::coding::CloseCode;

mod common;
use common::*;

/// A WebSocket client of `ws://ADDR/` whose reads time out after 10 s.
fn ws_connect(addr: &str) -> tungstenite::WebSocket<TcpStream> {
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tungstenite::client(format!("ws://{addr}/"), tcp).unwrap().0
}

#[test]
fn sigterm_closes_message_streams_with_1001_stops_accepting_and_exits_0() {
    for signal in ["TERM", "INT"] {
        let (mut server, log) = Running::spawn(&[
            "run",
            tether_guest_artifacts::ECHO_PATH,
            "--listen",
            "127.0.0.1:*",
            "--shutdown-timeout-ms",
            "5000",
            "--",
            "server",
            "127.0.0.1:0",
        ]);
        let line = wait_for(&log, "listening on");
        let addr = line.rsplit(' ').next().unwrap().to_string();
        let mut ws = ws_connect(&addr);
        ws.send(tungstenite::Message::text("before")).unwrap();
        assert_eq!(ws.read().unwrap(), tungstenite::Message::text("before"));

        server.signal(signal);
        // The open stream gets a close frame with 1001, going away.
        let close = match ws.read() {
            Ok(tungstenite::Message::Close(frame)) => frame,
            Ok(other) => panic!("{signal}: expected a close frame, got {other:?}"),
            Err(e) => panic!("{signal}: no close frame: {e}"),
        };
        let close = close.expect("a close frame with a status code");
        assert_eq!(close.code, CloseCode::Away, "{signal}: {close:?}");
        let (status, took) = server.exit_within(Duration::from_secs(5));
        let log = rest(&log);
        assert_eq!(status.code(), Some(0), "{signal}: {log}");
        assert!(
            took < Duration::from_secs(2),
            "{signal}: exit took {took:?}"
        );
        // The listener is gone: a new connection is refused.
        let refused = TcpStream::connect(&addr);
        assert!(refused.is_err(), "{signal}: the listener still accepts");
    }
}

/// A guest that does not end by itself when its byte stream half-closes
/// (the probe echoes until the peer's EOF): its peer sees the FIN at once,
/// the guest is stopped at the shutdown deadline and tether exits 0, or a
/// second signal ends the process at once.
#[test]
fn sigterm_half_closes_byte_streams_then_the_deadline_or_a_second_signal_ends_it() {
    for (timeout_ms, second_signal) in [("400", false), ("60000", true)] {
        let target = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = target.local_addr().unwrap().port();
        let allow = format!("127.0.0.1:{port}");
        let (mut guest, log) = Running::spawn(&[
            "run",
            tether_guest_artifacts::PROBE_PATH,
            "--allow",
            &allow,
            "--shutdown-timeout-ms",
            timeout_ms,
            "--",
            "tcp-echo",
            &allow,
        ]);
        let (mut conn, _) = target.accept().unwrap();
        conn.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        conn.write_all(b"ping").unwrap();
        let mut echoed = [0u8; 4];
        conn.read_exact(&mut echoed).unwrap();
        assert_eq!(&echoed, b"ping");

        guest.signal("TERM");
        let t0 = Instant::now();
        let mut byte = [0u8; 1];
        let n = conn.read(&mut byte).expect("EOF, not an error");
        assert_eq!(n, 0, "the host half-closed the byte stream (FIN)");
        assert!(
            t0.elapsed() < Duration::from_secs(2),
            "FIN after {:?}",
            t0.elapsed()
        );
        std::thread::sleep(Duration::from_millis(100));
        assert!(
            guest.is_running(),
            "the guest still waits for the peer's EOF"
        );

        if second_signal {
            std::thread::sleep(Duration::from_millis(200));
            assert!(guest.is_running(), "the 60 s deadline is far away");
            guest.signal("TERM");
            let (status, took) = guest.exit_within(Duration::from_secs(2));
            assert_eq!(status.code(), Some(128 + 15), "{}", rest(&log));
            assert!(
                took < Duration::from_millis(500),
                "second signal took {took:?}"
            );
        } else {
            let (status, _) = guest.exit_within(Duration::from_secs(5));
            let log = rest(&log);
            assert!(
                t0.elapsed() >= Duration::from_millis(400),
                "stopped before its deadline: {log}"
            );
            assert_eq!(status.code(), Some(0), "{log}");
            assert!(
                log.contains("after the host started shutting down"),
                "{log}"
            );
        }
    }
}

/// `tether jmux` winds down too: its pipe closes with 1001 and it exits 0.
#[test]
fn sigterm_ends_a_jmux_tunnel_with_a_going_away_close() {
    // A deadline far away: the guest must end by itself once its pipe
    // closed, not be stopped.
    let (mut server, log) = Running::spawn(&[
        "jmux",
        "--shutdown-timeout-ms",
        "20000",
        "--",
        "ws-listen://127.0.0.1:0",
        "--allow-all",
    ]);
    let line = wait_for(&log, "ws://");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap()
        .to_string();
    let mut pipe = ws_connect(url.trim_start_matches("ws://").trim_end_matches('/'));
    server.signal("TERM");
    let close = loop {
        match pipe.read() {
            Ok(tungstenite::Message::Close(frame)) => break frame,
            Ok(_) => {}
            Err(e) => panic!("no close frame: {e}"),
        }
    };
    assert_eq!(close.map(|c| c.code), Some(CloseCode::Away));
    // Answer the close (tungstenite sends the reply on the next flush).
    let _ = pipe.flush();
    let (status, _) = server.exit_within(Duration::from_secs(5));
    assert_eq!(status.code(), Some(0), "{}", rest(&log));
}

/// A listener that stopped accepting leaves the JMUX guest's readiness
/// set: it is logged once and never tried again. The guest kept it
/// registered, and a SIGTERM with a tunnel still open made it wake and log
/// `accept: closed` every turn until the session ended (the red team of
/// 2026-12-03 counted about 650 lines in 0.1 s).
#[test]
fn a_closed_jmux_listener_is_logged_once_not_every_turn() {
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let target_addr = target.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for conn in target.incoming() {
            let Ok(mut conn) = conn else { return };
            std::thread::spawn(move || {
                let mut buf = [0u8; 4096];
                while let Ok(n @ 1..) = conn.read(&mut buf) {
                    if conn.write_all(&buf[..n]).is_err() {
                        return;
                    }
                }
            });
        }
    });
    let (mut server, server_log) =
        Running::spawn(&["jmux", "--", "ws-listen://127.0.0.1:0", "--allow-all"]);
    let line = wait_for(&server_log, "ws://");
    let url = line
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap()
        .to_string();
    let (mut client, log) = Running::spawn(&[
        "jmux",
        "--shutdown-timeout-ms",
        "3000",
        "--",
        &url,
        "http-listen://127.0.0.1:0",
    ]);
    let line = wait_for(&log, "http listener on");
    let proxy = line.rsplit(' ').next().unwrap().to_string();
    // An open tunnel keeps the session (and the guest's loop) going after
    // the signal closed the listener.
    let mut tunnel = TcpStream::connect(&proxy).unwrap();
    tunnel
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    write!(tunnel, "CONNECT {target_addr} HTTP/1.1\r\n\r\n").unwrap();
    let mut reply = [0u8; 39];
    tunnel.read_exact(&mut reply).unwrap();
    assert!(reply.starts_with(b"HTTP/1.1 200"), "{reply:?}");
    tunnel.write_all(b"ping").unwrap();
    let mut echo = [0u8; 4];
    tunnel.read_exact(&mut echo).unwrap();
    assert_eq!(&echo, b"ping");

    client.signal("TERM");
    let _ = client.exit_within(Duration::from_secs(10));
    let log = rest(&log);
    let accepts = log.lines().filter(|l| l.contains("accept")).count();
    assert!(
        accepts <= 1,
        "{accepts} lines about accept after the signal:\n{}",
        log.lines().take(20).collect::<Vec<_>>().join("\n")
    );
    drop(tunnel);
    server.signal("TERM");
    let _ = server.exit_within(Duration::from_secs(10));
}

/// A guest that returns right after writing to a peer that was not
/// reading: what the host took (its TCP write buffer, 256 KiB) still
/// reaches the peer, then the FIN, before `tether run` exits. Before, the
/// process exited as soon as the guest returned and dropped the host's
/// queue: the peer read a clean FIN exactly 262,144 bytes short, a
/// truncated stream it could not tell from a whole one (red team
/// 2026-12-05, F1).
#[test]
fn a_guest_that_returns_still_delivers_what_the_host_took() {
    let target = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = target.local_addr().unwrap().to_string();
    let mut guest = Running(
        tether()
            .args(["run", tether_guest_artifacts::PROBE_PATH, "--allow", &addr])
            .args(["--", "tcp-stuck", &addr, "67108864"])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    );
    let (mut conn, _) = target.accept().unwrap();
    // Read nothing until the guest is stuck (300 ms without room) and has
    // returned, dropping the stream with the host's queue full.
    std::thread::sleep(Duration::from_millis(1500));
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let (mut got, mut buf) = (0usize, vec![0u8; 1 << 20]);
    let end = loop {
        match conn.read(&mut buf) {
            Ok(0) => break Ok(()),
            Ok(n) => got += n,
            Err(e) => break Err(e),
        }
    };
    let (status, _) = guest.exit_within(Duration::from_secs(10));
    let mut stdout = String::new();
    guest
        .0
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    let written: usize = stdout
        .split_whitespace()
        .find_map(|w| w.strip_prefix("blocked-after="))
        .unwrap_or_else(|| panic!("the probe never got stuck: {stdout}"))
        .parse()
        .unwrap();
    assert!(status.success(), "{status}: {stdout}");
    end.unwrap_or_else(|e| panic!("the stream failed after {got} of {written} bytes: {e}"));
    assert_eq!(
        got, written,
        "the peer read a FIN after {got} of the {written} bytes the guest wrote"
    );
}
