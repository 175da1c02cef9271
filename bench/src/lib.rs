//! Tether's benchmarks and the native peers they share with the tests.
//!
//! Every benchmark measures a guest against native code in the same run:
//! - [`echo`]: `tether demo` and `tether bench echo` (echo guest vs a native
//!   tokio-tungstenite client);
//! - [`quic`]: `tether bench quic` (QUIC over message streams, every
//!   guest/native pairing);
//! - [`jmux`]: `tether bench jmux` (a two-guest JMUX tunnel vs direct, and
//!   two native relays as the floor; with `--vs jetsocat`, pairs of `tether
//!   jmux` and `jetsocat jmux-proxy` processes side by side);
//! - [`load`]: `tether bench load` (one server guest holding N WebSocket
//!   connections from a load client in another process);
//! - [`load_jmux`]: `tether bench load --jmux` (N channels open through a
//!   two-guest JMUX tunnel, readiness-set loop vs the old poll-all loop);
//! - [`soak`]: `tether bench soak` (100,000 WebSocket and TCP connect /
//!   echo / close cycles through one server guest leave no descriptor,
//!   task, buffered byte, table entry or memory behind).
//!
//! [`report`] draws every bench's JSON as `target/bench/report.html` with
//! SVG plots; [`progress`] is the progress line of long runs.
//!
//! The native peers, each on its own thread and runtime ([`local_server`]):
//! - [`echo_server`]: a tokio-tungstenite WebSocket echo server;
//! - [`quic_peer`]: the native QUIC client and server (quinn-proto);
//! - [`jmux::peers`]: TCP echo, relays, HTTP/1.1 and HTTP/2 upload sinks;
//! - [`jmux::pair`]: a JMUX pipe between two proxies, each a guest in this
//!   process, a `tether jmux` process or a `jetsocat jmux-proxy` process;
//! - [`tunnel`]: JMUX guests on their own threads, ports, and the host
//!   policy `tether jmux` derives from a `jmux-proxy` command line.

pub mod echo;
pub mod echo_server;
pub mod isolation;
pub mod jmux;
pub mod latency;
pub mod load;
pub mod load_jmux;
pub mod local_server;
pub mod node;
pub mod progress;
pub mod quic;
pub mod quic_peer;
pub mod report;
pub mod soak;
pub mod tunnel;
