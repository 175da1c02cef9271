//! QUIC and TLS configuration: transport options, the server's identity,
//! the client's trust anchor, ALPN.
//!
//! Every connection runs TLS 1.3 with rustls and the *ring* provider (also
//! inside a `wasm32-wasip2` guest, where QUIC packet keys come from
//! [`crate::packet_protection`]). The client verifies the server's
//! certificate against one trusted certificate handed to it (the server's
//! own self-signed certificate or the CA that signed it), and both sides
//! require ALPN: a client that offers none of the server's protocols is
//! refused during the handshake.

use std::sync::Arc;
use std::time::Duration;

use quinn_proto::crypto::rustls::{QuicClientConfig, QuicServerConfig};
use quinn_proto::{IdleTimeout, TransportConfig, VarInt};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

use crate::Error;

/// The application protocol the echo guest and its peers speak.
pub const DEFAULT_ALPN: &[u8] = b"tether-quic-echo";

/// The server name clients check the certificate against by default.
pub const DEFAULT_SERVER_NAME: &str = "localhost";

/// The fixed UDP payload size every datagram is built for, bytes: QUIC's
/// minimum (RFC 9000 section 14), so a datagram fits any path. One datagram
/// is one WebSocket message.
pub const DEFAULT_MTU: u16 = 1200;

/// The largest datagram size supported, bytes: a long-header packet's
/// length must fit quinn-proto's two-byte length field.
pub const MAX_MTU: u16 = 16383;

/// Transport and TLS options shared by both sides.
#[derive(Clone, Debug)]
pub struct Options {
    /// Application protocols: offered by a client (most preferred first),
    /// accepted by a server. Must not be empty. Default
    /// [`DEFAULT_ALPN`].
    pub alpn: Vec<Vec<u8>>,
    /// Idle timeout: a connection (or a handshake) with no packet from the
    /// peer for this long is lost with [`Error::IdleTimeout`] (or
    /// [`Error::HandshakeTimeout`]). The effective value is the smaller of
    /// both sides'. Default 10 s.
    pub idle_timeout: Duration,
    /// Send a PING after this much quiet time to keep an idle connection
    /// alive; `None` (the default) sends nothing, so an idle connection has
    /// no timer before its idle timeout.
    pub keep_alive: Option<Duration>,
    /// The round-trip time assumed before the first measurement. It sets
    /// the first probe timeout (about 3x this), and QUIC stretches the idle
    /// timeout to at least three probe timeouts (RFC 9000 section 10.1), so
    /// keep `idle_timeout` at 10x this or more for it to hold as set.
    /// Default 100 ms (RFC 9002 suggests 333 ms for unknown paths; message
    /// streams are usually nearer).
    pub initial_rtt: Duration,
    /// Datagram size every connection starts with, bytes: the initial and
    /// minimum MTU. Default [`DEFAULT_MTU`] (1200, QUIC's minimum, RFC 9000
    /// section 14), so the handshake fits any path. quinn-proto does not
    /// shrink it to the peer's advertised limit, so raise it only with
    /// peers configured alike (both sides of Tether's pairings accept any
    /// size).
    pub mtu: u16,
    /// Largest datagram path MTU discovery (DPLPMTUD, RFC 9000 section
    /// 14.3) may reach, bytes; equal to `mtu` turns discovery off. Default
    /// [`MAX_MTU`] (16383): a message stream carries any datagram whole, so
    /// after the handshake the connection probes up to this size (never
    /// past the peer's `max_udp_payload_size`) and bulk transfers need an
    /// order of magnitude fewer messages. Must be in `mtu..=MAX_MTU`.
    pub max_mtu: u16,
    /// Per-stream receive window, bytes: how much a peer may send on one
    /// stream ahead of the reader. Default 4 MiB.
    pub stream_window: u32,
    /// Connection-wide receive window, bytes: how much a peer may send on
    /// all streams of a connection together ahead of the reader
    /// (`MAX_DATA`, RFC 9000 section 4.1). Default 8 MiB. Without it
    /// (quinn-proto's default is unbounded) a peer that opened 100 streams
    /// and filled each window made the reader hold 100 x `stream_window`
    /// (the red team of 2026-12-04i, F1).
    pub receive_window: u64,
    /// Bytes of datagrams (RFC 9221) buffered each way: received ones not
    /// yet taken, and ones queued to send. Default 64 KiB; at least one
    /// datagram of the largest MTU fits. Past it, received datagrams are
    /// dropped (they are unreliable) and sends wait.
    pub datagram_buffer: usize,
    /// Connection-wide send window, bytes: unacknowledged data buffered for
    /// sending. Default 8 MiB.
    pub send_window: u64,
    /// Where packet keys run. Default [`Aead::Builtin`].
    pub aead: Aead,
}

/// Where QUIC packet protection (RFC 9001 section 5.3) runs.
#[derive(Clone, Copy, Default)]
pub enum Aead {
    /// In this process, with *ring* (and, in WebAssembly, `rscrypto`'s
    /// SIMD ChaCha20-Poly1305 preferred: there are no AES instructions).
    #[default]
    Builtin,
    /// Packet keys handed to an external AEAD (a guest's host, with native
    /// AES-GCM), AES-128-GCM preferred; header protection stays here. See
    /// [`crate::packet_protection::external_suites`].
    External(&'static dyn crate::packet_protection::ExternalAead),
}

impl std::fmt::Debug for Aead {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Aead::Builtin => "Builtin",
            Aead::External(_) => "External",
        })
    }
}

impl Default for Options {
    fn default() -> Self {
        Options {
            alpn: vec![DEFAULT_ALPN.to_vec()],
            idle_timeout: Duration::from_secs(10),
            keep_alive: None,
            initial_rtt: Duration::from_millis(100),
            mtu: DEFAULT_MTU,
            max_mtu: MAX_MTU,
            stream_window: 4 << 20,
            receive_window: 8 << 20,
            datagram_buffer: 64 << 10,
            send_window: 8 << 20,
            aead: Aead::Builtin,
        }
    }
}

impl Options {
    /// The quinn-proto transport configuration for these options.
    ///
    /// Errors: [`Error::Config`] for an idle timeout of 0 or beyond QUIC's
    /// range, or an MTU under 1200.
    pub fn transport(&self) -> Result<Arc<TransportConfig>, Error> {
        if !(1200..=MAX_MTU).contains(&self.mtu) {
            return Err(Error::Config(format!(
                "MTU {} is outside 1200..={MAX_MTU} bytes (QUIC's minimum; quinn-proto's largest long-header packet)",
                self.mtu
            )));
        }
        if !(self.mtu..=MAX_MTU).contains(&self.max_mtu) {
            return Err(Error::Config(format!(
                "largest MTU {} is outside {}..={MAX_MTU} bytes (the initial MTU up to quinn-proto's largest long-header packet)",
                self.max_mtu, self.mtu
            )));
        }
        let discovery = (self.max_mtu > self.mtu).then(|| {
            let mut d = quinn_proto::MtuDiscoveryConfig::default();
            // A message stream has no real MTU: a probe is lost only if the
            // peer refuses its size, so a coarse search step is enough.
            d.upper_bound(self.max_mtu).minimum_change(256);
            d
        });
        if self.idle_timeout.is_zero() {
            // quinn-proto would take 0 as a timeout, not as "none": every
            // handshake failed at once with a handshake timeout of 0ns.
            return Err(Error::Config("idle timeout must be more than 0 ms".into()));
        }
        let idle = IdleTimeout::try_from(self.idle_timeout).map_err(|_| {
            Error::Config(format!("idle timeout {:?} is too long", self.idle_timeout))
        })?;
        let mut t = TransportConfig::default();
        // The first flight must hold at least a few full datagrams: 14720
        // bytes (RFC 9002 section 7.2) or, for large datagrams, ten of them.
        let mut cubic = quinn_proto::congestion::CubicConfig::default();
        cubic.initial_window(14720.max(10 * u64::from(self.mtu)));
        t.congestion_controller_factory(Arc::new(cubic));
        t.max_idle_timeout(Some(idle))
            .keep_alive_interval(self.keep_alive)
            .initial_rtt(self.initial_rtt)
            .initial_mtu(self.mtu)
            .min_mtu(self.mtu)
            .mtu_discovery_config(discovery)
            .stream_receive_window(VarInt::from_u32(self.stream_window))
            .receive_window(VarInt::from_u64(self.receive_window).unwrap_or(VarInt::MAX))
            .send_window(self.send_window)
            .datagram_receive_buffer_size(Some(self.datagram_buffer))
            .datagram_send_buffer_size(self.datagram_buffer);
        Ok(Arc::new(t))
    }

    /// The quinn-proto endpoint configuration: this side accepts datagrams
    /// of any size QUIC allows (65527 bytes, its `max_udp_payload_size`
    /// transport parameter), as a message stream carries them whole.
    pub fn endpoint(&self) -> Arc<quinn_proto::EndpointConfig> {
        let mut e = quinn_proto::EndpointConfig::default();
        e.max_udp_payload_size(65527)
            .expect("65527 is QUIC's largest UDP payload");
        Arc::new(e)
    }

    /// The ALPN list as text, for messages.
    pub fn alpn_text(&self) -> String {
        self.alpn
            .iter()
            .map(|p| String::from_utf8_lossy(p).into_owned())
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// A server's certificate and private key, DER-encoded.
#[derive(Clone)]
pub struct Identity {
    /// The certificate (X.509, DER). Clients trust it directly (it is
    /// self-signed) or through the CA that signed it.
    pub cert_der: Vec<u8>,
    /// The private key (PKCS #8, DER).
    pub key_der: Vec<u8>,
}

impl std::fmt::Debug for Identity {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Identity")
            .field("cert_der", &format_args!("{} bytes", self.cert_der.len()))
            .finish_non_exhaustive()
    }
}

impl Identity {
    /// A fresh self-signed certificate for `names` (DNS names or IP
    /// addresses) with a new ECDSA P-256 key.
    ///
    /// Errors: [`Error::Config`] when rcgen refuses a name.
    #[cfg(feature = "generate")]
    pub fn generate(names: &[&str]) -> Result<Identity, Error> {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        let cert = rcgen::generate_simple_self_signed(names)
            .map_err(|e| Error::Config(format!("generating a certificate: {e}")))?;
        Ok(Identity {
            cert_der: cert.cert.der().to_vec(),
            key_der: cert.signing_key.serialize_der(),
        })
    }
}

fn provider(aead: Aead) -> Arc<rustls::crypto::CryptoProvider> {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Aead::External(external) = aead {
        provider.cipher_suites = crate::packet_protection::external_suites(external);
        return Arc::new(provider);
    }
    // Without AES instructions (WebAssembly has none) ChaCha20-Poly1305 is
    // the faster AEAD, and `rscrypto`'s SIMD ChaCha20 beats *ring*'s
    // portable one for packet keys; natively AES-GCM is faster. The
    // client's order decides.
    if cfg!(target_family = "wasm") {
        for suite in &mut provider.cipher_suites {
            if suite.suite() == rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256 {
                *suite = crate::packet_protection::chacha20_poly1305_suite();
            }
        }
        provider
            .cipher_suites
            .sort_by_key(|s| s.suite() != rustls::CipherSuite::TLS13_CHACHA20_POLY1305_SHA256);
    }
    Arc::new(provider)
}

/// The quinn-proto server configuration: TLS 1.3 with `identity`, ALPN
/// from `options` required, no connection migration (the pipe never moves).
///
/// Errors: [`Error::Config`] for a certificate or key rustls rejects.
pub fn server_config(
    identity: &Identity,
    options: &Options,
) -> Result<Arc<quinn_proto::ServerConfig>, Error> {
    if options.alpn.is_empty() {
        return Err(Error::Config(
            "at least one ALPN protocol is required".into(),
        ));
    }
    let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(identity.key_der.clone()));
    let cert = CertificateDer::from(identity.cert_der.clone());
    let mut tls = rustls::ServerConfig::builder_with_provider(provider(options.aead))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Config(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(|e| Error::Config(format!("server certificate or key: {e}")))?;
    tls.alpn_protocols = options.alpn.clone();
    // In WebAssembly, or with an external AEAD, pick the suite that is fast
    // here (see `provider`).
    tls.ignore_client_order =
        cfg!(target_family = "wasm") || matches!(options.aead, Aead::External(_));
    let crypto = QuicServerConfig::try_from(tls).map_err(|e| Error::Config(e.to_string()))?;
    let mut config = quinn_proto::ServerConfig::with_crypto(Arc::new(crypto));
    config
        .transport_config(options.transport()?)
        .migration(false)
        .max_incoming(4);
    Ok(Arc::new(config))
}

/// The quinn-proto client configuration: TLS 1.3, the server verified
/// against `trusted_der` (a DER certificate: the server's self-signed
/// certificate or its CA), ALPN from `options` offered.
///
/// Errors: [`Error::Config`] when the certificate cannot be a trust anchor.
pub fn client_config(
    trusted_der: &[u8],
    options: &Options,
) -> Result<quinn_proto::ClientConfig, Error> {
    if options.alpn.is_empty() {
        return Err(Error::Config(
            "at least one ALPN protocol is required".into(),
        ));
    }
    let mut roots = rustls::RootCertStore::empty();
    roots
        .add(CertificateDer::from(trusted_der.to_vec()))
        .map_err(|e| Error::Config(format!("trusted certificate: {e}")))?;
    let mut tls = rustls::ClientConfig::builder_with_provider(provider(options.aead))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .map_err(|e| Error::Config(e.to_string()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = options.alpn.clone();
    let crypto = QuicClientConfig::try_from(tls).map_err(|e| Error::Config(e.to_string()))?;
    let mut config = quinn_proto::ClientConfig::new(Arc::new(crypto));
    config.transport_config(options.transport()?);
    Ok(config)
}

/// Lower-case hex of `bytes` (how certificates travel on a command line).
pub fn to_hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// Decodes hex (either case). Errors: [`Error::Config`] for an odd length
/// or a non-hex character.
pub fn from_hex(text: &str) -> Result<Vec<u8>, Error> {
    let digit = |c: u8| -> Result<u8, Error> {
        (c as char)
            .to_digit(16)
            .map(|d| d as u8)
            .ok_or_else(|| Error::Config(format!("`{}` is not a hex digit", c as char)))
    };
    let text = text.trim().as_bytes();
    if !text.len().is_multiple_of(2) {
        return Err(Error::Config("hex text has an odd number of digits".into()));
    }
    text.chunks(2)
        .map(|pair| Ok(digit(pair[0])? << 4 | digit(pair[1])?))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--idle-ms 0` is a clear configuration error, not a connection
    /// that times out at its first packet.
    #[test]
    fn a_zero_idle_timeout_is_refused() {
        let options = Options {
            idle_timeout: Duration::ZERO,
            ..Options::default()
        };
        match options.transport() {
            Err(Error::Config(m)) => assert!(m.contains("idle timeout"), "{m}"),
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("a zero idle timeout was accepted"),
        }
    }
}
