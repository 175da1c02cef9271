//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`: minimized
//! inputs and every crash reproducer) through the same checks the
//! cargo-fuzz targets run (`fuzz/checks.rs`), on stable, so every change
//! is checked against them. A missing or empty corpus folder fails.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "../../protocols/fuzz_replay.rs"]
mod fuzz_replay;
// What `checks` takes from `crate::`.
use rustls::pki_types::ServerName;
use tether_host::{policy, ws_url};
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

fuzz_replay::corpus_tests!(policy, ws_url);
