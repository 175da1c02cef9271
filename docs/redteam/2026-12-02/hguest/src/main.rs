//! Hostile guest for the red team: host memory a guest can spend outside its own linear memory.
//! `sets ADDR N`: N readiness sets, each filled to the limit with the same listener under new keys.
//! `sendmany URL N`: one send-many call with N empty binary messages.
//! Then sleeps HOLD_MS so the host's RSS can be read.
use tether_guest_sdk::{self as sdk, Interest, ListenOptions, Message, ReadinessSet, websocket};

fn sleep_ms(ms: u64) {
    sdk::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

fn main() {
    let a: Vec<String> = std::env::args().collect();
    let n: u64 = a[3].parse().unwrap();
    let hold: u64 = a.get(if a[1] == "sets2" { 6 } else { 4 }).and_then(|s| s.parse().ok()).unwrap_or(3000);
    match a[1].as_str() {
        "sets" => {
            let l = websocket::listen(&a[2], &ListenOptions { subprotocols: vec![] }).unwrap();
            let mut sets = Vec::new();
            let mut total = 0u64;
            for i in 0..n {
                let s = ReadinessSet::new();
                let mut k = 0u64;
                loop {
                    match s.register_listener(&l, Interest::Accept, k) {
                        Ok(()) => k += 1,
                        Err(e) => {
                            if i == 0 { println!("set full at {k}: {}", sdk::describe(&e)); }
                            break;
                        }
                    }
                }
                total += k;
                sets.push(s);
                if (i + 1) % 10 == 0 { println!("sets {} registrations {}", i + 1, total); }
            }
            println!("done sets {} registrations {}", sets.len(), total);
            sleep_ms(hold);
        }
        "sets2" => {
            // N listeners, then SETS readiness sets, each filled to the limit round robin over
            // the listeners (so no one listener's watcher list grows long).
            let sets_n: u64 = a[5].parse().unwrap();
            let ls: Vec<_> = (0..n)
                .map(|_| websocket::listen(&a[2], &ListenOptions { subprotocols: vec![] }).unwrap())
                .collect();
            println!("listeners {}", ls.len());
            let mut sets = Vec::new();
            let mut total = 0u64;
            for i in 0..sets_n {
                let s = ReadinessSet::new();
                let mut k = 0u64;
                while s.register_listener(&ls[(k % n) as usize], Interest::Accept, k).is_ok() {
                    k += 1;
                }
                total += k;
                sets.push(s);
                if (i + 1) % 10 == 0 { println!("sets {} registrations {}", i + 1, total); }
            }
            println!("done sets {} registrations {}", sets.len(), total);
            sleep_ms(hold);
        }
        "sendmany" => {
            let s = sdk::connect(&a[2], &[]).unwrap();
            let msgs: Vec<Message> = (0..n).map(|_| Message::Binary(Vec::new())).collect();
            println!("built {} messages", msgs.len());
            let r = s.send_many(&msgs);
            println!("send-many -> {:?}", r.map_err(|e| sdk::describe(&e)));
            drop(msgs);
            sleep_ms(hold);
        }
        _ => eprintln!("usage"),
    }
}
