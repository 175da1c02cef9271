//! Batched message-stream calls (`send-many`, `receive-many`): order and
//! message boundaries kept, the host's bounds enforced, backpressure as a
//! partial count with nothing lost.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tokio_tungstenite::tungstenite::Message;

use crate::common::*;

#[tokio::test(flavor = "current_thread")]
async fn send_many_against_a_slow_reader_takes_a_prefix_and_loses_nothing() {
    // 8 MiB in 16 KiB messages, in bursts of 64 (1 MiB) against a 256 KiB
    // outbound bound: most bursts can only be taken in part.
    const TOTAL: usize = 8 << 20;
    const CHUNK: usize = 16 << 10;
    const BOUND: usize = 256 << 10;
    let (tx, rx) = tokio::sync::oneshot::channel::<(usize, bool, bool)>();
    let tx = std::sync::Mutex::new(Some(tx));
    let addr = ws_server(move |mut ws| {
        let tx = tx.lock().unwrap().take();
        async move {
            let (mut offset, mut in_order, mut whole) = (0usize, true, true);
            while let Some(Ok(m)) = ws.next().await {
                if let Message::Binary(b) = m {
                    in_order &= b
                        .iter()
                        .enumerate()
                        .all(|(i, &x)| x == ((offset + i) % 251) as u8);
                    // Every message arrives as the guest sent it.
                    whole &= b.len() == CHUNK.min(TOTAL - offset);
                    offset += b.len();
                    // A slow reader: ~1 ms per 16 KiB.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }
            let _ = tx.unwrap().send((offset, in_order, whole));
        }
    });
    let mut config = local_config();
    config.limits.outbound_buffer_bytes = BOUND;
    // The guest closes once it queued the last burst; the kernel's socket
    // buffers may still hold a few MiB for the slow reader, which on a
    // busy machine takes longer than the tests' 800 ms linger, which would
    // then reset the connection (a bounded linger working, not a loss).
    config.limits.linger_timeout = Duration::from_secs(20);
    let runner = runner(config);
    let url = format!("ws://{addr}/");
    let (total, chunk) = (TOTAL.to_string(), CHUNK.to_string());
    let out = tokio::time::timeout(
        GUEST_DEADLINE,
        probe(&runner, &["send-many", &url, &total, &chunk]),
    )
    .await
    .expect("guest deadline");
    assert!(out.success(), "{}", show(&out));
    let (received, in_order, whole) = rx.await.unwrap();
    assert_eq!(received, TOTAL, "bytes lost");
    assert!(in_order, "bytes out of order");
    assert!(whole, "message boundaries changed");
    let field = |name: &str| -> u64 {
        let text = out.stdout_text();
        let rest = text.split(&format!("{name}=")).nth(1).unwrap_or("");
        rest.split_whitespace().next().unwrap().parse().unwrap()
    };
    assert!(
        field("partial") > 0,
        "no burst was taken in part: {}",
        show(&out)
    );
    assert!(
        field("wouldblock") > 0,
        "the guest never saw backpressure: {}",
        show(&out)
    );
    let peak = runner.host().stats.peak_buffered_bytes();
    assert!(
        peak > 0 && peak <= BOUND,
        "host buffered up to {peak} bytes, bound {BOUND}"
    );
}

/// A server that sends the texts "0" to "4999", then closes.
fn counting_server() -> std::net::SocketAddr {
    ws_server(|mut ws| async move {
        for i in 0..5000u32 {
            if ws.feed(Message::text(i.to_string())).await.is_err() {
                return;
            }
        }
        let _ = ws.flush().await;
        let _ = ws.close(None).await;
        while ws.next().await.is_some() {}
    })
}

#[tokio::test(flavor = "current_thread")]
async fn receive_many_keeps_order_and_stops_at_the_host_cap() {
    let addr = counting_server();
    let mut config = local_config();
    config.limits.max_batch_messages = 100;
    let runner = runner(config);
    let url = format!("ws://{addr}/");
    // The guest asks for 2^32 - 1 messages and any number of bytes, after
    // 300 ms: all 5000 are waiting, it gets at most 100 per call.
    let out = tokio::time::timeout(
        GUEST_DEADLINE,
        probe(
            &runner,
            &[
                "receive-many",
                &url,
                "300",
                "4294967295",
                &u64::MAX.to_string(),
            ],
        ),
    )
    .await
    .expect("guest deadline");
    assert!(out.success(), "{}", show(&out));
    let text = out.stdout_text();
    assert!(text.contains("ok zero-rejected"), "{}", show(&out));
    assert!(
        text.contains("ok received 5000 most=100 "),
        "want every message in order, at most (and once exactly) the cap of 100 per call: {}",
        show(&out)
    );
}

#[tokio::test(flavor = "current_thread")]
async fn receive_many_stops_at_max_bytes() {
    let addr = counting_server();
    let runner = runner(local_config());
    let url = format!("ws://{addr}/");
    let out = tokio::time::timeout(
        GUEST_DEADLINE,
        probe(
            &runner,
            &["receive-many", &url, "300", "4294967295", "1000"],
        ),
    )
    .await
    .expect("guest deadline");
    assert!(out.success(), "{}", show(&out));
    let text = out.stdout_text();
    assert!(text.contains("ok received 5000 "), "{}", show(&out));
    let most_bytes: u64 = text
        .split("most-bytes=")
        .nth(1)
        .and_then(|r| r.split_whitespace().next())
        .unwrap()
        .parse()
        .unwrap();
    // The texts are 1-4 bytes: a full batch is within 4 bytes of the bound.
    assert!(
        (997..=1000).contains(&most_bytes),
        "largest batch {most_bytes} bytes, bound 1000: {}",
        show(&out)
    );
}
