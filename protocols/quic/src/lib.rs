//! `tether-quic`: QUIC over a datagram pipe, sans-IO, on quinn-proto with
//! rustls and the *ring* provider. For Tether the pipe is a WebSocket
//! message stream: each binary message is exactly one QUIC datagram.
//!
//! No I/O, no async runtime, no clock reads: datagrams and the current
//! time go in as arguments, datagrams, deadlines and results come out (the
//! quinn-proto style). It builds for `wasm32-wasip2`, so the `quic-echo`
//! guest and the host's native peer share every line of protocol code and
//! differ only in their I/O drivers.
//!
//! - [`config`]: transport options (1200-byte datagrams during the
//!   handshake, then path MTU discovery up to 16383 bytes; idle timeout,
//!   keep-alive), TLS 1.3 with the server's certificate, ALPN required.
//! - [`packet_protection`]: ChaCha20-Poly1305 QUIC packet keys with a
//!   WebAssembly SIMD backend, used inside guests.
//! - [`link`]: [`Link`], one connection over one pipe, with the driver
//!   contract (input, deadline, output).
//! - [`echo`]: [`EchoServer`], echoes every bidirectional stream and
//!   datagram with bounded buffers.
//! - [`client`]: [`Client`], the measured workload: handshake, round trips,
//!   verified stream echoes, datagram round trips, idle periods.
//!
//! # Driving a link
//!
//! ```
//! use std::time::Instant;
//! use tether_quic::{App, Client, EchoServer, Identity, Link, Options, Phase};
//!
//! let identity = Identity::generate(&["localhost"]).unwrap();
//! let options = Options::default();
//! let now = Instant::now();
//! let mut client = Link::client(now, &identity.cert_der, "localhost", &options).unwrap();
//! let mut server = Link::server(now, &identity, &options).unwrap();
//! let mut workload = Client::new(vec!["rtt:3:32".parse::<Phase>().unwrap()]);
//! let mut echo = EchoServer::new();
//! // A perfect pipe in memory: move datagrams until both sides are idle.
//! while !workload.is_done() {
//!     while let Some(d) = client.poll_transmit(now) {
//!         let d = d.to_vec();
//!         server.handle_datagram(now, &d);
//!     }
//!     echo.pump(&mut server, now);
//!     while let Some(d) = server.poll_transmit(now) {
//!         let d = d.to_vec();
//!         client.handle_datagram(now, &d);
//!     }
//!     workload.pump(&mut client, now);
//! }
//! assert!(workload.error().is_none());
//! ```

pub mod client;
pub mod config;
pub mod echo;
pub mod link;
pub mod packet_protection;
pub mod pattern;

use std::time::{Duration, Instant};

pub use client::{Client, Phase, Report};
pub use config::{DEFAULT_ALPN, DEFAULT_MTU, DEFAULT_SERVER_NAME, Identity, MAX_MTU, Options};
pub use echo::{EchoServer, EchoStats, SharedBudget, Windows};
pub use link::{Link, LinkStats};
pub use quinn_proto;
pub use rustls;

/// Why a connection or a workload failed. Each case reads as a sentence
/// for people; [`Error::kind`] names it for machines.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Error {
    /// A certificate, key, option or argument was rejected.
    #[error("bad configuration: {0}")]
    Config(String),
    /// The handshake did not complete: no answer from the peer within the
    /// idle timeout (payload).
    #[error("handshake timed out: no answer from the peer within the idle timeout of {0:?}")]
    HandshakeTimeout(Duration),
    /// An established connection heard nothing from the peer for the idle
    /// timeout (payload).
    #[error("connection timed out: nothing from the peer for the idle timeout of {0:?}")]
    IdleTimeout(Duration),
    /// ALPN negotiation failed (QUIC requires ALPN).
    #[error("ALPN mismatch: {0}")]
    Alpn(String),
    /// The TLS handshake failed: certificate not trusted, name mismatch, ...
    #[error("TLS handshake failed: {0}")]
    Tls(String),
    /// The peer closed the connection.
    #[error("connection closed by the peer: {0}")]
    PeerClosed(String),
    /// The connection was lost for another reason.
    #[error("connection lost: {0}")]
    Lost(String),
    /// The datagram pipe (message stream) ended while the connection was
    /// still open.
    #[error("the message stream ended mid-connection: {0}")]
    PipeClosed(String),
    /// An echo did not match what was sent.
    #[error("echo check failed: {0}")]
    Verify(String),
    /// A stream was reset or stopped by the peer.
    #[error("stream failed: {0}")]
    Stream(String),
}

impl Error {
    /// The short name of the case (`handshake-timeout`, `alpn`, ...), for
    /// machine-readable output.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Config(_) => "config",
            Error::HandshakeTimeout(_) => "handshake-timeout",
            Error::IdleTimeout(_) => "idle-timeout",
            Error::Alpn(_) => "alpn",
            Error::Tls(_) => "tls",
            Error::PeerClosed(_) => "peer-closed",
            Error::Lost(_) => "lost",
            Error::PipeClosed(_) => "pipe-closed",
            Error::Verify(_) => "verify",
            Error::Stream(_) => "stream",
        }
    }
}

/// What runs on top of a [`Link`]: [`EchoServer`] or [`Client`]. A driver
/// calls [`App::pump`] after every batch of input or timers, before
/// draining [`Link::poll_transmit`].
pub trait App {
    /// Consumes the link's events and moves data on its streams and
    /// datagrams, without blocking.
    fn pump(&mut self, link: &mut Link, now: Instant);
    /// The application's own next deadline (an idle phase ending), merged
    /// by the driver with [`Link::poll_timeout`].
    fn poll_timeout(&self) -> Option<Instant>;
    /// True once the application has nothing more to do: the driver sends
    /// what is left and stops.
    fn is_done(&self) -> bool;
}

/// The earlier of two optional deadlines.
pub fn earliest(a: Option<Instant>, b: Option<Instant>) -> Option<Instant> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, None) => a,
        (None, b) => b,
    }
}
