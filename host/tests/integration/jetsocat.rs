//! Interop with `jetsocat`, the reference JMUX proxy (Devolutions), in both
//! directions: a Tether client (the JMUX guest with the listeners) with a
//! `jetsocat jmux-proxy ws-listen://` server, and a jetsocat client with a
//! Tether server. Each test starts its own jetsocat process
//! (`../shared/peers/jetsocat/jetsocat` from the workspace root; a missing
//! binary fails the test with that path) and real peers on 127.0.0.1.
//!
//! A channel reset mid-transfer is tested on Tether's side of each pair: by
//! the target behind a Tether server, and by the client in front of a
//! Tether client. (A target behind a *jetsocat* server that resets while
//! new channels reuse ids ends jetsocat's whole session: "detected two
//! streams with the same local ID".)

use std::net::SocketAddr;
use std::sync::Arc;

use tether_bench::jmux::pair::{Pair, Proxy, default_jetsocat, require_jetsocat};
use tether_bench::jmux::peers::{self, PeerRuntime};

use crate::jmux::{
    MakePair, ResetBy, a_reset_loses_only_its_channel, check_upload, guest,
    half_close_reaches_the_target, hundred_channels_with_checksums, local, pair, runner,
};

/// Which end is which.
#[derive(Clone, Copy, Debug)]
enum Direction {
    /// Tether client (listeners), jetsocat server (opens targets).
    TetherClient,
    /// jetsocat client, Tether server.
    JetsocatClient,
}

fn jetsocat() -> Proxy {
    let path = default_jetsocat();
    require_jetsocat(&path).unwrap_or_else(|e| panic!("{e:#}"));
    Proxy::Jetsocat(path)
}

/// Runs `test` with a maker of mixed pairs in `direction` (the server end
/// allows every target).
fn with_mixed<T>(direction: Direction, test: impl FnOnce(MakePair) -> T) -> T {
    let runner = runner();
    let (tether, jetsocat) = (guest(&runner), jetsocat());
    let (server, client) = match direction {
        Direction::TetherClient => (&jetsocat, &tether),
        Direction::JetsocatClient => (&tether, &jetsocat),
    };
    test(
        &|targets: &[SocketAddr], extra: &[&str]| -> (Pair, Vec<u16>, Vec<u16>) {
            pair(server, client, targets, extra, &[])
        },
    )
}

fn http1_upload_and_get(direction: Direction) {
    let peers = PeerRuntime::new().unwrap();
    let size = 8 << 20;
    let data = Arc::new(peers::payload(size, 13));
    let file = peers::data_file("jetsocat-test-upload.bin", &data).unwrap();
    let (h1, log) = peers.http1(data.clone()).unwrap();
    with_mixed(direction, |make| {
        let (_p, ports, _) = make(&[h1], &[]);
        let via = local(ports[0]);
        check_upload(&format!("http://{via}/up"), &file, false, &log, size);
        let got = peers::curl(&[&format!("http://{via}/data")]).unwrap();
        assert!(got == *data, "GET: {} bytes, not the payload", got.len());
    });
}

fn socks5_and_http_connect(direction: Direction) {
    let peers = PeerRuntime::new().unwrap();
    let data = Arc::new(peers::payload(300_000, 17));
    let (h1, _) = peers.http1(data.clone()).unwrap();
    with_mixed(direction, |make| {
        let (_p, _, lp) = make(&[], &["socks5-listen", "http-listen"]);
        let (socks, http) = (local(lp[0]).to_string(), format!("http://{}", local(lp[1])));
        let url = format!("http://{h1}/data");
        for args in [
            vec!["--socks5-hostname", &socks[..], &url[..]],
            vec!["--socks5", &socks[..], &url[..]],
            // -p: an HTTP CONNECT channel, not a plain proxy request.
            vec!["-p", "-x", &http[..], &url[..]],
        ] {
            let got = peers::curl(&args).unwrap_or_else(|e| panic!("{direction:?} {args:?}: {e}"));
            assert!(
                got == *data,
                "{args:?}: {} bytes, not the payload",
                got.len()
            );
        }
    });
}

#[test]
fn tether_client_jetsocat_server_http1_upload_and_get() {
    http1_upload_and_get(Direction::TetherClient);
}

#[test]
fn jetsocat_client_tether_server_http1_upload_and_get() {
    http1_upload_and_get(Direction::JetsocatClient);
}

#[test]
fn tether_client_jetsocat_server_socks5_and_http_connect() {
    socks5_and_http_connect(Direction::TetherClient);
}

#[test]
fn jetsocat_client_tether_server_socks5_and_http_connect() {
    socks5_and_http_connect(Direction::JetsocatClient);
}

#[test]
fn tether_client_jetsocat_server_hundred_concurrent_channels() {
    with_mixed(Direction::TetherClient, hundred_channels_with_checksums);
}

#[test]
fn jetsocat_client_tether_server_hundred_concurrent_channels() {
    with_mixed(Direction::JetsocatClient, hundred_channels_with_checksums);
}

#[test]
fn tether_client_jetsocat_server_half_close() {
    with_mixed(Direction::TetherClient, half_close_reaches_the_target);
}

#[test]
fn jetsocat_client_tether_server_half_close() {
    with_mixed(Direction::JetsocatClient, half_close_reaches_the_target);
}

#[test]
fn tether_client_jetsocat_server_client_resets_lose_only_their_channel() {
    let n = with_mixed(Direction::TetherClient, |make| {
        a_reset_loses_only_its_channel(make, ResetBy::Client)
    });
    eprintln!("{n} short channels next to five resets");
}

#[test]
fn jetsocat_client_tether_server_target_resets_lose_only_their_channel() {
    let n = with_mixed(Direction::JetsocatClient, |make| {
        a_reset_loses_only_its_channel(make, ResetBy::Target)
    });
    eprintln!("{n} short channels next to five resets");
}
