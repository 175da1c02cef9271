//! Fuzz target `session`: arbitrary peer messages and local calls on one session, asserting
//! its window, budget and output invariants. The properties are
//! documented on `checks::session`.
#![no_main]

#[path = "../checks.rs"]
mod checks;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::session(data));
