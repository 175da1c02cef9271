//! Replay of a committed fuzz corpus on stable, shared through `#[path]`
//! by the `tests/fuzz_corpus.rs` of every crate with fuzz targets
//! (`protocols/jmux`, `protocols/quic`, `host`).
//!
//! A crate's corpus is `fuzz/corpus/<target>/*` (minimized inputs and
//! every crash reproducer); its checks are `fuzz/checks.rs`, the same
//! functions the cargo-fuzz targets call. A missing or empty corpus folder
//! fails, and so does a folder without a target or a target without a
//! folder.

use std::path::{Path, PathBuf};

/// The tests of a crate's `tests/fuzz_corpus.rs`, invoked at its root
/// after `mod checks` (the crate's `fuzz/checks.rs`) and `mod
/// fuzz_replay` (this file): one `#[test]` per named target replaying its
/// corpus, and one checking that the corpus folders are the targets.
macro_rules! corpus_tests {
    ($($target:ident),+ $(,)?) => {
        const DIR: &str = env!("CARGO_MANIFEST_DIR");

        #[test]
        fn corpus_folders_are_the_targets() {
            fuzz_replay::folders_are(DIR, checks::TARGETS);
        }

        $(
            #[test]
            fn $target() {
                fuzz_replay::replay(DIR, stringify!($target), checks::run);
            }
        )+
    };
}
pub(crate) use corpus_tests;

/// Runs every file of `<crate>/fuzz/corpus/<target>` through `run(target,
/// bytes)`; fails naming each input whose check panics.
pub fn replay(manifest_dir: &str, target: &str, run: fn(&str, &[u8])) {
    let dir = corpus_root(manifest_dir).join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("corpus folder {} is missing: {e}", dir.display()))
        .map(|entry| entry.expect("readable corpus folder").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    assert!(
        !files.is_empty(),
        "corpus folder {} is empty",
        dir.display()
    );
    let failed: Vec<String> = files
        .iter()
        .filter(|path| {
            let data = std::fs::read(path).expect("readable corpus file");
            std::panic::catch_unwind(|| run(target, &data)).is_err()
        })
        .map(|path| path.display().to_string())
        .collect();
    assert!(
        failed.is_empty(),
        "{} of {} `{target}` inputs fail their check: {failed:?}",
        failed.len(),
        files.len()
    );
}

/// Asserts that the corpus folders are exactly `targets`.
pub fn folders_are(manifest_dir: &str, targets: &[&str]) {
    let mut dirs: Vec<String> = std::fs::read_dir(corpus_root(manifest_dir))
        .expect("fuzz/corpus exists")
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    let mut want: Vec<String> = targets.iter().map(|t| t.to_string()).collect();
    want.sort();
    assert_eq!(
        dirs, want,
        "a corpus folder without a check, or a check without corpus"
    );
}

fn corpus_root(manifest_dir: &str) -> PathBuf {
    Path::new(manifest_dir).join("fuzz/corpus")
}
