//! Dialling and binding TCP sockets under the guest's policy. Every socket
//! that leaves here has TCP_NODELAY set (latency lesson 2: Nagle plus
//! delayed ACK costs ~40 ms per back-to-back small write).

use std::io;
use std::net::SocketAddr;

use tokio::net::{TcpListener, TcpStream};

use crate::HostCtx;
use crate::bindings::ErrorCode;
use crate::policy::NameCheck;

/// Splits `host:port` (IPv6 literals in brackets) into its parts.
///
/// Errors: `invalid-url` naming what is missing.
pub fn split_host_port(address: &str) -> Result<(String, u16), ErrorCode> {
    let bad = |why: &str| ErrorCode::InvalidUrl(format!("`{address}`: {why} (expected host:port)"));
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("missing port"))?;
    let port: u16 = port.parse().map_err(|_| bad("bad port"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    if host.is_empty() {
        return Err(bad("missing host"));
    }
    if host.contains(':') && host.parse::<std::net::Ipv6Addr>().is_err() {
        return Err(bad("bad IPv6 literal"));
    }
    Ok((host.to_string(), port))
}

/// Maps an I/O error of connect/accept/read/write to the guest's error code.
pub fn io_error(e: &io::Error) -> ErrorCode {
    match e.kind() {
        io::ErrorKind::ConnectionRefused => ErrorCode::ConnectionRefused(e.to_string()),
        io::ErrorKind::TimedOut => ErrorCode::Timeout,
        _ => ErrorCode::Other(e.to_string()),
    }
}

/// Checks `host:port` against the policy before any DNS (the cheap,
/// synchronous half of [`dial`], so a denied connect fails at once).
pub fn precheck(ctx: &HostCtx, host: &str, port: u16) -> Result<NameCheck, ErrorCode> {
    ctx.config
        .policy
        .check_name(host, port)
        .map_err(ErrorCode::Denied)
}

/// Resolves `host`, keeps the addresses the policy admits, and connects to
/// the first that answers, within `limits.connect_timeout` overall.
///
/// Errors: `denied`, `dns-failure`, `connection-refused`, `timeout`, `other`.
pub async fn dial(
    ctx: &HostCtx,
    host: &str,
    port: u16,
    check: NameCheck,
) -> Result<TcpStream, ErrorCode> {
    let deadline = ctx.config.limits.connect_timeout;
    let work = async {
        let addrs: Vec<SocketAddr> = match host.parse::<std::net::IpAddr>() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::net::lookup_host((host, port))
                .await
                .map_err(|e| ErrorCode::DnsFailure(format!("{host}: {e}")))?
                .collect(),
        };
        if addrs.is_empty() {
            return Err(ErrorCode::DnsFailure(format!("{host}: no addresses")));
        }
        let addrs = ctx
            .config
            .policy
            .check_resolved(host, check, addrs)
            .map_err(ErrorCode::Denied)?;
        let mut last = None;
        for addr in addrs {
            match TcpStream::connect(addr).await {
                Ok(stream) => {
                    stream.set_nodelay(true).map_err(|e| io_error(&e))?;
                    return Ok(stream);
                }
                Err(e) => last = Some(e),
            }
        }
        let e = last.expect("at least one address was tried");
        Err(match io_error(&e) {
            // The kind already says "refused"; name what refused.
            ErrorCode::ConnectionRefused(_) => {
                ErrorCode::ConnectionRefused(format!("{host}:{port}"))
            }
            other => other,
        })
    };
    tokio::time::timeout(deadline, work)
        .await
        .unwrap_or(Err(ErrorCode::Timeout))
}

/// Parses and policy-checks a bind address, then binds a listener.
///
/// Errors: `invalid-url` (not `ip:port`), `denied` (no `--listen` rule),
/// `other` (bind failed, e.g. address in use).
pub fn bind(ctx: &HostCtx, address: &str) -> Result<TcpListener, ErrorCode> {
    let addr: SocketAddr = address.parse().map_err(|_| {
        ErrorCode::InvalidUrl(format!("`{address}` is not an ip:port bind address"))
    })?;
    ctx.config
        .policy
        .check_listen(addr)
        .map_err(ErrorCode::Denied)?;
    let socket = match addr {
        SocketAddr::V4(_) => tokio::net::TcpSocket::new_v4(),
        SocketAddr::V6(_) => tokio::net::TcpSocket::new_v6(),
    }
    .map_err(|e| io_error(&e))?;
    socket.set_reuseaddr(true).map_err(|e| io_error(&e))?;
    socket
        .bind(addr)
        .map_err(|e| ErrorCode::Other(format!("bind {addr}: {e}")))?;
    socket.listen(1024).map_err(|e| io_error(&e))
}

/// Sets TCP_NODELAY on an accepted socket.
pub fn accepted(stream: &TcpStream) -> io::Result<()> {
    stream.set_nodelay(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn host_port_forms() {
        assert_eq!(split_host_port("a.b:80").unwrap(), ("a.b".into(), 80));
        assert_eq!(split_host_port("[::1]:22").unwrap(), ("::1".into(), 22));
        for bad in ["nohost", ":80", "a:b", "a:99999", "[zz::]:1", "::1:22:x"] {
            assert!(
                matches!(split_host_port(bad), Err(ErrorCode::InvalidUrl(_))),
                "{bad}"
            );
        }
    }
}
