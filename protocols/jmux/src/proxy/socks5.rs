//! SOCKS5 server handshake (RFC 1928), CONNECT only, no authentication,
//! sans-IO: feed the client's bytes, send back what it returns.
//!
//! The JMUX reason codes are SOCKS5's reply codes (1 general failure ... 8
//! address type not supported), so [`reply`] maps an OPEN FAILURE straight
//! onto the reply the SOCKS client sees.

use crate::codec::{Destination, ReasonCode};

/// A SOCKS5 CONNECT request, complete.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Socks5Request {
    /// Where the client wants to go (`tcp://host:port`).
    pub destination: Destination,
    /// Bytes the client sent after its request (data for the target).
    pub leftover: Vec<u8>,
}

/// A handshake that cannot go on. Send [`Socks5Error::reply`] (if any) to
/// the client, then close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Socks5Error {
    /// The first byte is not 5.
    #[error("not SOCKS5: version byte {0}")]
    BadVersion(u8),
    /// The client does not offer "no authentication" (method 0).
    #[error(
        "client offers no acceptable authentication method (only 'no authentication' is supported)"
    )]
    NoAcceptableMethod,
    /// BIND (2) or UDP ASSOCIATE (3), or an unknown command.
    #[error("SOCKS5 command {0} is not supported (only CONNECT)")]
    CommandNotSupported(u8),
    /// An address type other than 1 (IPv4), 3 (name), 4 (IPv6).
    #[error("SOCKS5 address type {0} is not supported")]
    AddressTypeNotSupported(u8),
    /// A domain name (address type 3) that is empty or not UTF-8.
    #[error("SOCKS5 domain name is empty or not UTF-8")]
    BadDomainName,
    /// A reserved byte is not 0.
    #[error("malformed SOCKS5 request")]
    Malformed,
}

impl Socks5Error {
    /// What to send the client before closing, per RFC 1928.
    pub fn reply(&self) -> Option<Vec<u8>> {
        match self {
            Socks5Error::BadVersion(_) => None,
            Socks5Error::NoAcceptableMethod => Some(vec![5, 0xFF]),
            Socks5Error::CommandNotSupported(_) => Some(reply_code(7).to_vec()),
            Socks5Error::AddressTypeNotSupported(_) | Socks5Error::BadDomainName => {
                Some(reply_code(8).to_vec())
            }
            Socks5Error::Malformed => Some(reply_code(1).to_vec()),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    Greeting,
    Request,
    Done,
}

/// The server side of one SOCKS5 handshake.
#[derive(Debug)]
pub struct Socks5Handshake {
    phase: Phase,
    buf: Vec<u8>,
}

impl Default for Socks5Handshake {
    fn default() -> Self {
        Self::new()
    }
}

impl Socks5Handshake {
    /// A handshake waiting for the client's greeting.
    pub fn new() -> Self {
        Self {
            phase: Phase::Greeting,
            buf: Vec::new(),
        }
    }

    /// Feeds bytes from the client. Appends to `out` what must be sent to
    /// the client now (the method selection), and returns the request once
    /// it is complete (`Ok(None)`: more bytes needed). After the request,
    /// open the channel and send [`reply`] with the outcome.
    ///
    /// Errors: [`Socks5Error`]; send its [`Socks5Error::reply`], then close.
    pub fn feed(
        &mut self,
        bytes: &[u8],
        out: &mut Vec<u8>,
    ) -> Result<Option<Socks5Request>, Socks5Error> {
        self.buf.extend_from_slice(bytes);
        loop {
            match self.phase {
                Phase::Greeting => {
                    let Some(&ver) = self.buf.first() else {
                        return Ok(None);
                    };
                    if ver != 5 {
                        return Err(Socks5Error::BadVersion(ver));
                    }
                    let Some(&n) = self.buf.get(1) else {
                        return Ok(None);
                    };
                    let end = 2 + usize::from(n);
                    if self.buf.len() < end {
                        return Ok(None);
                    }
                    if !self.buf[2..end].contains(&0) {
                        return Err(Socks5Error::NoAcceptableMethod);
                    }
                    self.buf.drain(..end);
                    out.extend_from_slice(&[5, 0]);
                    self.phase = Phase::Request;
                }
                Phase::Request => {
                    if self.buf.len() < 5 {
                        return Ok(None);
                    }
                    let (ver, cmd, rsv, atyp) =
                        (self.buf[0], self.buf[1], self.buf[2], self.buf[3]);
                    if ver != 5 {
                        return Err(Socks5Error::BadVersion(ver));
                    }
                    if rsv != 0 {
                        return Err(Socks5Error::Malformed);
                    }
                    if cmd != 1 {
                        return Err(Socks5Error::CommandNotSupported(cmd));
                    }
                    let addr_len = match atyp {
                        1 => 4,
                        4 => 16,
                        3 => 1 + usize::from(self.buf[4]),
                        other => return Err(Socks5Error::AddressTypeNotSupported(other)),
                    };
                    let end = 4 + addr_len + 2;
                    if self.buf.len() < end {
                        return Ok(None);
                    }
                    let addr = &self.buf[4..4 + addr_len];
                    let host = match atyp {
                        1 => {
                            std::net::Ipv4Addr::from(<[u8; 4]>::try_from(addr).unwrap()).to_string()
                        }
                        4 => std::net::Ipv6Addr::from(<[u8; 16]>::try_from(addr).unwrap())
                            .to_string(),
                        _ => match std::str::from_utf8(&addr[1..]) {
                            Ok(name) if !name.is_empty() => name.to_owned(),
                            _ => return Err(Socks5Error::BadDomainName),
                        },
                    };
                    let port = u16::from_be_bytes([self.buf[end - 2], self.buf[end - 1]]);
                    self.phase = Phase::Done;
                    let leftover = self.buf.split_off(end);
                    self.buf = Vec::new();
                    return Ok(Some(Socks5Request {
                        destination: Destination::tcp(host, port),
                        leftover,
                    }));
                }
                Phase::Done => return Ok(None),
            }
        }
    }
}

fn reply_code(code: u8) -> [u8; 10] {
    // VER REP RSV ATYP=IPv4 BND.ADDR=0.0.0.0 BND.PORT=0
    [5, code, 0, 1, 0, 0, 0, 0, 0, 0]
}

/// The reply to a CONNECT: `None` for success (reply code 0), or the JMUX
/// OPEN FAILURE reason, whose code is the SOCKS5 reply code (unknown codes
/// become 1, general failure). Bound address 0.0.0.0:0.
pub fn reply(outcome: Option<ReasonCode>) -> [u8; 10] {
    let code = match outcome {
        None => 0,
        Some(ReasonCode::Unknown(_)) => 1,
        Some(r) => r.to_u32() as u8,
    };
    reply_code(code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_by_name_byte_by_byte_with_leftover() {
        let mut hs = Socks5Handshake::new();
        let mut wire = vec![5, 2, 2, 0];
        wire.extend_from_slice(&[5, 1, 0, 3, 9]);
        wire.extend_from_slice(b"localhost");
        wire.extend_from_slice(&8080u16.to_be_bytes());
        wire.extend_from_slice(b"GET");
        let mut out = Vec::new();
        let mut got = None;
        for (i, b) in wire.iter().enumerate() {
            if let Some(r) = hs.feed(&[*b], &mut out).unwrap() {
                got = Some(r);
                assert_eq!(i, wire.len() - 4, "request complete before the data");
                let rest = hs.feed(&wire[i + 1..], &mut out).unwrap();
                assert!(rest.is_none());
                break;
            }
        }
        assert_eq!(out, vec![5, 0]);
        let r = got.unwrap();
        assert_eq!(r.destination, Destination::tcp("localhost", 8080));
        assert!(r.leftover.is_empty());
    }

    #[test]
    fn connect_ipv4_ipv6_and_pipelined_data() {
        let mut hs = Socks5Handshake::new();
        let mut out = Vec::new();
        let mut wire = vec![5, 1, 0, 5, 1, 0, 1, 127, 0, 0, 1, 0, 80];
        wire.extend_from_slice(b"hello");
        let r = hs.feed(&wire, &mut out).unwrap().unwrap();
        assert_eq!(r.destination, Destination::tcp("127.0.0.1", 80));
        assert_eq!(r.leftover, b"hello");

        let mut hs = Socks5Handshake::new();
        let mut wire = vec![5, 1, 0, 5, 1, 0, 4];
        wire.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        wire.extend_from_slice(&[0, 22]);
        let r = hs.feed(&wire, &mut Vec::new()).unwrap().unwrap();
        assert_eq!(r.destination, Destination::tcp("::1", 22));
    }

    #[test]
    fn refusals_carry_the_rfc_reply() {
        let e = Socks5Handshake::new()
            .feed(&[5, 1, 2], &mut Vec::new())
            .unwrap_err();
        assert_eq!(e, Socks5Error::NoAcceptableMethod);
        assert_eq!(e.reply(), Some(vec![5, 0xFF]));
        let e = Socks5Handshake::new()
            .feed(&[5, 1, 0, 5, 2, 0, 1, 1, 2, 3, 4, 0, 1], &mut Vec::new())
            .unwrap_err();
        assert_eq!(e, Socks5Error::CommandNotSupported(2));
        assert_eq!(e.reply().unwrap()[1], 7);
        let e = Socks5Handshake::new()
            .feed(&[5, 1, 0, 5, 1, 0, 9, 0, 0], &mut Vec::new())
            .unwrap_err();
        assert_eq!(e.reply().unwrap()[1], 8);
        // An empty domain name (address type 3, length 0).
        let e = Socks5Handshake::new()
            .feed(&[5, 1, 0, 5, 1, 0, 3, 0, 0, 80], &mut Vec::new())
            .unwrap_err();
        assert_eq!(e, Socks5Error::BadDomainName);
        assert_eq!(e.reply().unwrap()[1], 8);
        let e = Socks5Handshake::new()
            .feed(&[4, 1, 0, 80], &mut Vec::new())
            .unwrap_err();
        assert_eq!(e, Socks5Error::BadVersion(4));
        assert_eq!(e.reply(), None);
    }

    #[test]
    fn reply_codes_are_the_jmux_reason_codes() {
        assert_eq!(reply(None), [5, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(reply(Some(ReasonCode::ConnectionRefused))[1], 5);
        assert_eq!(reply(Some(ReasonCode::NotAllowedByRuleSet))[1], 2);
        assert_eq!(reply(Some(ReasonCode::TtlExpired))[1], 6);
        assert_eq!(reply(Some(ReasonCode::Unknown(77)))[1], 1);
    }
}
