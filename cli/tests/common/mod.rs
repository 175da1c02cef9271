//! Helpers shared by the CLI tests, written once: the `tether` binary, a
//! child process killed when the test ends, and waiting on its log lines.

// Each test file compiles this module on its own and uses part of it.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

/// The `tether` binary this package built.
pub fn tether() -> Command {
    Command::new(env!("CARGO_BIN_EXE_tether"))
}

/// Kills the child when the test ends, however it ends.
pub struct Running(pub Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Running {
    /// Starts `tether ARGS...` with stdout discarded; returns it and its
    /// stderr lines.
    pub fn spawn(args: &[&str]) -> (Running, Receiver<String>) {
        let mut child = tether()
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let lines = stderr_lines(&mut child);
        (Running(child), lines)
    }

    /// Sends the signal `name` (`TERM`, `INT`, ...) with kill(1).
    pub fn signal(&self, name: &str) {
        let status = Command::new("kill")
            .args([&format!("-{name}"), &self.0.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success(), "kill -{name}");
    }

    /// Waits at most `limit` for the process to end; returns its status
    /// and how long that took. Panics past `limit`.
    pub fn exit_within(&mut self, limit: Duration) -> (ExitStatus, Duration) {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.0.try_wait().unwrap() {
                return (status, t0.elapsed());
            }
            assert!(t0.elapsed() < limit, "still running after {limit:?}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    /// Whether the process still runs.
    pub fn is_running(&mut self) -> bool {
        self.0.try_wait().unwrap().is_none()
    }
}

/// Lines of a child's stderr (which must be piped), read on a thread, so
/// that waiting for one can time out.
pub fn stderr_lines(child: &mut Child) -> Receiver<String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let stderr = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines() {
            let Ok(line) = line else { return };
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    rx
}

/// Waits (at most 10 s) for a line containing `needle`; returns it.
pub fn wait_for(lines: &Receiver<String>, needle: &str) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match lines.recv_timeout(left) {
            Ok(line) if line.contains(needle) => return line,
            Ok(_) => {}
            Err(e) => panic!("no line with {needle:?} within 10 s: {e}"),
        }
    }
}

/// Everything the process printed from now until it ended (its log's
/// reader hangs up at EOF; waits at most 5 s for each line).
pub fn rest(lines: &Receiver<String>) -> String {
    let mut all = Vec::new();
    while let Ok(line) = lines.recv_timeout(Duration::from_secs(5)) {
        all.push(line);
    }
    all.join("\n")
}
