//! Per-guest limits: runaway guests and memory.

use std::time::{Duration, Instant};

use tether_host::runner::RunError;

use crate::common::*;

/// Both guests share one thread; the whole test has its own deadline on
/// another thread, so a runaway that is not stopped fails it, never hangs.
#[test]
fn runaway_guest_is_stopped_while_others_keep_running() {
    within(Duration::from_secs(60), || async {
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
    })
}

/// A guest that fails while holding a message stream, in each way a guest
/// can fail: the host closes the stream with 1011 and a fixed reason
/// naming the kind of failure, not with 1000 as if all went well.
/// (probe arguments, how the run must fail, the close reason expected).
type FailureCase = (&'static [&'static str], fn(&RunError) -> bool, &'static str);

#[test]
fn a_failed_guests_streams_close_with_1011_for_every_failure_kind() {
    let cases: [FailureCase; 4] = [
        (
            &["fail-holding", "exit"],
            |e| matches!(e, RunError::Exit(c) if *c != 0),
            "guest exited with an error",
        ),
        (
            &["fail-holding", "trap"],
            |e| matches!(e, RunError::Trap(_)),
            "guest trapped",
        ),
        (
            &["fail-holding", "memory"],
            |e| matches!(e, RunError::MemoryLimit(_)),
            "guest stopped: memory limit",
        ),
        (
            &["spin"],
            |e| matches!(e, RunError::Runaway(_)),
            "guest stopped: ran too long without yielding",
        ),
    ];
    for (args, kind, expected) in cases {
        let frame = within(Duration::from_secs(60), move || async move {
            let mut config = local_config();
            config.limits.max_run_without_yield = Duration::from_millis(200);
            config.limits.max_memory_bytes = 64 << 20;
            let runner = runner(config);
            let (tx, rx) = std::sync::mpsc::channel();
            let tx = std::sync::Mutex::new(tx);
            let addr = ws_server(move |mut ws| {
                let tx = tx.lock().unwrap().clone();
                async move {
                    use futures_util::StreamExt;
                    while let Some(msg) = ws.next().await {
                        if let Ok(tokio_tungstenite::tungstenite::Message::Close(frame)) = msg {
                            let _ =
                                tx.send(frame.map(|f| (u16::from(f.code), f.reason.to_string())));
                            return;
                        }
                    }
                    let _ = tx.send(None);
                }
            });
            let url = format!("ws://{addr}/");
            let mut all = vec![args[0], &url];
            all.extend(&args[1..]);
            let out = probe(&runner, &all).await;
            assert!(
                out.result.as_ref().is_err_and(kind),
                "{args:?}: {}",
                show(&out)
            );
            // Wait without blocking this thread: the stream's writer task
            // runs on it.
            let t0 = Instant::now();
            loop {
                match rx.try_recv() {
                    Ok(frame) => break frame,
                    Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                        tokio::time::sleep(Duration::from_millis(10)).await
                    }
                    Err(e) => panic!("{args:?}: no close frame within 5 s: {e}"),
                }
            }
        });
        let (code, reason) =
            frame.unwrap_or_else(|| panic!("{args:?}: the connection ended without a close frame"));
        assert_eq!(code, 1011, "{args:?}: {reason}");
        // A fixed phrase: failure details stay on the host, never on the wire.
        assert_eq!(reason, expected, "{args:?}");
    }
}

/// A guest that fails while holding a TCP byte stream, in each way a
/// guest can fail: the host resets the connection, the byte stream's
/// counterpart of the 1011 above, so the peer reads what was sent and then
/// a reset. Before, the store's drop half-closed it: the peer read a FIN,
/// as if the stream had ended whole (a close-delimited transfer then looks
/// complete; red team 2026-12-05, F2).
#[test]
fn a_failed_guests_byte_streams_are_reset_for_every_failure_kind() {
    for how in ["exit", "trap", "memory"] {
        let (got, end) = within(Duration::from_secs(60), move || async move {
            use tokio::io::AsyncReadExt;
            let mut config = local_config();
            config.limits.max_memory_bytes = 64 << 20;
            let runner = runner(config);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap().to_string();
            let peer = tokio::spawn(async move {
                let (mut tcp, _) = listener.accept().await.unwrap();
                let mut got = Vec::new();
                let end = tokio::time::timeout(Duration::from_secs(10), tcp.read_to_end(&mut got))
                    .await
                    .expect("the connection never ended");
                (got, end.map_err(|e| e.kind()))
            });
            let out = probe(&runner, &["tcp-fail-holding", &addr, how]).await;
            assert!(
                !out.success() && out.stdout_text().contains("ok connected"),
                "{how}: {}",
                show(&out)
            );
            peer.await.unwrap()
        });
        assert!(got.len() <= 7, "{how}: {got:?}");
        assert_eq!(
            end,
            Err(std::io::ErrorKind::ConnectionReset),
            "{how}: after {got:?} the peer must read a reset, not the end of the stream"
        );
    }
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

/// Lists whose elements alias: 1,000 `send-many` messages that all point
/// at one 1 MiB buffer ask the host to copy 1,000 MiB out of a guest that
/// holds about 1 MiB. The host reads each element's length before its
/// payload and copies only what it takes: the first message (the 1 MiB
/// outbound buffer is then full), `ok took 1`. Before, the canonical ABI
/// lifted the whole list first, and wasmtime trapped the guest when the
/// copy passed its 128 MiB hostcall fuel (under that, the host copied it
/// all: 100 such messages cost the host 100 MiB for one call).
#[tokio::test(flavor = "current_thread")]
async fn send_many_copies_only_what_it_takes_from_an_aliased_list() {
    let addr = ws_server(|ws| async move {
        // Holds the connection, never reads.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(ws);
    });
    let runner = runner(local_config());
    let url = format!("ws://{addr}/");
    let out = probe(&runner, &["send-many-aliased", &url, "1000", "1048576"]).await;
    assert!(out.success(), "{}", show(&out));
    assert!(out.stdout_text().contains("ok took 1\n"), "{}", show(&out));
}

/// The option lists of `connect` (and `listen`) are bounded before they
/// are copied: 10,000 headers that all point at one 1 MiB string get
/// `invalid-argument` (at most 64 entries), and so do 8 such headers (at
/// most 16 KiB of options in all). Before, the host lifted them whole: the
/// first trapped the guest on wasmtime's hostcall fuel, the second cost
/// the host 16 MiB for one call.
#[tokio::test(flavor = "current_thread")]
async fn connect_options_are_bounded_before_they_are_copied() {
    let runner = runner(local_config());
    // invalid-argument is case 10 of error-code.
    for count in ["10000", "8"] {
        let out = probe(
            &runner,
            &["connect-aliased", "ws://127.0.0.1:9/", count, "1048576"],
        )
        .await;
        assert!(out.success(), "{count} headers: {}", show(&out));
        assert!(
            out.stdout_text().contains("error tag 10\n"),
            "{count} headers: {}",
            show(&out)
        );
    }
    // Within the bounds the options go through (the dial then fails:
    // nothing listens on port 9, and the policy may deny it; either way
    // `connect` itself returns the future).
    let out = probe(
        &runner,
        &["connect-aliased", "ws://127.0.0.1:9/", "4", "16"],
    )
    .await;
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text().contains("ok connecting"),
        "{}",
        show(&out)
    );
}
