//! Fuzz target `socks5`: client bytes through the SOCKS5 server handshake. The properties are
//! documented on `checks::socks5`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::socks5(data));
