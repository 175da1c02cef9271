//! Builds every guest component for `wasm32-wasip2` and tells the crate
//! where they are, the way wasmtime's own test-programs do. Nobody builds
//! guests by hand.

use std::path::PathBuf;
use std::process::Command;

const GUESTS: &[(&str, &str)] = &[
    ("tether-guest-echo", "echo"),
    ("tether-guest-echo", "echo-p3"),
    ("tether-guest-probe", "probe"),
    ("tether-guest-quic-echo", "quic-echo"),
    ("tether-guest-conformance", "conformance-suite"),
    ("tether-guest-conformance", "conformance-suite-p3"),
    ("tether-guest-jmux", "jmux"),
];

fn main() {
    let manifest = PathBuf::from(std::env::var("CARGO_MANIFEST_DIR").unwrap());
    let root = manifest.parent().unwrap().parent().unwrap().to_path_buf();
    // A separate target dir under the shared one: a nested cargo cannot take
    // the lock the outer build holds.
    let target = std::env::var("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|_| root.join("target"))
        .join("guests");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(&root)
        .args([
            "build",
            "--release",
            "--target",
            "wasm32-wasip2",
            "--target-dir",
        ])
        .arg(&target)
        .env_remove("RUSTFLAGS")
        // Fixed-width SIMD (a standard part of WebAssembly 2.0, on in every
        // wasmtime engine we run, Winch included): the compiler vectorises
        // the guests' software crypto (ring's ChaCha20 and Poly1305 have
        // no hardware path in wasm), +20% QUIC bulk throughput.
        .env("CARGO_ENCODED_RUSTFLAGS", "-Ctarget-feature=+simd128")
        .env("CFLAGS_wasm32_wasip2", "-msimd128")
        .env_remove("CARGO_MAKEFLAGS")
        .env_remove("CARGO_TARGET_DIR")
        .env_remove("RUSTC_WRAPPER")
        .env_remove("RUSTC_WORKSPACE_WRAPPER");
    for (package, _) in GUESTS {
        cmd.args(["-p", package]);
    }
    let status = cmd.status().expect("running cargo for the guests");
    if !status.success() {
        panic!(
            "building the guest components failed. Is the wasm32-wasip2 target installed? \
             Run `rustup target add wasm32-wasip2` (scripts/setup does it)."
        );
    }
    let out = target.join("wasm32-wasip2").join("release");
    let mut code = String::new();
    for (_, bin) in GUESTS {
        let path = out.join(format!("{bin}.wasm"));
        assert!(path.exists(), "missing {}", path.display());
        let konst = bin.to_uppercase().replace('-', "_");
        code.push_str(&format!(
            "/// The `{bin}` guest component.\npub const {konst}: &[u8] = include_bytes!({path:?});\n\
             /// Path of the `{bin}` guest component.\npub const {konst}_PATH: &str = {path:?};\n"
        ));
    }
    std::fs::write(
        PathBuf::from(std::env::var("OUT_DIR").unwrap()).join("guests.rs"),
        code,
    )
    .unwrap();
    for dir in ["guests", "wit", "protocols"] {
        println!("cargo:rerun-if-changed={}", root.join(dir).display());
    }
}
