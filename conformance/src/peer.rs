//! The conformance peer: a WebSocket server (ws:// and wss:// with a test
//! CA it generates) and TCP listeners on 127.0.0.1 whose behaviour is
//! scripted by the request path, the way a real server might misbehave.
//!
//! WebSocket paths (query parameters in brackets):
//! - `/echo`: echoes data messages; selects the first offered subprotocol
//!   among `chat`, `superchat`;
//! - `/headers`: sends `{"path":..,"x-tether-test":..}` as text, then echoes;
//! - `/unoffered`: selects subprotocol `bogus`, whatever was offered;
//! - `/reject`: HTTP 403; `/redirect`: HTTP 302 to `/echo` (must not be
//!   followed); `/stall`: reads the request, never answers;
//! - `/close-now` [code, reason]: closes right after the handshake (no code:
//!   an empty close frame, which the client reports as 1005);
//! - `/drop-now`: sends `bye`, then ends TCP without a close frame (1006);
//! - `/reset`: sends `bye`, then resets the connection (RST);
//! - `/burst` [n, size, then=wait|close|ignore, code, report]: n binary
//!   messages where byte i of message k is (k + i) % 256; then waits for the
//!   client's close, closes with `code` (default 4001), or ignores
//!   everything; `report=1` adds a text `elapsed_ms=T` (time to write the
//!   burst, i.e. how long the client's backpressure paused us);
//! - `/ignore-close`: reads and discards everything, never answers a close;
//! - `/blackhole`: never reads (held 5 s);
//! - `/fragmented`: a text message in 3 fragments split inside a UTF-8
//!   sequence, a binary message in 3 fragments with a ping between them,
//!   then text `end`;
//! - `/ping-flood` [n]: n pings then text `after-pings`; on text `report`
//!   answers `pongs=K`;
//! - `/timed` [count, gap_ms]: every gap_ms sends a text with the wall-clock
//!   send time in nanoseconds since the Unix epoch;
//! - `/idle` [ms]: sends `wake` after ms, then echoes;
//! - `/slow-sink` [every, pause_ms, check, start_ms]: reads nothing for
//!   start_ms (0) after the handshake, then pauses pause_ms (3) every
//!   `every` (8) messages and checks binary messages (pattern as in
//!   `/burst`, unless check=0); on text `done` answers `received N B ok|bad`;
//! - `/observe-close` [token]: echoes, and records the close code the
//!   client sent (`none` if it vanished without one);
//!   `/observed` [token]: sends the recorded code as text.
//!
//! TCP listeners: `tcp_echo` (echo, then half-close on EOF), `tcp_sink`
//! (64 KiB receive buffer, reads slowly, checks byte i = i % 251, answers `received N ok|bad\n`
//! after EOF), `tcp_reset` (accepts, then resets at once).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::{CloseFrame, Frame};
use tokio_tungstenite::tungstenite::protocol::{Role, WebSocketConfig};

/// The running peer: its addresses and the CA file that trusts `wss`.
/// Dropping it stops the peer's runtime and every connection.
pub struct Peer {
    /// Plain `ws://` listener.
    pub ws: SocketAddr,
    /// `wss://` listener whose certificate (for `localhost`) `ca_file` trusts.
    pub wss: SocketAddr,
    /// `wss://` listener with a certificate from another, untrusted CA.
    pub wss_other_ca: SocketAddr,
    /// TCP echo.
    pub tcp_echo: SocketAddr,
    /// TCP sink that reads slowly.
    pub tcp_sink: SocketAddr,
    /// TCP listener that resets every connection.
    pub tcp_reset: SocketAddr,
    /// A port nobody listens on.
    pub closed_port: u16,
    /// PEM file of the test CA.
    pub ca_file: PathBuf,
    rt: Option<tokio::runtime::Runtime>,
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Some(rt) = self.rt.take() {
            rt.shutdown_background();
        }
    }
}

#[derive(Default)]
struct PeerState {
    observed: Mutex<HashMap<String, String>>,
}

type Observed = Arc<PeerState>;

fn bind() -> anyhow::Result<std::net::TcpListener> {
    let l = std::net::TcpListener::bind("127.0.0.1:0").context("binding a peer listener")?;
    l.set_nonblocking(true)?;
    Ok(l)
}

impl Peer {
    /// Generates the test CAs into `dir` and starts every listener on a
    /// runtime of its own (2 threads), apart from the guests' thread.
    pub fn start(dir: &Path) -> anyhow::Result<Peer> {
        std::fs::create_dir_all(dir)?;
        let trusted = test_ca(&dir.join("ca.pem"), "Tether conformance CA")?;
        let other = test_ca(&dir.join("other-ca.pem"), "Untrusted CA")?;
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("conformance-peer")
            .enable_all()
            .build()?;
        let state: Observed = Arc::default();
        let (ws, wss, wss_other_ca) = (bind()?, bind()?, bind()?);
        let (tcp_echo, tcp_sink, tcp_reset) = (bind()?, bind()?, bind()?);
        // A small, fixed receive buffer (no autotuning): the sink really
        // pushes back, so a writer sees check-write reach 0.
        socket2::SockRef::from(&tcp_sink).set_recv_buffer_size(64 << 10)?;
        let closed_port = bind()?.local_addr()?.port();
        let mut peer = Peer {
            ws: ws.local_addr()?,
            wss: wss.local_addr()?,
            wss_other_ca: wss_other_ca.local_addr()?,
            tcp_echo: tcp_echo.local_addr()?,
            tcp_sink: tcp_sink.local_addr()?,
            tcp_reset: tcp_reset.local_addr()?,
            closed_port,
            ca_file: dir.join("ca.pem"),
            rt: None,
        };
        let _guard = rt.enter();
        spawn_ws(ws, None, state.clone())?;
        spawn_ws(wss, Some(trusted), state.clone())?;
        spawn_ws(wss_other_ca, Some(other), state)?;
        spawn_tcp(tcp_echo, tcp_echo_conn)?;
        spawn_tcp(tcp_sink, tcp_sink_conn)?;
        spawn_tcp(tcp_reset, |tcp| async move {
            let _ = socket2::SockRef::from(&tcp).set_linger(Some(Duration::ZERO));
            drop(tcp);
        })?;
        drop(_guard);
        peer.rt = Some(rt);
        Ok(peer)
    }

    /// The `--peer` argument for the suite guest: `key=value` pairs.
    pub fn guest_arg(&self) -> String {
        format!(
            "ws={},wss=localhost:{},wss-127=127.0.0.1:{},wss-other-ca=localhost:{},tcp-echo={},tcp-sink={},tcp-reset={},closed=127.0.0.1:{}",
            self.ws,
            self.wss.port(),
            self.wss.port(),
            self.wss_other_ca.port(),
            self.tcp_echo,
            self.tcp_sink,
            self.tcp_reset,
            self.closed_port
        )
    }
}

/// A CA certificate written to `ca_path` and a rustls server configuration
/// for `localhost` signed by it.
fn test_ca(ca_path: &Path, name: &str) -> anyhow::Result<Arc<rustls::ServerConfig>> {
    use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair, KeyUsagePurpose};
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params
        .distinguished_name
        .push(rcgen::DnType::CommonName, name);
    let ca_key = KeyPair::generate()?;
    let ca_cert = ca_params.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca_params, ca_key);
    let leaf_key = KeyPair::generate()?;
    let leaf =
        CertificateParams::new(vec!["localhost".to_string()])?.signed_by(&leaf_key, &issuer)?;
    std::fs::write(ca_path, ca_cert.pem())?;
    let key = rustls::pki_types::PrivateKeyDer::try_from(leaf_key.serialize_der())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![leaf.der().clone()], key)?;
    Ok(Arc::new(config))
}

fn spawn_tcp<F, Fut>(std: std::net::TcpListener, handler: F) -> anyhow::Result<()>
where
    F: Fn(TcpStream) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let listener = TcpListener::from_std(std)?;
    tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let _ = tcp.set_nodelay(true);
            tokio::spawn(handler(tcp));
        }
    });
    Ok(())
}

fn spawn_ws(
    std: std::net::TcpListener,
    tls: Option<Arc<rustls::ServerConfig>>,
    state: Observed,
) -> anyhow::Result<()> {
    spawn_tcp(std, move |tcp| {
        let tls = tls.clone();
        let state = state.clone();
        async move {
            match tls {
                None => serve(tcp, state).await,
                Some(config) => {
                    if let Ok(stream) = tokio_rustls::TlsAcceptor::from(config).accept(tcp).await {
                        serve(stream, state).await;
                    }
                }
            }
        }
    })
}

async fn tcp_echo_conn(mut tcp: TcpStream) {
    let (mut r, mut w) = tcp.split();
    if tokio::io::copy(&mut r, &mut w).await.is_ok() {
        let _ = w.shutdown().await;
    }
}

async fn tcp_sink_conn(mut tcp: TcpStream) {
    let mut buf = vec![0u8; 64 << 10];
    let (mut total, mut good) = (0usize, true);
    loop {
        match tcp.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                for (k, b) in buf[..n].iter().enumerate() {
                    good &= *b == ((total + k) % 251) as u8;
                }
                total += n;
                // Slow reader: about 32 MB/s at most.
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            Err(_) => return,
        }
    }
    let verdict = if good { "ok" } else { "bad" };
    let _ = tcp
        .write_all(format!("received {total} {verdict}\n").as_bytes())
        .await;
    let _ = tcp.shutdown().await;
}

struct Head {
    path: String,
    query: HashMap<String, String>,
    headers: HashMap<String, String>,
}

impl Head {
    fn num(&self, key: &str, default: usize) -> usize {
        self.query
            .get(key)
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }
}

async fn read_head<S: AsyncRead + Unpin>(io: &mut BufReader<S>) -> Option<Head> {
    let mut line = String::new();
    io.read_line(&mut line).await.ok()?;
    let target = line.split_whitespace().nth(1)?.to_string();
    let mut headers = HashMap::new();
    loop {
        let mut h = String::new();
        if io.read_line(&mut h).await.ok()? == 0 {
            return None;
        }
        let h = h.trim_end();
        if h.is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let (path, query) = target.split_once('?').unwrap_or((&target, ""));
    let query = query
        .split('&')
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Some(Head {
        path: path.to_string(),
        query,
        headers,
    })
}

fn ws_config() -> WebSocketConfig {
    WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None)
}

/// The burst pattern: byte i of message k is (k + i) % 256.
fn pattern(k: usize, size: usize) -> Vec<u8> {
    (0..size).map(|i| ((k + i) % 256) as u8).collect()
}

async fn serve<S>(stream: S, state: Observed)
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let mut io = BufReader::new(stream);
    // A TLS ClientHello on the plain port: answer like an HTTP server would.
    if matches!(io.fill_buf().await, Ok([0x16, ..])) {
        let _ = io
            .write_all(
                b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            )
            .await;
        return;
    }
    let Some(head) = read_head(&mut io).await else {
        return;
    };
    let host = head
        .headers
        .get("host")
        .cloned()
        .unwrap_or_else(|| "127.0.0.1".into());
    match head.path.as_str() {
        "/reject" => {
            let _ = io
                .write_all(
                    b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
                )
                .await;
            return;
        }
        "/redirect" => {
            let r = format!(
                "HTTP/1.1 302 Found\r\nLocation: ws://{host}/echo\r\nContent-Length: 0\r\n\r\n"
            );
            let _ = io.write_all(r.as_bytes()).await;
            return;
        }
        "/stall" => {
            let mut buf = [0u8; 1024];
            while io.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
            return;
        }
        _ => {}
    }
    let Some(key) = head.headers.get("sec-websocket-key") else {
        let _ = io
            .write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
            .await;
        return;
    };
    let offered: Vec<String> = head
        .headers
        .get("sec-websocket-protocol")
        .map(|v| v.split(',').map(|p| p.trim().to_string()).collect())
        .unwrap_or_default();
    let protocol = if head.path == "/unoffered" {
        Some("bogus".to_string())
    } else {
        offered
            .iter()
            .find(|p| *p == "chat" || *p == "superchat")
            .cloned()
    };
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(p) = &protocol {
        response.push_str(&format!("Sec-WebSocket-Protocol: {p}\r\n"));
    }
    response.push_str("\r\n");
    if io.write_all(response.as_bytes()).await.is_err() || io.flush().await.is_err() {
        return;
    }
    match head.path.as_str() {
        "/ignore-close" => {
            let mut buf = [0u8; 4096];
            while io.read(&mut buf).await.map(|n| n > 0).unwrap_or(false) {}
            return;
        }
        "/blackhole" => {
            tokio::time::sleep(Duration::from_secs(5)).await;
            return;
        }
        _ => {}
    }
    let ws = WebSocketStream::from_raw_socket(io, Role::Server, Some(ws_config())).await;
    let _ = script(ws, head, state).await;
}

type Ws<S> = WebSocketStream<BufReader<S>>;

async fn echo<S>(ws: &mut Ws<S>) -> Option<Option<CloseFrame>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while let Some(m) = ws.next().await {
        match m {
            Ok(m @ (Message::Text(_) | Message::Binary(_))) => {
                if ws.send(m).await.is_err() {
                    return None;
                }
            }
            Ok(Message::Close(frame)) => {
                // tungstenite answers the close; drain until the end.
                while ws.next().await.is_some() {}
                return Some(frame);
            }
            Ok(_) => {}
            Err(_) => return None,
        }
    }
    None
}

async fn wait_close<S>(ws: &mut Ws<S>)
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    while ws.next().await.is_some() {}
}

fn raw_tcp<S>(ws: Ws<S>) -> S
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    ws.into_inner().into_inner()
}

async fn script<S>(mut ws: Ws<S>, head: Head, state: Observed) -> anyhow::Result<()>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    match head.path.as_str() {
        "/echo" | "/unoffered" => {
            echo(&mut ws).await;
        }
        "/headers" => {
            let text = serde_json::json!({
                "path": format!("{}{}", head.path, query_string(&head)),
                "x-tether-test": head.headers.get("x-tether-test"),
            })
            .to_string();
            ws.send(Message::text(text)).await?;
            echo(&mut ws).await;
        }
        "/close-now" => {
            let frame = head.query.get("code").map(|c| CloseFrame {
                code: c.parse::<u16>().unwrap_or(4000).into(),
                reason: head.query.get("reason").cloned().unwrap_or_default().into(),
            });
            ws.close(frame).await?;
            wait_close(&mut ws).await;
        }
        "/drop-now" | "/reset" => {
            ws.send(Message::text("bye")).await?;
            let tcp = raw_tcp(ws);
            if head.path == "/reset" {
                set_linger_zero(&tcp);
            }
            drop(tcp);
        }
        "/burst" => {
            let (n, size) = (head.num("n", 100), head.num("size", 1000));
            let t0 = Instant::now();
            for k in 0..n {
                ws.feed(Message::binary(pattern(k, size))).await?;
            }
            ws.flush().await?;
            if head.num("report", 0) == 1 {
                let ms = t0.elapsed().as_millis();
                ws.send(Message::text(format!("elapsed_ms={ms}"))).await?;
            }
            match head.query.get("then").map(String::as_str) {
                Some("close") => {
                    let code = head.num("code", 4001) as u16;
                    ws.close(Some(CloseFrame {
                        code: code.into(),
                        reason: "burst done".into(),
                    }))
                    .await?;
                    wait_close(&mut ws).await;
                }
                Some("ignore") => {
                    let _hold = raw_tcp(ws);
                    tokio::time::sleep(Duration::from_secs(5)).await;
                }
                _ => {
                    echo(&mut ws).await;
                }
            }
        }
        "/fragmented" => {
            let text = "héllo wörld ✓ fragmented".as_bytes();
            // Split inside the two-byte `é` and the three-byte `✓`.
            let (a, rest) = text.split_at(2);
            let (b, c) = rest.split_at(14);
            ws.feed(Message::Frame(Frame::message(
                a.to_vec(),
                OpCode::Data(Data::Text),
                false,
            )))
            .await?;
            ws.feed(Message::Frame(Frame::message(
                b.to_vec(),
                OpCode::Data(Data::Continue),
                false,
            )))
            .await?;
            ws.feed(Message::Frame(Frame::message(
                c.to_vec(),
                OpCode::Data(Data::Continue),
                true,
            )))
            .await?;
            let bin = pattern(7, 3000);
            ws.feed(Message::Frame(Frame::message(
                bin[..1000].to_vec(),
                OpCode::Data(Data::Binary),
                false,
            )))
            .await?;
            ws.feed(Message::Ping(b"mid".to_vec().into())).await?;
            ws.feed(Message::Frame(Frame::message(
                bin[1000..2000].to_vec(),
                OpCode::Data(Data::Continue),
                false,
            )))
            .await?;
            ws.feed(Message::Frame(Frame::message(
                bin[2000..].to_vec(),
                OpCode::Data(Data::Continue),
                true,
            )))
            .await?;
            ws.send(Message::text("end")).await?;
            echo(&mut ws).await;
        }
        "/ping-flood" => {
            let n = head.num("n", 1000);
            for i in 0..n {
                ws.feed(Message::Ping(format!("{i}").into_bytes().into()))
                    .await?;
            }
            ws.send(Message::text("after-pings")).await?;
            let mut pongs = 0usize;
            while let Some(m) = ws.next().await {
                match m? {
                    Message::Pong(_) => pongs += 1,
                    Message::Text(t) if t.as_str() == "report" => {
                        ws.send(Message::text(format!("pongs={pongs}"))).await?;
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            wait_close(&mut ws).await;
        }
        "/timed" => {
            let (count, gap) = (head.num("count", 5), head.num("gap_ms", 20));
            for _ in 0..count {
                tokio::time::sleep(Duration::from_millis(gap as u64)).await;
                let now = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)?
                    .as_nanos();
                ws.send(Message::text(now.to_string())).await?;
            }
            echo(&mut ws).await;
        }
        "/idle" => {
            tokio::time::sleep(Duration::from_millis(head.num("ms", 500) as u64)).await;
            ws.send(Message::text("wake")).await?;
            echo(&mut ws).await;
        }
        "/slow-sink" => {
            let (mut count, mut bytes, mut good) = (0usize, 0usize, true);
            let (every, pause) = (head.num("every", 8).max(1), head.num("pause_ms", 3) as u64);
            let check = head.num("check", 1) == 1;
            tokio::time::sleep(Duration::from_millis(head.num("start_ms", 0) as u64)).await;
            while let Some(m) = ws.next().await {
                match m? {
                    Message::Binary(b) => {
                        good &= !check || b[..] == pattern(count, b.len())[..];
                        count += 1;
                        bytes += b.len();
                        if count % every == 0 {
                            tokio::time::sleep(Duration::from_millis(pause)).await;
                        }
                    }
                    Message::Text(t) if t.as_str() == "done" => {
                        let verdict = if good { "ok" } else { "bad" };
                        ws.send(Message::text(format!("received {count} {bytes} {verdict}")))
                            .await?;
                    }
                    Message::Close(_) => break,
                    _ => {}
                }
            }
            wait_close(&mut ws).await;
        }
        "/observe-close" => {
            let token = head.query.get("token").cloned().unwrap_or_default();
            let frame = echo(&mut ws).await;
            let code = match frame {
                Some(Some(f)) => u16::from(f.code).to_string(),
                Some(None) => "empty".into(),
                None => "none".into(),
            };
            state.observed.lock().unwrap().insert(token, code);
        }
        "/observed" => {
            let token = head.query.get("token").cloned().unwrap_or_default();
            let deadline = Instant::now() + Duration::from_secs(3);
            let code = loop {
                if let Some(c) = state.observed.lock().unwrap().get(&token) {
                    break c.clone();
                }
                if Instant::now() > deadline {
                    break "unobserved".into();
                }
                tokio::time::sleep(Duration::from_millis(5)).await;
            };
            ws.send(Message::text(code)).await?;
            echo(&mut ws).await;
        }
        _ => {
            ws.close(Some(CloseFrame {
                code: 4404.into(),
                reason: format!("no script for {}", head.path).into(),
            }))
            .await?;
            wait_close(&mut ws).await;
        }
    }
    Ok(())
}

fn query_string(head: &Head) -> String {
    if head.query.is_empty() {
        return String::new();
    }
    let mut pairs: Vec<String> = head.query.iter().map(|(k, v)| format!("{k}={v}")).collect();
    pairs.sort();
    format!("?{}", pairs.join("&"))
}

/// Makes dropping the socket send RST instead of FIN, through whatever
/// wraps it (plain TCP or TLS over TCP).
fn set_linger_zero<S: 'static>(stream: &S) {
    let any = stream as &dyn std::any::Any;
    if let Some(tcp) = any.downcast_ref::<TcpStream>() {
        let _ = socket2::SockRef::from(tcp).set_linger(Some(Duration::ZERO));
    } else if let Some(tls) = any.downcast_ref::<tokio_rustls::server::TlsStream<TcpStream>>() {
        let _ = socket2::SockRef::from(tls.get_ref().0).set_linger(Some(Duration::ZERO));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The peer's scripts, checked with a native client, so a guest failure
    /// is never a broken peer.
    #[test]
    fn scripted_paths_behave() {
        let dir = std::env::temp_dir().join(format!("peer-test-{}", std::process::id()));
        let peer = Peer::start(&dir).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let (mut ws, _) = tokio_tungstenite::connect_async(format!("ws://{}/echo", peer.ws))
                .await
                .unwrap();
            ws.send(Message::text("hi")).await.unwrap();
            assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hi"));
            let url = format!("ws://{}/burst?n=3&size=300&then=close", peer.ws);
            let (mut ws, _) = tokio_tungstenite::connect_async(url).await.unwrap();
            for k in 0..3 {
                let m = ws.next().await.unwrap().unwrap();
                assert_eq!(m, Message::binary(pattern(k, 300)));
            }
            match ws.next().await.unwrap().unwrap() {
                Message::Close(Some(f)) => assert_eq!(u16::from(f.code), 4001),
                other => panic!("expected close 4001, got {other:?}"),
            }
            let err = tokio_tungstenite::connect_async(format!("ws://{}/reject", peer.ws))
                .await
                .unwrap_err();
            assert!(err.to_string().contains("403"), "{err}");
            let mut tcp = TcpStream::connect(peer.tcp_echo).await.unwrap();
            tcp.write_all(b"bytes").await.unwrap();
            let mut back = [0u8; 5];
            tcp.read_exact(&mut back).await.unwrap();
            assert_eq!(&back, b"bytes");
        });
        drop(peer);
        std::fs::remove_dir_all(&dir).ok();
    }
}
