//! The case list: stable names, the host configuration each case needs and
//! what the driver checks besides the guest's own verdict.
//!
//! The suite guest (`guests/conformance-suite`) implements each case by
//! name and prints one JSON line per case; a case's category is the part
//! of its name before the first `.`.

use std::time::Duration;

/// Which host configuration a case runs under (see [`HostVariant::apply`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum HostVariant {
    /// The suite's default: 127.0.0.1, localhost and `*.invalid` allowed,
    /// listening on 127.0.0.1, the peer's CA trusted, short deadlines.
    Default,
    /// Runaway limit of 300 ms.
    ShortRun,
    /// Messages of at most 1 MiB.
    SmallMessages,
    /// Readiness sets of at most 8 registrations.
    SmallReadinessSets,
}

/// How a guest run must end for the case to pass.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    /// The guest returns normally and prints `"ok": true` for the case.
    Pass,
    /// The host stops the guest for exceeding its memory limit.
    MemoryLimit,
    /// The host stops the guest as a runaway.
    Runaway,
}

/// One conformance case.
#[derive(Clone, Copy, Debug)]
pub struct Case {
    /// Stable name, `category.case`.
    pub name: &'static str,
    /// Host configuration.
    pub host: HostVariant,
    /// How the run must end.
    pub expect: Expect,
    /// When set, the most bytes the host may have buffered for the guest's
    /// message streams at any moment (backpressure keeps memory bounded).
    pub max_buffered: Option<usize>,
    /// Wall-clock deadline for the whole guest run.
    pub deadline: Duration,
    /// The case judges a latency against a fixed bound, so one burst of
    /// steal time on a shared machine can fail it: a failed run is run
    /// once more, and the record keeps the first run's message.
    pub timed: bool,
}

impl Case {
    /// The category: the part of the name before the first `.`.
    pub fn category(&self) -> &'static str {
        self.name.split('.').next().unwrap_or(self.name)
    }
}

const fn case(name: &'static str) -> Case {
    Case {
        name,
        host: HostVariant::Default,
        expect: Expect::Pass,
        max_buffered: None,
        deadline: Duration::from_secs(20),
        timed: false,
    }
}

const fn timed(mut c: Case) -> Case {
    c.timed = true;
    c
}

const fn with_host(mut c: Case, host: HostVariant) -> Case {
    c.host = host;
    c
}

const fn expecting(mut c: Case, expect: Expect) -> Case {
    c.expect = expect;
    c
}

const fn bounded(mut c: Case, bytes: usize) -> Case {
    c.max_buffered = Some(bytes);
    c
}

/// The inbound and outbound bounds of the default configuration (1 MiB
/// each) plus one message that may exceed them when the queue is empty.
const STREAM_BOUND: usize = (1 << 20) + (1 << 20) + (64 << 10);

/// Categories in the order the matrix lists them.
pub const CATEGORIES: &[&str] = &[
    "connect",
    "subprotocol",
    "echo",
    "message",
    "close",
    "backpressure",
    "tls",
    "byte-stream",
    "listener",
    "limits",
    "wake-ups",
    "drop",
    "readiness",
];

/// Every case, grouped by category.
pub const CASES: &[Case] = &[
    case("connect.ok"),
    case("connect.invalid-url"),
    case("connect.refused"),
    case("connect.rejected-403"),
    case("connect.redirect-not-followed"),
    case("connect.handshake-timeout"),
    case("connect.dns-failure"),
    case("connect.denied-by-policy"),
    case("connect.custom-headers"),
    case("connect.peer-address-and-path"),
    case("subprotocol.negotiated"),
    case("subprotocol.none-offered"),
    case("subprotocol.none-accepted"),
    case("subprotocol.unoffered-selected"),
    case("echo.binary"),
    case("echo.text"),
    case("echo.unicode-text"),
    case("echo.empty-binary"),
    case("echo.empty-text"),
    case("echo.16mib"),
    case("message.boundaries-kept"),
    case("message.text-binary-interleaved"),
    case("message.pipelined-1000"),
    case("message.concurrent-send-receive"),
    case("message.burst-verified"),
    case("message.fragmented-reassembled"),
    case("message.ping-flood-answered"),
    case("close.local"),
    case("close.remote"),
    case("close.remote-no-code-1005"),
    case("close.remote-max-reason"),
    case("close.abnormal-1006"),
    case("close.reset-by-peer"),
    case("close.code-rules"),
    case("close.reason-rules"),
    case("close.send-after-close"),
    case("close.receive-after-close"),
    case("close.idempotent"),
    case("close.backlog-after-peer-close"),
    case("close.peer-ignores-close-frame"),
    case("close.drop-sends-1000"),
    bounded(case("backpressure.slow-reader-nothing-lost"), STREAM_BOUND),
    bounded(case("backpressure.burst-pauses-peer"), STREAM_BOUND),
    bounded(case("backpressure.send-would-block"), STREAM_BOUND),
    bounded(case("backpressure.slow-peer-nothing-lost"), STREAM_BOUND),
    case("tls.round-trip"),
    case("tls.close-clean"),
    case("tls.wrong-ca"),
    case("tls.hostname-mismatch"),
    case("tls.non-tls-server"),
    case("byte-stream.echo"),
    case("byte-stream.half-close"),
    case("byte-stream.large-in-order"),
    case("byte-stream.refused"),
    case("byte-stream.denied"),
    case("byte-stream.listener-accept"),
    case("byte-stream.slow-sink-backpressure"),
    case("byte-stream.reset-by-peer"),
    case("listener.accept-websocket"),
    case("listener.reject-bad-handshake"),
    case("listener.subprotocol-selected"),
    case("listener.denied-bind"),
    with_host(case("limits.send-over-max"), HostVariant::SmallMessages),
    with_host(
        case("limits.receive-over-max-1009"),
        HostVariant::SmallMessages,
    ),
    expecting(case("limits.guest-memory"), Expect::MemoryLimit),
    expecting(
        with_host(case("limits.runaway-stopped"), HostVariant::ShortRun),
        Expect::Runaway,
    ),
    timed(case("wake-ups.first-message-after-idle")),
    case("wake-ups.no-periodic-while-idle"),
    case("wake-ups.send-ready-wakes-once-room"),
    case("drop.message-stream"),
    case("drop.listener"),
    case("drop.future-message-stream"),
    case("drop.byte-stream"),
    case("drop.input-stream"),
    case("drop.output-stream"),
    case("drop.byte-listener"),
    case("drop.future-byte-stream"),
    case("readiness.register-deregister"),
    case("readiness.only-ready-reported"),
    case("readiness.drop-registered"),
    with_host(case("readiness.set-full"), HostVariant::SmallReadinessSets),
    case("readiness.connect-results"),
];

/// Looks a case up by name.
pub fn find(name: &str) -> Option<&'static Case> {
    CASES.iter().find(|c| c.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_categorised() {
        let mut names: Vec<&str> = CASES.iter().map(|c| c.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), CASES.len(), "duplicate case names");
        assert!(CASES.len() >= 60, "the suite has at least 60 cases");
        for c in CASES {
            assert!(CATEGORIES.contains(&c.category()), "{}", c.name);
        }
        for cat in CATEGORIES {
            assert!(
                CASES.iter().filter(|c| c.category() == *cat).count() >= 2,
                "{cat} has several cases"
            );
        }
    }
}
