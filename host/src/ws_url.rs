//! `ws://` and `wss://` URLs as a guest passes them to `connect`
//! (RFC 6455 section 3), parsed without I/O so that a fuzz target can
//! build this file on its own (`host/fuzz`, through `#[path]`); the WIT
//! error is added by [`crate::websocket::parse_ws_url`].

use rustls_pki_types::ServerName;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// A `ws://` or `wss://` URL, checked.
pub struct WsTarget {
    /// The URL as given.
    pub url: url::Url,
    /// Host name or IP literal (no brackets), as the URL parser (WHATWG)
    /// normalised it: the TLS server name.
    pub host: String,
    /// The host as the policy decides it and the socket reaches it
    /// ([`crate::policy::parse_host`] of `host`).
    pub dest: crate::policy::Host,
    /// Port (80/443 by default).
    pub port: u16,
    /// `wss://`.
    pub tls: bool,
}

/// Parses a WebSocket URL. Whatever it accepts, the later stages of a
/// connect accept too: the handshake request (its target and `Host`
/// field) and, for `wss://`, the TLS server name; so a bad URL is refused
/// here, before DNS and TCP, and not after dialling.
///
/// Errors: why it is not one, naming the URL (the payload of
/// `invalid-url`).
pub fn parse(text: &str) -> Result<WsTarget, String> {
    let url = url::Url::parse(text).map_err(|e| format!("`{text}`: {e}"))?;
    let tls = match url.scheme() {
        "ws" => false,
        "wss" => true,
        other => return Err(format!("`{text}`: scheme `{other}` is not ws or wss")),
    };
    let host = match url.host() {
        Some(url::Host::Domain(d)) => d.to_string(),
        Some(url::Host::Ipv4(ip)) => ip.to_string(),
        Some(url::Host::Ipv6(ip)) => ip.to_string(),
        None => return Err(format!("`{text}`: no host")),
    };
    if url.fragment().is_some() {
        return Err(format!(
            "`{text}`: a WebSocket URL has no fragment (RFC 6455 section 3)"
        ));
    }
    let dest = crate::policy::parse_host(&host).map_err(|e| format!("`{text}`: {e}"))?;
    let port = url
        .port_or_known_default()
        .unwrap_or(if tls { 443 } else { 80 });
    if let Err(e) = url.as_str().into_client_request() {
        return Err(format!("`{text}`: not a WebSocket request target: {e}"));
    }
    if tls && let Err(e) = ServerName::try_from(host.as_str()) {
        return Err(format!("`{text}`: `{host}` is not a TLS server name: {e}"));
    }
    Ok(WsTarget {
        url,
        host,
        dest,
        port,
        tls,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Found by the `ws_url` fuzz target: the URL parser accepted hosts
    /// that the handshake request refuses, so a guest's connect resolved
    /// and dialled the host and only then failed.
    #[test]
    fn what_a_connect_would_refuse_after_dialling_is_refused_here() {
        let bad = "ws://a{b}.example/";
        let e = parse(bad).err().unwrap_or_else(|| panic!("{bad} accepted"));
        assert!(e.contains(bad), "{e}");
        for good in [
            "ws://127.0.0.1:9001/",
            "wss://[::1]/x?y",
            "wss://Example.COM./",
        ] {
            assert!(parse(good).is_ok(), "{good}");
        }
    }
}
