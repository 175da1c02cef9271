//! Hostile guest 2 (red team 2026-12-03): malformed lists through the raw canonical ABI.
//! hguest2 MODE URL-or-ADDR; prints what the call returned (if it returns), the host may trap us instead.
use tether_guest_sdk::{self as sdk};

#[link(wasm_import_module = "tether:streams/websocket@0.1.0")]
unsafe extern "C" {
    #[link_name = "[method]message-stream.send-many"]
    fn raw_send_many(stream: i32, list: i32, len: i32, ret: i32);
    #[link_name = "connect"]
    fn raw_connect(url: i32, url_len: i32, protocols: i32, protocols_len: i32, headers: i32, headers_len: i32, ret: i32);
    #[link_name = "listen"]
    fn raw_listen(addr: i32, addr_len: i32, protocols: i32, protocols_len: i32, ret: i32);
}

#[repr(C, align(8))]
struct Ret([u8; 32]);
impl Ret {
    fn print(&self, what: &str) {
        if self.0[0] == 0 {
            println!("ok {what} {}", u32::from_le_bytes(self.0[8..12].try_into().unwrap()));
        } else {
            println!("error tag {}", self.0[8]);
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let mode = a[1].as_str();
    let target = &a[2];
    let mut ret = Ret([0; 32]);
    let bad = b"ab\xffcd".to_vec();
    let good = b"hello".to_vec();
    let big = vec![b'x'; 8 << 20];
    unsafe {
        match mode {
            "sm-badutf8-later" | "sm-badutf8-1025" | "sm-hugecount" | "sm-misaligned" | "sm-oob-later" | "sm-hugelen" | "sm-badcase" => {
                let stream = sdk::connect(target, &[]).unwrap();
                let h = stream.handle() as i32;
                let mut list: Vec<[u32; 3]> = (0..2000).map(|_| [0, good.as_ptr() as u32, good.len() as u32]).collect();
                let (ptr, len) = match mode {
                    "sm-badutf8-later" => { list[500] = [0, bad.as_ptr() as u32, bad.len() as u32]; (list.as_ptr() as i32, 2000) }
                    "sm-badutf8-1025" => { list[1500] = [0, bad.as_ptr() as u32, bad.len() as u32]; (list.as_ptr() as i32, 2000) }
                    "sm-oob-later" => { list[1500] = [1, 0xFFFF_FF00, 0x1000]; (list.as_ptr() as i32, 2000) }
                    "sm-hugelen" => { list[3] = [0, big.as_ptr() as u32, 0xFFFF_FFF0]; (list.as_ptr() as i32, 2000) }
                    "sm-badcase" => { list[3] = [7, 0, 0]; (list.as_ptr() as i32, 2000) }
                    "sm-hugecount" => (list.as_ptr() as i32, -1),
                    _ => ((list.as_ptr() as i32) + 2, 10),
                };
                println!("calling {mode}");
                raw_send_many(h, ptr, len, ret.0.as_mut_ptr() as i32);
                ret.print("took");
            }
            "cn-hugecount" | "cn-badutf8-later" | "cn-hugestr" => {
                let p = good.as_ptr() as u32;
                let mut headers: Vec<[u32; 4]> = (0..10).map(|_| [p, 5, p, 5]).collect();
                let (hp, hn) = match mode {
                    "cn-hugecount" => (headers.as_ptr() as i32, -1),
                    "cn-badutf8-later" => { headers[9] = [bad.as_ptr() as u32, 5, p, 5]; (headers.as_ptr() as i32, 10) }
                    _ => { headers[2] = [big.as_ptr() as u32, big.len() as u32, p, 5]; (headers.as_ptr() as i32, 10) }
                };
                println!("calling {mode}");
                raw_connect(target.as_ptr() as i32, target.len() as i32, 0, 0, hp, hn, ret.0.as_mut_ptr() as i32);
                ret.print("connect");
            }
            "ls-badutf8-later" | "ls-aliased-big" => {
                let p = good.as_ptr() as u32;
                let mut protos: Vec<[u32; 2]> = (0..10).map(|_| [p, 5]).collect();
                if mode == "ls-badutf8-later" { protos[9] = [bad.as_ptr() as u32, 5]; }
                else { for e in protos.iter_mut() { *e = [big.as_ptr() as u32, big.len() as u32]; } }
                println!("calling {mode}");
                raw_listen(target.as_ptr() as i32, target.len() as i32, protos.as_ptr() as i32, 10, ret.0.as_mut_ptr() as i32);
                ret.print("listen");
            }
            "cn-many" => {
                let n: usize = a[3].parse().unwrap();
                let p = good.as_ptr() as u32;
                let headers: Vec<[u32; 4]> = (0..n).map(|_| [p, 5, p, 5]).collect();
                println!("calling {mode} {n}");
                raw_connect(target.as_ptr() as i32, target.len() as i32, 0, 0, headers.as_ptr() as i32, n as i32, ret.0.as_mut_ptr() as i32);
                ret.print("connect");
            }
            _ => println!("unknown mode"),
        }
    }
    println!("guest returned normally");
}
