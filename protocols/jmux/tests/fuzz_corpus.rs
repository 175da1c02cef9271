//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`: minimized
//! inputs and every crash reproducer) through the same checks the
//! cargo-fuzz targets run (`fuzz/checks.rs`), on stable, so every change
//! is checked against them. A missing or empty corpus folder fails.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "../../fuzz_replay.rs"]
mod fuzz_replay;

const DIR: &str = env!("CARGO_MANIFEST_DIR");

#[test]
fn corpus_folders_are_the_targets() {
    fuzz_replay::folders_are(DIR, checks::TARGETS);
}

#[test]
fn decode_corpus() {
    fuzz_replay::replay(DIR, "decode", checks::run);
}

#[test]
fn session_corpus() {
    fuzz_replay::replay(DIR, "session", checks::run);
}

#[test]
fn socks5_corpus() {
    fuzz_replay::replay(DIR, "socks5", checks::run);
}

#[test]
fn http_proxy_corpus() {
    fuzz_replay::replay(DIR, "http_proxy", checks::run);
}
