//! `tether run --metrics ADDR`: a Prometheus scrape of `/metrics` with a
//! real HTTP client (curl) sees the counters move by what the test did,
//! and a metrics address the listen policy denies fails at start-up.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use tungstenite::protocol::CloseFrame;
use tungstenite::protocol::frame::coding::CloseCode;

fn tether() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tether"))
}

/// A `tether` process, killed when the test ends however it ends, with its
/// stdout and stderr lines read on threads.
struct Running {
    child: Child,
    lines: Receiver<String>,
    seen: Vec<String>,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn spawn(args: &[&str]) -> Running {
        Running::spawn_with_env(args, &[])
    }

    fn spawn_with_env(args: &[&str], env: &[(&str, &str)]) -> Running {
        let mut child = tether()
            .args(args)
            .env_remove("TETHER_LOG")
            .envs(env.iter().copied())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, lines) = std::sync::mpsc::channel();
        let out: Box<dyn Read + Send> = Box::new(child.stdout.take().unwrap());
        let err: Box<dyn Read + Send> = Box::new(child.stderr.take().unwrap());
        for stream in [out, err] {
            let tx = tx.clone();
            std::thread::spawn(move || {
                for line in BufReader::new(stream).lines() {
                    let Ok(line) = line else { return };
                    if tx.send(line).is_err() {
                        return;
                    }
                }
            });
        }
        Running {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    /// Waits (at most 20 s) for a line of stdout or stderr containing
    /// `needle`, seen before or not; returns its last word.
    fn last_word_of(&mut self, needle: &str) -> String {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(line) = self.seen.iter().find(|l| l.contains(needle)) {
                return line.rsplit(' ').next().unwrap().to_string();
            }
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                Ok(line) => self.seen.push(line),
                Err(e) => panic!(
                    "no line with {needle:?} within 20 s ({e}):\n{:#?}",
                    self.seen
                ),
            }
        }
    }

    /// The `/metrics` URL the process printed.
    fn metrics_url(&mut self) -> String {
        self.last_word_of("tether: metrics on http://")
    }
}

/// `GET url` with curl: (status code, body).
fn curl(url: &str) -> (u16, String) {
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "5", "-w", "\n%{http_code}", url])
        .output()
        .expect("curl is installed (scripts/setup)");
    assert!(out.status.success(), "curl {url}: {out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap(), body.to_string())
}

/// The value of one series (`name{labels}` exactly as exposed) in a
/// scrape; `None` when the scrape lacks it.
fn value(scrape: &str, series: &str) -> Option<u64> {
    scrape.lines().find_map(|l| {
        let v = l.strip_prefix(series)?.strip_prefix(' ')?;
        Some(v.parse::<f64>().unwrap() as u64)
    })
}

/// Scrapes `url` until `series` has `want` (at most 10 s); returns the
/// scrape.
fn scrape_until(url: &str, series: &str, want: u64) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (code, body) = curl(url);
        assert_eq!(code, 200, "{body}");
        if value(&body, series) == Some(want) {
            return body;
        }
        assert!(
            Instant::now() < deadline,
            "{series} is not {want} within 10 s:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn assert_series(scrape: &str, expected: &[(&str, u64)]) {
    for (series, want) in expected {
        assert_eq!(value(scrape, series), Some(*want), "{series} in:\n{scrape}");
    }
}

/// Also: `RUST_LOG` sets the log filter, and the log line about the failed
/// handshake carries the guest's id and the peer's address.
#[test]
fn a_scrape_sees_websocket_traffic_close_codes_and_a_failed_handshake() {
    let mut tether = Running::spawn_with_env(
        &[
            "run",
            tether_guest_artifacts::ECHO_PATH,
            "--listen",
            "127.0.0.1:*",
            "--metrics",
            "127.0.0.1:0",
            "--",
            "server",
            "127.0.0.1:0",
        ],
        &[("RUST_LOG", "tether_host=info")],
    );
    let url = tether.metrics_url();
    let addr = tether.last_word_of("listening on");
    let (code, before) = curl(&url);
    assert_eq!(code, 200, "{before}");
    assert_series(
        &before,
        &[
            ("tether_guests_running", 1),
            (
                "tether_connections_total{interface=\"websocket\",direction=\"inbound\"}",
                0,
            ),
            ("tether_received_messages_total", 0),
        ],
    );
    let (code, _) = curl(&url.replace("/metrics", "/other"));
    assert_eq!(code, 404);

    // 3 clients, each: a 5-byte text and a 3-byte binary message, echoed,
    // then a close with 1000.
    for i in 0..3 {
        let tcp = TcpStream::connect(&addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let (mut ws, _) = tungstenite::client(format!("ws://{addr}/"), tcp).unwrap();
        ws.send(tungstenite::Message::text("hello")).unwrap();
        ws.send(tungstenite::Message::binary(vec![1u8, 2, 3]))
            .unwrap();
        assert_eq!(ws.read().unwrap(), tungstenite::Message::text("hello"));
        assert_eq!(
            ws.read().unwrap(),
            tungstenite::Message::binary(vec![1u8, 2, 3])
        );
        if i == 0 {
            let open = scrape_until(
                &url,
                "tether_connections_open{interface=\"websocket\",direction=\"inbound\"}",
                1,
            );
            assert_series(&open, &[("tether_received_messages_total", 2)]);
        }
        ws.close(Some(CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        }))
        .unwrap();
        loop {
            match ws.read() {
                Ok(_) => {}
                Err(tungstenite::Error::ConnectionClosed) => break,
                Err(e) => panic!("client {i}: {e}"),
            }
        }
    }
    // A request that is not an upgrade: a failed handshake.
    let mut bad = TcpStream::connect(&addr).unwrap();
    bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    bad.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let _ = bad.read_to_end(&mut Vec::new());
    let bad_peer = bad.local_addr().unwrap().to_string();
    tether.last_word_of("rejected WebSocket handshake");
    let logged = tether
        .seen
        .iter()
        .find(|l| l.contains("rejected WebSocket handshake"))
        .unwrap();
    assert!(
        logged.contains("guest{id=1}") && logged.contains(&format!("peer={bad_peer}")),
        "{logged}"
    );

    let after = scrape_until(
        &url,
        "tether_connections_open{interface=\"websocket\",direction=\"inbound\"}",
        0,
    );
    assert_series(
        &after,
        &[
            ("tether_guests_running", 1),
            (
                "tether_connections_total{interface=\"websocket\",direction=\"inbound\"}",
                3,
            ),
            (
                "tether_connections_total{interface=\"websocket\",direction=\"outbound\"}",
                0,
            ),
            ("tether_received_messages_total", 6),
            ("tether_sent_messages_total", 6),
            ("tether_received_bytes_total{interface=\"websocket\"}", 24),
            ("tether_sent_bytes_total{interface=\"websocket\"}", 24),
            (
                "tether_close_codes_total{direction=\"received\",code=\"1000\"}",
                3,
            ),
            // The host answers each client's close with the same code.
            (
                "tether_close_codes_total{direction=\"sent\",code=\"1000\"}",
                3,
            ),
            (
                "tether_handshake_failures_total{direction=\"inbound\",reason=\"bad_request\"}",
                1,
            ),
            ("tether_buffered_bytes", 0),
        ],
    );
    assert!(
        value(&after, "tether_peak_buffered_bytes").unwrap() >= 5,
        "{after}"
    );
}

#[test]
fn a_scrape_sees_tcp_bytes_and_a_policy_denial_by_rule() {
    let mut tether = Running::spawn(&[
        "run",
        tether_guest_artifacts::PROBE_PATH,
        "--allow",
        "127.0.0.0/8:*",
        "--deny",
        "127.0.0.1:1",
        "--listen",
        "127.0.0.1:*",
        "--metrics",
        "127.0.0.1:0",
        "--",
        "denied-then-tcp-serve",
        "127.0.0.1:1",
        "127.0.0.1:0",
    ]);
    let url = tether.metrics_url();
    let addr = tether.last_word_of("ok listening");
    let mut tcp = TcpStream::connect(&addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let sent: Vec<u8> = (0..1000u32).map(|i| i as u8).collect();
    tcp.write_all(&sent).unwrap();
    let mut echoed = vec![0u8; sent.len()];
    tcp.read_exact(&mut echoed).unwrap();
    assert_eq!(echoed, sent);
    let open = scrape_until(&url, "tether_received_bytes_total{interface=\"tcp\"}", 1000);
    assert_series(
        &open,
        &[
            (
                "tether_connections_open{interface=\"tcp\",direction=\"inbound\"}",
                1,
            ),
            (
                "tether_connections_total{interface=\"tcp\",direction=\"inbound\"}",
                1,
            ),
            ("tether_sent_bytes_total{interface=\"tcp\"}", 1000),
            ("tether_policy_denials_total{rule=\"127.0.0.1:1\"}", 1),
            ("tether_sent_messages_total", 0),
        ],
    );
    // End the connection: the guest half-closes and exits 0.
    tcp.shutdown(std::net::Shutdown::Write).unwrap();
    let _ = tcp.read_to_end(&mut Vec::new());
    let deadline = Instant::now() + Duration::from_secs(20);
    let status = loop {
        if let Some(status) = tether.child.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "tether still running");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(status.success(), "{status:?}: {:#?}", tether.seen);
}

/// The metrics listener is a listening socket like a guest's: an address
/// no --listen rule allows is a clear error at start-up, before the guest
/// runs.
#[test]
fn a_metrics_address_the_listen_policy_denies_fails_at_start_up() {
    for listen in [&["--listen", "127.0.0.1:*"][..], &[]] {
        let mut args = vec!["run", tether_guest_artifacts::ECHO_PATH];
        args.extend(listen);
        args.extend(["--metrics", "127.0.0.2:0", "--", "server", "127.0.0.1:0"]);
        let mut tether = Running::spawn(&args);
        let line = tether.last_word_of("tether:");
        let deadline = Instant::now() + Duration::from_secs(20);
        let status = loop {
            if let Some(status) = tether.child.try_wait().unwrap() {
                break status;
            }
            assert!(Instant::now() < deadline, "{args:?}: still running");
            std::thread::sleep(Duration::from_millis(20));
        };
        let log = tether.seen.join("\n");
        assert_eq!(status.code(), Some(1), "{args:?}: {log}");
        assert!(
            log.contains(
                "--metrics 127.0.0.2:0: denied by policy: listening on 127.0.0.2:0 is not allowed"
            ),
            "{args:?}: {log} ({line})"
        );
        assert!(
            !log.contains("listening on 127.0.0.1"),
            "{args:?}: the guest ran: {log}"
        );
    }
}
