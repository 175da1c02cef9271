//! Host-side helpers for the JMUX proxy guest (`guests/jmux`): the host
//! policy that `tether jmux` derives from a `jmux-proxy` command line, guests
//! on their own threads that can be stopped, and ports: free ones, and
//! waiting for a listener without connecting to it. A pipe between two
//! proxies (guests, `tether jmux` or jetsocat processes) is
//! [`crate::jmux::pair::Pair`].

use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tether_jmux::proxy::cli::{PipeSpec, ProxyArgs};
use tether_jmux::proxy::rules::TargetFilter;
use wasmtime::component::Component;

use tether_host::policy::{Policy, Rule};
use tether_host::runner::{GuestIo, Outcome, Runner, TableCensus};

/// The host policy a `jmux-proxy` command line needs, and nothing more:
/// dialling the pipe's address (`ws://`, `wss://`, `tcp://`), binding the
/// pipe's and the listeners' addresses, and dialling targets as the guest's
/// own filter allows (`--allow-all`: any host, internal addresses included,
/// `*:*` and `internal:*`, since tunnelling into a private network is what
/// JMUX is for; `--allow RULE`: the same rules, so a wildcard there does not
/// reach internal addresses; neither: none). `deny` rules are kept as given.
///
/// Errors: a pipe URL or bind address that does not make a host rule.
pub fn policy_for(args: &ProxyArgs, deny: Vec<Rule>) -> anyhow::Result<Policy> {
    let mut allow: Vec<Rule> = Vec::new();
    let mut listen: Vec<Rule> = Vec::new();
    let host_rule = |host: &str, port: u16| -> anyhow::Result<Rule> {
        let text = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(text.parse()?)
    };
    let bind_rule = |bind: &str| -> anyhow::Result<Rule> {
        let addr: SocketAddr = bind
            .parse()
            .with_context(|| format!("`{bind}` is not ip:port"))?;
        host_rule(&addr.ip().to_string(), addr.port())
    };
    match &args.pipe {
        PipeSpec::WsConnect(url) => {
            let t = tether_host::websocket::parse_ws_url(url)
                .map_err(|e| anyhow::anyhow!("pipe {url}: {e:?}"))?;
            allow.push(host_rule(&t.host, t.port)?);
        }
        PipeSpec::TcpConnect(addr) => {
            let (host, port) = tether_host::net::split_host_port(addr)
                .map_err(|e| anyhow::anyhow!("pipe: {e:?}"))?;
            allow.push(host_rule(&host, port)?);
        }
        PipeSpec::WsListen(bind) | PipeSpec::TcpListen(bind) => listen.push(bind_rule(bind)?),
    }
    for l in &args.listeners {
        listen.push(bind_rule(l.bind())?);
    }
    match &args.filter {
        TargetFilter::DenyAll => {}
        TargetFilter::AllowAll => {
            allow.push("*:*".parse()?);
            allow.push("internal:*".parse()?);
        }
        TargetFilter::Rules(rules) => {
            for r in rules {
                allow.push(r.to_string().parse()?);
            }
        }
    }
    Ok(Policy {
        allow,
        deny,
        listen,
    })
}

/// A guest running on its own thread, on a current-thread tokio runtime
/// (the guest and its sockets' tasks stay on one thread). Dropping it, or
/// [`GuestThread::stop`], cancels the guest: its store and every socket it
/// holds are dropped.
pub struct GuestThread {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<JoinHandle<Option<Outcome>>>,
    runtime: tokio::runtime::Handle,
}

impl GuestThread {
    /// Starts `component` with `args` (`args[0]` is the program name).
    ///
    /// Errors: the thread or its runtime could not be created.
    pub fn spawn(
        runner: Arc<Runner>,
        component: Component,
        args: Vec<String>,
        io: GuestIo,
    ) -> anyhow::Result<GuestThread> {
        GuestThread::spawn_with_census(runner, component, args, io, None)
    }

    /// Like [`GuestThread::spawn`], with `census` counting the guest's
    /// resource table on request ([`Runner::run_with_census`]).
    ///
    /// Errors: the thread or its runtime could not be created.
    pub fn spawn_with_census(
        runner: Arc<Runner>,
        component: Component,
        args: Vec<String>,
        io: GuestIo,
        census: Option<Arc<TableCensus>>,
    ) -> anyhow::Result<GuestThread> {
        let name = format!("guest-{}", args.first().map_or("", String::as_str));
        GuestThread::spawn_run(name, async move {
            runner.run_with_census(&component, &args, io, census).await
        })
    }

    /// Like [`GuestThread::spawn`], for a guest of the async interface
    /// (`tether:streams-async`) on a [`tether_host::p3::Runner`].
    ///
    /// Errors: the thread or its runtime could not be created.
    pub fn spawn_p3(
        runner: Arc<tether_host::p3::Runner>,
        component: Component,
        args: Vec<String>,
        io: GuestIo,
    ) -> anyhow::Result<GuestThread> {
        let name = format!("guest-{}", args.first().map_or("", String::as_str));
        GuestThread::spawn_run(name, async move { runner.run(&component, &args, io).await })
    }

    /// Runs `guest` (a runner's `run`) on a thread `name`d so, with its own
    /// current-thread runtime.
    fn spawn_run(
        name: String,
        guest: impl std::future::Future<Output = Outcome> + Send + 'static,
    ) -> anyhow::Result<GuestThread> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let runtime = rt.handle().clone();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            rt.block_on(async move {
                // The guest runs as a spawned task, not as the
                // `block_on` future: waking a task from another task on
                // this thread only queues it, while waking the
                // `block_on` future goes through the I/O driver.
                let guest = tokio::spawn(guest);
                tokio::select! {
                    outcome = guest => outcome.ok(),
                    _ = stopped => None,
                }
            })
        })?;
        Ok(GuestThread {
            stop: Some(stop),
            thread: Some(thread),
            runtime,
        })
    }

    /// The guest's runtime (its thread's): the guest and its sockets'
    /// tasks run there ([`tokio::runtime::RuntimeMetrics::num_alive_tasks`]
    /// counts them).
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }

    /// CPU time (user and system) the guest's thread has used so far: the
    /// guest, its host calls and its sockets' tasks. `None` once the
    /// thread is gone or when the clock cannot be read.
    pub fn cpu_time(&self) -> Option<std::time::Duration> {
        use std::os::unix::thread::JoinHandleExt;
        let thread = self.thread.as_ref().filter(|t| !t.is_finished())?;
        let mut clock: libc::clockid_t = 0;
        // SAFETY: the thread is joinable (not joined, not detached), so
        // its pthread_t is valid; both calls write only what we pass.
        let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
        unsafe {
            if libc::pthread_getcpuclockid(thread.as_pthread_t(), &mut clock) != 0
                || libc::clock_gettime(clock, &mut ts) != 0
            {
                return None;
            }
        }
        Some(std::time::Duration::new(
            ts.tv_sec as u64,
            ts.tv_nsec as u32,
        ))
    }

    /// Whether the guest has ended by itself.
    pub fn is_finished(&self) -> bool {
        self.thread.as_ref().is_none_or(JoinHandle::is_finished)
    }

    /// Waits up to `timeout` for the guest to end by itself, then stops it
    /// (see [`GuestThread::stop`]).
    pub fn wait(self, timeout: Duration) -> Option<Outcome> {
        let start = Instant::now();
        while !self.is_finished() && start.elapsed() < timeout {
            std::thread::sleep(Duration::from_millis(2));
        }
        self.stop()
    }

    /// Cancels the guest if it still runs and waits for its thread. Returns
    /// its outcome when it had ended by itself.
    pub fn stop(mut self) -> Option<Outcome> {
        self.stop_inner()
    }

    fn stop_inner(&mut self) -> Option<Outcome> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        self.thread.take().and_then(|t| t.join().ok().flatten())
    }
}

impl Drop for GuestThread {
    fn drop(&mut self) {
        self.stop_inner();
    }
}

/// A free TCP port on 127.0.0.1 (bound to port 0, then released), never
/// one this process was given before: ports taken one after another and
/// released in between can otherwise repeat (a tunnel whose listener and
/// pipe got the same port fails to start).
///
/// Errors: binding failed, or 64 binds in a row gave ports already handed
/// out.
pub fn free_port() -> std::io::Result<u16> {
    use std::collections::HashSet;
    use std::sync::{Mutex, OnceLock};
    static GIVEN: OnceLock<Mutex<HashSet<u16>>> = OnceLock::new();
    let mut given = GIVEN
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // Holding the refused listeners makes the kernel pick other ports.
    let mut held = Vec::new();
    for _ in 0..64 {
        let listener = TcpListener::bind("127.0.0.1:0")?;
        let port = listener.local_addr()?.port();
        if given.insert(port) {
            return Ok(port);
        }
        held.push(listener);
    }
    Err(std::io::Error::new(
        std::io::ErrorKind::AddrInUse,
        "no port on 127.0.0.1 that was not handed out already",
    ))
}

/// Whether this machine has a TCP socket listening on `port` (any address),
/// read from `/proc/net/tcp` and `/proc/net/tcp6`: a readiness check that
/// does not connect (a probe connection would open a JMUX channel).
pub fn is_listening(port: u16) -> bool {
    let want = format!(":{port:04X} ");
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|file| {
        std::fs::read_to_string(file).is_ok_and(|text| {
            text.lines().skip(1).any(|line| {
                let mut cols = line.split_whitespace();
                let local = cols.nth(1).unwrap_or("");
                let state = cols.nth(1).unwrap_or("");
                state == "0A" && format!("{local} ").ends_with(&want)
            })
        })
    })
}

/// Waits until every port in `ports` is listening.
///
/// Errors: `timeout` passed first (naming the ports still closed), or
/// `alive()` turned false (the guest ended).
pub fn wait_listening(
    ports: &[u16],
    timeout: Duration,
    mut alive: impl FnMut() -> bool,
) -> anyhow::Result<()> {
    let start = Instant::now();
    loop {
        let closed: Vec<u16> = ports
            .iter()
            .copied()
            .filter(|p| !is_listening(*p))
            .collect();
        if closed.is_empty() {
            return Ok(());
        }
        if !alive() {
            bail!("the guest ended before listening on {closed:?}");
        }
        if start.elapsed() > timeout {
            bail!("nothing listens on {closed:?} after {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tether_jmux::proxy::cli::parse_args;

    #[test]
    fn policy_follows_the_command_line() {
        let args = parse_args(&[
            "ws://gw.example:7171/jmux",
            "tcp-listen://127.0.0.1:5000/db:5432",
            "socks5-listen://[::1]:1080",
        ])
        .unwrap();
        let p = policy_for(&args, Vec::new()).unwrap();
        let text = |rules: &[Rule]| rules.iter().map(|r| r.to_string()).collect::<Vec<_>>();
        assert_eq!(text(&p.allow), ["gw.example:7171"]);
        assert_eq!(text(&p.listen), ["127.0.0.1:5000", "[::1]:1080"]);

        let args = parse_args(&["ws-listen://0.0.0.0:9000", "--allow-all"]).unwrap();
        let p = policy_for(&args, Vec::new()).unwrap();
        assert_eq!(text(&p.allow), ["*:*", "internal:*"]);
        assert_eq!(text(&p.listen), ["0.0.0.0:9000"]);

        let args = parse_args(&["tcp://10.0.0.1:80", "--allow", "*.lan:22"]).unwrap();
        let p = policy_for(&args, Vec::new()).unwrap();
        assert_eq!(text(&p.allow), ["10.0.0.1:80", "*.lan:22"]);
    }

    #[test]
    fn free_ports_never_repeat() {
        let ports: Vec<u16> = (0..300).map(|_| free_port().unwrap()).collect();
        let unique: std::collections::HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(unique.len(), ports.len(), "a port was handed out twice");
    }

    #[test]
    fn listening_ports_are_seen_without_connecting() {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = l.local_addr().unwrap().port();
        assert!(is_listening(port));
        drop(l);
        assert!(!is_listening(port));
    }
}
