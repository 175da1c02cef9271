//! Graceful shutdown through the embedding API (`HostCtx::shutdown`): what
//! every guest of the host sees, and the deadline that stops a guest that
//! does not end.

use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use tether_host::runner::RunError;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::common::*;

/// A guest blocked in `accept` on a TCP listener sees `closed`, the port
/// stops accepting, and the guest ends by itself before the deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_byte_listener_closes_and_the_waiting_guest_sees_closed() {
    let mut config = local_config();
    config.limits.shutdown_timeout = Duration::from_secs(20);
    let runner = runner(config);
    let listen = format!("127.0.0.1:{}", closed_port());
    let guest = probe(&runner, &["tcp-serve", &listen]);
    let stop = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner.host().shutdown();
        assert!(runner.host().is_shutting_down());
    };
    let (out, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(guest, stop) })
            .await
            .expect("the guest ended within 10 s of the shutdown");
    assert!(out.stdout_text().contains("error closed"), "{}", show(&out));
    assert!(
        tokio::net::TcpStream::connect(&listen).await.is_err(),
        "the listener still accepts after the shutdown"
    );
}

/// A dialled message stream closes with 1001 (going away); the guest sees
/// the peer's answer and ends.
#[tokio::test(flavor = "current_thread")]
async fn a_message_stream_closes_with_going_away() {
    let (tx, rx) = tokio::sync::oneshot::channel();
    let tx = std::sync::Mutex::new(Some(tx));
    let addr = ws_server(move |mut ws| {
        let tx = tx.lock().unwrap().take();
        async move {
            ws.send(Message::text("hello")).await.unwrap();
            // Read until the close frame; tungstenite answers it.
            let mut code = None;
            while let Some(Ok(m)) = ws.next().await {
                if let Message::Close(frame) = m {
                    code = frame.map(|f| f.code);
                }
            }
            let _ = tx.unwrap().send(code);
        }
    });
    let runner = runner(local_config());
    let url = format!("ws://{addr}/");
    let guest = probe(&runner, &["recv-all", &url]);
    let stop = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        runner.host().shutdown();
    };
    let (out, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(guest, stop) })
            .await
            .expect("the guest ended within 10 s of the shutdown");
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text().contains("ok received 1 5 close=1001"),
        "{}",
        show(&out)
    );
    let code = tokio::time::timeout(Duration::from_secs(5), rx)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(code, Some(CloseCode::Away));
}

/// A guest that does not end (it waits on a byte stream whose peer never
/// closes) is stopped at the deadline.
#[tokio::test(flavor = "current_thread")]
async fn a_guest_still_running_at_the_deadline_is_stopped() {
    let addr = tcp_server(|tcp| async move {
        // Hold the connection open, never send, never close.
        tokio::time::sleep(Duration::from_secs(30)).await;
        drop(tcp);
    });
    let mut config = local_config();
    config.limits.shutdown_timeout = Duration::from_millis(300);
    let runner = runner(config);
    let guest = probe(&runner, &["tcp-echo", &addr.to_string()]);
    let t0 = std::time::Instant::now();
    let stop = async {
        tokio::time::sleep(Duration::from_millis(200)).await;
        runner.host().shutdown();
    };
    let (out, ()) =
        tokio::time::timeout(Duration::from_secs(10), async { tokio::join!(guest, stop) })
            .await
            .expect("the guest was stopped within 10 s");
    assert!(
        matches!(out.result, Err(RunError::ShutdownDeadline(d)) if d == Duration::from_millis(300)),
        "{}",
        show(&out)
    );
    let took = t0.elapsed();
    assert!(
        took >= Duration::from_millis(500) && took < Duration::from_secs(3),
        "stopped after {took:?}"
    );
}
