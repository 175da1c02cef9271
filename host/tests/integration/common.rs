//! Test fixtures, written once: host configurations, guest runs, scripted
//! servers on 127.0.0.1 with ephemeral ports, a test CA, the third-party
//! Python `websockets` server, and socket inspection.

use std::future::Future;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use tether_host::policy::Policy;
use tether_host::runner::{EngineKind, GuestIo, Outcome, Runner};
use tether_host::{Config, Limits};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;

/// A runtime for peers (servers), separate from the guest's thread, the
/// way a remote server would be.
pub fn peer_runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
    })
}

/// Host configuration that allows 127.0.0.1, localhost and ::1 on any port,
/// with short deadlines so failure tests stay fast.
pub fn local_config() -> Config {
    let rules = |list: &[&str]| list.iter().map(|r| r.parse().unwrap()).collect::<Vec<_>>();
    Config {
        policy: Policy {
            allow: rules(&["127.0.0.1:*", "localhost:*", "[::1]:*"]),
            deny: Vec::new(),
            listen: rules(&["127.0.0.1:*"]),
        },
        limits: Limits {
            connect_timeout: Duration::from_secs(3),
            handshake_timeout: Duration::from_millis(800),
            linger_timeout: Duration::from_millis(800),
            ..Limits::default()
        },
        ..Config::default()
    }
}

pub fn runner(config: Config) -> Runner {
    Runner::new(config, EngineKind::Cranelift).expect("runner")
}

/// Runs the probe guest with `args` and captures its output.
pub fn probe<'a>(runner: &'a Runner, args: &[&str]) -> impl Future<Output = Outcome> + 'a {
    run_guest(runner, tether_guest_artifacts::PROBE, "probe", args)
}

fn run_guest<'a>(
    runner: &'a Runner,
    wasm: &'static [u8],
    name: &str,
    args: &[&str],
) -> impl Future<Output = Outcome> + 'a {
    let mut all = vec![name.to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    async move {
        let component = runner.compile_cached(wasm).expect("compile guest");
        let run = runner.run(&component, &all, GuestIo::Capture(64 << 20));
        match tokio::time::timeout(GUEST_DEADLINE, run).await {
            Ok(outcome) => outcome,
            Err(_) => panic!("guest {all:?} still running after {GUEST_DEADLINE:?}"),
        }
    }
}

/// Every guest run in these tests ends within this, or the test fails.
pub const GUEST_DEADLINE: Duration = Duration::from_secs(120);

/// Runs `test` on a thread of its own with a current-thread runtime, and
/// fails (instead of hanging) when it is not done within `deadline`. For
/// tests whose guest may never yield (runaway guests): a guest that never
/// returns to the host holds its thread, so no timer on that thread fires.
pub fn within<T, F, Fut>(deadline: Duration, test: F) -> T
where
    T: Send + 'static,
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = T>,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let _ = tx.send(rt.block_on(test()));
    });
    match rx.recv_timeout(deadline) {
        Ok(v) => v,
        // The test panicked: fail with its message.
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => match thread.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(()) => unreachable!("the thread sends before it ends"),
        },
        Err(std::sync::mpsc::RecvTimeoutError::Timeout) => {
            panic!("not done within {deadline:?} (a guest that never yields was not stopped?)")
        }
    }
}

/// Connections completed by the kernel on the listening socket at
/// `127.0.0.1:port` that nobody accepted yet (its accept queue, the
/// `rx_queue` of a LISTEN row in /proc/net/tcp). `None` when no such
/// listener exists.
pub fn accept_queue_len(port: u16) -> Option<usize> {
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let local = format!("0100007F:{port:04X}");
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        // sl local_address rem_address st tx_queue:rx_queue ...; 0A = LISTEN
        if f.get(1) == Some(&local.as_str()) && f.get(3) == Some(&"0A") {
            let rx = f.get(4)?.split(':').nth(1)?;
            usize::from_str_radix(rx, 16).ok()
        } else {
            None
        }
    })
}

/// Runs the echo guest with `args` and captures its output.
pub fn echo<'a>(runner: &'a Runner, args: &[&str]) -> impl Future<Output = Outcome> + 'a {
    run_guest(runner, tether_guest_artifacts::ECHO, "echo", args)
}

/// Runs the echo guest's p3 build (`echo-p3`) with `args` on the
/// async-interface host and captures its output.
pub fn echo_p3<'a>(
    runner: &'a tether_host::p3::Runner,
    args: &[&str],
) -> impl Future<Output = Outcome> + 'a {
    let mut all = vec!["echo-p3".to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    async move {
        let component = runner
            .compile_cached(tether_guest_artifacts::ECHO_P3)
            .expect("compile guest");
        let run = runner.run(&component, &all, GuestIo::Capture(64 << 20));
        match tokio::time::timeout(GUEST_DEADLINE, run).await {
            Ok(outcome) => outcome,
            Err(_) => panic!("guest {all:?} still running after {GUEST_DEADLINE:?}"),
        }
    }
}

/// A WebSocket server for an echo client guest: it sends 200 messages of
/// mixed kinds and sizes (text with non-ASCII, binary up to 5,000 bytes),
/// checks each echo, then closes with 4001 "done". The receiver gets how
/// many echoes matched.
pub fn mixed_messages_server() -> (SocketAddr, tokio::sync::oneshot::Receiver<usize>) {
    use futures_util::{SinkExt, StreamExt};
    use tokio_tungstenite::tungstenite::Message;
    let (done_tx, done_rx) = tokio::sync::oneshot::channel();
    let done_tx = std::sync::Mutex::new(Some(done_tx));
    let addr = ws_server(move |mut ws| {
        let done = done_tx.lock().unwrap().take();
        async move {
            let mut ok = 0;
            for i in 0..200usize {
                let m = if i % 3 == 0 {
                    Message::Text(format!("héllo ✓ {i}").into())
                } else {
                    Message::Binary(
                        (0..(i * 37) % 5000)
                            .map(|b| (b + i) as u8)
                            .collect::<Vec<u8>>()
                            .into(),
                    )
                };
                ws.send(m.clone()).await.unwrap();
                let back = ws.next().await.unwrap().unwrap();
                if back == m {
                    ok += 1;
                }
            }
            ws.close(Some(tokio_tungstenite::tungstenite::protocol::CloseFrame {
                code: 4001.into(),
                reason: "done".into(),
            }))
            .await
            .unwrap();
            while ws.next().await.is_some() {}
            let _ = done.unwrap().send(ok);
        }
    });
    (addr, done_rx)
}

/// Asserts that an echo client guest's run `out` against
/// [`mixed_messages_server`] succeeded, that the server saw all 200 echoes
/// match (`done`), and that the guest reported them and the 4001 close.
pub async fn assert_mixed_messages_echoed(
    out: &Outcome,
    done: tokio::sync::oneshot::Receiver<usize>,
) {
    assert!(out.success(), "{}", show(out));
    assert_eq!(done.await.unwrap(), 200, "every echo must match");
    let stdout = out.stdout_text();
    assert!(stdout.contains("echoed 200 messages"), "{}", show(out));
    assert!(stdout.contains("close=4001 reason=done"), "{}", show(out));
}

/// Stdout of a run, with stderr and the result appended for assertion
/// messages.
pub fn show(o: &Outcome) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}\nresult: {:?}",
        o.stdout_text(),
        String::from_utf8_lossy(&o.stderr),
        o.result
    )
}

/// Spawns a TCP server on the peer runtime; `handler` gets each accepted
/// connection.
pub fn tcp_server<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(TcpStream) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let std = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    std.set_nonblocking(true).unwrap();
    let addr = std.local_addr().unwrap();
    let handler = Arc::new(handler);
    peer_runtime().spawn(async move {
        let listener = TcpListener::from_std(std).unwrap();
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            tcp.set_nodelay(true).unwrap();
            tokio::spawn(handler(tcp));
        }
    });
    addr
}

/// Spawns a WebSocket server (tokio-tungstenite) on the peer runtime.
pub fn ws_server<F, Fut>(handler: F) -> SocketAddr
where
    F: Fn(WebSocketStream<TcpStream>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let handler = Arc::new(handler);
    tcp_server(move |tcp| {
        let handler = handler.clone();
        async move {
            let config = tokio_tungstenite::tungstenite::protocol::WebSocketConfig::default()
                .max_message_size(None)
                .max_frame_size(None);
            if let Ok(ws) = tokio_tungstenite::accept_async_with_config(tcp, Some(config)).await {
                handler(ws).await;
            }
        }
    })
}

/// A directory for this test run's files (CA files, ...).
pub fn scratch_dir(name: &str) -> PathBuf {
    let dir =
        PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// A test certificate authority and a server certificate it signed.
pub struct TestCa {
    /// PEM file of the CA certificate (for `--ca-file`).
    pub ca_file: PathBuf,
    pub server_config: Arc<rustls::ServerConfig>,
}

impl TestCa {
    /// A CA, and a server certificate for `names` signed by it.
    pub fn new(dir: &Path, names: &[&str]) -> TestCa {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
        let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        ca_params
            .distinguished_name
            .push(rcgen::DnType::CommonName, "Tether test CA");
        let ca_key = KeyPair::generate().unwrap();
        let ca_cert = ca_params.self_signed(&ca_key).unwrap();
        let issuer = Issuer::new(ca_params, ca_key);
        let leaf_key = KeyPair::generate().unwrap();
        let leaf_params =
            CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>())
                .unwrap();
        let leaf = leaf_params.signed_by(&leaf_key, &issuer).unwrap();
        let ca_file = dir.join("ca.pem");
        std::fs::write(&ca_file, ca_cert.pem()).unwrap();
        let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der()).unwrap();
        let server_config = rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(vec![leaf.der().clone()], key)
        .unwrap();
        TestCa {
            ca_file,
            server_config: Arc::new(server_config),
        }
    }
}

/// A wss:// echo server with `config`.
pub fn wss_echo_server(config: Arc<rustls::ServerConfig>) -> SocketAddr {
    tcp_server(move |tcp| {
        let acceptor = tokio_rustls::TlsAcceptor::from(config.clone());
        async move {
            let Ok(tls) = acceptor.accept(tcp).await else {
                return;
            };
            let Ok(ws) = tokio_tungstenite::accept_async(tls).await else {
                return;
            };
            echo_ws(ws).await;
        }
    })
}

/// Echoes data messages until the peer closes.
pub async fn echo_ws<S>(mut ws: WebSocketStream<S>)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use futures_util::{SinkExt, StreamExt};
    while let Some(Ok(m)) = ws.next().await {
        if (m.is_binary() || m.is_text()) && ws.send(m).await.is_err() {
            return;
        }
    }
}

/// The third-party Python `websockets` echo server, installed into a venv
/// under the target dir when missing. Killed on drop.
pub struct PythonServer {
    pub port: u16,
    child: Child,
}

impl Drop for PythonServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The venv's python with `websockets`, created on first use. Panics with
/// the reason when it cannot be set up: a missing peer fails the test.
pub fn python_with_websockets() -> PathBuf {
    static PY: OnceLock<PathBuf> = OnceLock::new();
    PY.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let venv = std::env::var_os("TETHER_PEERS_VENV")
            .map(PathBuf::from)
            .unwrap_or_else(|| root.join("target/peers/venv"));
        let python = venv.join("bin/python");
        let ok = |py: &Path| {
            Command::new(py)
                .args(["-c", "import websockets"])
                .status()
                .map(|s| s.success())
                .unwrap_or(false)
        };
        if !ok(&python) {
            let status = Command::new("python3")
                .args(["-m", "venv"])
                .arg(&venv)
                .status()
                .expect("python3 -m venv (is python3 installed?)");
            assert!(
                status.success(),
                "creating the venv at {} failed",
                venv.display()
            );
            let status = Command::new(&python)
                .args(["-m", "pip", "install", "--quiet", "websockets>=14"])
                .status()
                .expect("pip install websockets");
            assert!(
                status.success(),
                "pip install websockets failed: the third-party peer is missing"
            );
            assert!(
                ok(&python),
                "websockets still not importable from {}",
                python.display()
            );
        }
        python
    })
    .clone()
}

impl PythonServer {
    pub fn start() -> PythonServer {
        let python = python_with_websockets();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/peers/ws_echo_server.py");
        let mut child = Command::new(python)
            .arg(script)
            .stdout(Stdio::piped())
            .spawn()
            .expect("start python server");
        let mut line = String::new();
        use std::io::BufRead;
        std::io::BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let port = line
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("python server printed `{line}` instead of its port"));
        PythonServer { port, child }
    }
}

/// TCP_NODELAY of every TCP socket of this process whose peer address is
/// `addr`, read back from the kernel with getsockopt.
pub fn nodelay_of_sockets_at(addr: SocketAddr) -> Vec<bool> {
    nodelay_of_sockets_between(addr, None)
}

/// [`nodelay_of_sockets_at`], only the sockets whose own address is
/// `local` when given: tests run in parallel in this process, and a
/// client port may be another test's client port too (Linux shares an
/// ephemeral port across destinations), so a peer address alone can
/// match a socket of another test.
pub fn nodelay_of_sockets_between(addr: SocketAddr, local: Option<SocketAddr>) -> Vec<bool> {
    use std::os::fd::BorrowedFd;
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(fd) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(link) = std::fs::read_link(entry.path()) else {
            continue;
        };
        if !link.to_string_lossy().starts_with("socket:") {
            continue;
        }
        // SAFETY: the fd is open for the duration of this borrow (it was
        // just listed); we only read socket options.
        let fd = unsafe { BorrowedFd::borrow_raw(fd) };
        let sock = socket2::SockRef::from(&fd);
        let matches = sock.peer_addr().ok().and_then(|a| a.as_socket()) == Some(addr)
            && local.is_none_or(|l| sock.local_addr().ok().and_then(|a| a.as_socket()) == Some(l));
        if matches && let Ok(nodelay) = sock.tcp_nodelay() {
            found.push(nodelay);
        }
    }
    found
}

/// The calling thread's CPU time (user + system).
pub fn thread_cpu_time() -> Duration {
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage writes into the struct we own.
    assert_eq!(
        unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) },
        0
    );
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A port nobody listens on (bound, then closed).
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// TCP states (hex, as /proc/net/tcp writes them: 01 ESTABLISHED, 04
/// FIN_WAIT1, 05 FIN_WAIT2, 06 TIME_WAIT, 08 CLOSE_WAIT, ...) of the sockets
/// on this machine at either end of the IPv4 connection between `a` and `b`.
/// Empty once both ends are gone: after a reset (RST), not after an orderly
/// close, which leaves FIN_WAIT, CLOSE_WAIT or TIME_WAIT rows behind.
pub fn sockets_between(a: SocketAddr, b: SocketAddr) -> Vec<String> {
    let hex = |s: SocketAddr| match s {
        SocketAddr::V4(v4) => format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        ),
        SocketAddr::V6(_) => panic!("IPv4 only: {s}"),
    };
    let (a, b) = (hex(a), hex(b));
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table
        .lines()
        .skip(1)
        .filter_map(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let (local, remote) = (*f.get(1)?, *f.get(2)?);
            ((local == a && remote == b) || (local == b && remote == a))
                .then(|| f.get(3).map(|s| s.to_string()))
                .flatten()
        })
        .collect()
}

/// Polls `cond` every 10 ms (yielding to this thread's runtime, where the
/// host's tasks run) until it holds; returns how long that took, or `None`
/// when it still did not hold after `limit`.
pub async fn time_until(limit: Duration, mut cond: impl FnMut() -> bool) -> Option<Duration> {
    let t0 = std::time::Instant::now();
    loop {
        if cond() {
            return Some(t0.elapsed());
        }
        if t0.elapsed() > limit {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
