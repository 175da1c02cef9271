//! Soak: thousands of connect / echo / close cycles through one server
//! guest must leave nothing behind. A test binary of its own, so that the
//! process's file descriptors, tasks and RSS are this test's alone.
//!
//! The run is `tether bench soak`'s ([`tether_bench::soak`]): WebSocket and
//! TCP cycles, mixed (clean closes, peer resets, guest drops with bytes
//! queued, handshakes abandoned halfway, half-closes). Afterwards the
//! process's open file descriptors and the guest runtime's live tasks are
//! back to their baseline exactly, the host buffers 0 bytes, the guest's
//! resource table holds as many entries as before, and RSS is within 5% of
//! where it stood after the first 2,000 cycles.
//!
//! `TETHER_SOAK_CYCLES` sets the number of cycles (default 5,000, the CI
//! run; `tether bench soak` runs 100,000).

use tether_bench::progress::Progress;
use tether_bench::soak::{self, Options};

#[test]
fn cycles_leave_no_fds_tasks_buffers_table_entries_or_memory_behind() {
    let cycles = std::env::var("TETHER_SOAK_CYCLES")
        .ok()
        .and_then(|v| v.parse().ok());
    let opts = Options::quick(cycles);
    // The clients on this thread, the guest on its own (as `tether bench
    // soak` runs them).
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let progress = Progress::new("soak", opts.cycles as u64);
    let report = rt
        .block_on(async {
            let limit = std::time::Duration::from_secs(300);
            tokio::time::timeout(limit, soak::run(&opts, &progress)).await
        })
        .expect("the soak took over 300 s")
        .expect("the soak ran");
    eprintln!("{}", report.table());
    eprintln!(
        "RSS along the run, [cycles, KiB]: {:?}",
        report.rss_kib_along
    );
    // Each kind of cycle did its part: bytes were queued in message
    // streams and in a TCP write queue along the way.
    assert!(report.peak_buffered_bytes > 0, "{report:?}");
    assert!(report.peak_tcp_queued_bytes > 0, "{report:?}");
    report.check().unwrap();
}
