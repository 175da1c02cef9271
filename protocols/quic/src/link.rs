//! [`Link`]: one QUIC connection carried over one datagram pipe (for
//! Tether, a WebSocket message stream: one binary message is one datagram).
//!
//! The link owns a quinn-proto `Endpoint` and its single `Connection`, and
//! shuttles the events between them. A driver does the I/O:
//!
//! 1. every datagram that arrives goes to [`Link::handle_datagram`];
//! 2. when [`Link::poll_timeout`] has passed, call [`Link::handle_timeout`];
//! 3. the application ([`crate::App`]) reads and writes streams;
//! 4. send every datagram [`Link::poll_transmit`] returns, one per message;
//! 5. sleep until a datagram arrives or the next deadline, whichever first.

use std::collections::VecDeque;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use quinn_proto::{
    ClientConfig, Connection, ConnectionError, ConnectionHandle, DatagramEvent, Endpoint, Event,
    ServerConfig, Side,
};

use crate::Error;
use crate::config::{Identity, Options};

/// The address quinn-proto is told the peer has. A message stream has no
/// UDP address; the value only has to stay the same.
const PIPE_PEER: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(Ipv4Addr::LOCALHOST), 443);

/// The transport error code standing in for an application close during
/// the handshake (RFC 9000 section 20.1).
const APPLICATION_ERROR: u64 = 0x0c;

/// Path MTU discovery is possible on a pipe: a message stream delivers
/// every datagram whole or not at all, never fragmented (quinn-proto's
/// `allow_mtud`, normally "the socket sets don't-fragment"). Whether a
/// connection probes is [`Options::max_mtu`]'s choice.
const ALLOW_MTUD: bool = true;

/// TLS alert 120, `no_application_protocol`, as a QUIC crypto error code
/// (RFC 9001 section 4.8).
const NO_APPLICATION_PROTOCOL: u64 = 0x100 + 120;

/// Datagrams the endpoint answered by itself (version negotiation,
/// refusals, stateless resets) that a link holds at most while the pipe
/// does not take them; past it, new answers are dropped
/// ([`LinkStats::responses_dropped`]). These answers are best effort: a
/// server may drop them (RFC 9000 sections 6.1, 10.3), and a peer that
/// sends datagrams eliciting them without reading its own pipe would
/// otherwise have the link keep one per datagram, without bound.
pub const MAX_QUEUED_RESPONSES: usize = 16;

/// Counters of one link.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LinkStats {
    /// Datagrams handed to [`Link::handle_datagram`].
    pub datagrams_in: u64,
    /// Datagrams returned by [`Link::poll_transmit`].
    pub datagrams_out: u64,
    /// Incoming datagrams the endpoint could not use at all (not QUIC, or
    /// for no connection of this link). Datagrams that reach the connection
    /// but fail to decrypt (truncated, corrupted) are dropped inside
    /// quinn-proto and not counted here.
    pub ignored: u64,
    /// Endpoint answers dropped because [`MAX_QUEUED_RESPONSES`] were
    /// waiting for the pipe already.
    pub responses_dropped: u64,
}

/// One QUIC connection over one datagram pipe, client or server side.
pub struct Link {
    endpoint: Endpoint,
    side: Side,
    conn: Option<(ConnectionHandle, Connection)>,
    /// Datagrams the endpoint itself answered with (version negotiation,
    /// stateless resets, refusals), sent before the connection's own.
    responses: VecDeque<Bytes>,
    buf: Vec<u8>,
    out: Vec<u8>,
    started: Instant,
    connected_at: Option<Instant>,
    idle_timeout: Duration,
    offered_alpn: String,
    alpn: Option<Vec<u8>>,
    error: Option<Error>,
    closed_locally: bool,
    /// The peer closed with application code 0 (its work was done).
    peer_closed_cleanly: bool,
    stats: LinkStats,
}

impl Link {
    /// A client link that starts its handshake at once (the first
    /// datagram is ready from [`Link::poll_transmit`]). `trusted_der` is
    /// the certificate the server is verified against; `server_name` the
    /// name its certificate must carry.
    ///
    /// Errors: [`Error::Config`] for a bad certificate, option or name.
    pub fn client(
        now: Instant,
        trusted_der: &[u8],
        server_name: &str,
        options: &Options,
    ) -> Result<Link, Error> {
        let config = crate::config::client_config(trusted_der, options)?;
        Link::client_with(now, config, server_name, options)
    }

    /// Like [`Link::client`] with a prepared quinn-proto configuration
    /// (reused across many connections).
    pub fn client_with(
        now: Instant,
        config: ClientConfig,
        server_name: &str,
        options: &Options,
    ) -> Result<Link, Error> {
        let mut endpoint = Endpoint::new(options.endpoint(), None, ALLOW_MTUD, None);
        let (handle, conn) = endpoint
            .connect(now, config, PIPE_PEER, server_name)
            .map_err(|e| Error::Config(format!("cannot start the connection: {e}")))?;
        let mut link = Link::new(endpoint, Side::Client, now, options);
        link.conn = Some((handle, conn));
        Ok(link)
    }

    /// A server link waiting for a client's first datagram.
    ///
    /// Errors: [`Error::Config`] for a certificate or key rustls rejects.
    pub fn server(now: Instant, identity: &Identity, options: &Options) -> Result<Link, Error> {
        let config = crate::config::server_config(identity, options)?;
        Ok(Link::server_with(now, config, options))
    }

    /// Like [`Link::server`] with a prepared quinn-proto configuration.
    pub fn server_with(now: Instant, config: Arc<ServerConfig>, options: &Options) -> Link {
        let endpoint = Endpoint::new(options.endpoint(), Some(config), ALLOW_MTUD, None);
        Link::new(endpoint, Side::Server, now, options)
    }

    fn new(endpoint: Endpoint, side: Side, now: Instant, options: &Options) -> Link {
        Link {
            endpoint,
            side,
            conn: None,
            responses: VecDeque::new(),
            buf: Vec::new(),
            out: Vec::with_capacity(usize::from(options.max_mtu.max(options.mtu))),
            started: now,
            connected_at: None,
            idle_timeout: options.idle_timeout,
            offered_alpn: options.alpn_text(),
            alpn: None,
            error: None,
            closed_locally: false,
            peer_closed_cleanly: false,
            stats: LinkStats::default(),
        }
    }

    /// Client or server.
    pub fn side(&self) -> Side {
        self.side
    }

    /// Feeds one datagram from the pipe. Never fails: a datagram that is
    /// not QUIC, belongs to no connection of this link, or fails to
    /// decrypt is dropped (QUIC's rule), and the connection goes on.
    pub fn handle_datagram(&mut self, now: Instant, datagram: &[u8]) {
        self.stats.datagrams_in += 1;
        let data = BytesMut::from(datagram);
        self.buf.clear();
        let event = self
            .endpoint
            .handle(now, PIPE_PEER, None, None, data, &mut self.buf);
        match event {
            Some(DatagramEvent::ConnectionEvent(handle, event)) => match &mut self.conn {
                Some((h, conn)) if *h == handle => conn.handle_event(event),
                _ => self.stats.ignored += 1,
            },
            Some(DatagramEvent::NewConnection(incoming)) => {
                if self.conn.is_some() || self.side == Side::Client {
                    // One connection per pipe.
                    self.endpoint.ignore(incoming);
                    self.stats.ignored += 1;
                } else {
                    self.buf.clear();
                    match self.endpoint.accept(incoming, now, &mut self.buf, None) {
                        Ok((handle, conn)) => {
                            self.started = now;
                            self.conn = Some((handle, conn));
                        }
                        Err(e) => {
                            if let Some(t) = e.response {
                                self.queue_response(t.size);
                            }
                            self.error = Some(self.classify(&e.cause));
                        }
                    }
                }
            }
            Some(DatagramEvent::Response(t)) => self.queue_response(t.size),
            None => self.stats.ignored += 1,
        }
        self.shuttle();
    }

    /// Queues the endpoint's answer (the first `size` bytes of `buf`),
    /// unless [`MAX_QUEUED_RESPONSES`] wait already.
    fn queue_response(&mut self, size: usize) {
        if self.responses.len() >= MAX_QUEUED_RESPONSES {
            self.stats.responses_dropped += 1;
            return;
        }
        self.responses
            .push_back(Bytes::copy_from_slice(&self.buf[..size]));
    }

    /// Passes endpoint events between the connection and the endpoint.
    fn shuttle(&mut self) {
        let Some((handle, conn)) = &mut self.conn else {
            return;
        };
        while let Some(event) = conn.poll_endpoint_events() {
            if let Some(back) = self.endpoint.handle_event(*handle, event) {
                conn.handle_event(back);
            }
        }
    }

    /// The next datagram to send, at most one MTU, or `None` when nothing
    /// is due now (call again after the next input or deadline). Send
    /// every datagram as one message, in order.
    pub fn poll_transmit(&mut self, now: Instant) -> Option<&[u8]> {
        if let Some(d) = self.responses.pop_front() {
            self.out.clear();
            self.out.extend_from_slice(&d);
            self.stats.datagrams_out += 1;
            return Some(&self.out);
        }
        let (_, conn) = self.conn.as_mut()?;
        self.out.clear();
        let transmit = conn.poll_transmit(now, 1, &mut self.out);
        self.shuttle();
        let t = transmit?;
        debug_assert!(t.segment_size.is_none(), "one datagram per transmit");
        self.out.truncate(t.size);
        self.stats.datagrams_out += 1;
        Some(&self.out)
    }

    /// When [`Link::handle_timeout`] must be called next: the connection's
    /// nearest protocol deadline (loss detection, delayed ACK, pacing, idle
    /// timeout, keep-alive). `None` while there is no timer at all.
    pub fn poll_timeout(&mut self) -> Option<Instant> {
        self.conn.as_mut().and_then(|(_, c)| c.poll_timeout())
    }

    /// Runs the timers that are due at `now`.
    pub fn handle_timeout(&mut self, now: Instant) {
        if let Some((_, conn)) = &mut self.conn {
            conn.handle_timeout(now);
        }
        self.shuttle();
    }

    /// The next application event. The link records `Connected` (at `now`,
    /// for [`Link::handshake_time`], and the ALPN) and `ConnectionLost` (as
    /// [`Link::error`]) on the way.
    pub fn poll_event(&mut self, now: Instant) -> Option<Event> {
        let (_, conn) = self.conn.as_mut()?;
        let event = conn.poll()?;
        match &event {
            Event::Connected => {
                self.connected_at = Some(now);
                self.alpn = conn
                    .crypto_session()
                    .handshake_data()
                    .and_then(|d| {
                        d.downcast::<quinn_proto::crypto::rustls::HandshakeData>()
                            .ok()
                    })
                    .and_then(|d| d.protocol);
            }
            Event::ConnectionLost { reason } => {
                self.peer_closed_cleanly = match reason {
                    ConnectionError::ApplicationClosed(a) => a.error_code.into_inner() == 0,
                    // A peer that closes before the handshake is confirmed
                    // must hide its application code behind
                    // APPLICATION_ERROR (RFC 9000 section 10.2.3): a client
                    // that only measured the handshake closes this way.
                    ConnectionError::ConnectionClosed(c) => {
                        u64::from(c.error_code) == APPLICATION_ERROR
                    }
                    _ => false,
                };
                if self.error.is_none() {
                    self.error = Some(self.classify(reason));
                }
            }
            _ => {}
        }
        Some(event)
    }

    fn classify(&self, reason: &ConnectionError) -> Error {
        let connected = self.connected_at.is_some();
        match reason {
            ConnectionError::TimedOut if !connected => Error::HandshakeTimeout(self.idle_timeout),
            ConnectionError::TimedOut => Error::IdleTimeout(self.idle_timeout),
            ConnectionError::ConnectionClosed(c)
                if u64::from(c.error_code) == NO_APPLICATION_PROTOCOL =>
            {
                Error::Alpn(format!(
                    "the server accepts none of the protocols offered ({})",
                    self.offered_alpn
                ))
            }
            ConnectionError::TransportError(e) if u64::from(e.code) == NO_APPLICATION_PROTOCOL => {
                Error::Alpn(format!(
                    "the client offered none of the protocols accepted ({}): {}",
                    self.offered_alpn, e.reason
                ))
            }
            ConnectionError::ConnectionClosed(c) if is_crypto(u64::from(c.error_code)) => {
                Error::Tls(format!("the peer refused the handshake: {c}"))
            }
            ConnectionError::TransportError(e) if is_crypto(u64::from(e.code)) => {
                Error::Tls(e.to_string())
            }
            ConnectionError::ApplicationClosed(a) => Error::PeerClosed(format!(
                "code {} {}",
                a.error_code,
                String::from_utf8_lossy(&a.reason)
            )),
            ConnectionError::ConnectionClosed(c) => Error::PeerClosed(c.to_string()),
            ConnectionError::LocallyClosed => Error::Lost("closed locally".into()),
            ConnectionError::Reset => Error::Lost("reset by the peer (stateless reset)".into()),
            other => Error::Lost(other.to_string()),
        }
    }

    /// The connection, once there is one (a server link has none until the
    /// client's first datagram).
    pub fn connection(&mut self) -> Option<&mut Connection> {
        self.conn.as_mut().map(|(_, c)| c)
    }

    /// True once there is a connection: at once on a client link, on a
    /// server link once the client's first datagram made one.
    pub fn has_connection(&self) -> bool {
        self.conn.is_some()
    }

    /// True once the handshake completed.
    pub fn is_connected(&self) -> bool {
        self.connected_at.is_some()
    }

    /// Handshake duration: from the link's creation (client) or the
    /// client's first datagram (server) to `Connected`.
    pub fn handshake_time(&self) -> Option<Duration> {
        self.connected_at
            .map(|t| t.saturating_duration_since(self.started))
    }

    /// The ALPN protocol both sides agreed on, once connected.
    pub fn alpn(&self) -> Option<&[u8]> {
        self.alpn.as_deref()
    }

    /// Why the connection ended, once it has (and it was not closed by
    /// this side with [`Link::close`]).
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// Records a failure found by the driver (the pipe ended) or the
    /// application. The first error wins.
    pub fn fail(&mut self, error: Error) {
        if self.error.is_none() {
            self.error = Some(error);
        }
    }

    /// Closes the connection with an application `code` and `reason`; the
    /// CONNECTION_CLOSE datagram comes out of the next
    /// [`Link::poll_transmit`].
    pub fn close(&mut self, now: Instant, code: u32, reason: &[u8]) {
        self.closed_locally = true;
        if let Some((_, conn)) = &mut self.conn {
            conn.close(
                now,
                quinn_proto::VarInt::from_u32(code),
                Bytes::copy_from_slice(reason),
            );
        }
        self.shuttle();
    }

    /// True once the connection is closed (by either side, or lost) or
    /// this link failed.
    pub fn is_closed(&self) -> bool {
        self.closed_locally
            || self.error.is_some()
            || self.conn.as_ref().is_some_and(|(_, c)| c.is_closed())
    }

    /// True when the connection ended the normal way: closed here with
    /// [`Link::close`] before any failure, or by the peer with application
    /// code 0.
    pub fn closed_cleanly(&self) -> bool {
        self.peer_closed_cleanly || (self.closed_locally && self.error.is_none())
    }

    /// True when [`Link::close`] was called here.
    pub fn closed_locally(&self) -> bool {
        self.closed_locally
    }

    /// Counters.
    pub fn stats(&self) -> LinkStats {
        self.stats
    }

    /// The connection's current datagram size (path MTU), bytes: the
    /// initial MTU until discovery raises it. `None` before a connection
    /// exists.
    pub fn mtu(&self) -> Option<u16> {
        self.conn.as_ref().map(|(_, c)| c.current_mtu())
    }

    /// When the link was created (client) or the client's first datagram
    /// arrived (server).
    pub fn started(&self) -> Instant {
        self.started
    }
}

fn is_crypto(code: u64) -> bool {
    (0x100..0x200).contains(&code)
}
