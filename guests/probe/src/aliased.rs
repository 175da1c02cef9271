//! Lists whose elements all point at the same guest bytes, passed to the
//! host through the raw canonical ABI (the generated bindings would give
//! each element its own copy): what a hostile guest can hand the host.
//!
//! Layouts (canonical ABI, wasm32): `message` is 12 bytes (case byte at 0,
//! payload pointer at 4, length at 8); a `tuple<string, string>` is 16;
//! `result<T, error-code>` has its case byte at 0 and its payload at 8
//! (`error-code` holds a `u64`), the error's own case byte first.

use tether_guest_sdk::{self as sdk, ErrorCode};

#[link(wasm_import_module = "tether:streams/websocket@0.1.0")]
unsafe extern "C" {
    #[link_name = "[method]message-stream.send-many"]
    fn raw_send_many(stream: i32, list: i32, len: i32, ret: i32);
    #[link_name = "connect"]
    fn raw_connect(
        url: i32,
        url_len: i32,
        protocols: i32,
        protocols_len: i32,
        headers: i32,
        headers_len: i32,
        ret: i32,
    );
}

/// A `result<T, error-code>` return area.
#[repr(C, align(8))]
struct Ret([u8; 32]);

impl Ret {
    /// Prints `ok WHAT U32-PAYLOAD` or `error tag T` (the error's case).
    fn print(&self, what: &str) {
        if self.0[0] == 0 {
            let n = u32::from_le_bytes(self.0[8..12].try_into().unwrap());
            println!("ok {what} {n}");
        } else {
            println!("error tag {}", self.0[8]);
        }
    }
}

/// `send-many` with `count` binary messages, each the same `bytes`-byte
/// buffer.
pub fn send_many(url: &str, count: usize, bytes: usize) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    let payload = vec![7u8; bytes];
    let list: Vec<[u32; 3]> = (0..count)
        .map(|_| [1, payload.as_ptr() as u32, bytes as u32])
        .collect();
    let mut ret = Ret([0; 32]);
    unsafe {
        raw_send_many(
            stream.handle() as i32,
            list.as_ptr() as i32,
            count as i32,
            ret.0.as_mut_ptr() as i32,
        )
    };
    ret.print("took");
    Ok(())
}

/// `connect` to `url` with `count` headers whose names and values are all
/// the same `bytes`-byte string.
pub fn connect(url: &str, count: usize, bytes: usize) -> Result<(), ErrorCode> {
    let text = "x".repeat(bytes);
    let (p, n) = (text.as_ptr() as u32, bytes as u32);
    let headers: Vec<[u32; 4]> = (0..count).map(|_| [p, n, p, n]).collect();
    let mut ret = Ret([0; 32]);
    unsafe {
        raw_connect(
            url.as_ptr() as i32,
            url.len() as i32,
            0,
            0,
            headers.as_ptr() as i32,
            count as i32,
            ret.0.as_mut_ptr() as i32,
        )
    };
    ret.print("connecting");
    Ok(())
}
