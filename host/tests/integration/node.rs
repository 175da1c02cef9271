//! The unchanged guests on Node.js through jco (`node/`, `tether-node
//! run`): the JMUX guest at both ends of a tunnel carries an HTTP/1.1
//! upload and a SOCKS5 channel, and the QUIC echo guest completes its
//! handshakes and echoes against the native QUIC peer. Node 24 comes
//! from scripts/setup; without it these tests fail saying so.

use std::sync::Arc;

use tether_bench::jmux::pair::Proxy;
use tether_bench::jmux::peers::{self, PeerRuntime};
use tether_bench::quic_peer::{Faults, NativeServer};
use tether_quic::{Identity, Options};

use crate::jmux::{check_upload, local, pair};

#[test]
fn jmux_guest_on_node_carries_an_http1_upload_and_a_socks5_channel() {
    let peers = PeerRuntime::new().unwrap();
    let size = 2 << 20;
    let data = Arc::new(peers::payload(size, 23));
    let file = peers::data_file("node-jmux-upload.bin", &data).unwrap();
    let (h1, h1_log) = peers.http1(data.clone()).unwrap();
    let allow = h1.to_string();
    let (_pair, ports, extra) = pair(
        &Proxy::Node,
        &Proxy::Node,
        &[h1],
        &["socks5-listen"],
        &["--allow", &allow],
    );
    let took = check_upload(
        &format!("http://{}/up", local(ports[0])),
        &file,
        false,
        &h1_log,
        size,
    );
    eprintln!("2 MiB HTTP/1.1 upload through two JMUX guests on node: {took:?}");
    let socks = local(extra[0]).to_string();
    let got = peers::curl(&["--socks5-hostname", &socks, &format!("http://{h1}/data")]).unwrap();
    assert!(
        got == *data,
        "SOCKS5 GET: {} bytes, not the payload",
        got.len()
    );
}

#[tokio::test(flavor = "current_thread")]
async fn quic_echo_guest_on_node_handshakes_and_echoes() {
    let identity = Identity::generate(&["localhost"]).unwrap();
    let options = Options::default();
    let server = NativeServer::start(&identity, &options, Faults::default()).unwrap();
    let phases: Vec<String> = ["stream:1", "stream:100000", "rtt:5:32"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    let run =
        tether_bench::quic::node_client(&server.url(), &identity.cert_der, &options, 2, &phases)
            .await
            .expect("quic-echo on node runs");
    assert!(run.error.is_none(), "client failed: {:?}", run.error);
    // Two handshake-only connections, then the one that runs the phases.
    assert_eq!(run.handshakes.len(), 3, "{run:?}");
    assert_eq!(run.alpn, "tether-quic-echo");
    let bytes: Vec<u64> = run.streams().iter().map(|s| s.0).collect();
    assert_eq!(bytes, vec![1, 100_000]);
    assert_eq!(run.rtt_ns().len(), 5);
}
