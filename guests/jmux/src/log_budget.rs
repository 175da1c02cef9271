//! Log lines a peer or a client can cause, at a bounded rate and in a
//! bounded, printable form: a hostile peer must not be able to write a
//! line per message it sends (the red teams of 2026-12-03: a line per
//! dropped message, then a line per refused OPEN, 14,336 lines and 1.8 MB
//! for 50,000 OPENs), nor forge lines or write 57 KB ones with the target
//! names it sends (the fourth round).

use std::fmt::Write;
use std::time::{Duration, Instant};

/// Longest line written, in characters: a peer's 60 KB target name is
/// cut here.
pub const MAX_LINE_CHARS: usize = 512;

/// Lines of one kind: at most `burst` per `interval`. How many were left
/// out is said by the next line of the kind, or, if none comes, by a line
/// of its own once the interval ends ([`LogBudget::flush`]), so a flood
/// that stops is still counted.
pub struct LogBudget {
    /// What the lines are about, for the count line ("refused OPENs").
    kind: &'static str,
    interval: Duration,
    burst: u32,
    /// Start of the current interval, and lines written in it.
    window: Option<(Instant, u32)>,
    /// Lines left out since the last one written.
    suppressed: u64,
}

impl LogBudget {
    /// At most `burst` lines about `kind` per `interval`.
    pub const fn new(kind: &'static str, interval: Duration, burst: u32) -> LogBudget {
        LogBudget {
            kind,
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
        eprintln!("jmux: {}{note}", printable(&line()));
    }

    /// When lines were left out: the end of their interval, when
    /// [`LogBudget::flush`] writes their count. `None` when none were.
    pub fn deadline(&self) -> Option<Instant> {
        match (self.suppressed, self.window) {
            (0, _) | (_, None) => None,
            (_, Some((start, _))) => Some(start + self.interval),
        }
    }

    /// Once the interval of lines left out has ended at `now` with no
    /// line of the kind since, writes their count and starts afresh.
    pub fn flush(&mut self, now: Instant) {
        if self.deadline().is_some_and(|d| now >= d) {
            eprintln!(
                "jmux: {} more {} not logged in the last {} s",
                std::mem::take(&mut self.suppressed),
                self.kind,
                self.interval.as_secs()
            );
            self.window = None;
        }
    }
}

/// `text` as one log line: control characters (newlines, CR, NUL, ANSI
/// escapes) escaped as `\n`, `\u{1b}`, ... so a peer's target name cannot
/// forge lines or drive the terminal, and cut at [`MAX_LINE_CHARS`]
/// characters with a note of how many were left out.
pub fn printable(text: &str) -> String {
    let mut out = String::with_capacity(text.len().min(MAX_LINE_CHARS + 32));
    for (chars, c) in text.chars().enumerate() {
        if chars >= MAX_LINE_CHARS {
            let rest = text.chars().count() - chars;
            let _ = write!(out, "... ({rest} more characters)");
            break;
        }
        if c.is_control() {
            let _ = write!(out, "{}", c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}
