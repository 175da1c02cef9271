//! Byte streams: echo through a guest, half-close, order, listener,
//! refused and denied connects.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::common::*;

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 % 253) as u8).collect()
}

#[tokio::test(flavor = "current_thread")]
async fn guest_client_echoes_8_mib_in_order_and_half_closes() {
    const N: usize = 8 << 20;
    let (tx, rx) = tokio::sync::oneshot::channel::<(bool, bool)>();
    let tx = std::sync::Mutex::new(Some(tx));
    let addr = tcp_server(move |tcp| {
        let tx = tx.lock().unwrap().take();
        async move {
            let (mut r, mut w) = tcp.into_split();
            let writer = tokio::spawn(async move {
                w.write_all(&pattern(N)).await.unwrap();
                // Half-close: the guest sees EOF and then half-closes too.
                w.shutdown().await.unwrap();
            });
            let mut back = Vec::with_capacity(N);
            r.read_to_end(&mut back).await.unwrap();
            writer.await.unwrap();
            let _ = tx.unwrap().send((back == pattern(N), true));
        }
    });
    let runner = runner(local_config());
    let out = probe(&runner, &["tcp-echo", &addr.to_string()]).await;
    assert!(out.success(), "{}", show(&out));
    assert!(
        out.stdout_text().contains(&format!("ok echoed {N}")),
        "{}",
        show(&out)
    );
    let (same, eof) = rx.await.unwrap();
    assert!(same && eof, "echo differs from what was sent");
}

#[tokio::test(flavor = "current_thread")]
async fn guest_listener_accepts_and_echoes() {
    let runner = runner(local_config());
    let port = closed_port();
    let listen = format!("127.0.0.1:{port}");
    let guest = probe(&runner, &["tcp-serve", &listen]);
    let client = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let tcp = tokio::net::TcpStream::connect(&listen).await.unwrap();
        let local = tcp.local_addr().unwrap();
        // Give the host's accept loop (on this thread) a moment to run.
        tokio::time::sleep(Duration::from_millis(100)).await;
        let nodelay = nodelay_of_sockets_at(local);
        let (mut r, mut w) = tcp.into_split();
        let data = pattern(1 << 20);
        let expected = data.clone();
        let writer = tokio::spawn(async move {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        });
        let mut back = Vec::new();
        r.read_to_end(&mut back).await.unwrap();
        writer.await.unwrap();
        (back == expected, nodelay)
    };
    let (out, (same, nodelay)) = tokio::join!(guest, client);
    assert!(out.success(), "{}", show(&out));
    assert!(same, "echo differs");
    assert_eq!(
        nodelay,
        vec![true],
        "accepted byte stream must have TCP_NODELAY"
    );
}

#[tokio::test(flavor = "current_thread")]
async fn connect_errors() {
    let runner = runner(local_config());
    let out = probe(
        &runner,
        &["tcp-connect", &format!("127.0.0.1:{}", closed_port())],
    )
    .await;
    assert!(
        out.stdout_text().starts_with("error connection-refused"),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["tcp-connect", "192.0.2.1:22"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    let out = probe(&runner, &["tcp-connect", "no-port"]).await;
    assert!(
        out.stdout_text().starts_with("error invalid-url"),
        "{}",
        show(&out)
    );
    // Only name rules: a name no rule matches is denied before any DNS.
    let mut config = local_config();
    config.policy.allow = vec!["*.invalid:*".parse().unwrap()];
    let dns = crate::common::runner(config);
    let out = probe(&dns, &["tcp-connect", "example.com:80"]).await;
    assert!(
        out.stdout_text().starts_with("error denied"),
        "{}",
        show(&out)
    );
    let out = probe(&dns, &["tcp-connect", "no-such-host.invalid:80"]).await;
    assert!(
        out.stdout_text().starts_with("error dns-failure"),
        "{}",
        show(&out)
    );
}
