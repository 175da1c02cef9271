//! Log lines a peer or a client can cause, at a bounded rate: a hostile
//! peer must not be able to write a line per message it sends (the red
//! teams of 2026-12-03: a line per dropped message, then a line per
//! refused OPEN, 14,336 lines and 1.8 MB for 50,000 OPENs).

use std::time::{Duration, Instant};

/// Lines of one kind: at most `burst` per `interval`; the first line after
/// a quiet spell says how many were left out.
pub struct LogBudget {
    interval: Duration,
    burst: u32,
    /// Start of the current interval, and lines written in it.
    window: Option<(Instant, u32)>,
    /// Lines left out since the last one written.
    suppressed: u64,
}

impl LogBudget {
    /// At most `burst` lines per `interval`.
    pub const fn new(interval: Duration, burst: u32) -> LogBudget {
        LogBudget {
            interval,
            burst,
            window: None,
            suppressed: 0,
        }
    }

    /// Writes `line()` to stderr unless this interval's lines are used
    /// up, with a note of how many were left out before it. `now` is the
    /// caller's clock (monotonic).
    pub fn log(&mut self, now: Instant, line: impl FnOnce() -> String) {
        let used = match &mut self.window {
            Some((start, used)) if now.duration_since(*start) < self.interval => used,
            window => &mut window.insert((now, 0)).1,
        };
        if *used >= self.burst {
            self.suppressed += 1;
            return;
        }
        *used += 1;
        let left_out = std::mem::take(&mut self.suppressed);
        let note = match left_out {
            0 => String::new(),
            n => format!(" ({n} more like it not logged)"),
        };
        eprintln!("jmux: {}{note}", line());
    }
}
