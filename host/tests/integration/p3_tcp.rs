//! Byte streams of the async interface (`tether:streams-async/tcp`,
//! `stream<u8>`): echo, half-close, backpressure against a peer that never
//! reads, and a denied destination, run by the p3 suite guest against
//! peers started here.

use std::time::Duration;

use tether_host::p3::Runner;
use tether_host::runner::{GuestIo, Outcome};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

fn p3_runner() -> Runner {
    Runner::new(local_config()).expect("p3 runner")
}

/// Runs the p3 suite guest's `cases` with `--peer peer`.
async fn suite(runner: &Runner, peer: &str, cases: &[&str]) -> Outcome {
    let component = runner
        .compile_cached(tether_guest_artifacts::CONFORMANCE_SUITE_P3)
        .expect("compile guest");
    let mut args = vec!["conformance-suite-p3", "--peer", peer];
    args.extend_from_slice(cases);
    let run = runner.run(&component, &args, GuestIo::Capture(1 << 20));
    tokio::time::timeout(GUEST_DEADLINE, run)
        .await
        .expect("guest still running at its deadline")
}

/// An echo peer: sends back what it reads, half-closes at EOF.
fn echo_peer() -> std::net::SocketAddr {
    tcp_server(|tcp| async move {
        let (mut r, mut w) = tcp.into_split();
        tokio::io::copy(&mut r, &mut w).await.unwrap();
        w.shutdown().await.unwrap();
    })
}

#[tokio::test(flavor = "current_thread")]
async fn p3_echo_and_half_close_through_stream_u8() {
    let addr = echo_peer();
    let runner = p3_runner();
    let out = suite(
        &runner,
        &format!("tcp-echo={addr}"),
        &[
            "byte-stream.echo",
            "byte-stream.half-close",
            "byte-stream.large-in-order",
        ],
    )
    .await;
    assert!(out.success(), "{}", show(&out));
    assert_eq!(
        out.stdout_text().matches("\"ok\":true").count(),
        3,
        "{}",
        show(&out)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn p3_denied_destination_fails_at_once() {
    let runner = p3_runner();
    let out = suite(&runner, "", &["byte-stream.denied"]).await;
    assert!(out.success(), "{}", show(&out));
}

/// A peer that does not read: the guest's write into `stream<u8>`
/// suspends once the kernel buffers and the host's bounded buffer are
/// full, the host never queues more than `tcp_write_buffer_bytes`, and once
/// the peer reads, every byte arrives in order and the guest finishes.
#[tokio::test(flavor = "current_thread")]
async fn p3_write_suspends_while_the_peer_never_reads() {
    const TOTAL: usize = 32 << 20;
    let bound = local_config().limits.tcp_write_buffer_bytes;
    let (go_tx, go_rx) = tokio::sync::oneshot::channel::<()>();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<usize, String>>();
    let slots = std::sync::Mutex::new(Some((go_rx, done_tx)));
    let addr = tcp_server(move |mut tcp| {
        let slot = slots.lock().unwrap().take();
        async move {
            let (go, done) = slot.expect("one connection");
            go.await.unwrap();
            let mut got = Vec::with_capacity(TOTAL);
            tcp.read_to_end(&mut got).await.unwrap();
            let bad = got
                .iter()
                .enumerate()
                .position(|(i, b)| *b != (i % 251) as u8);
            let _ = done.send(match bad {
                None => Ok(got.len()),
                Some(i) => Err(format!("byte {i} differs")),
            });
        }
    });
    let runner = p3_runner();
    let stats = runner.host().stats.clone();
    let peer = format!("tcp-target={addr},bytes={TOTAL}");
    let guest = suite(&runner, &peer, &["test.tcp-send"]);
    tokio::pin!(guest);
    tokio::select! {
        out = &mut guest => panic!("the guest finished while the peer never read: {}", show(&out)),
        () = tokio::time::sleep(Duration::from_millis(1500)) => {}
    }
    let queued = stats.tcp_queued_bytes();
    assert!(
        queued > 0,
        "nothing queued in the host: the write did not reach the bound"
    );
    assert!(
        queued <= bound,
        "{queued} bytes queued, over the {bound}-byte bound"
    );
    go_tx.send(()).unwrap();
    let out = guest.await;
    assert!(out.success(), "{}", show(&out));
    let received = tokio::time::timeout(Duration::from_secs(30), done_rx)
        .await
        .expect("peer still reading")
        .unwrap();
    assert_eq!(received, Ok(TOTAL));
    let peak = stats.peak_tcp_queued_bytes();
    assert!(
        peak <= bound,
        "peak {peak} bytes queued, over the {bound}-byte bound"
    );
}

/// The async calls one p3 guest has pending are bounded by
/// `readiness_set_entries`: with 8, the guest's 9th pending `accept` fails
/// at once with `invalid-argument` naming the limit, and cancelling one
/// (dropping its subtask drops the host future) makes room for exactly one
/// more (the suite's `readiness.set-full`). Without the bound the guest
/// trapped at wasmtime's store handle limit ("cannot allocate another
/// handle").
#[tokio::test(flavor = "current_thread")]
async fn p3_pending_calls_are_bounded_and_a_cancel_frees_one() {
    let mut config = local_config();
    config.limits.readiness_set_entries = 8;
    let runner = Runner::new(config).expect("p3 runner");
    let out = suite(&runner, "", &["readiness.set-full"]).await;
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text().contains("full at 8 pending calls"),
        "{}",
        show(&out)
    );
}
