//! A JMUX pipe between two ends of any implementation, for the side-by-side
//! benchmark (`tether bench jmux --vs jetsocat`) and the interop tests: each
//! end is the JMUX guest in this process (on its own thread), a `tether
//! jmux` process, or the reference `jetsocat jmux-proxy` process
//! (Devolutions; see `../shared/peers/jetsocat/README.md`).
//!
//! The server end listens (`ws-listen://127.0.0.1:PORT`, `--allow-all`
//! unless told otherwise) and opens the targets; the client end dials it
//! (`ws://127.0.0.1:PORT/jmux`) and runs the listeners. jetsocat's
//! `ws-listen://` pipe accepts exactly one connection, so readiness is read
//! from `/proc/net/tcp` ([`crate::tunnel::wait_listening`]), never probed
//! with a connection.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, bail};
use tether_host::runner::{GuestIo, Runner};
use wasmtime::component::Component;

use crate::tunnel::{GuestThread, free_port, wait_listening};

/// How long an end may take to listen (a `tether jmux` process compiles
/// the guest first: about 1 s here).
const START_TIMEOUT: Duration = Duration::from_secs(30);

/// The jetsocat binary the benchmark and the tests use unless told
/// otherwise: `../shared/peers/jetsocat/jetsocat` from the workspace root
/// (the directory of the top `Cargo.toml`, fixed at build time), whatever
/// the current directory.
pub fn default_jetsocat() -> PathBuf {
    // This crate is `bench/` in the workspace.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let root = root.parent().unwrap_or(root);
    root.parent()
        .unwrap_or(root)
        .join("shared/peers/jetsocat/jetsocat")
}

/// `path` if it is an executable file.
///
/// Errors: it is missing or not executable; the message names the path and
/// says where the reference build comes from.
pub fn require_jetsocat(path: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::PermissionsExt;
    match std::fs::metadata(path) {
        Ok(m) if m.is_file() && m.permissions().mode() & 0o111 != 0 => Ok(path.to_path_buf()),
        Ok(_) => bail!("jetsocat at {} is not an executable file", path.display()),
        Err(e) => bail!(
            "no jetsocat at {} ({e}): the reference JMUX proxy is needed for the jetsocat \
             comparison and the interop tests (see ../shared/peers/jetsocat/README.md, or pass \
             --jetsocat PATH)",
            path.display()
        ),
    }
}

/// What runs one end of the pipe.
#[derive(Clone)]
pub enum Proxy {
    /// The JMUX guest in this process, on its own thread and current-thread
    /// runtime ([`GuestThread`]).
    Guest {
        /// The host the guest runs in (its policy admits the pipe, the
        /// listeners and the targets).
        runner: Arc<Runner>,
        /// The compiled JMUX guest.
        component: Component,
        /// Where its stdout and stderr go.
        io: GuestIo,
    },
    /// A `tether jmux` process: the `tether` binary at this path.
    Tether(PathBuf),
    /// A `jetsocat jmux-proxy` process: the jetsocat binary at this path.
    Jetsocat(PathBuf),
    /// The JMUX guest on Node.js through jco (`tether-node run`, see
    /// [`crate::node`]) under the policy `tether jmux` derives from the
    /// same arguments ([`crate::tunnel::policy_for`]).
    Node,
}

impl Proxy {
    /// A short name for messages and tables: `guest`, `tether` or
    /// `jetsocat`.
    pub fn name(&self) -> &'static str {
        match self {
            Proxy::Guest { .. } => "guest",
            Proxy::Tether(_) => "tether",
            Proxy::Jetsocat(_) => "jetsocat",
            Proxy::Node => "node-jco",
        }
    }

    /// Starts this end with jmux-proxy arguments `args` (`PIPE
    /// [LISTENER...] [--allow-all | --allow RULE...]`); `role` names it in
    /// thread, log and error names.
    fn start(&self, role: &str, args: &[String]) -> anyhow::Result<End> {
        match self {
            Proxy::Guest {
                runner,
                component,
                io,
            } => {
                let mut all = vec![format!("jmux-{role}"), "jmux-proxy".into()];
                all.extend(args.iter().cloned());
                Ok(End::Guest(GuestThread::spawn(
                    runner.clone(),
                    component.clone(),
                    all,
                    *io,
                )?))
            }
            Proxy::Tether(program) => {
                let mut all = vec!["jmux".to_string()];
                all.extend(args.iter().cloned());
                let name = format!("tether-{role}");
                Ok(End::Process(ProxyProcess::spawn(
                    program,
                    &all,
                    &name,
                    scratch_dir(&name)?,
                    None,
                )?))
            }
            Proxy::Node => {
                let parsed = tether_jmux::proxy::cli::parse_args(args)
                    .map_err(|e| anyhow::anyhow!("jmux-proxy arguments: {e:?}"))?;
                let policy = crate::tunnel::policy_for(&parsed, Vec::new())?;
                let text = |rules: &[tether_host::policy::Rule]| {
                    rules.iter().map(|r| r.to_string()).collect::<Vec<_>>()
                };
                let run = crate::node::NodeRun {
                    allow: text(&policy.allow),
                    deny: text(&policy.deny),
                    listen: text(&policy.listen),
                    ..Default::default()
                };
                let mut all = vec!["jmux-proxy".to_string()];
                all.extend(args.iter().cloned());
                let cmd = run.command(Path::new(tether_guest_artifacts::JMUX_PATH), None, &all)?;
                let cmd = cmd.as_std();
                let program = PathBuf::from(cmd.get_program());
                let argv: Vec<String> = cmd
                    .get_args()
                    .map(|a| a.to_string_lossy().into_owned())
                    .collect();
                let name = format!("node-{role}");
                Ok(End::Process(ProxyProcess::spawn(
                    &program,
                    &argv,
                    &name,
                    scratch_dir(&name)?,
                    None,
                )?))
            }
            Proxy::Jetsocat(program) => {
                let program = require_jetsocat(program)?;
                let name = format!("jetsocat-{role}");
                let scratch = scratch_dir(&name)?;
                let log = scratch.path().join("jetsocat.log");
                let mut all = vec!["jmux-proxy".to_string()];
                all.extend(args.iter().cloned());
                // Never a proxy from the environment; logs to a file of
                // ours, not to ~/.local/share/jetsocat.
                all.extend(["--no-proxy".into(), "--log-file".into()]);
                all.push(log.display().to_string());
                Ok(End::Process(ProxyProcess::spawn(
                    &program,
                    &all,
                    &name,
                    scratch,
                    Some(log),
                )?))
            }
        }
    }
}

/// A new directory under the system's temp dir for one proxy process's
/// logs; [`ProxyProcess`] removes it.
fn scratch_dir(name: &str) -> anyhow::Result<tempfile::TempDir> {
    tempfile::Builder::new()
        .prefix(&format!("tether-jmux-{name}-"))
        .tempdir()
        .context("creating a log directory in the temp dir")
}

/// A JMUX proxy child process. Dropping it kills it, waits for it and
/// removes its log directory, unless the process had already exited on its
/// own: then the log stays for whoever reads the error that named it.
pub struct ProxyProcess {
    child: Child,
    name: String,
    /// Where its log goes (its stderr, or jetsocat's `--log-file`), inside
    /// `scratch`.
    log: PathBuf,
    /// The directory of its logs; `None` once kept.
    scratch: Option<tempfile::TempDir>,
}

impl ProxyProcess {
    fn spawn(
        program: &Path,
        args: &[String],
        name: &str,
        scratch: tempfile::TempDir,
        log: Option<PathBuf>,
    ) -> anyhow::Result<ProxyProcess> {
        let stderr_log = scratch.path().join("stderr.log");
        let stderr = File::create(&stderr_log)?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {} {}", program.display(), args.join(" ")))?;
        Ok(ProxyProcess {
            child,
            name: name.to_string(),
            log: log.unwrap_or(stderr_log),
            scratch: Some(scratch),
        })
    }

    /// The process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// CPU time the process has used so far (user + system, every thread,
    /// exited ones included): fields 14 and 15 of `/proc/PID/stat`, in
    /// clock ticks (10 ms here).
    ///
    /// Errors: the process is gone or the file does not parse.
    pub fn cpu(&self) -> anyhow::Result<Duration> {
        proc_cpu(self.pid())
    }

    /// The last lines of its log, for error messages.
    pub fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        let tail = lines[lines.len().saturating_sub(12)..].join("\n");
        format!("{} (log {}):\n{tail}", self.name, self.log.display())
    }
}

impl Drop for ProxyProcess {
    fn drop(&mut self) {
        let exited_on_its_own = !self.is_running();
        let _ = self.child.kill();
        let _ = self.child.wait();
        if exited_on_its_own && let Some(dir) = self.scratch.take() {
            let _ = dir.keep();
        }
    }
}

/// CPU time (user + system) of process `pid` from `/proc/PID/stat`.
///
/// Errors: no such process, or an unexpected file.
pub fn proc_cpu(pid: u32) -> anyhow::Result<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("reading /proc/{pid}/stat"))?;
    // The command name (field 2) may hold spaces: count from after its ')'.
    let rest = text
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("no ')' in /proc/PID/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime field 15.
    let ticks = |i: usize| -> anyhow::Result<u64> {
        Ok(fields.get(i - 3).context("short /proc/PID/stat")?.parse()?)
    };
    // SAFETY: sysconf only reads a configuration value.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as u64;
    let total = ticks(14)? + ticks(15)?;
    Ok(Duration::from_nanos(total * 1_000_000_000 / hz))
}

/// One running end of a [`Pair`].
pub enum End {
    /// A guest thread in this process.
    Guest(GuestThread),
    /// A child process.
    Process(ProxyProcess),
}

impl End {
    /// Whether it still runs.
    pub fn is_running(&mut self) -> bool {
        match self {
            End::Guest(g) => !g.is_finished(),
            End::Process(p) => p.is_running(),
        }
    }

    /// The child process, when this end is one.
    pub fn process(&self) -> Option<&ProxyProcess> {
        match self {
            End::Process(p) => Some(p),
            End::Guest(_) => None,
        }
    }

    fn describe(&self) -> String {
        match self {
            End::Guest(_) => "the guest ended".into(),
            End::Process(p) => p.log_tail(),
        }
    }
}

/// Two JMUX proxies joined by a `ws://` pipe over loopback. Dropping it
/// stops both ends.
pub struct Pair {
    /// The accepting end (opens targets).
    pub server: End,
    /// The dialling end (runs the listeners).
    pub client: End,
    /// The pipe's port on 127.0.0.1.
    pub pipe_port: u16,
}

impl Pair {
    /// Starts `server` on `ws-listen://127.0.0.1:PORT` with `server_args`
    /// (`--allow-all` when empty), waits until its pipe port listens, starts
    /// `client` on `ws://127.0.0.1:PORT/jmux` with `listeners` (jmux-proxy
    /// listener arguments), and waits until `listen_ports` listen.
    ///
    /// Errors: jetsocat is missing (naming the path), an end could not
    /// start, ended, or did not listen within 30 s (with its log's tail).
    pub fn start(
        server: &Proxy,
        client: &Proxy,
        listeners: &[String],
        listen_ports: &[u16],
        server_args: &[String],
    ) -> anyhow::Result<Pair> {
        let pipe_port = free_port()?;
        let mut args = vec![format!("ws-listen://127.0.0.1:{pipe_port}")];
        if server_args.is_empty() {
            args.push("--allow-all".into());
        } else {
            args.extend(server_args.iter().cloned());
        }
        let mut server_end = server.start("server", &args)?;
        wait_listening(&[pipe_port], START_TIMEOUT, || server_end.is_running())
            .with_context(|| format!("{} JMUX server: {}", server.name(), server_end.describe()))?;
        let mut args = vec![format!("ws://127.0.0.1:{pipe_port}/jmux")];
        args.extend(listeners.iter().cloned());
        let mut client_end = client.start("client", &args)?;
        wait_listening(listen_ports, START_TIMEOUT, || {
            client_end.is_running() && server_end.is_running()
        })
        .with_context(|| {
            format!(
                "{} JMUX client: {}\nserver: {}",
                client.name(),
                client_end.describe(),
                server_end.describe()
            )
        })?;
        Ok(Pair {
            server: server_end,
            client: client_end,
            pipe_port,
        })
    }

    /// Both ends' CPU time so far, when both are processes (`None` when an
    /// end is a guest in this process).
    ///
    /// Errors: a process is gone.
    pub fn cpu(&self) -> anyhow::Result<Option<Duration>> {
        match (self.server.process(), self.client.process()) {
            (Some(s), Some(c)) => Ok(Some(s.cpu()? + c.cpu()?)),
            _ => Ok(None),
        }
    }

    /// Whether both ends still run.
    pub fn is_running(&mut self) -> bool {
        self.server.is_running() && self.client.is_running()
    }

    /// Both ends' log tails (for assertion messages).
    pub fn describe(&self) -> String {
        format!(
            "server: {}\nclient: {}",
            self.server.describe(),
            self.client.describe()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_cpu_time_reads_from_proc_like_getrusage() {
        let before = proc_cpu(std::process::id()).unwrap();
        let rusage0 = crate::jmux::peers::process_cpu();
        // Spin until getrusage saw 100 ms of CPU (the machine may be busy).
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        let mut x = 0u64;
        while crate::jmux::peers::process_cpu() - rusage0 < Duration::from_millis(100) {
            assert!(std::time::Instant::now() < deadline, "no CPU for 20 s");
            for _ in 0..10_000 {
                x = std::hint::black_box(x.wrapping_add(1));
            }
        }
        let used = proc_cpu(std::process::id()).unwrap() - before;
        // Clock ticks are 10 ms: allow two of them.
        assert!(
            used >= Duration::from_millis(80) && used < Duration::from_secs(5),
            "{used:?}"
        );
    }

    #[test]
    fn a_missing_jetsocat_is_an_error_naming_its_path() {
        let e = require_jetsocat(Path::new("/nonexistent/jetsocat")).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/jetsocat"), "{e}");
        let e = Pair::start(
            &Proxy::Jetsocat("/nonexistent/jetsocat".into()),
            &Proxy::Jetsocat("/nonexistent/jetsocat".into()),
            &[],
            &[],
            &[],
        )
        .err()
        .expect("no pair without jetsocat");
        assert!(e.to_string().contains("/nonexistent/jetsocat"), "{e}");
    }

    /// A proxy process's logs go when it is dropped (each run used to leave
    /// a directory of them in the temp dir), unless it had exited on its own.
    #[test]
    fn a_proxy_process_leaves_no_logs_behind_unless_it_failed() {
        let bin = tempfile::tempdir().unwrap();
        let script = |name: &str, body: &str| {
            let path = bin.path().join(name);
            std::fs::write(&path, format!("#!/bin/sh\n{body}\n")).unwrap();
            let mut perms = std::fs::metadata(&path).unwrap().permissions();
            std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
            std::fs::set_permissions(&path, perms).unwrap();
            path
        };
        let log_of = |proxy: &Proxy| match proxy.start("client", &[]).unwrap() {
            End::Process(mut p) => {
                std::thread::sleep(Duration::from_millis(200));
                let log = p.log.clone();
                assert!(log.exists(), "{}", log.display());
                let running = p.is_running();
                drop(p);
                (log, running)
            }
            End::Guest(_) => unreachable!(),
        };
        let (log, running) = log_of(&Proxy::Tether(script("runs", "echo up >&2; exec sleep 30")));
        assert!(running);
        assert!(!log.exists(), "{} is left behind", log.display());
        let (log, running) = log_of(&Proxy::Tether(script("fails", "echo broken >&2; exit 3")));
        assert!(!running);
        assert_eq!(std::fs::read_to_string(&log).unwrap(), "broken\n");
        std::fs::remove_dir_all(log.parent().unwrap()).unwrap();
    }
}
