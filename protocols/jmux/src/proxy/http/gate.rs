//! Which of a plain proxy client's bytes after the request head may reach
//! the origin (sans-IO): the request's body, framed as the head says
//! (RFC 9112 section 6.3), and nothing after it, unless the request was an
//! upgrade the origin accepted (`101 Switching Protocols`, RFC 9110
//! section 15.2.2), after which the connection is a tunnel.
//!
//! A byte past the body is the start of the client's next request (a
//! pipelined or keep-alive request). It is never forwarded: the proxy
//! carries one request per connection, and the next request must come on
//! a new connection, where it is parsed, checked and routed on its own.

use super::{HttpProxyError, MAX_HEAD, MAX_HEADERS};

/// Where a forwarded request stands, as [`ForwardGate::state`] reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GateState {
    /// In the request's body: [`ForwardGate::admit`] passes body bytes.
    Body,
    /// The request (an upgrade) is complete and the origin's answer is
    /// not known yet: hold what the client sends next (do not read it),
    /// and feed the origin's bytes to [`ForwardGate::observe_response`].
    AwaitingUpgrade,
    /// The request is complete: nothing more from the client may reach
    /// the origin. Discard what it sends (or stop reading it).
    Closed,
    /// The origin switched protocols: every byte passes, both ways.
    Tunnel,
}

/// A chunked request body whose framing is malformed (RFC 9112 section
/// 7.1). The origin has seen part of the request; abort the channel and
/// close the client connection.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed chunked request body: {0}")]
pub struct BodyError(&'static str);

/// How the body is framed, and where in it the client is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    /// `Content-Length` (or no body at all: 0): bytes still to come.
    Length(u64),
    /// `Transfer-Encoding: chunked`, at this point of the coding.
    Chunked(Chunk),
    /// The body ended (or its framing was malformed).
    Done,
}

/// A position in the chunked coding (RFC 9112 section 7.1): `chunk-size
/// [chunk-ext] CRLF chunk-data CRLF`, ..., `0 [chunk-ext] CRLF`, trailer
/// fields, `CRLF`. Line ends are CRLF only; a bare CR or LF is an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Chunk {
    /// At the start of a chunk-size line (at least one hex digit due).
    SizeStart,
    /// In the chunk-size digits.
    Size(u64),
    /// In a chunk extension (after `;` or whitespace), up to CR.
    Ext(u64),
    /// After the size line's CR.
    SizeLf(u64),
    /// In chunk data: bytes left.
    Data(u64),
    /// After chunk data: CR due.
    DataCr,
    /// After chunk data and CR: LF due.
    DataLf,
    /// After the last chunk, at the start of a trailer line (or of the
    /// final empty line).
    TrailerStart,
    /// Inside a trailer line.
    TrailerLine,
    /// After a trailer line's CR.
    TrailerLf,
    /// After the final empty line's CR.
    EndLf,
}

/// Whether the request asked to switch protocols, and what the origin
/// answered.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Upgrade {
    /// Not an upgrade request.
    No,
    /// Waiting for the origin's final status: the response bytes so far
    /// (interim `1xx` heads other than `101` are dropped as they end).
    Waiting(Vec<u8>),
    /// `101`: a tunnel once the request's body is through.
    Switched,
    /// Any other final status, or an unparsable response.
    Refused,
}

/// The gate between a plain proxy client and its origin, for the bytes
/// after the request head (returned with
/// [`ProxyRequest::Forward`](super::ProxyRequest::Forward)).
///
/// Feed every byte the client sends after the head, in order, to
/// [`ForwardGate::admit`]: it says how many of them, from the front, may
/// go to the origin; then [`ForwardGate::state`] says what to do with the
/// rest. For an upgrade request, feed the origin's bytes to
/// [`ForwardGate::observe_response`] as they go to the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ForwardGate {
    body: Body,
    upgrade: Upgrade,
}

impl ForwardGate {
    /// The gate for a request head's `headers` (HTTP/1.`minor`), and
    /// whether it is an upgrade request.
    ///
    /// Errors ([`HttpProxyError::BadFraming`], answered with 400): framing
    /// a recipient must not guess at (RFC 9112 section 6.3): both
    /// `Transfer-Encoding` and `Content-Length`; a transfer coding list
    /// whose last coding is not `chunked`, or that has `chunked` twice;
    /// `Transfer-Encoding` in an HTTP/1.0 request; a `Content-Length` that
    /// is not one decimal number (identical repeats allowed).
    pub(super) fn new(
        headers: &[httparse::Header<'_>],
        minor: u8,
        upgrade: bool,
    ) -> Result<ForwardGate, HttpProxyError> {
        let bad = |why: &str| HttpProxyError::BadFraming(why.to_owned());
        let mut codings: Vec<String> = Vec::new();
        let mut length: Option<u64> = None;
        let mut any_length = false;
        for h in headers {
            let value = std::str::from_utf8(h.value)
                .map_err(|_| bad("a framing field that is not ASCII"))?;
            if h.name.eq_ignore_ascii_case("transfer-encoding") {
                codings.extend(
                    value
                        .split(',')
                        .map(|c| c.trim_matches([' ', '\t']).to_ascii_lowercase())
                        .filter(|c| !c.is_empty()),
                );
            } else if h.name.eq_ignore_ascii_case("content-length") {
                any_length = true;
                for v in value.split(',').map(|v| v.trim_matches([' ', '\t'])) {
                    if v.is_empty() || !v.bytes().all(|b| b.is_ascii_digit()) {
                        return Err(bad("Content-Length is not a decimal number"));
                    }
                    let n: u64 = v.parse().map_err(|_| bad("Content-Length is too large"))?;
                    if length.is_some_and(|l| l != n) {
                        return Err(bad("Content-Length fields disagree"));
                    }
                    length = Some(n);
                }
            }
        }
        let has_te = headers
            .iter()
            .any(|h| h.name.eq_ignore_ascii_case("transfer-encoding"));
        let body = if has_te {
            if minor == 0 {
                return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
            }
            if any_length {
                return Err(bad("both Transfer-Encoding and Content-Length"));
            }
            if codings.last().map(String::as_str) != Some("chunked") {
                return Err(bad("the last transfer coding is not chunked"));
            }
            if codings.iter().filter(|c| *c == "chunked").count() > 1 {
                return Err(bad("chunked applied more than once"));
            }
            Body::Chunked(Chunk::SizeStart)
        } else if any_length {
            Body::Length(length.ok_or_else(|| bad("an empty Content-Length"))?)
        } else {
            // RFC 9112 section 6.3, rule 6: a request with neither has no
            // body.
            Body::Length(0)
        };
        let mut gate = ForwardGate {
            body,
            upgrade: if upgrade {
                Upgrade::Waiting(Vec::new())
            } else {
                Upgrade::No
            },
        };
        if gate.body == Body::Length(0) {
            gate.body = Body::Done;
        }
        Ok(gate)
    }

    /// Where the request stands (what to do with the bytes
    /// [`ForwardGate::admit`] did not pass).
    pub fn state(&self) -> GateState {
        match (&self.body, &self.upgrade) {
            (Body::Length(_) | Body::Chunked(_), _) => GateState::Body,
            (Body::Done, Upgrade::Waiting(_)) => GateState::AwaitingUpgrade,
            (Body::Done, Upgrade::Switched) => GateState::Tunnel,
            (Body::Done, Upgrade::No | Upgrade::Refused) => GateState::Closed,
        }
    }

    /// Takes the next bytes the client sent (after the head and every
    /// byte passed to earlier calls) and returns how many of them, from
    /// the front, may go to the origin: the rest of the body, or all of
    /// them in a tunnel. Bytes past that are the client's next request
    /// (or, while [`GateState::AwaitingUpgrade`], possibly early tunnel
    /// bytes): see [`ForwardGate::state`].
    ///
    /// Errors: [`BodyError`] when the chunked coding is malformed (the
    /// bytes before the error are not passed either); the gate is then
    /// [`GateState::Closed`].
    pub fn admit(&mut self, bytes: &[u8]) -> Result<usize, BodyError> {
        let mut used = 0;
        while used < bytes.len() {
            match &mut self.body {
                Body::Done => {
                    if self.state() == GateState::Tunnel {
                        return Ok(bytes.len());
                    }
                    break;
                }
                Body::Length(left) => {
                    let n = (bytes.len() - used).min(usize::try_from(*left).unwrap_or(usize::MAX));
                    used += n;
                    *left -= n as u64;
                    if *left == 0 {
                        self.body = Body::Done;
                    }
                }
                Body::Chunked(chunk) => match step(chunk, &bytes[used..]) {
                    Ok((n, done)) => {
                        used += n;
                        if done {
                            self.body = Body::Done;
                        }
                    }
                    Err(e) => {
                        self.body = Body::Done;
                        self.upgrade = Upgrade::Refused;
                        return Err(e);
                    }
                },
            }
        }
        Ok(used)
    }

    /// Takes the next bytes the origin sent (for an upgrade request; a
    /// no-op otherwise): its final status decides whether the connection
    /// becomes a tunnel (`101`) or the request is over (anything else,
    /// including a response head that does not parse or is longer than
    /// [`MAX_HEAD`]).
    pub fn observe_response(&mut self, bytes: &[u8]) {
        let Upgrade::Waiting(buf) = &mut self.upgrade else {
            return;
        };
        buf.extend_from_slice(bytes);
        loop {
            let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(buf) {
                Ok(httparse::Status::Complete(n)) => match resp.code {
                    Some(101) => self.upgrade = Upgrade::Switched,
                    Some(100..=199) => {
                        buf.drain(..n);
                        continue;
                    }
                    _ => self.upgrade = Upgrade::Refused,
                },
                Ok(httparse::Status::Partial) if buf.len() <= MAX_HEAD => {}
                _ => self.upgrade = Upgrade::Refused,
            }
            return;
        }
    }
}

/// Advances a chunked body over `bytes`: how many were used, and whether
/// the body ended there.
fn step(chunk: &mut Chunk, bytes: &[u8]) -> Result<(usize, bool), BodyError> {
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if let Chunk::Data(left) = chunk {
            let n = (bytes.len() - i).min(usize::try_from(*left).unwrap_or(usize::MAX));
            i += n;
            *left -= n as u64;
            if *left == 0 {
                *chunk = Chunk::DataCr;
            }
            continue;
        }
        i += 1;
        *chunk = match (*chunk, b) {
            (Chunk::SizeStart, _) => Chunk::Size(hex(b).ok_or(BodyError("no chunk size"))?),
            (Chunk::Size(size), _) if hex(b).is_some() => Chunk::Size(
                size.checked_mul(16)
                    .and_then(|s| s.checked_add(hex(b)?))
                    .ok_or(BodyError("chunk size too large"))?,
            ),
            (Chunk::Size(size), b';' | b' ' | b'\t') => Chunk::Ext(size),
            (Chunk::Size(size) | Chunk::Ext(size), b'\r') => Chunk::SizeLf(size),
            (Chunk::Ext(_), b'\n') => return Err(BodyError("bare LF in a chunk extension")),
            (Chunk::Ext(size), b) if b == b'\t' || !b.is_ascii_control() => Chunk::Ext(size),
            (Chunk::SizeLf(0), b'\n') => Chunk::TrailerStart,
            (Chunk::SizeLf(size), b'\n') => Chunk::Data(size),
            (Chunk::DataCr, b'\r') => Chunk::DataLf,
            (Chunk::DataLf, b'\n') => Chunk::SizeStart,
            (Chunk::TrailerStart, b'\r') => Chunk::EndLf,
            (Chunk::TrailerStart | Chunk::TrailerLine, b'\n') => {
                return Err(BodyError("bare LF in the trailer section"));
            }
            (Chunk::TrailerLine, b'\r') => Chunk::TrailerLf,
            (Chunk::TrailerStart | Chunk::TrailerLine, _) => Chunk::TrailerLine,
            (Chunk::TrailerLf, b'\n') => Chunk::TrailerStart,
            (Chunk::EndLf, b'\n') => return Ok((i, true)),
            (Chunk::Size(_), _) => return Err(BodyError("bad byte in a chunk size")),
            (Chunk::Ext(_), _) => return Err(BodyError("control byte in a chunk extension")),
            (Chunk::DataCr | Chunk::DataLf, _) => {
                return Err(BodyError("chunk data not followed by CRLF"));
            }
            (Chunk::SizeLf(_) | Chunk::TrailerLf | Chunk::EndLf, _) => {
                return Err(BodyError("CR not followed by LF"));
            }
            (Chunk::Data(_), _) => unreachable!("handled above"),
        };
    }
    Ok((i, false))
}

fn hex(b: u8) -> Option<u64> {
    (b as char).to_digit(16).map(u64::from)
}
