//! Host AEAD (`tether:streams/aead`) through the WIT: RFC 9001 Appendix
//! A.5 byte for byte, and hostile inputs answered with errors while the
//! host keeps serving (the probe guest's `aead` command); a QUIC guest
//! whose keys the host refuses keeps them inside and still works.

use std::sync::Arc;

use tether_bench::quic::{Side, run_pairing};
use tether_host::Limits;
use tether_quic::{Identity, Options};

use crate::common::*;

/// The value after `NAME ` on the probe's line for `name`.
fn line<'a>(out: &'a str, name: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(name).and_then(|r| r.strip_prefix(' ')))
        .unwrap_or_else(|| panic!("no `{name}` line in:\n{out}"))
}

#[tokio::test(flavor = "current_thread")]
async fn rfc_9001_vector_and_hostile_inputs_through_the_wit() {
    let mut config = local_config();
    config.limits.max_aead_keys = 8;
    let runner = runner(config);
    for run in 0..2 {
        let outcome = probe(&runner, &["aead"]).await;
        assert!(outcome.success(), "run {run}: {outcome:?}");
        let out = outcome.stdout_text();
        // RFC 9001 Appendix A.5: ChaCha20-Poly1305, payload 01.
        assert_eq!(
            line(&out, "a5-seal"),
            "ok 655e5cd55c41f69080575d7999c25a5bfb"
        );
        assert_eq!(line(&out, "a5-open"), "ok 01");
        assert!(
            line(&out, "forged").ends_with("AuthenticationFailed"),
            "{out}"
        );
        assert!(
            line(&out, "oversized").ends_with("TooLarge(65536)"),
            "{out}"
        );
        // 64 KiB seals: 65,552 bytes back (usize, big-endian, wasm32).
        assert_eq!(line(&out, "largest"), "ok 00010010");
        assert!(
            line(&out, "short-nonce").ends_with("InvalidNonceLength(12)"),
            "{out}"
        );
        assert!(
            line(&out, "aes128-key32").ends_with("InvalidKeyLength(16)"),
            "{out}"
        );
        assert!(
            line(&out, "aes256-key16").ends_with("InvalidKeyLength(32)"),
            "{out}"
        );
        assert_eq!(line(&out, "aes128-key16"), "ok 01");
        assert!(line(&out, "keys").starts_with("8 err"), "{out}");
        assert!(line(&out, "keys").ends_with("TooManyKeys(8)"), "{out}");
        assert_eq!(line(&out, "after-drop").trim_end(), "ok");
        assert_eq!(line(&out, "still-serving"), "ok 01");
        // Run 1: the first guest's keys died with it; the limit is per
        // instance, so a new guest gets all 8 again.
    }
}

/// The host holds at most 3 keys per guest: the QUIC guest keeps the rest
/// inside and every byte still echoes, both ways.
#[tokio::test(flavor = "current_thread")]
async fn quic_guest_keeps_refused_keys_inside() {
    let mut config = local_config();
    config.limits = Limits {
        max_aead_keys: 3,
        ..config.limits
    };
    let runner = Arc::new(runner(config));
    let component = runner
        .compile_cached(tether_guest_artifacts::QUIC_ECHO)
        .expect("compile quic-echo");
    let identity = Identity::generate(&["localhost"]).unwrap();
    for (client, server) in [(Side::Guest, Side::Native), (Side::Guest, Side::Guest)] {
        let phases = ["stream:1m".to_string(), "rtt:5:32".to_string()];
        let run = run_pairing(
            &runner,
            &component,
            &identity,
            &Options::default(),
            client,
            server,
            1,
            &phases,
        )
        .await
        .expect("pairing runs");
        assert!(
            run.error.is_none(),
            "{client:?} -> {server:?}: {:?}",
            run.error
        );
        assert_eq!(
            run.streams().iter().map(|s| s.0).collect::<Vec<_>>(),
            vec![1 << 20]
        );
    }
}

/// A key limit above wasmtime's default cap on a store's live handles
/// (100,000): the guest gets `too-many-keys` at the limit, as documented,
/// not the trap wasmtime's cap makes (the red team of 2026-12-07, F2: the
/// probe trapped at its 100,001st key with "store handle limit exceeded").
/// The runners size the store's cap from the limits
/// (`Limits::component_handles`).
#[tokio::test(flavor = "current_thread")]
async fn a_key_limit_past_wasmtimes_default_handle_cap_is_a_refusal_not_a_trap() {
    let mut config = local_config();
    config.limits.max_aead_keys = 120_000;
    assert!(config.limits.component_handles() > 120_000);
    let runner = runner(config);
    let outcome = probe(&runner, &["aead"]).await;
    assert!(outcome.success(), "{outcome:?}");
    let out = outcome.stdout_text();
    assert!(line(&out, "keys").starts_with("120000 err"), "{out}");
    assert!(line(&out, "keys").ends_with("TooManyKeys(120000)"), "{out}");
    assert_eq!(line(&out, "still-serving"), "ok 01");
}
