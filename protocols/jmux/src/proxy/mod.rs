//! The jetsocat-style front end of a JMUX proxy, sans-IO: the command line
//! model ([`cli`]), the guest-side target filter ([`rules`]) and the two
//! listener handshakes that run before a channel opens ([`socks5`], CONNECT
//! only, no authentication; [`http`], CONNECT and plain proxy requests).
//!
//! Nothing here does I/O: the handshakes take the bytes a client sent and
//! return the bytes to answer with, so the guest driver stays thin and
//! these rules are tested natively.
//!
//! Source: JMUX spec, "How people run it (jetsocat)"; RFC 1928 (SOCKS5);
//! RFC 9110 section 9.3.6 and RFC 9112 section 3.2 (HTTP CONNECT and
//! request targets).

pub mod cli;
pub mod http;
pub mod rules;
pub mod socks5;
