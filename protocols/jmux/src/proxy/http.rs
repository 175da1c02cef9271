//! HTTP proxy requests (`http-listen://`), sans-IO: parse the request head
//! a client sent to the proxy and decide where the channel goes.
//!
//! - `CONNECT host:port HTTP/1.1` (RFC 9110 section 9.3.6): open a channel
//!   to `host:port`; answer `200` once it is open ([`CONNECT_OK`]), then
//!   relay bytes both ways (a tunnel by design: the client may send its
//!   first tunnel bytes before the `200`).
//! - A plain proxy request with an absolute-form target
//!   (`GET http://host[:port]/path HTTP/1.1`, RFC 9112 section 3.2.2): open a
//!   channel to `host:port` (80 by default) and send the head rewritten to
//!   origin-form (`GET /path HTTP/1.1`) without hop-by-hop fields
//!   (`Proxy-Connection`, `Proxy-Authorization`, `Connection`,
//!   `Keep-Alive`, `TE`, `Trailer`, `Upgrade` unless this is an upgrade,
//!   and whatever `Connection` names except the body's framing
//!   fields; RFC 9110 section 7.6.1), with a `Host` made from the target
//!   in place of the client's (RFC 9112 section 3.2.2) and with
//!   `Connection: close` (RFC 9112 section 9.6), then the request's body,
//!   as the
//!   client's `Content-Length` or `Transfer-Encoding: chunked` frames it
//!   (RFC 9112 section 6.3; no body without either, and framing a
//!   recipient must not guess at is refused with 400:
//!   [`HttpProxyError::BadFraming`]). [`ForwardGate`] finds the body's
//!   end in the client's bytes. Nothing after it reaches the origin: one
//!   request per connection. A keep-alive client's next request, which
//!   may name another origin, is never forwarded on this connection (a
//!   pipelined one is discarded unanswered); the origin closes after its
//!   response (it was sent `Connection: close`), the proxy closes the
//!   client connection after it, and the client sends the next request
//!   on a new connection, where it is parsed, checked and routed on its
//!   own. The origin's response is relayed unchanged.
//! - An upgrade request (`Connection: upgrade` with `Upgrade`) keeps its
//!   `Upgrade` field and goes out with `Connection: upgrade`. What the
//!   client sends after its body is held until the origin's final status
//!   arrives: `101 Switching Protocols` makes the connection a tunnel to
//!   that origin; any other status ends it like a plain request.
//!
//! Heads are parsed with `httparse`.

mod gate;

pub use gate::{BodyError, ForwardGate, GateState};

use crate::codec::{Destination, ReasonCode};

/// Largest request head accepted, in bytes (64 KiB); a longer one is
/// refused with 431.
pub const MAX_HEAD: usize = 64 * 1024;

/// Most header fields accepted in a request head; more are refused with
/// 431.
pub const MAX_HEADERS: usize = 100;

/// The answer to a CONNECT whose channel opened.
pub const CONNECT_OK: &[u8] = b"HTTP/1.1 200 Connection Established\r\n\r\n";

/// What the client asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProxyRequest {
    /// CONNECT: answer [`CONNECT_OK`] once the channel is open.
    Connect {
        /// The tunnel's target.
        destination: Destination,
    },
    /// A plain proxy request: send `head` (rewritten to origin-form) into
    /// the channel first, then only what `gate` admits of the client's
    /// later bytes.
    Forward {
        /// The origin server.
        destination: Destination,
        /// The request head to send to the origin, `\r\n\r\n` included.
        head: Vec<u8>,
        /// Which of the client's bytes after the head may follow it.
        gate: ForwardGate,
    },
}

impl ProxyRequest {
    /// Where the channel goes.
    pub fn destination(&self) -> &Destination {
        match self {
            ProxyRequest::Connect { destination } | ProxyRequest::Forward { destination, .. } => {
                destination
            }
        }
    }
}

/// A request the proxy refuses. Send [`HttpProxyError::response`], then
/// close the connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HttpProxyError {
    /// Not a parsable HTTP/1.x request head.
    #[error("malformed HTTP request: {0}")]
    Malformed(String),
    /// The request target is neither `host:port` (CONNECT) nor an
    /// absolute `http://` URL.
    #[error(
        "unsupported request target `{0}` (expected CONNECT host:port or an absolute http:// URL)"
    )]
    BadTarget(String),
    /// The head is longer than [`MAX_HEAD`].
    #[error("request head larger than {MAX_HEAD} bytes")]
    TooLarge,
    /// The head has more than [`MAX_HEADERS`] header fields.
    #[error("more than {MAX_HEADERS} header fields")]
    TooManyHeaders,
    /// The body's framing is ambiguous or unsupported (see
    /// [`ForwardGate`]'s rules): the proxy could not tell where the
    /// request ends.
    #[error("request body framing refused: {0}")]
    BadFraming(String),
}

impl HttpProxyError {
    /// The response to send before closing (400, or 431 for
    /// [`HttpProxyError::TooLarge`] and [`HttpProxyError::TooManyHeaders`]).
    pub fn response(&self) -> Vec<u8> {
        let status = match self {
            HttpProxyError::TooLarge | HttpProxyError::TooManyHeaders => {
                "431 Request Header Fields Too Large"
            }
            _ => "400 Bad Request",
        };
        response(status, &self.to_string())
    }
}

fn response(status: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {status}\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}\n",
        body.len() + 1
    )
    .into_bytes()
}

/// The answer to a client whose request head did not arrive within the
/// listener's handshake timeout: `408 Request Timeout` (RFC 9110 section
/// 15.5.9), then close.
pub fn timeout_response() -> Vec<u8> {
    response(
        "408 Request Timeout",
        "the request head did not arrive in time",
    )
}

/// The answer to a client accepted while the listeners already run their
/// maximum of handshakes: `503 Service Unavailable` (RFC 9110 section
/// 15.6.4), then close.
pub fn busy_response() -> Vec<u8> {
    response(
        "503 Service Unavailable",
        "too many proxy handshakes in progress",
    )
}

/// The response for a channel that could not be opened: 403 for reason 2
/// (not allowed by rule set), 504 for reason 6 (timeout), 502 otherwise;
/// the body names the reason and the peer's description.
pub fn failure_response(reason: ReasonCode, description: &str) -> Vec<u8> {
    let status = match reason {
        ReasonCode::NotAllowedByRuleSet => "403 Forbidden",
        ReasonCode::TtlExpired => "504 Gateway Timeout",
        _ => "502 Bad Gateway",
    };
    let body = if description.is_empty() {
        format!("JMUX open failed: {reason}")
    } else {
        format!("JMUX open failed: {reason}: {description}")
    };
    response(status, &body)
}

/// Decodes the percent-escapes of a URI host (RFC 3986 section 2.1:
/// `reg-name` may hold them, and a zone id is written `%25`, RFC 6874),
/// so the host meets the rules of what it names. `None` when an escape is
/// malformed or decodes to a byte that is not ASCII.
fn percent_decode(host: &str) -> Option<String> {
    if !host.contains('%') {
        return Some(host.to_owned());
    }
    let bytes = host.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = host.get(i + 1..i + 3)?;
            out.push(u8::from_str_radix(hex, 16).ok().filter(u8::is_ascii)?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

fn split_authority(authority: &str, default_port: Option<u16>) -> Option<Destination> {
    // `[v6]:port`, `host:port`, or `host` with a default port.
    let (host, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        match after.strip_prefix(':') {
            Some(p) => (h, p.parse().ok()?),
            None if after.is_empty() => (h, default_port?),
            None => return None,
        }
    } else {
        match authority.rsplit_once(':') {
            Some((h, p)) if !h.contains(':') => (h, p.parse().ok()?),
            Some(_) => return None,
            None => (authority, default_port?),
        }
    };
    let host = percent_decode(host)?;
    if host.is_empty() || host.contains(['/', '@', ' ']) {
        return None;
    }
    Some(Destination::tcp(host, port))
}

/// A request head arriving in pieces: [`HeadReader::feed`] keeps the
/// bytes and parses them only when a piece could complete the head (an
/// empty line, `\n\n` or `\n\r\n`, arrived; RFC 9112 section 2.2 lets a
/// recipient take a bare LF as a line end), on the first piece (so a
/// client that speaks no HTTP is refused at once) and once the bytes pass
/// [`MAX_HEAD`]. Each byte is searched once: a head dripped a byte at a
/// time costs linear time, where parsing on every piece cost quadratic
/// time (the red team of 2026-12-03: one guest thread serves every
/// tunnel).
#[derive(Debug, Default)]
pub struct HeadReader {
    buf: Vec<u8>,
    /// Bytes of `buf` searched for the empty line (a search starts two
    /// bytes back: an empty line may straddle two pieces).
    searched: usize,
    /// How many times the bytes were parsed.
    parses: usize,
}

impl HeadReader {
    /// A reader with nothing read yet.
    pub fn new() -> HeadReader {
        HeadReader::default()
    }

    /// Bytes held (the head so far), at most [`MAX_HEAD`] plus one piece.
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// Whether nothing is held.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Adds the next `piece` of the client's bytes.
    ///
    /// Returns `Ok(None)` while the head is incomplete, or the request and
    /// the bytes that followed its head (body or tunnel data for the
    /// target).
    ///
    /// Errors: [`HttpProxyError`], as [`parse_request`]; answer with its
    /// response and close.
    pub fn feed(
        &mut self,
        piece: &[u8],
    ) -> Result<Option<(ProxyRequest, Vec<u8>)>, HttpProxyError> {
        self.buf.extend_from_slice(piece);
        let ended = self.empty_line();
        if !(ended || self.parses == 0 || self.buf.len() > MAX_HEAD) {
            return Ok(None);
        }
        self.parses += 1;
        Ok(parse_request(&self.buf)?.map(|(request, n)| (request, self.buf.split_off(n))))
    }

    /// Whether an empty line follows a line end in the unsearched bytes.
    fn empty_line(&mut self) -> bool {
        let buf = &self.buf;
        let from = self.searched.saturating_sub(2);
        let found = buf[from..].iter().enumerate().any(|(i, &b)| {
            let i = from + i;
            b == b'\n'
                && (buf.get(i + 1) == Some(&b'\n')
                    || (buf.get(i + 1) == Some(&b'\r') && buf.get(i + 2) == Some(&b'\n')))
        });
        self.searched = buf.len();
        found
    }
}

/// Parses the request head at the start of `buf`.
///
/// Returns `Ok(None)` while the head is incomplete, or the request and the
/// number of bytes of `buf` the head took (what follows is body or tunnel
/// data for the target).
///
/// Errors: [`HttpProxyError`]; answer with its response and close.
pub fn parse_request(buf: &[u8]) -> Result<Option<(ProxyRequest, usize)>, HttpProxyError> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut req = httparse::Request::new(&mut headers);
    let consumed = match req.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) if buf.len() > MAX_HEAD => {
            return Err(HttpProxyError::TooLarge);
        }
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => return Err(HttpProxyError::TooManyHeaders),
        Err(e) => return Err(HttpProxyError::Malformed(e.to_string())),
    };
    if consumed > MAX_HEAD {
        return Err(HttpProxyError::TooLarge);
    }
    let method = req.method.unwrap_or_default();
    let target = req.path.unwrap_or_default();
    let bad_target = || HttpProxyError::BadTarget(target.to_owned());
    if method.eq_ignore_ascii_case("CONNECT") {
        let destination = split_authority(target, None).ok_or_else(bad_target)?;
        return Ok(Some((ProxyRequest::Connect { destination }, consumed)));
    }
    let rest = target
        .get(..7)
        .filter(|s| s.eq_ignore_ascii_case("http://"))
        .map(|_| &target[7..])
        .ok_or_else(bad_target)?;
    let (authority, path) = match rest.find(['/', '?']) {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    let path = if path.starts_with('?') {
        format!("/{path}")
    } else {
        path.to_owned()
    };
    // Drop any userinfo (`user@host`).
    let authority = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    let destination = split_authority(authority, Some(80)).ok_or_else(bad_target)?;
    let mut head = Vec::with_capacity(consumed);
    head.extend_from_slice(method.as_bytes());
    head.push(b' ');
    head.extend_from_slice(path.as_bytes());
    head.extend_from_slice(format!(" HTTP/1.{}\r\n", req.version.unwrap_or(1)).as_bytes());
    // RFC 9112 section 3.2.2: a proxy ignores the Host the client sent
    // with an absolute-form target and sends one made from the target.
    head.extend_from_slice(b"Host: ");
    head.extend_from_slice(authority.as_bytes());
    head.extend_from_slice(b"\r\n");
    // Hop-by-hop fields (RFC 9110 section 7.6.1): the fixed ones and every
    // field the client's Connection header names. The body's framing
    // (Content-Length, Transfer-Encoding) always passes: the body is
    // relayed as it is, up to its end (the gate). The client's Host never
    // does (above).
    let named: Vec<String> = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case("connection"))
        .flat_map(|h| {
            String::from_utf8_lossy(h.value)
                .split(',')
                .map(|t| t.trim().to_ascii_lowercase())
                .collect::<Vec<_>>()
        })
        .filter(|t| !t.is_empty())
        .collect();
    let has = |name: &str| {
        req.headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case(name))
    };
    // An upgrade (WebSocket, h2c) keeps its Upgrade field and turns the
    // connection into a tunnel to this origin; anything else is one
    // request per connection.
    let upgrade = named.iter().any(|t| t == "upgrade") && has("upgrade");
    // A field name that a server may read as a framing field or as Host
    // once it maps `_` to `-` (CGI-style servers do) would let the client
    // frame the body differently for the origin than for the gate.
    if let Some(h) = req.headers.iter().find(|h| {
        h.name.contains('_') && {
            let name = h.name.replace('_', "-");
            ["content-length", "transfer-encoding", "host"]
                .iter()
                .any(|f| name.eq_ignore_ascii_case(f))
        }
    }) {
        return Err(HttpProxyError::BadFraming(format!(
            "header field `{}` spells a framing field with `_`",
            h.name
        )));
    }
    let gate = ForwardGate::new(req.headers, req.version.unwrap_or(1), upgrade)?;
    let fixed = [
        "proxy-connection",
        "proxy-authorization",
        "connection",
        "keep-alive",
        "te",
        "trailer",
    ];
    let kept = ["content-length", "transfer-encoding"];
    for h in req.headers.iter() {
        let name = h.name.to_ascii_lowercase();
        let hop = if name == "host" {
            true
        } else if name == "upgrade" {
            !upgrade
        } else {
            fixed.contains(&name.as_str())
                || (named.contains(&name) && !kept.contains(&name.as_str()))
        };
        if hop {
            continue;
        }
        head.extend_from_slice(h.name.as_bytes());
        head.extend_from_slice(b": ");
        head.extend_from_slice(h.value);
        head.extend_from_slice(b"\r\n");
    }
    if upgrade {
        head.extend_from_slice(b"Connection: upgrade\r\n\r\n");
    } else {
        head.extend_from_slice(b"Connection: close\r\n\r\n");
    }
    Ok(Some((
        ProxyRequest::Forward {
            destination,
            head,
            gate,
        },
        consumed,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_requests() {
        let req = b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\n\r\nTLS";
        let (r, n) = parse_request(req).unwrap().unwrap();
        assert_eq!(
            r,
            ProxyRequest::Connect {
                destination: Destination::tcp("example.com", 443)
            }
        );
        assert_eq!(&req[n..], b"TLS");
        let (r, _) = parse_request(b"CONNECT [::1]:22 HTTP/1.1\r\n\r\n")
            .unwrap()
            .unwrap();
        assert_eq!(r.destination(), &Destination::tcp("::1", 22));
        // Percent-escapes in the host are decoded (RFC 3986 section 2.1),
        // a zone id is written %25 (RFC 6874).
        for (head, host) in [
            (
                &b"CONNECT %31%32%37.0.0.1:80 HTTP/1.1\r\n\r\n"[..],
                "127.0.0.1",
            ),
            (b"CONNECT %6C%6Fcalhost:80 HTTP/1.1\r\n\r\n", "localhost"),
            (
                b"CONNECT [fe80::1%25eth0]:80 HTTP/1.1\r\n\r\n",
                "fe80::1%eth0",
            ),
            (b"GET http://%30x7f.1/ HTTP/1.1\r\n\r\n", "0x7f.1"),
        ] {
            let (r, _) = parse_request(head).unwrap().unwrap();
            assert_eq!(r.destination().host, host);
        }
        for bad in [
            &b"CONNECT %zz:80 HTTP/1.1\r\n\r\n"[..],
            b"CONNECT a%2Fb:80 HTTP/1.1\r\n\r\n",
            b"CONNECT %C3%BC:80 HTTP/1.1\r\n\r\n",
        ] {
            assert!(matches!(
                parse_request(bad),
                Err(HttpProxyError::BadTarget(_))
            ));
        }
        assert!(matches!(
            parse_request(b"CONNECT example.com HTTP/1.1\r\n\r\n"),
            Err(HttpProxyError::BadTarget(_))
        ));
    }

    #[test]
    fn partial_heads_wait_for_more() {
        let req = b"CONNECT a:1 HTTP/1.1\r\nHost: a\r\n\r\n";
        for i in 0..req.len() {
            assert_eq!(parse_request(&req[..i]).unwrap(), None, "at {i}");
        }
    }

    /// The head a plain proxy request is forwarded with.
    fn forwarded_head(request: &[u8]) -> String {
        let (r, _) = parse_request(request).unwrap().unwrap();
        let ProxyRequest::Forward { head, .. } = r else {
            panic!("not a plain proxy request")
        };
        String::from_utf8(head).unwrap()
    }

    #[test]
    fn plain_proxy_requests_are_rewritten_to_origin_form() {
        let req = b"POST http://127.0.0.1:8080/up?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nProxy-Connection: keep-alive\r\nConnection: keep-alive\r\nKeep-Alive: timeout=5\r\nContent-Length: 4\r\n\r\nbody";
        let (r, n) = parse_request(req).unwrap().unwrap();
        let ProxyRequest::Forward {
            destination, head, ..
        } = r
        else {
            panic!("not forward")
        };
        assert_eq!(destination, Destination::tcp("127.0.0.1", 8080));
        assert_eq!(
            String::from_utf8(head).unwrap(),
            "POST /up?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nContent-Length: 4\r\nConnection: close\r\n\r\n"
        );
        assert_eq!(&req[n..], b"body");
        // Fields named by Connection and TE are hop-by-hop; framing stays.
        assert_eq!(
            forwarded_head(
                b"POST http://a/ HTTP/1.1\r\nConnection: close, X-Secret\r\nX-Secret: 1\r\nTE: trailers\r\nTrailer: X-Sum\r\nTransfer-Encoding: chunked\r\nUpgrade: h2c\r\n\r\n"
            ),
            "POST / HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        );
        // An upgrade keeps Upgrade and asks for it.
        assert_eq!(
            forwarded_head(
                b"GET http://a/ws HTTP/1.1\r\nHost: a\r\nConnection: keep-alive, Upgrade\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n"
            ),
            "GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\nConnection: upgrade\r\n\r\n"
        );
        let (r, _) = parse_request(b"GET http://u@example.com HTTP/1.0\r\n\r\n")
            .unwrap()
            .unwrap();
        let ProxyRequest::Forward {
            destination, head, ..
        } = r
        else {
            panic!()
        };
        assert_eq!(destination, Destination::tcp("example.com", 80));
        assert!(head.starts_with(b"GET / HTTP/1.0\r\nHost: example.com\r\n"));
    }

    #[test]
    fn the_host_sent_is_the_targets_not_the_clients() {
        // RFC 9112 section 3.2.2: the client's Host (one, several, or
        // named by Connection) gives way to the target's authority.
        for req in [
            &b"GET http://127.0.0.1:8080/x HTTP/1.1\r\nHost: internal.example\r\n\r\n"[..],
            b"GET http://127.0.0.1:8080/x HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
            b"GET http://127.0.0.1:8080/x HTTP/1.1\r\nConnection: Host\r\nHost: a\r\n\r\n",
            b"GET http://user@127.0.0.1:8080/x HTTP/1.1\r\n\r\n",
        ] {
            assert_eq!(
                forwarded_head(req),
                "GET /x HTTP/1.1\r\nHost: 127.0.0.1:8080\r\nConnection: close\r\n\r\n",
                "{}",
                String::from_utf8_lossy(req)
            );
        }
    }

    #[test]
    fn framing_fields_spelled_with_underscores_are_refused() {
        for name in ["Transfer_Encoding", "content_length", "HOST_"] {
            let req = format!("POST http://a/ HTTP/1.1\r\n{name}: 5\r\n\r\n");
            let e = parse_request(req.as_bytes()).err();
            if name == "HOST_" {
                assert!(e.is_none(), "{name}: {e:?}");
            } else {
                assert!(
                    matches!(e, Some(HttpProxyError::BadFraming(_))),
                    "{name}: {e:?}"
                );
            }
        }
    }

    #[test]
    fn a_dripped_head_is_parsed_once_it_can_be_complete() {
        let mut head = b"GET http://a/ HTTP/1.1\r\nX: ".to_vec();
        head.extend(std::iter::repeat_n(b'a', 60_000));
        head.extend_from_slice(b"\r\n\r\nbody");
        let mut reader = HeadReader::new();
        let mut done = None;
        for (i, b) in head.iter().enumerate() {
            if let Some(r) = reader.feed(std::slice::from_ref(b)).unwrap() {
                done = Some((i, r));
                break;
            }
        }
        let (i, (request, rest)) = done.expect("the head completes");
        assert_eq!(i, head.len() - 5, "complete at its empty line");
        assert!(rest.is_empty());
        assert_eq!(request.destination(), &Destination::tcp("a", 80));
        // The first piece and the one with the empty line: never once a
        // piece (parsing 60 KB on each of 60,000 pieces was the attack).
        assert_eq!(reader.parses, 2);

        // Bare LF line ends, an empty line split across pieces, and what
        // follows the head in the same piece.
        let mut reader = HeadReader::new();
        assert!(reader.feed(b"CONNECT a:1 HTTP/1.1\n").unwrap().is_none());
        assert!(reader.feed(b"X: 1\r").unwrap().is_none());
        assert!(reader.feed(b"\n\r").unwrap().is_none());
        let (request, rest) = reader.feed(b"\nTLS").unwrap().unwrap();
        assert_eq!(request.destination(), &Destination::tcp("a", 1));
        assert_eq!(rest, b"TLS");

        // Not HTTP: refused on the first piece, not after MAX_HEAD bytes.
        let mut reader = HeadReader::new();
        assert!(matches!(
            reader.feed(b"\x16\x03\x01\x02\x00"),
            Err(HttpProxyError::Malformed(_))
        ));

        // No empty line ever: refused once past MAX_HEAD.
        let mut reader = HeadReader::new();
        assert!(
            reader
                .feed(b"GET http://a/ HTTP/1.1\r\nX: ")
                .unwrap()
                .is_none()
        );
        let chunk = [b'a'; 4096];
        let e = (0..=MAX_HEAD / chunk.len())
            .find_map(|_| reader.feed(&chunk).err())
            .expect("refused");
        assert_eq!(e, HttpProxyError::TooLarge);
        assert!(reader.len() <= MAX_HEAD + chunk.len());
    }

    #[test]
    fn refusals() {
        assert!(matches!(
            parse_request(b"GET /relative HTTP/1.1\r\n\r\n"),
            Err(HttpProxyError::BadTarget(_))
        ));
        assert!(matches!(
            parse_request(b"GET https://x/ HTTP/1.1\r\n\r\n"),
            Err(HttpProxyError::BadTarget(_))
        ));
        assert!(matches!(
            parse_request(b"\x16\x03\x01garbage\r\n\r\n"),
            Err(HttpProxyError::Malformed(_))
        ));
        let mut big = b"GET http://a/ HTTP/1.1\r\nX: ".to_vec();
        big.extend(std::iter::repeat_n(b'a', MAX_HEAD + 1));
        let e = parse_request(&big).unwrap_err();
        assert_eq!(e, HttpProxyError::TooLarge);
        assert!(e.response().starts_with(b"HTTP/1.1 431 "));
        let mut many = b"GET http://a/ HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_HEADERS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        let e = parse_request(&many).unwrap_err();
        assert_eq!(e, HttpProxyError::TooManyHeaders);
        assert!(e.response().starts_with(b"HTTP/1.1 431 "));
        assert!(e.to_string().contains("header fields"), "{e}");
        let r = failure_response(ReasonCode::NotAllowedByRuleSet, "denied: x:1");
        assert!(r.starts_with(b"HTTP/1.1 403 "));
        assert!(failure_response(ReasonCode::ConnectionRefused, "").starts_with(b"HTTP/1.1 502 "));
        assert!(timeout_response().starts_with(b"HTTP/1.1 408 "));
        assert!(busy_response().starts_with(b"HTTP/1.1 503 "));
    }

    /// The gate of a plain proxy request, and the bytes after its head.
    fn gated(request: &[u8]) -> (ForwardGate, &[u8]) {
        let (r, n) = parse_request(request).unwrap().unwrap();
        let ProxyRequest::Forward { gate, .. } = r else {
            panic!("not a plain proxy request")
        };
        (gate, &request[n..])
    }

    /// What the gate admits of `rest`, fed whole and in every two-piece
    /// split and one byte at a time (all must agree), and its state after.
    fn admitted(gate: &ForwardGate, rest: &[u8]) -> (usize, GateState) {
        let mut whole = gate.clone();
        let n = whole.admit(rest).unwrap();
        let feed = |pieces: &mut dyn Iterator<Item = &[u8]>| {
            let mut g = gate.clone();
            let mut total = 0;
            for piece in pieces {
                let k = g.admit(piece).unwrap();
                total += k;
                if k < piece.len() {
                    break;
                }
            }
            (total, g.state())
        };
        for cut in 0..=rest.len() {
            let (a, b) = rest.split_at(cut);
            assert_eq!(
                feed(&mut [a, b].into_iter()),
                (n, whole.state()),
                "cut {cut}"
            );
        }
        assert_eq!(
            feed(&mut rest.chunks(1)),
            (n, whole.state()),
            "byte by byte"
        );
        (n, whole.state())
    }

    const SECOND: &[u8] = b"GET http://127.0.0.1:9/b HTTP/1.1\r\nHost: 127.0.0.1:9\r\nProxy-Authorization: Basic c2VjcmV0OnB3\r\n\r\n";

    #[test]
    fn a_pipelined_request_after_a_bodiless_request_reaches_no_origin() {
        let mut req = b"GET http://127.0.0.1:8/a HTTP/1.1\r\nHost: 127.0.0.1:8\r\nProxy-Authorization: Basic c2VjcmV0OnB3\r\n\r\n".to_vec();
        req.extend_from_slice(SECOND);
        let (gate, rest) = gated(&req);
        assert_eq!(rest, SECOND);
        assert_eq!(gate.state(), GateState::Closed);
        assert_eq!(admitted(&gate, rest), (0, GateState::Closed));
        // HTTP/1.0 and a request without framing fields: no body either.
        let mut req = b"DELETE http://a/x HTTP/1.0\r\n\r\n".to_vec();
        req.extend_from_slice(SECOND);
        let (gate, rest) = gated(&req);
        assert_eq!(admitted(&gate, rest), (0, GateState::Closed));
    }

    #[test]
    fn a_content_length_body_passes_and_what_follows_it_does_not() {
        for len in [1usize, 5, 70_000] {
            let body = vec![b'x'; len];
            let mut req = format!(
                "POST http://a/up HTTP/1.1\r\nContent-Length: {len}\r\nContent-Length: {len}, {len}\r\n\r\n"
            )
            .into_bytes();
            req.extend_from_slice(&body);
            req.extend_from_slice(SECOND);
            let (gate, rest) = gated(&req);
            assert_eq!(gate.state(), GateState::Body);
            if len < 100 {
                assert_eq!(admitted(&gate, rest), (len, GateState::Closed));
            }
            let mut g = gate.clone();
            assert_eq!(g.admit(rest), Ok(len));
            assert_eq!(g.state(), GateState::Closed);
            assert_eq!(g.admit(SECOND), Ok(0));
        }
    }

    #[test]
    fn a_chunked_body_passes_to_its_last_chunk_and_trailers_and_no_further() {
        let body: &[u8] = b"5\r\nhello\r\n1A;name=\"v;x\"\t;y\r\nabcdefghijklmnopqrstuvwxyz\r\n000\r\nX-Sum: 1\r\nX-More: a b\r\n\r\n";
        let mut req =
            b"PUT http://a/up HTTP/1.1\r\nTransfer-Encoding: gzip , chunked\r\n\r\n".to_vec();
        req.extend_from_slice(body);
        req.extend_from_slice(SECOND);
        let (gate, rest) = gated(&req);
        assert_eq!(admitted(&gate, rest), (body.len(), GateState::Closed));
        // Without trailers; and a body whose hex size uses leading zeros.
        let body: &[u8] = b"0003\r\nabc\r\n0\r\n\r\n";
        let mut req = b"POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
        req.extend_from_slice(body);
        req.extend_from_slice(b"0\r\n\r\n");
        let (gate, rest) = gated(&req);
        assert_eq!(admitted(&gate, rest), (body.len(), GateState::Closed));
        // Cut short: all of it is body so far.
        let (gate, _) = gated(b"POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        assert_eq!(admitted(&gate, b"5\r\nhel"), (6, GateState::Body));
    }

    #[test]
    fn malformed_chunked_bodies_stop_the_gate() {
        let (gate, _) = gated(b"POST http://a/ HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n");
        for bad in [
            &b"\r\n"[..],
            b"x\r\n",
            b"-1\r\n",
            b"5\nhello\r\n0\r\n\r\n",
            b"5\r\nhello\n0\r\n\r\n",
            b"5\r\nhelloX\r\n",
            b"5;a\nb\r\n",
            b"5;\x00\r\n",
            b"1\rX",
            b"0\r\nX-Sum: 1\n\r\n",
            b"0\r\n\n",
            b"0\r\n\rX",
            b"10000000000000000\r\n",
        ] {
            let mut g = gate.clone();
            assert!(g.admit(bad).is_err(), "{:?}", String::from_utf8_lossy(bad));
            assert_eq!(g.state(), GateState::Closed);
            assert_eq!(g.admit(b"0\r\n\r\n"), Ok(0));
        }
        // The largest chunk size is fine.
        let mut g = gate.clone();
        assert_eq!(g.admit(b"ffffffffffffffff\r\nab"), Ok(20));
        assert_eq!(g.state(), GateState::Body);
    }

    #[test]
    fn framing_a_proxy_cannot_be_sure_of_is_refused() {
        let cases = [
            ("1.1", "Content-Length: 3\r\nTransfer-Encoding: chunked"),
            ("1.1", "Transfer-Encoding: chunked\r\nContent-Length: 3"),
            ("1.1", "Transfer-Encoding: gzip"),
            ("1.1", "Transfer-Encoding: chunked, gzip"),
            (
                "1.1",
                "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
            ),
            ("1.1", "Transfer-Encoding: "),
            ("1.0", "Transfer-Encoding: chunked"),
            ("1.1", "Content-Length: 3\r\nContent-Length: 4"),
            ("1.1", "Content-Length: 3, 4"),
            ("1.1", "Content-Length: +3"),
            ("1.1", "Content-Length: 0x3"),
            ("1.1", "Content-Length: "),
            ("1.1", "Content-Length: 99999999999999999999"),
        ];
        for (version, fields) in cases {
            let head = format!("POST http://a/ HTTP/{version}\r\n{fields}\r\n\r\n");
            let e = parse_request(head.as_bytes()).unwrap_err();
            assert!(
                matches!(e, HttpProxyError::BadFraming(_)),
                "{head:?}: {e:?}"
            );
            assert!(e.response().starts_with(b"HTTP/1.1 400 "));
        }
        // CONNECT has no body framing to check.
        assert!(parse_request(b"CONNECT a:1 HTTP/1.1\r\nContent-Length: x\r\n\r\n").is_ok());
    }

    #[test]
    fn an_upgrade_holds_later_bytes_until_the_origin_answers() {
        let req = b"GET http://a/ws HTTP/1.1\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n";
        let (gate, _) = gated(req);
        assert_eq!(gate.state(), GateState::AwaitingUpgrade);
        assert_eq!(
            admitted(&gate, b"\x81\x05hello"),
            (0, GateState::AwaitingUpgrade)
        );
        let switch: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x81\x02hi";
        // Every cut before the end of the 101 head.
        for cut in 0..switch.len() - 4 {
            let mut g = gate.clone();
            g.observe_response(&switch[..cut]);
            assert_eq!(g.state(), GateState::AwaitingUpgrade, "cut {cut}");
            g.observe_response(&switch[cut..]);
            assert_eq!(g.state(), GateState::Tunnel, "cut {cut}");
            assert_eq!(g.admit(b"\x81\x05hello"), Ok(7));
        }
        for answer in [
            &b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"[..],
            b"HTTP/1.1 426 Upgrade Required\r\n\r\n",
            b"garbage\r\n\r\n",
        ] {
            let mut g = gate.clone();
            g.observe_response(answer);
            assert_eq!(g.state(), GateState::Closed);
            assert_eq!(g.admit(SECOND), Ok(0));
        }
        let mut g = gate.clone();
        g.observe_response(&vec![b'H'; MAX_HEAD + 1]);
        assert_eq!(g.state(), GateState::Closed);
        // An upgrade with a body: the body first, then the hold; a 101
        // that came early opens the tunnel once the body is through.
        let (mut g, _) = gated(b"POST http://a/ HTTP/1.1\r\nConnection: upgrade\r\nUpgrade: x\r\nContent-Length: 2\r\n\r\n");
        g.observe_response(b"HTTP/1.1 101 Switching Protocols\r\n\r\n");
        assert_eq!(g.state(), GateState::Body);
        assert_eq!(g.admit(b"ab, then tunnel"), Ok(15));
        assert_eq!(g.state(), GateState::Tunnel);
        // A plain request ignores the origin's bytes.
        let (mut g, _) = gated(b"GET http://a/ HTTP/1.1\r\n\r\n");
        g.observe_response(b"HTTP/1.1 101 Switching Protocols\r\n\r\n");
        assert_eq!(g.state(), GateState::Closed);
    }
}
