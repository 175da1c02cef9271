//! Integration tests: guest components run through the host against real
//! peers on 127.0.0.1.

mod aead;
mod batch;
mod common;
mod jetsocat;
mod jmux;
mod limits;
mod linger;
mod metrics;
mod node;
mod p3_echo;
mod p3_tcp;
mod policy;
mod quic;
mod readiness;
mod shutdown;
mod tcp;
mod websocket;
mod ws_hostile;
