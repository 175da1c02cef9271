//! Real peers for the JMUX benchmark and tests, each on 127.0.0.1 with an
//! ephemeral port: an HTTP/1.1 server (GET a payload, PUT/POST an upload
//! that is checked byte for byte), an HTTP/2 server on the `h2` crate
//! (hyper's HTTP/2; 65535-byte stream and connection windows, no adaptive
//! window) that checks uploads the same way, a TCP echo server for round
//! trips and a byte sink for bulk throughput. Every accepted socket gets
//! TCP_NODELAY. The upload servers log each upload: its bytes, whether it
//! matched, and the time from the request head to the last body byte. The
//! benchmark times uploads at the client instead ([`curl_upload_timed`]):
//! that also counts what a path held back before the head arrived or after
//! the last byte (a proxy that buffers, Nagle on the answer).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::local_server::LocalServer;

/// Deterministic pseudo-random bytes (xorshift64), so a server can check
/// an upload without receiving the expected data out of band.
pub fn payload(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(len + 8);
    while out.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(len);
    out
}

/// One upload as the server saw it.
#[derive(Clone, Debug)]
pub struct Upload {
    /// Body bytes received.
    pub bytes: usize,
    /// The body matched the expected payload byte for byte (and in length).
    pub ok: bool,
    /// From the request head to the last body byte.
    pub elapsed: Duration,
}

/// The upload log of a server.
pub type Uploads = Arc<Mutex<Vec<Upload>>>;

/// The runtime the servers run on: one worker thread, like a remote peer
/// with its own CPU budget. Dropping it stops every server.
pub struct PeerRuntime {
    rt: tokio::runtime::Runtime,
}

impl PeerRuntime {
    /// Errors: the runtime could not be built.
    pub fn new() -> anyhow::Result<PeerRuntime> {
        Ok(PeerRuntime {
            rt: tokio::runtime::Builder::new_multi_thread()
                .worker_threads(1)
                .thread_name("jmux-peer")
                .enable_all()
                .build()?,
        })
    }

    fn listen<F, Fut>(&self, handler: F) -> anyhow::Result<SocketAddr>
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let std = std::net::TcpListener::bind("127.0.0.1:0")?;
        std.set_nonblocking(true)?;
        let addr = std.local_addr()?;
        let _guard = self.rt.enter();
        let listener = tokio::net::TcpListener::from_std(std)?;
        self.rt.spawn(async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let _ = tcp.set_nodelay(true);
                tokio::spawn(handler(tcp));
            }
        });
        Ok(addr)
    }

    /// An HTTP/1.1 server: `GET` answers `data`; `PUT`/`POST` reads a
    /// `Content-Length` body, checks it against `data` and answers `200 ok
    /// N` or `400 mismatch`. One request per connection.
    ///
    /// Errors: binding failed.
    pub fn http1(&self, data: Arc<Vec<u8>>) -> anyhow::Result<(SocketAddr, Uploads)> {
        let uploads = Uploads::default();
        let log = uploads.clone();
        let addr = self.listen(move |tcp| {
            let (data, log) = (data.clone(), log.clone());
            async move {
                let _ = serve_http1(tcp, data, log).await;
            }
        })?;
        Ok((addr, uploads))
    }

    /// An HTTP/2 (cleartext, prior knowledge) server on the `h2` crate with
    /// 65535-byte stream and connection windows: uploads are checked
    /// against `data` and answered `200 ok N` or `400 mismatch`.
    ///
    /// Errors: binding failed.
    pub fn http2(&self, data: Arc<Vec<u8>>) -> anyhow::Result<(SocketAddr, Uploads)> {
        let uploads = Uploads::default();
        let log = uploads.clone();
        let addr = self.listen(move |tcp| {
            let (data, log) = (data.clone(), log.clone());
            async move {
                let _ = serve_http2(tcp, data, log).await;
            }
        })?;
        Ok((addr, uploads))
    }

    /// A TCP echo server (echoes until the client closes).
    ///
    /// Errors: binding failed.
    pub fn echo(&self) -> anyhow::Result<SocketAddr> {
        self.listen(|mut tcp| async move {
            let (mut r, mut w) = tcp.split();
            let _ = tokio::io::copy(&mut r, &mut w).await;
        })
    }
}

fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

async fn serve_http1(
    mut tcp: tokio::net::TcpStream,
    data: Arc<Vec<u8>>,
    log: Uploads,
) -> anyhow::Result<()> {
    let mut buf = Vec::with_capacity(8192);
    let mut chunk = vec![0u8; 64 * 1024];
    let end = loop {
        if let Some(end) = head_end(&buf) {
            break end;
        }
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        buf.extend_from_slice(&chunk[..n]);
        if buf.len() > 64 * 1024 {
            bail!("head too large");
        }
    };
    let started = Instant::now();
    let mut headers = [httparse::EMPTY_HEADER; 64];
    let mut req = httparse::Request::new(&mut headers);
    req.parse(&buf[..end])?;
    let method = req.method.unwrap_or("").to_owned();
    let length: usize = req
        .headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
        .and_then(|h| std::str::from_utf8(h.value).ok()?.trim().parse().ok())
        .unwrap_or(0);
    if method == "GET" {
        let head = format!(
            "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\nConnection: close\r\n\r\n",
            data.len()
        );
        tcp.write_all(head.as_bytes()).await?;
        tcp.write_all(&data).await?;
        tcp.shutdown().await?;
        return Ok(());
    }
    let mut received = 0usize;
    let mut ok = true;
    let mut check = |bytes: &[u8], at: usize| {
        ok &= data.get(at..at + bytes.len()) == Some(bytes);
    };
    let first = &buf[end..];
    check(first, 0);
    received += first.len();
    while received < length {
        let n = tcp.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        check(&chunk[..n], received);
        received += n;
    }
    ok &= received == data.len();
    log.lock().unwrap().push(Upload {
        bytes: received,
        ok,
        elapsed: started.elapsed(),
    });
    let body = if ok {
        format!("ok {received}\n")
    } else {
        format!("mismatch after {received} bytes\n")
    };
    let status = if ok { "200 OK" } else { "400 Bad Request" };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    );
    tcp.write_all(head.as_bytes()).await?;
    tcp.write_all(body.as_bytes()).await?;
    tcp.shutdown().await?;
    Ok(())
}

async fn serve_http2(
    tcp: tokio::net::TcpStream,
    data: Arc<Vec<u8>>,
    log: Uploads,
) -> anyhow::Result<()> {
    let mut conn = h2::server::Builder::new()
        .initial_window_size(65_535)
        .initial_connection_window_size(65_535)
        .handshake::<_, bytes::Bytes>(tcp)
        .await?;
    while let Some(request) = conn.accept().await {
        let (request, mut respond) = request?;
        let (data, log) = (data.clone(), log.clone());
        tokio::spawn(async move {
            let started = Instant::now();
            let mut body = request.into_body();
            let mut received = 0usize;
            let mut ok = true;
            while let Some(chunk) = body.data().await {
                let Ok(chunk) = chunk else {
                    ok = false;
                    break;
                };
                ok &= data.get(received..received + chunk.len()) == Some(&chunk[..]);
                received += chunk.len();
                let _ = body.flow_control().release_capacity(chunk.len());
            }
            ok &= received == data.len();
            log.lock().unwrap().push(Upload {
                bytes: received,
                ok,
                elapsed: started.elapsed(),
            });
            let (status, text) = if ok {
                (200, format!("ok {received}\n"))
            } else {
                (400, format!("mismatch after {received} bytes\n"))
            };
            let response = http::Response::builder().status(status).body(()).unwrap();
            if let Ok(mut send) = respond.send_response(response, false) {
                let _ = send.send_data(bytes::Bytes::from(text), true);
            }
        });
    }
    Ok(())
}

/// Writes `data` to a new file under the system's temp dir (its name starts
/// with `tether-jmux-` and `name`) and returns its path, for `curl -T`.
/// Dropping the returned path removes the file, so a run leaves nothing in
/// the temp dir (an 8 MiB upload per run used to stay behind).
///
/// Errors: the file could not be written.
pub fn data_file(name: &str, data: &[u8]) -> anyhow::Result<tempfile::TempPath> {
    let mut file = tempfile::Builder::new()
        .prefix(&format!("tether-jmux-{name}-"))
        .tempfile()
        .context("creating an upload file in the temp dir")?;
    file.write_all(data).context("writing the upload file")?;
    Ok(file.into_temp_path())
}

/// Runs `curl` with `args` and returns its stdout.
///
/// Errors: curl is missing (scripts/setup installs it), or it failed
/// (with its stderr).
pub fn curl(args: &[&str]) -> anyhow::Result<Vec<u8>> {
    let out = Command::new("curl")
        .args(["-sS", "--fail", "--max-time", "60"])
        .args(args)
        .output()
        .context("running curl (install it: scripts/setup)")?;
    if !out.status.success() {
        bail!(
            "curl {args:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(out.stdout)
}

/// Uploads `file` with curl (`PUT`, no `Expect: 100-continue`), over
/// HTTP/2 with prior knowledge when `h2`, and returns the server's answer.
///
/// Errors: see [`curl`].
pub fn curl_upload(url: &str, file: &Path, h2: bool) -> anyhow::Result<String> {
    Ok(curl_upload_timed(url, file, h2)?.0)
}

/// [`curl_upload`], also returning curl's `time_total`: from the start of
/// the transfer (connect) to the last byte of the answer, as the client
/// sees it (curl's process start-up not included).
///
/// Errors: see [`curl`]; curl printed no time.
pub fn curl_upload_timed(url: &str, file: &Path, h2: bool) -> anyhow::Result<(String, Duration)> {
    let file = file.to_str().context("temp path is not UTF-8")?;
    let mut args = vec!["-H", "Expect:", "-w", "\n%{time_total}", "-T", file, url];
    if h2 {
        args.insert(0, "--http2-prior-knowledge");
    }
    let out = String::from_utf8_lossy(&curl(&args)?).into_owned();
    let (answer, total) = out
        .rsplit_once('\n')
        .context("curl printed no time_total")?;
    let total: f64 = total
        .trim()
        .parse()
        .with_context(|| format!("curl's time_total {total:?}"))?;
    Ok((answer.to_string(), Duration::from_secs_f64(total)))
}

/// Waits for the next upload logged after `before` entries (the server
/// logs it before answering, so it is there once curl returned).
///
/// Errors: none was logged within 5 s.
pub fn upload_after(log: &Uploads, before: usize) -> anyhow::Result<Upload> {
    let start = Instant::now();
    loop {
        if let Some(u) = log.lock().unwrap().get(before) {
            return Ok(u.clone());
        }
        if start.elapsed() > Duration::from_secs(5) {
            bail!("the server logged no upload");
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The calling thread's CPU time (user + system).
pub fn thread_cpu() -> Duration {
    cpu(libc::RUSAGE_THREAD)
}

/// This process's CPU time (user + system, every thread).
pub fn process_cpu() -> Duration {
    cpu(libc::RUSAGE_SELF)
}

fn cpu(who: libc::c_int) -> Duration {
    // SAFETY: getrusage only writes into the struct we own.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    if unsafe { libc::getrusage(who, &mut usage) } != 0 {
        return Duration::ZERO;
    }
    let tv = |t: libc::timeval| {
        Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
    };
    tv(usage.ru_utime) + tv(usage.ru_stime)
}

/// A byte sink on its own thread: accepts connections one after the other,
/// reads each to EOF and reports (bytes, its thread CPU for it) on the
/// channel.
///
/// Errors: binding failed.
pub fn sink() -> anyhow::Result<(SocketAddr, std::sync::mpsc::Receiver<(u64, Duration)>)> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("jmux-sink".into())
        .spawn(move || {
            let mut buf = vec![0u8; 256 * 1024];
            for tcp in listener.incoming() {
                let Ok(mut tcp) = tcp else { return };
                let _ = tcp.set_nodelay(true);
                let cpu0 = thread_cpu();
                let mut total = 0u64;
                while let Ok(n) = tcp.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    total += n as u64;
                }
                if tx.send((total, thread_cpu() - cpu0)).is_err() {
                    return;
                }
            }
        })?;
    Ok((addr, rx))
}

/// Writes `total` bytes to `addr` in 256 KiB writes, then half-closes.
/// Returns this thread's CPU time for it.
///
/// Errors: connect or write failed.
pub fn generate(addr: SocketAddr, total: u64) -> anyhow::Result<Duration> {
    let cpu0 = thread_cpu();
    let mut tcp = TcpStream::connect(addr)?;
    tcp.set_nodelay(true)?;
    let chunk = payload(256 * 1024, 7);
    let mut left = total;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        tcp.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    tcp.shutdown(std::net::Shutdown::Write)?;
    Ok(thread_cpu() - cpu0)
}

/// A connection to an echo server for one-at-a-time round trips of a
/// fixed size, kept open so that several paths can be measured in turns
/// (drift then hits them alike).
pub struct RoundTrips {
    tcp: TcpStream,
    msg: Vec<u8>,
    back: Vec<u8>,
    /// Recorded round trips, ns.
    pub samples: Vec<u64>,
}

impl RoundTrips {
    /// Connects to the echo server at `addr` (TCP_NODELAY, 30 s read
    /// deadline) and runs `warmup` unrecorded round trips of `size` bytes.
    ///
    /// Errors: connect, write or read failed, or the echo differed.
    pub fn connect(addr: SocketAddr, size: usize, warmup: usize) -> anyhow::Result<RoundTrips> {
        let tcp = TcpStream::connect(addr).with_context(|| format!("connecting to {addr}"))?;
        tcp.set_nodelay(true)?;
        tcp.set_read_timeout(Some(Duration::from_secs(30)))?;
        let mut r = RoundTrips {
            tcp,
            msg: payload(size, 3),
            back: vec![0u8; size],
            samples: Vec::new(),
        };
        r.run(warmup)?;
        r.samples.clear();
        Ok(r)
    }

    /// `n` more recorded round trips.
    ///
    /// Errors: write or read failed, or the echo differed.
    pub fn run(&mut self, n: usize) -> anyhow::Result<()> {
        self.samples.reserve(n);
        for _ in 0..n {
            let t0 = Instant::now();
            self.tcp.write_all(&self.msg)?;
            self.tcp.read_exact(&mut self.back)?;
            self.samples.push(t0.elapsed().as_nanos() as u64);
        }
        if n > 0 && self.back != self.msg {
            bail!("echo mismatch");
        }
        Ok(())
    }
}

/// A native TCP relay to `target` on its own thread and current-thread
/// runtime (as a tunnel guest runs): each accepted connection is joined to
/// a new connection to `target`, TCP_NODELAY on both, and bytes are copied
/// both ways. Two of them in a row are what any two-ended tunnel (this
/// one, or the reference's two `jetsocat` processes) adds to a round trip
/// at the least: two more hops each way, with no framing, no multiplexing
/// and no WebAssembly. Dropping it stops the relay and its connections.
///
/// Errors: binding, the runtime or the thread could not be created.
pub fn relay(target: SocketAddr) -> std::io::Result<LocalServer> {
    LocalServer::start("jmux-relay", move |listener| async move {
        while let Ok((mut inbound, _)) = listener.accept().await {
            tokio::spawn(async move {
                let Ok(mut outbound) = tokio::net::TcpStream::connect(target).await else {
                    return;
                };
                let _ = inbound.set_nodelay(true);
                let _ = outbound.set_nodelay(true);
                let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
            });
        }
    })
}
