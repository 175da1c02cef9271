//! The guest components, built for `wasm32-wasip2` by this crate's build
//! script and embedded as bytes (`ECHO`, `PROBE`, ...) with their paths
//! (`ECHO_PATH`, ...).

include!(concat!(env!("OUT_DIR"), "/guests.rs"));
