//! Autobahn|Testsuite runs against the host's WebSocket client and server.
//!
//! - client: `wstest -m fuzzingserver` on 127.0.0.1, and the suite guest's
//!   `autobahn-client` mode connecting to every case and echoing;
//! - server: the echo guest serving through the host's WebSocket listener,
//!   and `wstest -m fuzzingclient` against it.
//!
//! wstest runs under Python 2.7 from a virtualenv that
//! `conformance/autobahn/setup.sh` creates; without Python 2.7 the run
//! fails and says why.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use tether_host::runner::{EngineKind, GuestIo, Runner};

use crate::matrix::{conformance_dir, results_dir};

/// Which Autobahn case groups to run.
pub fn case_groups(full: bool) -> Vec<&'static str> {
    let mut groups = vec!["1.*", "2.*", "3.*", "4.*", "5.*", "6.*", "7.*", "10.*"];
    if full {
        // 9.x: performance cases, minutes under Python 2 (outside CI).
        groups.push("9.*");
    }
    groups
}

/// One Autobahn run's results.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct RunSummary {
    /// Cases run.
    pub cases: usize,
    /// Count per behaviour (`OK`, `NON-STRICT`, `INFORMATIONAL`, `FAILED`,
    /// `UNIMPLEMENTED`), counting a case by its worse of behaviour and
    /// closing behaviour.
    pub counts: BTreeMap<String, usize>,
    /// Every case that is not plainly OK: (case, behaviour, closing
    /// behaviour).
    pub notable: Vec<(String, String, String)>,
    /// Wall-clock seconds.
    pub seconds: f64,
}

/// Both runs, as written to `target/conformance/autobahn.json`.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
pub struct AutobahnSummary {
    /// The case groups that ran.
    pub groups: Vec<String>,
    /// The host's client against the fuzzingserver.
    pub client: Option<RunSummary>,
    /// The host's listener against the fuzzingclient.
    pub server: Option<RunSummary>,
    /// Why a run could not happen.
    pub errors: Vec<String>,
}

impl AutobahnSummary {
    /// The summary file.
    pub fn path() -> PathBuf {
        results_dir().join("autobahn.json")
    }

    /// Reads the last summary, if any.
    pub fn load() -> Option<AutobahnSummary> {
        let text = std::fs::read_to_string(Self::path()).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// What fails the run: errors, missing runs, FAILED or UNIMPLEMENTED,
    /// and any other non-OK result not declared in
    /// `conformance/autobahn/expected.txt`.
    pub fn problems(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .errors
            .iter()
            .map(|e| format!("autobahn: {e}"))
            .collect();
        let expected = match expected() {
            Ok(e) => e,
            Err(e) => {
                out.push(format!("autobahn: {e:#}"));
                Vec::new()
            }
        };
        for (name, run) in [("client", &self.client), ("server", &self.server)] {
            match run {
                None => out.push(format!("autobahn {name}: did not run")),
                Some(r) if r.cases == 0 => out.push(format!("autobahn {name}: no cases ran")),
                Some(r) => {
                    for (case, b, c) in &r.notable {
                        let worst = if rank(c) > rank(b) { c } else { b };
                        let declared = expected.iter().any(|e| {
                            (e.run == "both" || e.run == name)
                                && e.case == *case
                                && e.behavior == *worst
                        });
                        if !declared || worst == "FAILED" || worst == "UNIMPLEMENTED" {
                            out.push(format!(
                                "autobahn {name}: case {case}: {b} / close {c} (not declared in conformance/autobahn/expected.txt)"
                            ));
                        }
                    }
                }
            }
        }
        out
    }

    /// The matrix section: deterministic (the declared NON-STRICT and
    /// INFORMATIONAL cases, not this run's timing-dependent subset).
    pub fn render(&self) -> String {
        let mut m = String::from("## Autobahn|Testsuite\n\n");
        m.push_str(&format!(
            "Cases {} (9.x performance cases run outside CI: `cargo run --release -p tether-conformance -- autobahn --full`). The bar is 0 FAILED and every other non-OK result declared in `conformance/autobahn/expected.txt`; each run's exact counts are printed and kept in `target/conformance/autobahn.json`.\n\n",
            self.groups.join(", ")
        ));
        m.push_str("| run | cases | FAILED | UNIMPLEMENTED | undeclared non-OK |\n");
        m.push_str("|---|---|---|---|---|\n");
        let problems = self.problems();
        let rows = [
            (
                "client",
                "host WebSocket client (guest) vs fuzzingserver",
                &self.client,
            ),
            (
                "server",
                "host WebSocket listener (echo guest) vs fuzzingclient",
                &self.server,
            ),
        ];
        for (name, label, run) in rows {
            match run {
                Some(r) => {
                    let c = |k: &str| r.counts.get(k).copied().unwrap_or(0);
                    let undeclared = problems
                        .iter()
                        .filter(|p| p.starts_with(&format!("autobahn {name}: case")))
                        .count();
                    m.push_str(&format!(
                        "| {name}: {label} | {} | {} | {} | {undeclared} |\n",
                        r.cases,
                        c("FAILED"),
                        c("UNIMPLEMENTED"),
                    ));
                }
                None => m.push_str(&format!("| {name}: {label} | did not run | | | |\n")),
            }
        }
        m.push_str(
            "\nDeclared NON-STRICT and INFORMATIONAL results (both runs unless marked):\n\n",
        );
        match expected() {
            Ok(list) => {
                for e in list {
                    let run = if e.run == "both" {
                        String::new()
                    } else {
                        format!(" ({})", e.run)
                    };
                    m.push_str(&format!("- {} {}{run}: {}\n", e.case, e.behavior, e.reason));
                }
            }
            Err(e) => m.push_str(&format!("- unreadable: {e:#}\n")),
        }
        m
    }
}

/// One line of `conformance/autobahn/expected.txt`.
struct Expected {
    run: String,
    case: String,
    behavior: String,
    reason: String,
}

fn expected() -> anyhow::Result<Vec<Expected>> {
    let path = conformance_dir().join("autobahn/expected.txt");
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    let mut out = Vec::new();
    for line in text.lines().map(str::trim) {
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let parse = || -> Option<Expected> {
            let (head, reason) = line.split_once(':')?;
            let mut parts = head.split_whitespace();
            let e = Expected {
                run: parts.next()?.to_string(),
                case: parts.next()?.to_string(),
                behavior: parts.next()?.to_string(),
                reason: reason.trim().to_string(),
            };
            let known_run = ["both", "client", "server"].contains(&e.run.as_str());
            let known_behavior = ["NON-STRICT", "INFORMATIONAL"].contains(&e.behavior.as_str());
            (known_run && known_behavior && !e.reason.is_empty()).then_some(e)
        };
        out.push(parse().with_context(|| {
            format!(
                "{}: `{line}` is not `client|server|both CASE NON-STRICT|INFORMATIONAL: reason`",
                path.display()
            )
        })?);
    }
    Ok(out)
}

fn rank(behavior: &str) -> u8 {
    match behavior {
        "OK" => 0,
        "INFORMATIONAL" => 1,
        "NON-STRICT" => 2,
        "UNIMPLEMENTED" => 3,
        _ => 4,
    }
}

fn case_key(id: &str) -> Vec<u32> {
    id.split('.').filter_map(|p| p.parse().ok()).collect()
}

#[derive(Deserialize)]
struct CaseReport {
    behavior: String,
    #[serde(rename = "behaviorClose")]
    behavior_close: String,
}

fn summarize(index: &Path, agent: &str, seconds: f64) -> anyhow::Result<RunSummary> {
    let text = std::fs::read_to_string(index)
        .with_context(|| format!("wstest wrote no report at {}", index.display()))?;
    let all: BTreeMap<String, BTreeMap<String, CaseReport>> = serde_json::from_str(&text)?;
    let cases = all
        .get(agent)
        .with_context(|| format!("no results for agent {agent} in {}", index.display()))?;
    let mut ids: Vec<&String> = cases.keys().collect();
    ids.sort_by_key(|id| case_key(id));
    let mut summary = RunSummary {
        cases: ids.len(),
        seconds: (seconds * 10.0).round() / 10.0,
        ..RunSummary::default()
    };
    for id in ids {
        let r = &cases[id];
        let worst = if rank(&r.behavior_close) > rank(&r.behavior) {
            &r.behavior_close
        } else {
            &r.behavior
        };
        *summary.counts.entry(worst.clone()).or_default() += 1;
        if worst != "OK" {
            summary
                .notable
                .push((id.clone(), r.behavior.clone(), r.behavior_close.clone()));
        }
    }
    Ok(summary)
}

/// Runs `conformance/autobahn/setup.sh` and returns the `wstest` path.
pub fn wstest() -> anyhow::Result<PathBuf> {
    let root = conformance_dir().parent().unwrap().to_path_buf();
    let status = std::process::Command::new("bash")
        .arg(conformance_dir().join("autobahn/setup.sh"))
        .current_dir(&root)
        .status()
        .context("running conformance/autobahn/setup.sh")?;
    if !status.success() {
        bail!(
            "conformance/autobahn/setup.sh failed: Autobahn|Testsuite is not available (see above)"
        );
    }
    Ok(root.join("target/autobahn/venv/bin/wstest"))
}

fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

async fn wait_for_port(port: u16, child: &mut tokio::process::Child) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            return Ok(());
        }
        if let Some(status) = child.try_wait()? {
            bail!("wstest exited ({status}) before listening on {port}");
        }
        if Instant::now() > deadline {
            bail!("wstest did not listen on {port} within 60 s");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn host_config() -> tether_host::Config {
    let rules = |list: &[&str]| list.iter().map(|r| r.parse().expect("rule")).collect();
    tether_host::Config {
        policy: tether_host::policy::Policy {
            allow: rules(&["127.0.0.1:*"]),
            deny: Vec::new(),
            listen: rules(&["127.0.0.1:*"]),
        },
        ..tether_host::Config::default()
    }
}

const AGENT: &str = "tether";

/// The host's WebSocket client (through the suite guest) against
/// `wstest -m fuzzingserver`.
pub async fn run_client(wstest: &Path, groups: &[&str]) -> anyhow::Result<RunSummary> {
    let dir = results_dir().join("autobahn-client");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let spec = serde_json::json!({
        "url": format!("ws://127.0.0.1:{port}"),
        "outdir": dir.join("reports").to_string_lossy(),
        "cases": groups,
        "exclude-cases": [],
        "exclude-agent-cases": {},
    });
    let spec_path = dir.join("fuzzingserver.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&spec)?)?;
    let log = std::fs::File::create(dir.join("wstest.log"))?;
    let mut child = tokio::process::Command::new(wstest)
        .args(["-m", "fuzzingserver", "-u", "0", "-s"])
        .arg(&spec_path)
        .current_dir(&dir)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log))
        .kill_on_drop(true)
        .spawn()
        .context("starting wstest -m fuzzingserver")?;
    wait_for_port(port, &mut child).await?;
    let t0 = Instant::now();
    let runner = Runner::new(host_config(), EngineKind::Cranelift)?;
    let component = runner.compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE)?;
    let base = format!("ws://127.0.0.1:{port}");
    let args = ["conformance-suite", "autobahn-client", &base, AGENT];
    let outcome = runner
        .run(&component, &args, GuestIo::Capture(1 << 20))
        .await;
    let seconds = t0.elapsed().as_secs_f64();
    child.kill().await.ok();
    if !outcome.success() {
        bail!(
            "the autobahn client guest failed: {:?}\n{}",
            outcome.result,
            String::from_utf8_lossy(&outcome.stderr)
        );
    }
    summarize(&dir.join("reports/index.json"), AGENT, seconds)
}

/// `wstest -m fuzzingclient` against the echo guest serving through the
/// host's WebSocket listener.
pub async fn run_server(wstest: &Path, groups: &[&str]) -> anyhow::Result<RunSummary> {
    let dir = results_dir().join("autobahn-server");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    let port = free_port()?;
    let spec = serde_json::json!({
        "outdir": dir.join("reports").to_string_lossy(),
        "servers": [{"agent": AGENT, "url": format!("ws://127.0.0.1:{port}")}],
        "cases": groups,
        "exclude-cases": [],
        "exclude-agent-cases": {},
    });
    let spec_path = dir.join("fuzzingclient.json");
    std::fs::write(&spec_path, serde_json::to_string_pretty(&spec)?)?;
    let runner = Runner::new(host_config(), EngineKind::Cranelift)?;
    let component = runner.compile_cached(tether_guest_artifacts::ECHO)?;
    let addr = format!("127.0.0.1:{port}");
    let local = tokio::task::LocalSet::new();
    local
        .run_until(async {
            let server = tokio::task::spawn_local(async move {
                let args = ["echo", "server", addr.as_str()];
                runner
                    .run(&component, &args, GuestIo::Capture(1 << 20))
                    .await
            });
            // Wait for the guest's listener.
            let deadline = Instant::now() + Duration::from_secs(20);
            while tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_err()
            {
                if server.is_finished() || Instant::now() > deadline {
                    bail!("the echo guest did not listen on 127.0.0.1:{port}");
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            let t0 = Instant::now();
            let log = std::fs::File::create(dir.join("wstest.log"))?;
            let status = tokio::process::Command::new(wstest)
                .args(["-m", "fuzzingclient", "-s"])
                .arg(&spec_path)
                .current_dir(&dir)
                .stdout(Stdio::from(log.try_clone()?))
                .stderr(Stdio::from(log))
                .kill_on_drop(true)
                .status()
                .await
                .context("running wstest -m fuzzingclient")?;
            let seconds = t0.elapsed().as_secs_f64();
            server.abort();
            if !status.success() {
                bail!(
                    "wstest -m fuzzingclient exited with {status} (log: {})",
                    dir.join("wstest.log").display()
                );
            }
            summarize(&dir.join("reports/index.json"), AGENT, seconds)
        })
        .await
}

/// Runs both, writes the summary and returns it. A run that cannot happen
/// (no Python 2.7, wstest broken) is recorded as an error, so the
/// aggregate fails loudly instead of passing.
pub async fn run(full: bool) -> AutobahnSummary {
    let groups = case_groups(full);
    let mut summary = AutobahnSummary {
        groups: groups.iter().map(|g| g.to_string()).collect(),
        ..AutobahnSummary::default()
    };
    match wstest() {
        Err(e) => summary.errors.push(format!("{e:#}")),
        Ok(wstest) => {
            eprintln!(
                "autobahn: client run (fuzzingserver), cases {}",
                groups.join(" ")
            );
            match run_client(&wstest, &groups).await {
                Ok(r) => summary.client = Some(r),
                Err(e) => summary.errors.push(format!("client run: {e:#}")),
            }
            eprintln!(
                "autobahn: server run (fuzzingclient), cases {}",
                groups.join(" ")
            );
            match run_server(&wstest, &groups).await {
                Ok(r) => summary.server = Some(r),
                Err(e) => summary.errors.push(format!("server run: {e:#}")),
            }
        }
    }
    if let Ok(text) = serde_json::to_string_pretty(&summary) {
        let _ = std::fs::create_dir_all(results_dir());
        let _ = std::fs::write(AutobahnSummary::path(), text);
    }
    summary
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(notable: &[(&str, &str, &str)]) -> RunSummary {
        RunSummary {
            cases: 10,
            notable: notable
                .iter()
                .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
                .collect(),
            ..RunSummary::default()
        }
    }

    #[test]
    fn declarations_parse() {
        let list = expected().expect("expected.txt parses");
        assert!(list.iter().any(|e| e.behavior == "INFORMATIONAL"));
    }

    #[test]
    fn only_declared_non_ok_results_pass() {
        let ok = AutobahnSummary {
            client: Some(run(&[
                ("3.2", "NON-STRICT", "OK"),
                ("7.13.1", "INFORMATIONAL", "INFORMATIONAL"),
            ])),
            server: Some(run(&[])),
            ..AutobahnSummary::default()
        };
        assert!(ok.problems().is_empty(), "{:?}", ok.problems());
        let bad = AutobahnSummary {
            client: Some(run(&[
                ("1.1.1", "NON-STRICT", "OK"),
                ("3.2", "FAILED", "OK"),
            ])),
            server: None,
            ..AutobahnSummary::default()
        };
        let problems = bad.problems();
        assert_eq!(problems.len(), 3, "{problems:?}");
    }

    #[test]
    fn a_case_counts_by_its_worse_behaviour() {
        let dir = std::env::temp_dir().join(format!("ab-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let index = dir.join("index.json");
        std::fs::write(
            &index,
            r#"{"tether": {"1.1.2": {"behavior": "OK", "behaviorClose": "OK"},
                           "1.1.10": {"behavior": "OK", "behaviorClose": "FAILED"},
                           "3.2": {"behavior": "NON-STRICT", "behaviorClose": "OK"}}}"#,
        )
        .unwrap();
        let s = summarize(&index, "tether", 1.0).unwrap();
        assert_eq!(s.cases, 3);
        assert_eq!(s.counts.get("FAILED"), Some(&1));
        assert_eq!(s.counts.get("NON-STRICT"), Some(&1));
        // Numeric order: 1.1.10 after 3.2 would be wrong; 1.1.10 before 3.2.
        assert_eq!(s.notable[0].0, "1.1.10");
        std::fs::remove_dir_all(&dir).ok();
    }
}
