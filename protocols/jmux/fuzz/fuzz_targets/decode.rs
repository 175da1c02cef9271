//! Fuzz target `decode`: arbitrary bytes, cut into arbitrary chunks, through
//! the incremental decoder and a session. Nothing may panic, and every
//! decoded message must survive encode -> decode unchanged.
#![no_main]

use std::time::{Duration, Instant};

use libfuzzer_sys::fuzz_target;
use tether_jmux::{Config, Decoder, Message, Session};

fuzz_target!(|data: &[u8]| {
    // First byte picks the chunk size so chunk boundaries vary too.
    let Some((&cut, bytes)) = data.split_first() else {
        return;
    };
    let cut = usize::from(cut).max(1);

    let mut dec = Decoder::new();
    for chunk in bytes.chunks(cut) {
        dec.push(chunk);
        while let Ok(Some(msg)) = dec.next_message() {
            let mut out = Vec::new();
            msg.encode(&mut out).expect("a decoded message re-encodes");
            let again = Message::decode(&out).expect("re-encoded bytes decode");
            assert_eq!(again, msg);
        }
    }

    // The same bytes as peer input to a session with one channel open.
    let mut session = Session::new(Config::default()).unwrap();
    let now = Instant::now();
    let _ = session.open(&tether_jmux::Destination::tcp("fuzz", 1), now);
    let mut t = now;
    for chunk in bytes.chunks(cut) {
        t += Duration::from_micros(7);
        if session.handle_input(t, chunk).is_err() {
            break;
        }
        while let Some(ev) = session.poll_event() {
            if let tether_jmux::Event::OpenRequest { id, .. } = ev {
                let _ = session.accept(id);
            }
        }
        if session.poll_flush(t) {
            let n = session.transmit().len();
            session.advance_transmit(n);
        }
    }
});
