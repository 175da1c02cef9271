//! The listener's check of a client's opening handshake (RFC 6455 section
//! 4.2.1), made on the request head before the upgrade, and the HTTP error
//! response for each way a request fails it (sections 4.2.2, 4.4, 11.3.1
//! and 11.3.5; RFC 9110 section 15.5.22; RFC 9112 section 3.2).
//!
//! tungstenite's server handshake checks less (it takes a repeated
//! `Sec-WebSocket-Key`, a missing `Host`) and closes the connection with no
//! answer on an error, so a client cannot tell a bad request from a network
//! fault. Every refusal here gets a status line, a one-line reason as the
//! body, `Sec-WebSocket-Version: 13` (the version this server speaks) and
//! `Connection: close`.

/// Most header lines a request head may have; past it the answer is 431.
/// As many as tungstenite's server handshake parses (124): a head between
/// the two passed this check and then failed there, and the client got a
/// bare close instead of an answer (the red team's eighth round: 125 to
/// 128 lines).
pub(crate) const MAX_REQUEST_HEADERS: usize =
    tokio_tungstenite::tungstenite::handshake::headers::MAX_HEADERS;

/// Where the request head (up to its blank line, `\r\n\r\n`, or all
/// of `head` while it has none) has an LF not preceded by CR, if it has
/// one. RFC 9112 section 2.2 lets a server take a bare LF as a line end;
/// this one refuses it (400), the Node host's `ws` alike: a head whose
/// lines end in bare LF never showed its `\r\n\r\n` blank line and
/// waited for the handshake timeout (the red team's eighth round).
pub(crate) fn bare_lf(head: &[u8]) -> Option<usize> {
    let end = head
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .unwrap_or(head.len());
    (0..end).find(|&i| head[i] == b'\n' && (i == 0 || head[i - 1] != b'\r'))
}

/// Why an upgrade request was refused, and so which HTTP status it gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// 400 Bad Request: not a valid HTTP/1.1 request head, or a header
    /// that RFC 6455 section 4.2.1 requires is missing, malformed, or
    /// repeated where section 11.3 allows it once. The text says which.
    BadRequest(&'static str),
    /// 405 Method Not Allowed: the method is not GET (section 4.2.1 item
    /// 1); the answer carries `Allow: GET`.
    MethodNotAllowed,
    /// 426 Upgrade Required: no `Upgrade: websocket` (a plain HTTP
    /// request), or a `Sec-WebSocket-Version` other than 13 (section 4.4).
    /// The answer carries `Upgrade: websocket`.
    UpgradeRequired(&'static str),
    /// 431 Request Header Fields Too Large: more than
    /// [`MAX_REQUEST_HEADERS`] header lines.
    TooManyHeaders,
}

impl Refusal {
    /// The reason, one line of text (the response body and the log line).
    pub(crate) fn reason(self) -> &'static str {
        match self {
            Refusal::BadRequest(why) | Refusal::UpgradeRequired(why) => why,
            Refusal::MethodNotAllowed => "the opening handshake must be a GET request",
            Refusal::TooManyHeaders => "too many header lines in the request head",
        }
    }

    /// The whole HTTP/1.1 response: status line, headers, the reason as a
    /// `text/plain` body.
    pub(crate) fn response(self) -> Vec<u8> {
        let (status, extra) = match self {
            Refusal::BadRequest(_) => ("400 Bad Request", ""),
            Refusal::MethodNotAllowed => ("405 Method Not Allowed", "Allow: GET\r\n"),
            Refusal::UpgradeRequired(_) => ("426 Upgrade Required", "Upgrade: websocket\r\n"),
            Refusal::TooManyHeaders => ("431 Request Header Fields Too Large", ""),
        };
        let body = self.reason();
        format!(
            "HTTP/1.1 {status}\r\n{extra}Sec-WebSocket-Version: 13\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}\n",
            body.len() + 1
        )
        .into_bytes()
    }
}

/// Checks a complete request head (up to and including the blank line)
/// against RFC 6455 section 4.2.1: an HTTP/1.1 GET with exactly one `Host`
/// (RFC 9112 section 3.2), an `Upgrade` naming `websocket`, a `Connection`
/// naming `Upgrade`, exactly one `Sec-WebSocket-Key` that is the base64 of
/// 16 bytes (sections 4.2.1 item 5 and 11.3.1), and exactly one
/// `Sec-WebSocket-Version` that is 13 (sections 4.2.1 item 6 and 11.3.5).
/// Header names and the tokens in `Upgrade` and `Connection` compare
/// case-insensitively. No body (`Content-Length` other than 0, any
/// `Transfer-Encoding`), and nothing after the head: a client sends frames
/// only once it has the 101 (section 4.1), so bytes there would be read as
/// frames the client did not mean as such (a proxy in front may have passed
/// them as a body). `head` is what the listener read: the head and whatever
/// came with it. Errors: the first requirement the head fails.
pub(crate) fn check(head: &[u8]) -> Result<(), Refusal> {
    if bare_lf(head).is_some() {
        return Err(Refusal::BadRequest(
            "a line of the request head ends in a bare LF; HTTP/1.1 lines end in CRLF",
        ));
    }
    let mut headers = [httparse::EMPTY_HEADER; MAX_REQUEST_HEADERS];
    let mut request = httparse::Request::new(&mut headers);
    let head_len = match request.parse(head) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => {
            return Err(Refusal::BadRequest("the request head is incomplete"));
        }
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooManyHeaders),
        Err(_) => return Err(Refusal::BadRequest("not an HTTP/1.1 request head")),
    };
    if request.version != Some(1) {
        return Err(Refusal::BadRequest(
            "the opening handshake needs HTTP/1.1 or later",
        ));
    }
    if request.method != Some("GET") {
        return Err(Refusal::MethodNotAllowed);
    }
    let all = |name: &'static str| {
        request
            .headers
            .iter()
            .filter(move |h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let one = |name: &'static str, missing, repeated| {
        let mut values = all(name);
        match (values.next(), values.next()) {
            (Some(v), None) => Ok(v),
            (None, _) => Err(Refusal::BadRequest(missing)),
            (Some(_), Some(_)) => Err(Refusal::BadRequest(repeated)),
        }
    };
    let names_token = |name: &'static str, token: &str| {
        all(name).any(|v| {
            v.split(|&b| b == b',')
                .any(|t| t.trim_ascii().eq_ignore_ascii_case(token.as_bytes()))
        })
    };
    one("host", "missing Host header", "more than one Host header")?;
    if all("content-length").any(|v| v.trim_ascii() != b"0")
        || all("transfer-encoding").next().is_some()
    {
        return Err(Refusal::BadRequest(
            "the opening handshake has no body (Content-Length or Transfer-Encoding)",
        ));
    }
    if head_len < head.len() {
        return Err(Refusal::BadRequest(
            "bytes after the request head: frames come only after the 101",
        ));
    }
    if !names_token("upgrade", "websocket") {
        return Err(Refusal::UpgradeRequired(
            "this is a WebSocket endpoint: the request needs Upgrade: websocket",
        ));
    }
    if !names_token("connection", "upgrade") {
        return Err(Refusal::BadRequest(
            "the request needs a Connection header naming Upgrade",
        ));
    }
    let key = one(
        "sec-websocket-key",
        "missing Sec-WebSocket-Key header",
        "more than one Sec-WebSocket-Key header",
    )?;
    let decoded = data_encoding::BASE64.decode(key.trim_ascii());
    if !matches!(decoded, Ok(k) if k.len() == 16) {
        return Err(Refusal::BadRequest(
            "Sec-WebSocket-Key is not the base64 of 16 bytes",
        ));
    }
    let version = one(
        "sec-websocket-version",
        "missing Sec-WebSocket-Version header",
        "more than one Sec-WebSocket-Version header",
    )?;
    if version.trim_ascii() != b"13" {
        return Err(Refusal::UpgradeRequired(
            "unsupported Sec-WebSocket-Version: this server speaks 13",
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    const VERSION: &str = "Sec-WebSocket-Version: 13\r\n";
    const UPGRADE: &str = "Upgrade: websocket\r\nConnection: Upgrade\r\n";

    fn head(start: &str, lines: &[&str]) -> Vec<u8> {
        format!("{start}\r\n{}\r\n", lines.concat()).into_bytes()
    }

    fn good(extra: &[&str]) -> Vec<u8> {
        let mut lines = vec!["Host: x\r\n", UPGRADE, KEY, VERSION];
        lines.extend_from_slice(extra);
        head("GET /chat HTTP/1.1", &lines)
    }

    #[test]
    fn valid_requests_pass_in_any_case_and_with_token_lists() {
        assert_eq!(check(&good(&[])), Ok(()));
        assert_eq!(check(&good(&["Content-Length: 0\r\n"])), Ok(()));
        let mixed = head(
            "GET / HTTP/1.1",
            &[
                "host: x\r\n",
                "UPGRADE: WebSocket\r\n",
                "connection: keep-alive, Upgrade\r\n",
                "sec-websocket-key:  dGhlIHNhbXBsZSBub25jZQ==  \r\n",
                "SEC-WEBSOCKET-VERSION: 13\r\n",
            ],
        );
        assert_eq!(check(&mixed), Ok(()));
        // Sec-WebSocket-Protocol may repeat in a request (section 11.3.4).
        assert_eq!(
            check(&good(&[
                "Sec-WebSocket-Protocol: a\r\n",
                "Sec-WebSocket-Protocol: b\r\n"
            ])),
            Ok(())
        );
    }

    #[test]
    fn each_broken_requirement_gets_its_own_status() {
        let bad = |r: Result<(), Refusal>| r.unwrap_err();
        let status = |r: Refusal| {
            String::from_utf8(r.response()).unwrap()[9..12]
                .parse::<u16>()
                .unwrap()
        };
        let cases: Vec<(Vec<u8>, u16)> = vec![
            (b"\x16\x03\x01\x02\x00\r\n\r\n".to_vec(), 400),
            (
                head("GET / HTTP/1.0", &["Host: x\r\n", UPGRADE, KEY, VERSION]),
                400,
            ),
            (
                head("POST / HTTP/1.1", &["Host: x\r\n", UPGRADE, KEY, VERSION]),
                405,
            ),
            (head("GET / HTTP/1.1", &[UPGRADE, KEY, VERSION]), 400),
            (good(&["Host: y\r\n"]), 400),
            (head("GET / HTTP/1.1", &["Host: x\r\n", KEY, VERSION]), 426),
            (
                head(
                    "GET / HTTP/1.1",
                    &[
                        "Host: x\r\n",
                        "Upgrade: h2c\r\nConnection: Upgrade\r\n",
                        KEY,
                        VERSION,
                    ],
                ),
                426,
            ),
            (
                head(
                    "GET / HTTP/1.1",
                    &["Host: x\r\n", "Upgrade: websocket\r\n", KEY, VERSION],
                ),
                400,
            ),
            (
                head("GET / HTTP/1.1", &["Host: x\r\n", UPGRADE, VERSION]),
                400,
            ),
            (
                good(&["Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n"]),
                400,
            ),
            (
                head(
                    "GET / HTTP/1.1",
                    &[
                        "Host: x\r\n",
                        UPGRADE,
                        "Sec-WebSocket-Key: c2hvcnQ=\r\n",
                        VERSION,
                    ],
                ),
                400,
            ),
            (
                head(
                    "GET / HTTP/1.1",
                    &[
                        "Host: x\r\n",
                        UPGRADE,
                        "Sec-WebSocket-Key: !!notbase64!!!!!!!!!!!==\r\n",
                        VERSION,
                    ],
                ),
                400,
            ),
            (head("GET / HTTP/1.1", &["Host: x\r\n", UPGRADE, KEY]), 400),
            (
                head(
                    "GET / HTTP/1.1",
                    &["Host: x\r\n", UPGRADE, KEY, "Sec-WebSocket-Version: 8\r\n"],
                ),
                426,
            ),
            (good(&["Sec-WebSocket-Version: 13\r\n"]), 400),
            // Bare LF line ends (RFC 9112 section 2.2), all or one.
            (
                b"GET / HTTP/1.1\nHost: x\nUpgrade: websocket\nConnection: Upgrade\n\
                  Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\nSec-WebSocket-Version: 13\n\n"
                    .to_vec(),
                400,
            ),
            (good(&["X-Bare: lf\n"]), 400),
            // A body, or bytes after the head (the red team of
            // 2026-12-04g, F5).
            (good(&["Content-Length: 5\r\n"]), 400),
            (good(&["Transfer-Encoding: chunked\r\n"]), 400),
            ([good(&[]), b"\x82\x80abcd".to_vec()].concat(), 400),
        ];
        for (i, (request, want)) in cases.into_iter().enumerate() {
            let refusal = bad(check(&request));
            assert_eq!(
                status(refusal),
                want,
                "case {i}: {:?} -> {refusal:?}",
                String::from_utf8_lossy(&request)
            );
        }
        let many: Vec<String> = (0..MAX_REQUEST_HEADERS)
            .map(|i| format!("X-{i}: v\r\n"))
            .collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(check(&good(&many)), Err(Refusal::TooManyHeaders));
        // The largest head the check takes, tungstenite parses too.
        let extra = MAX_REQUEST_HEADERS - good(&[]).split(|&b| b == b'\n').count() + 3;
        let most: Vec<String> = (0..extra).map(|i| format!("X-{i}: v\r\n")).collect();
        let most: Vec<&str> = most.iter().map(String::as_str).collect();
        let head = good(&most);
        assert_eq!(check(&head), Ok(()));
        let mut headers = [httparse::EMPTY_HEADER;
            tokio_tungstenite::tungstenite::handshake::headers::MAX_HEADERS];
        let parsed = httparse::Request::new(&mut headers).parse(&head);
        assert!(
            matches!(parsed, Ok(httparse::Status::Complete(_))),
            "tungstenite's parse of a head the check took: {parsed:?}"
        );
    }

    #[test]
    fn responses_are_complete_http_with_the_version_we_speak() {
        for refusal in [
            Refusal::BadRequest("missing Host header"),
            Refusal::MethodNotAllowed,
            Refusal::UpgradeRequired("unsupported Sec-WebSocket-Version: this server speaks 13"),
            Refusal::TooManyHeaders,
        ] {
            let bytes = refusal.response();
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut response = httparse::Response::new(&mut headers);
            let httparse::Status::Complete(len) = response.parse(&bytes).unwrap() else {
                panic!("incomplete response for {refusal:?}");
            };
            let header = |name: &str| {
                response
                    .headers
                    .iter()
                    .find(|h| h.name.eq_ignore_ascii_case(name))
                    .map(|h| String::from_utf8_lossy(h.value).into_owned())
            };
            assert_eq!(header("sec-websocket-version").as_deref(), Some("13"));
            assert_eq!(header("connection").as_deref(), Some("close"));
            let body = &bytes[len..];
            assert_eq!(header("content-length"), Some(body.len().to_string()));
            assert_eq!(body, format!("{}\n", refusal.reason()).as_bytes());
        }
    }
}
