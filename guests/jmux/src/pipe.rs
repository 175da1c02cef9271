//! The byte pipe under the JMUX session: a WebSocket (JMUX bytes carried in
//! binary messages, concatenated into one byte stream) or a TCP connection.

use tether_guest_sdk::{
    self as sdk, ErrorCode, Interest, ListenOptions, Message, MessageStream, Pollable,
    ReadinessSet, StreamError, monotonic_clock, tcp, websocket,
};
use tether_jmux::proxy::cli::PipeSpec;

/// Largest read from a TCP pipe, bytes.
const TCP_READ: u64 = 64 * 1024;

/// Close codes that end a session normally (RFC 6455 section 7.4.1): 1000
/// normal, 1001 going away, 1005 no code given.
const NORMAL_CLOSE_CODES: [u16; 3] = [1000, 1001, 1005];

/// An established pipe. Pollables are declared before the streams they
/// watch so they are dropped first.
pub enum Pipe {
    Ws {
        rx: Pollable,
        tx: Pollable,
        stream: MessageStream,
        /// Reused buffer for outgoing binary messages.
        buf: Vec<u8>,
    },
    Tcp {
        rx: Pollable,
        tx: Pollable,
        conn: sdk::Connection,
    },
}

/// What one read from the pipe gave.
pub enum Read {
    /// Bytes to feed to the session.
    Bytes(Vec<u8>),
    /// Nothing right now.
    Empty,
    /// The peer closed the pipe normally.
    Closed,
}

/// What one write to the pipe did.
pub enum Wrote {
    /// This many bytes went out.
    Bytes(usize),
    /// No room now: wait on [`Pipe::tx`].
    Blocked,
}

impl Pipe {
    /// Opens the pipe, blocking the guest until it is established (for the
    /// listening forms: until the first peer arrives). Prints where it
    /// listens to stderr.
    ///
    /// Errors: a message naming the pipe and the host's reason.
    pub fn open(spec: &PipeSpec) -> Result<Pipe, String> {
        match spec {
            PipeSpec::WsConnect(url) => {
                let stream = sdk::connect(url, &[])
                    .map_err(|e| format!("pipe {url}: {}", sdk::describe(&e)))?;
                eprintln!("jmux: pipe connected to {url}");
                Ok(Pipe::ws(stream))
            }
            PipeSpec::WsListen(bind) => {
                let listener = websocket::listen(
                    bind,
                    &ListenOptions {
                        subprotocols: Vec::new(),
                    },
                )
                .map_err(|e| format!("pipe ws-listen://{bind}: {}", sdk::describe(&e)))?;
                eprintln!("jmux: pipe listening on ws://{}", listener.local_address());
                let ready = listener.subscribe();
                let stream = loop {
                    match listener.accept() {
                        Ok(Some(s)) => break s,
                        Ok(None) => ready.block(),
                        Err(e) => return Err(format!("pipe accept: {}", sdk::describe(&e))),
                    }
                };
                eprintln!("jmux: pipe accepted from {}", stream.peer_address());
                Ok(Pipe::ws(stream))
            }
            PipeSpec::TcpConnect(addr) => {
                let conn = sdk::tcp_connect(addr)
                    .map_err(|e| format!("pipe tcp://{addr}: {}", sdk::describe(&e)))?;
                eprintln!("jmux: pipe connected to tcp://{addr}");
                Ok(Pipe::tcp(conn))
            }
            PipeSpec::TcpListen(bind) => {
                let listener = tcp::listen(bind)
                    .map_err(|e| format!("pipe tcp-listen://{bind}: {}", sdk::describe(&e)))?;
                eprintln!("jmux: pipe listening on tcp://{}", listener.local_address());
                let ready = listener.subscribe();
                let (stream, input, output) = loop {
                    match listener.accept() {
                        Ok(Some(c)) => break c,
                        Ok(None) => ready.block(),
                        Err(e) => return Err(format!("pipe accept: {}", sdk::describe(&e))),
                    }
                };
                eprintln!("jmux: pipe accepted from {}", stream.peer_address());
                Ok(Pipe::tcp(sdk::Connection {
                    stream,
                    input,
                    output,
                }))
            }
        }
    }

    fn ws(stream: MessageStream) -> Pipe {
        Pipe::Ws {
            rx: stream.subscribe_receive(),
            tx: stream.subscribe_send(),
            stream,
            buf: Vec::new(),
        }
    }

    fn tcp(conn: sdk::Connection) -> Pipe {
        Pipe::Tcp {
            rx: conn.input.subscribe(),
            tx: conn.output.subscribe(),
            conn,
        }
    }

    /// Ready when [`Pipe::read`] has something (bytes or the end).
    pub fn rx(&self) -> &Pollable {
        match self {
            Pipe::Ws { rx, .. } | Pipe::Tcp { rx, .. } => rx,
        }
    }

    /// Ready when [`Pipe::write`] has room again.
    pub fn tx(&self) -> &Pollable {
        match self {
            Pipe::Ws { tx, .. } | Pipe::Tcp { tx, .. } => tx,
        }
    }

    /// Registers (`on`) or deregisters in `set`, under `key`, the pipe's
    /// receive side (`rx`: a message or bytes to read) or send side (room
    /// to write).
    ///
    /// Errors: the set is full.
    pub fn watch(&self, set: &ReadinessSet, key: u64, rx: bool, on: bool) -> Result<(), String> {
        let interest = match (self, rx) {
            (Pipe::Ws { .. }, true) => Interest::Receive,
            (Pipe::Ws { .. }, false) => Interest::Send,
            (Pipe::Tcp { .. }, true) => Interest::Read,
            (Pipe::Tcp { .. }, false) => Interest::Write,
        };
        if !on {
            set.deregister(key, interest);
            return Ok(());
        }
        match self {
            Pipe::Ws { stream, .. } => set.register_message_stream(stream, interest, key),
            Pipe::Tcp { conn, .. } => set.register_byte_stream(&conn.stream, interest, key),
        }
        .map_err(|e| format!("pipe: readiness set: {}", sdk::describe(&e)))
    }

    /// Takes what arrived, without blocking.
    ///
    /// Errors: the pipe failed (or a text message arrived on a WebSocket
    /// pipe, which JMUX does not use).
    pub fn read(&mut self) -> Result<Read, String> {
        match self {
            Pipe::Ws { stream, .. } => match stream.receive() {
                Ok(Some(Message::Binary(b))) => Ok(Read::Bytes(b)),
                Ok(Some(Message::Text(t))) => Err(format!(
                    "the peer sent a text WebSocket message ({} bytes); JMUX travels in binary messages",
                    t.len()
                )),
                Ok(None) => Ok(Read::Empty),
                // 1000 (or 1001 going away, or no code) ends the session
                // normally; any other code is the peer's failure, e.g. 1011
                // from a host whose guest trapped, or 4002 for a protocol
                // error. (A connection that ends without a close frame is
                // an error from the host already.)
                Err(ErrorCode::Closed) => match stream.close_info() {
                    Some(info) if !NORMAL_CLOSE_CODES.contains(&info.code) => Err(format!(
                        "pipe closed by the peer with {} {}",
                        info.code, info.reason
                    )),
                    _ => Ok(Read::Closed),
                },
                Err(e) => Err(format!("pipe: {}", sdk::describe(&e))),
            },
            Pipe::Tcp { conn, .. } => match conn.input.read(TCP_READ) {
                Ok(b) if b.is_empty() => Ok(Read::Empty),
                Ok(b) => Ok(Read::Bytes(b)),
                Err(StreamError::Closed) => Ok(Read::Closed),
                Err(StreamError::LastOperationFailed(e)) => {
                    Err(format!("pipe: {}", e.to_debug_string()))
                }
            },
        }
    }

    /// Writes a prefix of `bytes` (never empty; over a WebSocket, all of
    /// them as one binary message or nothing).
    ///
    /// Errors: the pipe failed or was closed.
    pub fn write(&mut self, bytes: &[u8]) -> Result<Wrote, String> {
        debug_assert!(!bytes.is_empty());
        match self {
            Pipe::Ws { stream, buf, .. } => {
                let mut owned = std::mem::take(buf);
                owned.clear();
                owned.extend_from_slice(bytes);
                let message = Message::Binary(owned);
                let result = stream.send(&message);
                if let Message::Binary(b) = message {
                    *buf = b;
                }
                match result {
                    Ok(()) => Ok(Wrote::Bytes(bytes.len())),
                    Err(ErrorCode::WouldBlock) => Ok(Wrote::Blocked),
                    Err(e) => Err(format!("pipe: {}", sdk::describe(&e))),
                }
            }
            Pipe::Tcp { conn, .. } => {
                let permit = conn
                    .output
                    .check_write()
                    .map_err(|e| format!("pipe: {}", stream_error(&e)))?;
                if permit == 0 {
                    return Ok(Wrote::Blocked);
                }
                let n = bytes.len().min(permit as usize);
                conn.output
                    .write(&bytes[..n])
                    .map_err(|e| format!("pipe: {}", stream_error(&e)))?;
                Ok(Wrote::Bytes(n))
            }
        }
    }

    /// Ends the pipe: a WebSocket close frame with `code` and `reason`
    /// (cut to 123 bytes), or a FIN.
    pub fn close(&mut self, code: u16, reason: &str) {
        match self {
            Pipe::Ws { stream, rx, .. } => {
                let mut end = reason.len().min(123);
                while !reason.is_char_boundary(end) {
                    end -= 1;
                }
                let _ = stream.close(code, &reason[..end]);
                // Wait (at most 2 s) for the peer's close frame, so the
                // close frame is on the wire before the guest exits.
                let timeout = monotonic_clock::subscribe_duration(2_000_000_000);
                loop {
                    match stream.receive() {
                        Ok(Some(_)) => continue,
                        Ok(None) => {
                            let ready = sdk::poll(&[&*rx, &timeout]);
                            if ready.contains(&1) {
                                break;
                            }
                        }
                        Err(_) => break,
                    }
                }
            }
            Pipe::Tcp { conn, .. } => {
                let _ = conn.stream.shutdown_send();
            }
        }
    }
}

/// A `wasi:io` stream error for people.
pub fn stream_error(e: &StreamError) -> String {
    match e {
        StreamError::Closed => "closed".into(),
        StreamError::LastOperationFailed(e) => e.to_debug_string(),
    }
}
