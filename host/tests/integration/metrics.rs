//! The embedding API's metrics: an embedder registers the host's
//! `tether_*` metrics into its own `prometheus_client` registry, next to
//! its own metrics, and they move as guests dial, send, receive, get
//! denied and finish.

use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::registry::Registry;

use crate::common::{echo, local_config, probe, runner, show, within};

fn encode(registry: &Registry) -> String {
    let mut text = String::new();
    prometheus_client::encoding::prometheus_text::encode(&mut text, registry).unwrap();
    text
}

fn assert_line(text: &str, line: &str) {
    assert!(
        text.lines().any(|l| l == line),
        "no line `{line}` in:\n{text}"
    );
}

#[test]
fn an_embedder_registers_the_host_metrics_into_its_own_registry() {
    within(Duration::from_secs(120), || async {
        let server = tether_bench::echo_server::EchoServer::start().unwrap();
        let runner = runner(local_config());
        // The embedder's registry, with a metric of its own.
        let mut registry = Registry::default();
        let own = Counter::<u64>::default();
        registry.register("embedder_requests", "The embedder's own", own.clone());
        runner.host().metrics.register(&mut registry);
        let before = encode(&registry);
        assert_line(&before, "tether_guests_running 0");
        assert_line(
            &before,
            "tether_connections_total{interface=\"websocket\",direction=\"outbound\"} 0",
        );

        // 3 round trips of 16 bytes through the echo guest (outbound).
        let o = echo(&runner, &["ping", &server.url(), "rtt:3:16"]).await;
        assert!(o.success(), "{}", show(&o));
        // A dial the policy denies: no --allow rule covers 10.0.0.1.
        let o = probe(&runner, &["tcp-connect", "10.0.0.1:80"]).await;
        assert!(o.stdout_text().contains("error denied"), "{}", show(&o));
        own.inc();

        let after = encode(&registry);
        for line in [
            "embedder_requests_total 1",
            "tether_guests_running 0",
            "tether_guest_outcomes_total{outcome=\"ok\"} 1",
            "tether_guest_outcomes_total{outcome=\"exit_nonzero\"} 1",
            "tether_connections_total{interface=\"websocket\",direction=\"outbound\"} 1",
            "tether_connections_total{interface=\"websocket\",direction=\"inbound\"} 0",
            "tether_sent_messages_total 3",
            "tether_received_messages_total 3",
            "tether_sent_bytes_total{interface=\"websocket\"} 48",
            "tether_received_bytes_total{interface=\"websocket\"} 48",
            "tether_policy_denials_total{rule=\"(no allow rule)\"} 1",
        ] {
            assert_line(&after, line);
        }
    });
}

/// The metrics server's accepted sockets have TCP_NODELAY, as every
/// socket the host accepts (the red team of 2026-12-07, F4: its listener
/// accepted without it). A scraper that has not sent its head yet holds
/// its socket, so the server side can be read back from the kernel.
#[test]
fn the_metrics_server_sets_tcp_nodelay_on_what_it_accepts() {
    within(Duration::from_secs(30), || async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let server = tether_host::metrics::MetricsServer::serve(
            listener,
            std::sync::Arc::new(Registry::default()),
            &tether_host::Limits::default(),
        )
        .unwrap();
        let client = tokio::net::TcpStream::connect(server.local_addr())
            .await
            .unwrap();
        let client_addr = client.local_addr().unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let found = loop {
            let found =
                crate::common::nodelay_of_sockets_between(client_addr, Some(server.local_addr()));
            if !found.is_empty() || std::time::Instant::now() > deadline {
                break found;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        };
        assert_eq!(
            found,
            vec![true],
            "TCP_NODELAY of the accepted scrape socket"
        );
        drop(client);
    });
}
