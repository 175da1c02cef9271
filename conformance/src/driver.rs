//! Runs the suite guest, one case per run and one store per run, on a
//! target, and turns each run into a [`Record`]. A trapping, hanging or
//! panicking run is a failed case, never a crashed driver.

use std::path::Path;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};
use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Outcome, RunError, Runner};
use tether_host::{Config, Limits, TlsOptions};

use crate::cases::{Case, Expect, HostVariant};
use crate::peer::Peer;
use tether_bench::progress::Progress;

/// The ways the suite runs guests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    /// A `wasi:cli/command` guest on the p2-style interface, on one of the
    /// host's engine configurations.
    Engine(EngineKind),
    /// The suite built against the component-model-async interface
    /// (`wit/p3`), hosted by `tether_host::p3`.
    P3,
    /// The same p2 suite guest on Node.js 24 through jco (JSPI), hosted by
    /// the JS implementation of `tether:streams` in `node/`, one child
    /// process per case (`node/bin/tether-node.mjs`).
    NodeJco,
}

/// Every target, in matrix column order.
pub const TARGETS: &[Target] = &[
    Target::Engine(EngineKind::Cranelift),
    Target::Engine(EngineKind::Winch),
    Target::Engine(EngineKind::Pooling),
    Target::P3,
    Target::NodeJco,
];

impl Target {
    /// The target's name in results and in the matrix.
    pub fn name(self) -> &'static str {
        match self {
            Target::Engine(kind) => kind.name(),
            Target::P3 => "wasmtime-p3",
            Target::NodeJco => "node-jco",
        }
    }

    /// The bound on a message's median delivery after 20 ms of idle in
    /// `wake-ups.first-message-after-idle`, us. 1 ms on wasmtime (measured
    /// here 190-300 us). 3 ms on Node: its bare socket-to-`data` after idle
    /// takes about 300 us here, and `ws`, jco's task bookkeeping, the JSPI
    /// resume and this host then run a few thousand lines of JS with caches
    /// gone cold, another 400-500 us (0.6-0.9 ms in all here; a loaded CI
    /// machine measured twice that). A tick would show: jco's own idle
    /// cadence is 10 ms.
    pub fn idle_delivery_bound_us(self) -> u64 {
        match self {
            Target::Engine(_) | Target::P3 => 1_000,
            Target::NodeJco => 3_000,
        }
    }

    /// Looks a target up by name.
    pub fn parse(name: &str) -> Option<Target> {
        TARGETS.iter().copied().find(|t| t.name() == name)
    }
}

/// One case's result on one target: a line of the target's JSON Lines file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct Record {
    /// Case name.
    pub name: String,
    /// Target name.
    pub target: String,
    /// `pass` or `fail`.
    pub outcome: String,
    /// Wall-clock duration of the guest run, milliseconds.
    pub duration_ms: f64,
    /// The guest's message, or why the case failed.
    pub message: String,
}

impl Record {
    /// Did the case pass?
    pub fn passed(&self) -> bool {
        self.outcome == "pass"
    }
}

/// The host configuration for `variant`, trusting the peer's CA only.
pub fn host_config(peer: &Peer, variant: HostVariant) -> Config {
    let rules = |list: &[&str]| list.iter().map(|r| r.parse().expect("rule")).collect();
    let mut limits = Limits {
        connect_timeout: Duration::from_secs(3),
        handshake_timeout: Duration::from_millis(800),
        linger_timeout: Duration::from_millis(800),
        max_memory_bytes: 128 << 20,
        max_run_without_yield: Duration::from_secs(5),
        ..Limits::default()
    };
    match variant {
        HostVariant::Default => {}
        HostVariant::ShortRun => limits.max_run_without_yield = Duration::from_millis(300),
        HostVariant::SmallMessages => limits.max_message_bytes = 1 << 20,
        HostVariant::SmallReadinessSets => limits.readiness_set_entries = 8,
    }
    Config {
        policy: Policy {
            allow: rules(&["127.0.0.1:*", "localhost:*", "*.invalid:*"]),
            deny: Vec::new(),
            listen: rules(&["127.0.0.1:*"]),
        },
        tls: TlsOptions {
            system_roots: false,
            extra_ca_files: vec![peer.ca_file.clone()],
        },
        limits,
    }
}

/// What a finished guest run left behind, whatever ran it.
pub struct RunReport {
    /// The run.
    pub outcome: Outcome,
    /// Peak bytes buffered by the host's message streams during the run.
    pub peak_buffered: usize,
}

/// Runs `case` once on `target` in a fresh store (and a fresh host
/// context, so buffer statistics are the case's own).
pub async fn run_case(target: Target, case: &Case, peer: &Peer) -> Record {
    let t0 = Instant::now();
    let config = host_config(peer, case.host);
    if target == Target::NodeJco {
        return finish(
            target,
            case,
            t0,
            run_node(config, &args_for(target, case, peer), case.deadline).await,
        );
    }
    let args = args_for(target, case, peer);
    let local = tokio::task::LocalSet::new();
    let run = local.run_until(async move {
        let task = tokio::task::spawn_local(async move {
            match target {
                Target::Engine(kind) => run_engine(kind, config, args).await,
                Target::P3 => run_p3(config, args).await,
                Target::NodeJco => unreachable!("node runs as a child process"),
            }
        });
        let abort = task.abort_handle();
        match tokio::time::timeout(case.deadline, task).await {
            Ok(Ok(report)) => report,
            Ok(Err(e)) => Err(format!("host task failed: {e}")),
            Err(_) => {
                abort.abort();
                Err(format!("no result within {:?}", case.deadline))
            }
        }
    });
    finish(target, case, t0, run.await)
}

/// The suite guest's arguments for `case`.
fn args_for(target: Target, case: &Case, peer: &Peer) -> Vec<String> {
    vec![
        "conformance-suite".to_string(),
        "--peer".to_string(),
        peer.guest_arg(),
        "--idle-delivery-bound-us".to_string(),
        target.idle_delivery_bound_us().to_string(),
        case.name.to_string(),
    ]
}

/// Judges a finished run into its record.
fn finish(target: Target, case: &Case, t0: Instant, result: Result<RunReport, String>) -> Record {
    let duration_ms = t0.elapsed().as_secs_f64() * 1000.0;
    let (passed, message) = match result {
        Ok(report) => judge(case, &report),
        Err(message) => (false, message),
    };
    Record {
        name: case.name.to_string(),
        target: target.name().to_string(),
        outcome: if passed { "pass" } else { "fail" }.to_string(),
        duration_ms: (duration_ms * 10.0).round() / 10.0,
        message,
    }
}

async fn run_engine(
    kind: EngineKind,
    config: Config,
    args: Vec<String>,
) -> Result<RunReport, String> {
    let runner = Runner::new(config, kind).map_err(|e| format!("runner: {e:#}"))?;
    let component = runner
        .compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE)
        .map_err(|e| format!("compiling the suite guest: {e:#}"))?;
    let outcome = runner
        .run(&component, &args, GuestIo::Capture(4 << 20))
        .await;
    Ok(RunReport {
        outcome,
        peak_buffered: runner.host().stats.peak_buffered_bytes(),
    })
}

/// Runs the suite guest under `tether-node` with `config`'s policy, trust
/// and limits as flags, killing it at `deadline`; the runner's report file
/// gives the outcome and the peak of buffered bytes.
async fn run_node(
    config: Config,
    args: &[String],
    deadline: Duration,
) -> Result<RunReport, String> {
    use tether_bench::node::{NodeRun, read_report};
    let text = |rules: &[tether_host::policy::Rule]| rules.iter().map(|r| r.to_string()).collect();
    let run = NodeRun {
        allow: text(&config.policy.allow),
        deny: text(&config.policy.deny),
        listen: text(&config.policy.listen),
        ca_files: config.tls.extra_ca_files.clone(),
        flags: Vec::new(),
    }
    .limits(&config.limits);
    let dir = crate::matrix::results_dir().join("node");
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let report_file = dir.join(format!(
        "{}.json",
        args.last().map(String::as_str).unwrap_or("run")
    ));
    let _ = std::fs::remove_file(&report_file);
    let mut cmd = run
        .command(
            Path::new(tether_guest_artifacts::CONFORMANCE_SUITE_PATH),
            Some(&report_file),
            &args[1..],
        )
        .map_err(|e| format!("{e:#}"))?;
    cmd.stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let t0 = Instant::now();
    let child = cmd.spawn().map_err(|e| format!("spawning node: {e}"))?;
    let out = match tokio::time::timeout(deadline, child.wait_with_output()).await {
        Ok(Ok(out)) => out,
        Ok(Err(e)) => return Err(format!("waiting for node: {e}")),
        Err(_) => return Err(format!("no result within {deadline:?}")),
    };
    let report = read_report(&report_file).map_err(|e| {
        format!(
            "{e:#}; exit {:?}; stderr: {}",
            out.status.code(),
            tail(&out.stderr, 300)
        )
    })?;
    let error = report.error.clone().unwrap_or_default();
    let result = match report.outcome.as_str() {
        "ok" => Ok(()),
        "exit" => Err(RunError::Exit(report.exit.unwrap_or(1))),
        "memory" => Err(RunError::MemoryLimit(config.limits.max_memory_bytes)),
        "runaway" => Err(RunError::Runaway(config.limits.max_run_without_yield)),
        "instantiate" => Err(RunError::Instantiate(error)),
        _ => Err(RunError::Trap(error)),
    };
    Ok(RunReport {
        outcome: Outcome {
            result,
            stdout: out.stdout,
            stderr: out.stderr,
            elapsed: t0.elapsed(),
        },
        peak_buffered: report.peak_buffered,
    })
}

async fn run_p3(config: Config, args: Vec<String>) -> Result<RunReport, String> {
    let runner = tether_host::p3::Runner::new(config).map_err(|e| format!("p3 runner: {e:#}"))?;
    let component = runner
        .compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE_P3)
        .map_err(|e| format!("compiling the p3 suite guest: {e:#}"))?;
    let outcome = runner
        .run(&component, &args, GuestIo::Capture(4 << 20))
        .await;
    Ok(RunReport {
        outcome,
        peak_buffered: runner.host().stats.peak_buffered_bytes(),
    })
}

#[derive(Deserialize)]
struct GuestLine {
    case: String,
    ok: bool,
    message: String,
}

fn tail(bytes: &[u8], max: usize) -> String {
    let text = String::from_utf8_lossy(bytes);
    let text = text.trim();
    let start = text.len().saturating_sub(max);
    let start = (start..=text.len())
        .find(|i| text.is_char_boundary(*i))
        .unwrap_or(text.len());
    text[start..].replace('\n', " | ")
}

/// Decides pass or fail from the run and the case's expectations.
fn judge(case: &Case, report: &RunReport) -> (bool, String) {
    let o = &report.outcome;
    let line = o
        .stdout_text()
        .lines()
        .filter_map(|l| serde_json::from_str::<GuestLine>(l).ok())
        .find(|l| l.case == case.name);
    let (mut passed, mut message) = match case.expect {
        Expect::Pass => match (&line, o.success()) {
            (Some(l), true) => (l.ok, l.message.clone()),
            (Some(l), false) if !l.ok => (false, l.message.clone()),
            (_, false) => (
                false,
                format!(
                    "{}; stderr: {}",
                    o.result
                        .as_ref()
                        .err()
                        .map(|e| e.to_string())
                        .unwrap_or_default(),
                    tail(&o.stderr, 300)
                ),
            ),
            (None, true) => (false, "the guest printed no result for the case".into()),
        },
        Expect::MemoryLimit => match &o.result {
            Err(e @ RunError::MemoryLimit(_)) => (true, e.to_string()),
            other => (
                false,
                format!(
                    "expected the memory limit to stop the guest, got {other:?} {}",
                    line.map(|l| l.message).unwrap_or_default()
                ),
            ),
        },
        Expect::Runaway => match &o.result {
            Err(e @ RunError::Runaway(_)) => (true, e.to_string()),
            other => (
                false,
                format!("expected the runaway guest to be stopped, got {other:?}"),
            ),
        },
    };
    if let Some(max) = case.max_buffered {
        let peak = report.peak_buffered;
        if peak > max {
            passed = false;
            message =
                format!("host buffered {peak} bytes at peak, over the {max}-byte bound; {message}");
        } else {
            message = format!("{message}; host buffered at most {} KiB", peak >> 10);
        }
    }
    (passed, message)
}

/// Runs `cases` on `target` one after the other, printing failures as they
/// happen; each case is a step of `progress`.
pub async fn run_target(
    target: Target,
    cases: &[&'static Case],
    peer: &Peer,
    progress: &Progress,
) -> Vec<Record> {
    let mut records = Vec::with_capacity(cases.len());
    for case in cases {
        progress.phase(&format!("{}: {}", target.name(), case.name));
        let mut record = run_case(target, case, peer).await;
        if !record.passed() && case.timed {
            let first = record.message;
            record = run_case(target, case, peer).await;
            record.message = format!("{} (second run; the first: {first})", record.message);
        }
        if !record.passed() {
            progress.println(&format!(
                "  {} {}: FAIL {}",
                target.name(),
                case.name,
                record.message
            ));
        }
        progress.inc();
        records.push(record);
    }
    records
}
