//! Fuzz target `ws_url`: the properties are documented on `checks::ws_url`.
#![no_main]

#[path = "../checks.rs"]
mod checks;
#[allow(dead_code)] // the target uses part of the policy
mod policy {
    pub use tether_policy::*;
}
#[path = "../../src/ws_url.rs"]
mod ws_url;

use rustls_pki_types::ServerName;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

libfuzzer_sys::fuzz_target!(|data: &[u8]| checks::ws_url(data));
