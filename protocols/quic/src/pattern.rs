//! The byte pattern the client sends and checks its echoes against.
//!
//! Byte `i` of a stream is `table[i % PERIOD]`, a pseudo-random table with a
//! prime period, so a shifted, dropped or duplicated span of any length is
//! caught, and writing or checking is a `memcpy`/`memcmp` of table windows
//! (64 MiB is checked in milliseconds, even inside WebAssembly).

use std::sync::OnceLock;

/// The period of the pattern, bytes (the largest prime below 2^16).
pub const PERIOD: usize = 65521;

fn table() -> &'static [u8] {
    static TABLE: OnceLock<Vec<u8>> = OnceLock::new();
    TABLE.get_or_init(|| {
        // xorshift64*: any fixed pseudo-random sequence will do.
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let mut t: Vec<u8> = (0..PERIOD)
            .map(|_| {
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 56) as u8
            })
            .collect();
        t.extend_from_within(..);
        t
    })
}

/// The pattern from stream offset `offset`, at most `max` bytes and at most
/// one period (a contiguous window of the table).
pub fn window(offset: u64, max: usize) -> &'static [u8] {
    let start = (offset % PERIOD as u64) as usize;
    &table()[start..start + max.min(PERIOD)]
}

/// True when `data` equals the pattern at stream offset `offset`.
pub fn matches(mut offset: u64, mut data: &[u8]) -> bool {
    while !data.is_empty() {
        let w = window(offset, data.len());
        if &data[..w.len()] != w {
            return false;
        }
        data = &data[w.len()..];
        offset += w.len() as u64;
    }
    true
}

/// The first `len` pattern bytes from `offset`, as a vector.
pub fn bytes(mut offset: u64, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    while v.len() < len {
        let w = window(offset, len - v.len());
        v.extend_from_slice(w);
        offset += w.len() as u64;
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_wrap_and_mismatches_are_caught() {
        let a = bytes(PERIOD as u64 - 10, 100);
        assert_eq!(a.len(), 100);
        assert!(matches(PERIOD as u64 - 10, &a));
        assert_eq!(&a[10..20], window(0, 10));
        assert!(!matches(PERIOD as u64 - 9, &a), "shifted by one");
        let mut b = a.clone();
        b[57] ^= 1;
        assert!(!matches(PERIOD as u64 - 10, &b), "one flipped bit");
        let long = bytes(3, 3 * PERIOD + 7);
        assert!(matches(3, &long));
    }
}
