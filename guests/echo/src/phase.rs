//! The `ping` phases, shared by both builds of the echo guest (`main.rs`
//! on `tether:streams`, `p3.rs` on `tether:streams-async`), so that they
//! take the same arguments and print the same lines.

/// One `ping` phase (sizes in bytes).
pub enum Phase {
    /// `rtt:N:SIZE` (`sends` 1) or `nagle:N:SIZE` (`sends` 2): N times,
    /// `sends` messages of SIZE bytes back to back, then their echoes;
    /// prints `NAME NS NS ...` ([`samples_line`]).
    RoundTrips {
        name: &'static str,
        n: usize,
        size: usize,
        sends: usize,
    },
    /// `pipeline:N:SIZE:WINDOW`: N messages with up to WINDOW (at least 1)
    /// in flight; prints `pipeline N SIZE ELAPSED_NS`.
    Pipeline {
        n: usize,
        size: usize,
        window: usize,
    },
}

impl Phase {
    /// Parses one phase argument.
    ///
    /// Errors: a message naming the phase, for an unknown kind or a
    /// missing or non-numeric count or size.
    pub fn parse(phase: &str) -> Result<Phase, String> {
        let parts: Vec<&str> = phase.split(':').collect();
        let num = |i: usize| -> Result<usize, String> {
            parts
                .get(i)
                .and_then(|p| p.parse().ok())
                .ok_or_else(|| format!("bad phase `{phase}`"))
        };
        let trips = |name, sends| -> Result<Phase, String> {
            Ok(Phase::RoundTrips {
                name,
                n: num(1)?,
                size: num(2)?,
                sends,
            })
        };
        match parts[0] {
            "rtt" => trips("rtt", 1),
            "nagle" => trips("nagle", 2),
            "pipeline" => Ok(Phase::Pipeline {
                n: num(1)?,
                size: num(2)?,
                window: num(3)?.max(1),
            }),
            other => Err(format!("unknown phase `{other}`")),
        }
    }
}

/// The line a round-trip phase prints: its name, then each sample in ns.
pub fn samples_line(name: &str, samples_ns: &[u64]) -> String {
    let list: Vec<String> = samples_ns.iter().map(u64::to_string).collect();
    format!("{name} {}", list.join(" "))
}
