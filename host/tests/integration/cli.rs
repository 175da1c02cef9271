//! The `tether` command line as a user runs it: exit codes of usage
//! errors, and a running tunnel that outlives its log reader.

use std::io::{BufRead, BufReader, Read};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn tether() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tether"))
}

/// Kills the child when the test ends, however it ends.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn usage_errors_exit_2_with_a_message() {
    let echo = "guest.wasm";
    for args in [
        &["jmux", "--", "ws://127.0.0.1:1/", "--frobnicate"][..],
        &["jmux", "--", "ws://127.0.0.1:1/", "--deny"],
        &["run", echo, "--inbound-buffer-bytes", "0"],
        &["run", echo, "--engine", "v8"],
        &["run", echo, "--listen", "localhost:*"],
        &["bench", "quic", "--mtu", "1000"],
    ] {
        let out = tether().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.trim().is_empty(), "{args:?}: no message");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

/// The first jmux process logs to a pipe whose reader goes away; its next
/// log lines (a peer connecting) must not end it: Rust's `eprintln!` in the
/// guest panics on a failed write unless the host's stderr absorbs it.
#[test]
fn a_closed_stderr_does_not_end_a_running_tunnel() {
    let mut server = Running(
        tether()
            .args(["jmux", "--", "ws-listen://127.0.0.1:0", "--allow-all"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    let mut lines = BufReader::new(server.0.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("ws://"))
        .unwrap_or_else(|| panic!("no ws:// URL in {first:?}"))
        .to_string();
    drop(lines); // The log reader goes away.

    let mut client = Running(
        tether()
            .args(["jmux", "--", &url, "socks5-listen://127.0.0.1:0"])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap(),
    );
    // The client connects; the server logs the accepted pipe (and fails to
    // write it). Give it time to die if it is going to.
    let mut client_log = BufReader::new(client.0.stderr.take().unwrap());
    let mut line = String::new();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !line.contains("socks5 listener") && Instant::now() < deadline {
        line.clear();
        if client_log.read_line(&mut line).unwrap() == 0 {
            break;
        }
    }
    assert!(line.contains("socks5 listener"), "client log: {line:?}");
    std::thread::sleep(Duration::from_millis(500));
    if let Some(status) = server.0.try_wait().unwrap() {
        let mut rest = String::new();
        let _ = client_log.read_to_string(&mut rest);
        panic!("the server ended with {status} once its stderr closed; client: {rest}");
    }
    assert!(
        client.0.try_wait().unwrap().is_none(),
        "the client ended although its pipe's peer is alive"
    );

    // When the server process dies, the client's pipe ends without a close
    // frame: that is an error (exit 1, naming it), not a normal end.
    drop(server);
    let deadline = Instant::now() + Duration::from_secs(10);
    let status = loop {
        if let Some(status) = client.0.try_wait().unwrap() {
            break status;
        }
        assert!(Instant::now() < deadline, "the client outlived its pipe");
        std::thread::sleep(Duration::from_millis(20));
    };
    let mut rest = String::new();
    let _ = client_log.read_to_string(&mut rest);
    assert_eq!(status.code(), Some(1), "{rest}");
    assert!(
        rest.contains("without closing handshake") || rest.contains("without a WebSocket close"),
        "{rest}"
    );
}
