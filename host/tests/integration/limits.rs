//! Per-guest limits: runaway guests and memory.

use std::time::{Duration, Instant};

use tether_host::runner::RunError;

use crate::common::*;

#[tokio::test(flavor = "current_thread")]
async fn runaway_guest_is_stopped_while_others_keep_running() {
    let mut config = local_config();
    config.limits.max_run_without_yield = Duration::from_millis(300);
    let runner = runner(config);
    let addr = ws_server(echo_ws);
    let url = format!("ws://{addr}/");
    let t0 = Instant::now();
    let (spin, ok) = tokio::join!(
        probe(&runner, &["spin"]),
        echo(&runner, &["ping", &url, "rtt:200:64"])
    );
    assert!(
        matches!(spin.result, Err(RunError::Runaway(_))),
        "{}",
        show(&spin)
    );
    assert!(
        spin.result
            .as_ref()
            .unwrap_err()
            .to_string()
            .contains("without returning to the host")
    );
    assert!(t0.elapsed() < Duration::from_secs(5));
    assert!(
        ok.success(),
        "the other guest must keep running: {}",
        show(&ok)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn memory_limit_stops_the_guest_with_a_clear_error() {
    let mut config = local_config();
    config.limits.max_memory_bytes = 64 << 20;
    let runner = runner(config);
    let out = probe(&runner, &["alloc", "128"]).await;
    assert!(
        matches!(out.result, Err(RunError::MemoryLimit(_))),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["alloc", "16"]).await;
    assert!(out.success(), "{}", show(&out));
}
