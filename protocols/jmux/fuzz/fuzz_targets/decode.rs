//! Fuzz target `decode`: arbitrary bytes, cut into arbitrary chunks, through the incremental
//! decoder and a session. The properties are
//! documented on `checks::decode`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::decode(data));
