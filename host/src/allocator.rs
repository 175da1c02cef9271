//! The process's allocator, tuned for message-sized buffers.
//!
//! glibc's malloc serves blocks of 128 KiB and more with `mmap` and hands
//! them back with `munmap` (its threshold moves up after the first free,
//! but trimming still returns the heap's top to the kernel), so every
//! 1 MiB message the host lifts out of a guest, copies out of tungstenite
//! or queues for a socket came in fresh pages, each a page fault and a
//! zeroed 4 KiB page: about 500 faults per MiB. Measured on a guest
//! client echoing 2,000 messages of 1 MiB (8 in flight, `perf stat`, the
//! echo guest's `ping` against `echo server`): 1,031,612 and 969,117 page
//! faults and 6.1 and 6.0 s of CPU by default, 6,682 faults and 2.2 s
//! with the bounds below.

/// Largest block served from the heap, bytes: glibc's own ceiling for its
/// moving threshold (32 MiB on 64-bit). Larger blocks (a message near the
/// 64 MiB `max_message_bytes`) still come from `mmap` and go back at once.
pub const MMAP_THRESHOLD_BYTES: i32 = 32 << 20;

/// Free heap a glibc arena keeps before it trims its top, bytes: what the
/// process may hold beyond its live blocks, per arena, after a burst.
pub const TRIM_THRESHOLD_BYTES: i32 = 64 << 20;

/// Sets glibc's `M_MMAP_THRESHOLD` and `M_TRIM_THRESHOLD` to
/// [`MMAP_THRESHOLD_BYTES`] and [`TRIM_THRESHOLD_BYTES`], so buffers of
/// messages up to 32 MiB are reused from the heap instead of being
/// mapped and faulted in anew. The `tether` command calls it at start; an
/// embedder that uses the system allocator may too (one that sets its own
/// global allocator needs not). Does nothing when `GLIBC_TUNABLES` sets
/// any `glibc.malloc.` tunable (the operator's choice stands), and off
/// glibc. Returns whether it set them.
pub fn keep_freed_buffers() -> bool {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        let chosen = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."));
        if chosen {
            return false;
        }
        // SAFETY: mallopt only changes malloc's parameters; it is
        // thread-safe and takes plain integers.
        unsafe {
            libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES) == 1
                && libc::mallopt(libc::M_TRIM_THRESHOLD, TRIM_THRESHOLD_BYTES) == 1
        }
    }
    #[cfg(not(all(target_os = "linux", target_env = "gnu")))]
    {
        false
    }
}

#[cfg(all(test, target_os = "linux", target_env = "gnu"))]
mod tests {
    use super::*;

    /// Minor page faults of the calling thread so far.
    fn thread_minor_faults() -> i64 {
        // SAFETY: getrusage fills the struct it is given.
        unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            assert_eq!(libc::getrusage(libc::RUSAGE_THREAD, &mut usage), 0);
            usage.ru_minflt
        }
    }

    /// Eight 1 MiB buffers in flight at a time, as the echo bench's bulk
    /// phase holds them: by default glibc trims them back to the kernel
    /// after each round and faults them in again (about 2,000 faults a
    /// round); kept, a round after the first costs none.
    #[test]
    fn message_sized_buffers_are_reused_not_faulted_in_again() {
        let tunables = std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc."));
        assert_eq!(keep_freed_buffers(), !tunables, "mallopt refused");
        let round = || {
            let buffers: Vec<Vec<u8>> = (0..8)
                .map(|i| {
                    let mut b = Vec::with_capacity(1 << 20);
                    b.resize(1 << 20, i as u8);
                    b
                })
                .collect();
            std::hint::black_box(&buffers);
        };
        round();
        let before = thread_minor_faults();
        for _ in 0..50 {
            round();
        }
        let faults = thread_minor_faults() - before;
        assert!(
            faults < 1_000,
            "{faults} page faults for 50 rounds of 8 MiB of buffers"
        );
    }
}
