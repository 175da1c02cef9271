//! A progress line for long runs (benches, the conformance suite, soak
//! runs): an `indicatif` bar on a terminal, plain lines otherwise.

use std::io::IsTerminal;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Shows how far a run is: `done/total` steps and the current phase.
/// Cheap to clone (clones share one line). On a terminal it redraws one
/// stderr line; when stderr is not a terminal (CI, a pipe) it prints a line
/// per phase and, for runs of more than 10 steps, one per tenth of the
/// steps, never more.
#[derive(Clone)]
pub struct Progress {
    inner: Arc<Inner>,
}

struct Inner {
    label: String,
    total: u64,
    done: AtomicU64,
    /// The last tenth of `total` reported as a plain line.
    reported_tenth: AtomicU64,
    bar: Option<ProgressBar>,
}

impl Progress {
    /// A progress line called `label` over `total` steps (0: phases only).
    pub fn new(label: &str, total: u64) -> Progress {
        Progress::with_terminal(label, total, std::io::stderr().is_terminal())
    }

    /// A progress line that never draws (library callers, tests).
    pub fn hidden() -> Progress {
        Progress {
            inner: Arc::new(Inner {
                label: String::new(),
                total: 0,
                done: AtomicU64::new(0),
                reported_tenth: AtomicU64::new(0),
                bar: Some(ProgressBar::hidden()),
            }),
        }
    }

    fn with_terminal(label: &str, total: u64, terminal: bool) -> Progress {
        let bar = terminal.then(|| {
            let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
            let template = if total > 0 {
                "{prefix} [{elapsed_precise}] {bar:30} {pos}/{len} {wide_msg}"
            } else {
                "{prefix} [{elapsed_precise}] {spinner} {wide_msg}"
            };
            bar.set_style(ProgressStyle::with_template(template).expect("a valid template"));
            bar.set_prefix(label.to_string());
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Progress {
            inner: Arc::new(Inner {
                label: label.to_string(),
                total,
                done: AtomicU64::new(0),
                reported_tenth: AtomicU64::new(0),
                bar,
            }),
        }
    }

    /// Names the phase now running (e.g. `round 2/3: guest round trips`).
    pub fn phase(&self, phase: &str) {
        match &self.inner.bar {
            Some(bar) => bar.set_message(phase.to_string()),
            None => {
                let done = self.inner.done.load(Ordering::Relaxed);
                if self.inner.total > 0 {
                    eprintln!(
                        "{}: [{done}/{}] {phase}",
                        self.inner.label, self.inner.total
                    );
                } else {
                    eprintln!("{}: {phase}", self.inner.label);
                }
            }
        }
    }

    /// One more step done.
    pub fn inc(&self) {
        let done = self.inner.done.fetch_add(1, Ordering::Relaxed) + 1;
        match &self.inner.bar {
            Some(bar) => bar.set_position(done),
            // Phases name themselves; counts only for runs of many steps.
            None if self.inner.total > 10 => {
                let tenth = done * 10 / self.inner.total;
                let before = self
                    .inner
                    .reported_tenth
                    .fetch_max(tenth, Ordering::Relaxed);
                if tenth > before {
                    eprintln!("{}: {done}/{} done", self.inner.label, self.inner.total);
                }
            }
            None => {}
        }
    }

    /// Prints `line` on stderr above the progress line (which stays).
    pub fn println(&self, line: &str) {
        match &self.inner.bar {
            Some(bar) => bar.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    /// Steps in the whole run (0: phases only).
    pub fn total(&self) -> u64 {
        self.inner.total
    }

    /// Steps done so far.
    pub fn done(&self) -> u64 {
        self.inner.done.load(Ordering::Relaxed)
    }

    /// Clears the line (a terminal) once the run is over.
    pub fn finish(&self) {
        if let Some(bar) = &self.inner.bar {
            bar.finish_and_clear();
        }
    }
}
