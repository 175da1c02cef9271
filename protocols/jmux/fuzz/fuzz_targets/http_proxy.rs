//! Fuzz target `http_proxy`: bytes as an HTTP proxy request head. The properties are
//! documented on `checks::http_proxy`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::http_proxy(data));
