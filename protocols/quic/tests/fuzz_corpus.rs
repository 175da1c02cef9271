//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/*`: minimized
//! inputs and every crash reproducer) through the same checks the
//! cargo-fuzz targets run (`fuzz/checks.rs`), on stable, so every change
//! is checked against them. A missing or empty corpus folder fails.

#[path = "../fuzz/checks.rs"]
mod checks;
#[path = "../../fuzz_replay.rs"]
mod fuzz_replay;

fuzz_replay::corpus_tests!(link);
