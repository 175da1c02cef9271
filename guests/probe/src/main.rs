//! Test guest: each command exercises one host behaviour and prints its
//! outcome on stdout as `ok ...` or `error KIND DETAIL` lines, which the
//! host's integration tests assert on.
//!
//! ```text
//! probe connect URL [SUBPROTOCOL...]   connect, close 1000, print close info
//! probe send-bulk URL TOTAL CHUNK      send TOTAL bytes (byte i = i % 251) in CHUNK-byte messages
//! probe send-many URL TOTAL CHUNK    send-bulk's messages in bursts of 64 through `send-many`;
//!                                      print how often a burst was taken in part
//! probe receive-many URL WAIT_MS MAX_MESSAGES MAX_BYTES
//!                                      wait WAIT_MS, then `receive-many` until closed; the peer's
//!                                      messages are texts "0", "1", ... (checked in order); print
//!                                      the count, the largest batch in messages and in bytes
//! probe recv-all URL [WAIT_MS]         (wait WAIT_MS before the first receive, then) receive
//!                                      until closed; print count, bytes, close code
//! probe send-big URL SIZE              send one SIZE-byte message
//! probe close-rules URL                check close code/reason rules, idempotent close, send after close
//! probe tcp-echo HOST:PORT             echo bytes until EOF, then half-close
//! probe tcp-serve ADDR                 accept one connection, echo until EOF, half-close
//! probe denied-then-tcp-serve DEST ADDR  dial DEST (expecting `denied`), then listen on ADDR,
//!                                      print its address, and serve one connection as tcp-serve
//! probe tcp-connect HOST:PORT          connect and report
//! probe listen ADDR                    bind a WebSocket listener and report
//! probe ws-serve-hold ADDR MS [CODE]   accept one stream (close it with CODE), receive until it ends, print close info, hold it MS ms
//! probe spin [URL]                     (connect to URL, then) loop forever (runaway guest)
//! probe alloc MIB                      allocate MIB mebibytes
//! probe tcp-wakeups HOST:PORT CONNS    open CONNS connections, read each to EOF waiting on
//!                                      its input pollable; count reads that returned 0 bytes
//! probe tcp-stuck HOST:PORT TOTAL      write (within check-write) to a peer that never reads
//!                                      until check-write stays 0 for 300 ms or TOTAL bytes went
//! probe ws-stuck URL drop|close [SIZE]  send SIZE-byte messages (default 16 KiB) to a peer
//!                                      that never reads until `send` stays would-block for
//!                                      300 ms (print `ok blocked-after=BYTES messages=N`; after
//!                                      4 Mi messages `ok never-blocked`); then drop the stream,
//!                                      or close it and receive until it ends (print how long it
//!                                      took and the close code)
//! probe tcp-backlog ADDR WAIT_MS N     listen, accept nothing for WAIT_MS, then accept N
//! probe ws-backlog ADDR WAIT_MS N      the same with a WebSocket listener
//! probe fail-holding URL exit|trap|memory   connect, then fail that way holding the stream
//! probe tcp-fail-holding HOST:PORT exit|trap|memory  connect over TCP, write `partial`, then
//!                                      fail that way holding the byte stream
//! probe send-many-aliased URL COUNT BYTES  call `send-many` through the raw canonical ABI with
//!                                      COUNT messages that all point at one BYTES-byte buffer;
//!                                      print `ok took N` or `error tag T`
//! probe connect-aliased URL COUNT BYTES  call `connect` through the raw ABI with COUNT headers
//!                                      whose names and values all point at one BYTES-byte string;
//!                                      print `ok connecting` or `error tag T`
//! probe readiness-sets ADDR SETS       one WebSocket listener on ADDR, SETS readiness sets each
//!                                      filled with it under new keys until `register` fails; print
//!                                      the total and the first failure; then check that a
//!                                      deregistration, a dropped set and the dropped listener give
//!                                      places back (one line each)
//! probe aead                           host AEAD (`tether:streams/aead`): RFC 9001 A.5, then
//!                                      hostile inputs (forged tag, oversized payload, wrong key
//!                                      and nonce lengths, keys until refused), one line each
//! ```

use std::process::ExitCode;

mod aliased;

use tether_guest_sdk::{
    self as sdk, ErrorCode, Interest, ListenOptions, Message, ReadinessSet, StreamError, websocket,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().collect();
    let arg = |i: usize| args.get(i).map(String::as_str).unwrap_or("");
    let num = |i: usize| arg(i).parse::<usize>().unwrap_or(0);
    let result = match arg(1) {
        "connect" => connect(arg(2), &args[3..]),
        "send-bulk" => send_bulk(arg(2), num(3), num(4)),
        "recv-all" => recv_all(arg(2), num(3) as u64),
        "send-many" => send_many(arg(2), num(3), num(4)),
        "receive-many" => receive_many(
            arg(2),
            num(3) as u64,
            arg(4).parse().unwrap_or(0),
            arg(5).parse().unwrap_or(0),
        ),
        "send-big" => send_big(arg(2), num(3)),
        "close-rules" => close_rules(arg(2)),
        "tcp-echo" => tcp_echo(arg(2)),
        "tcp-serve" => tcp_serve(arg(2)),
        "denied-then-tcp-serve" => denied_then_tcp_serve(arg(2), arg(3)),
        "tcp-connect" => {
            sdk::tcp_connect(arg(2)).map(|c| println!("ok connected {}", c.stream.peer_address()))
        }
        "listen" => websocket::listen(
            arg(2),
            &ListenOptions {
                subprotocols: vec![],
            },
        )
        .map(|l| println!("ok listening {}", l.local_address())),
        "ws-serve-hold" => ws_serve_hold(arg(2), num(3) as u64, arg(4).parse().ok()),
        "spin" => spin(arg(2)),
        "alloc" => alloc(num(2)),
        "tcp-wakeups" => tcp_wakeups(arg(2), num(3)),
        "tcp-stuck" => tcp_stuck(arg(2), num(3)),
        "ws-stuck" => ws_stuck(
            arg(2),
            arg(3) == "close",
            arg(4).parse().unwrap_or(16 << 10),
        ),
        "tcp-backlog" => tcp_backlog(arg(2), num(3) as u64, num(4)),
        "ws-backlog" => ws_backlog(arg(2), num(3) as u64, num(4)),
        "fail-holding" => fail_holding(arg(2), arg(3)),
        "tcp-fail-holding" => tcp_fail_holding(arg(2), arg(3)),
        "send-many-aliased" => aliased::send_many(arg(2), num(3), num(4)),
        "connect-aliased" => aliased::connect(arg(2), num(3), num(4)),
        "readiness-sets" => readiness_sets(arg(2), num(3)),
        "aead" => {
            aead();
            Ok(())
        }
        other => {
            eprintln!("probe: unknown command `{other}`");
            return ExitCode::from(2);
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("error {} {}", sdk::error_kind(&e), sdk::describe(&e));
            ExitCode::FAILURE
        }
    }
}

fn connect(url: &str, protocols: &[String]) -> Result<(), ErrorCode> {
    let protocols: Vec<&str> = protocols.iter().map(String::as_str).collect();
    let stream = sdk::connect(url, &protocols)?;
    println!(
        "ok connected protocol={} path={}",
        stream.subprotocol().unwrap_or_default(),
        stream.path()
    );
    stream.close(1000, "bye")?;
    let rx = stream.subscribe_receive();
    while sdk::receive_blocking(&stream, &rx)?.is_some() {}
    let info = stream.close_info().expect("closed stream has close info");
    println!("ok closed code={} reason={}", info.code, info.reason);
    Ok(())
}

fn send_bulk(url: &str, total: usize, chunk: usize) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    let tx = stream.subscribe_send();
    let (mut offset, mut would_block) = (0usize, 0u64);
    while offset < total {
        let n = chunk.min(total - offset);
        let message = Message::Binary((offset..offset + n).map(|i| (i % 251) as u8).collect());
        loop {
            match stream.send(&message) {
                Ok(()) => break,
                Err(ErrorCode::WouldBlock) => {
                    would_block += 1;
                    tx.block();
                }
                Err(e) => return Err(e),
            }
        }
        offset += n;
    }
    stream.close(1000, "done")?;
    let rx = stream.subscribe_receive();
    while sdk::receive_blocking(&stream, &rx)?.is_some() {}
    println!("ok sent {total} wouldblock={would_block}");
    Ok(())
}

/// Messages one `send-many` burst holds at most.
const BURST: usize = 64;

fn send_many(url: &str, total: usize, chunk: usize) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    let tx = stream.subscribe_send();
    let (mut offset, mut would_block, mut partial) = (0usize, 0u64, 0u64);
    let mut burst: Vec<Message> = Vec::with_capacity(BURST);
    while offset < total || !burst.is_empty() {
        while burst.len() < BURST && offset < total {
            let n = chunk.min(total - offset);
            burst.push(Message::Binary(
                (offset..offset + n).map(|i| (i % 251) as u8).collect(),
            ));
            offset += n;
        }
        match stream.send_many(&burst) {
            Ok(0) => return Err(ErrorCode::Other("send-many took nothing".into())),
            Ok(n) => {
                if (n as usize) < burst.len() {
                    partial += 1;
                }
                burst.drain(..n as usize);
            }
            Err(ErrorCode::WouldBlock) => {
                would_block += 1;
                tx.block();
            }
            Err(e) => return Err(e),
        }
    }
    stream.close(1000, "done")?;
    let rx = stream.subscribe_receive();
    while sdk::receive_blocking(&stream, &rx)?.is_some() {}
    println!("ok sent {total} wouldblock={would_block} partial={partial}");
    Ok(())
}

fn receive_many(
    url: &str,
    wait_ms: u64,
    max_messages: u32,
    max_bytes: u64,
) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    match stream.receive_many(0, max_bytes) {
        Err(ErrorCode::InvalidArgument(_)) => println!("ok zero-rejected"),
        other => println!("error zero-accepted {other:?}"),
    }
    if wait_ms > 0 {
        sleep_ms(wait_ms);
    }
    let rx = stream.subscribe_receive();
    let (mut count, mut most, mut most_bytes) = (0u64, 0usize, 0u64);
    let end = loop {
        match stream.receive_many(max_messages, max_bytes) {
            Ok(batch) if batch.is_empty() => rx.block(),
            Ok(batch) => {
                let mut bytes = 0u64;
                for m in &batch {
                    let text = match m {
                        Message::Text(t) => t.as_str(),
                        Message::Binary(_) => "binary",
                    };
                    if text != count.to_string() {
                        println!("error out-of-order {text} expected {count}");
                        return Ok(());
                    }
                    bytes += text.len() as u64;
                    count += 1;
                }
                most = most.max(batch.len());
                most_bytes = most_bytes.max(bytes);
            }
            Err(ErrorCode::Closed) => break None,
            Err(e) => break Some(e),
        }
    };
    println!("ok received {count} most={most} most-bytes={most_bytes}");
    match end {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn recv_all(url: &str, wait_ms: u64) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    if wait_ms > 0 {
        sleep_ms(wait_ms);
    }
    let rx = stream.subscribe_receive();
    let (mut count, mut bytes) = (0u64, 0u64);
    let end = loop {
        match stream.receive() {
            Ok(Some(Message::Binary(b))) => {
                count += 1;
                bytes += b.len() as u64;
            }
            Ok(Some(Message::Text(t))) => {
                count += 1;
                bytes += t.len() as u64;
            }
            Ok(None) => rx.block(),
            Err(ErrorCode::Closed) => break None,
            Err(e) => break Some(e),
        }
    };
    let code = stream.close_info().map(|c| c.code).unwrap_or(0);
    println!("ok received {count} {bytes} close={code}");
    match end {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

fn send_big(url: &str, size: usize) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    stream.send(&Message::Binary(vec![1; size]))?;
    println!("ok sent {size}");
    Ok(())
}

fn close_rules(url: &str) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    for (code, reason_len) in [
        (999u16, 0usize),
        (1001, 0),
        (2999, 0),
        (5000, 0),
        (1000, 124),
    ] {
        match stream.close(code, &"r".repeat(reason_len)) {
            Err(ErrorCode::InvalidArgument(_)) => println!("ok rejected {code} {reason_len}"),
            other => println!("error accepted {code} {reason_len} {other:?}"),
        }
    }
    stream.close(4000, &"r".repeat(123))?;
    stream.close(4000, "again")?;
    println!("ok idempotent");
    match stream.send(&Message::Text("late".into())) {
        Err(ErrorCode::Closed) => println!("ok send-after-close closed"),
        other => println!("error send-after-close {other:?}"),
    }
    let rx = stream.subscribe_receive();
    while sdk::receive_blocking(&stream, &rx)?.is_some() {}
    match stream.receive() {
        Err(ErrorCode::Closed) => println!("ok receive-after-close closed"),
        other => println!("error receive-after-close {other:?}"),
    }
    println!("ok close-info {:?}", stream.close_info().map(|c| c.code));
    Ok(())
}

fn echo_bytes(conn: &sdk::Connection) -> Result<u64, ErrorCode> {
    let ready = conn.input.subscribe();
    let mut total = 0u64;
    loop {
        match conn.input.read(65536) {
            Ok(bytes) if bytes.is_empty() => ready.block(),
            Ok(bytes) => {
                total += bytes.len() as u64;
                sdk::write_all(&conn.output, &bytes)
                    .map_err(|e| ErrorCode::Other(format!("write: {e:?}")))?;
            }
            Err(StreamError::Closed) => break,
            Err(e) => return Err(ErrorCode::Other(format!("read: {e:?}"))),
        }
    }
    conn.stream.shutdown_send()?;
    Ok(total)
}

fn tcp_echo(address: &str) -> Result<(), ErrorCode> {
    let conn = sdk::tcp_connect(address)?;
    let total = echo_bytes(&conn)?;
    println!("ok echoed {total}");
    Ok(())
}

fn tcp_serve(address: &str) -> Result<(), ErrorCode> {
    serve_one(&sdk::tcp::listen(address)?)
}

/// Accepts one connection, echoes it until EOF, half-closes.
fn serve_one(listener: &sdk::tcp::ByteListener) -> Result<(), ErrorCode> {
    let ready = listener.subscribe();
    let (stream, input, output) = loop {
        match listener.accept()? {
            Some(conn) => break conn,
            None => ready.block(),
        }
    };
    let conn = sdk::Connection {
        stream,
        input,
        output,
    };
    let total = echo_bytes(&conn)?;
    println!("ok served {total}");
    Ok(())
}

fn denied_then_tcp_serve(dest: &str, address: &str) -> Result<(), ErrorCode> {
    match sdk::tcp_connect(dest) {
        Err(ErrorCode::Denied(why)) => println!("ok denied {why}"),
        Err(e) => return Err(e),
        Ok(_) => return Err(ErrorCode::Other(format!("{dest} was not denied"))),
    }
    let listener = sdk::tcp::listen(address)?;
    println!("ok listening {}", listener.local_address());
    serve_one(&listener)
}

fn spin(url: &str) -> Result<(), ErrorCode> {
    // Held (never closed) while spinning: the host must close it.
    let _stream = if url.is_empty() {
        None
    } else {
        let stream = sdk::connect(url, &[])?;
        println!("ok connected");
        Some(stream)
    };
    let mut x = 0u64;
    loop {
        x = std::hint::black_box(x.wrapping_add(1));
    }
}

fn alloc(mib: usize) -> Result<(), ErrorCode> {
    let mut keep = Vec::new();
    for _ in 0..mib {
        keep.push(vec![1u8; 1 << 20]);
    }
    println!("ok allocated {}", keep.len());
    Ok(())
}

fn tcp_wakeups(address: &str, conns: usize) -> Result<(), ErrorCode> {
    let conns: Vec<sdk::Connection> = (0..conns.max(1))
        .map(|_| sdk::tcp_connect(address))
        .collect::<Result<_, _>>()?;
    let ready: Vec<sdk::Pollable> = conns.iter().map(|c| c.input.subscribe()).collect();
    let mut open: Vec<usize> = (0..conns.len()).collect();
    let (mut bytes, mut wakeups, mut spurious) = (0u64, 0u64, 0u64);
    while !open.is_empty() {
        let waiting: Vec<&sdk::Pollable> = open.iter().map(|&i| &ready[i]).collect();
        let woken: Vec<usize> = sdk::poll(&waiting)
            .into_iter()
            .map(|k| open[k as usize])
            .collect();
        for i in woken {
            wakeups += 1;
            match conns[i].input.read(65536) {
                Ok(b) if b.is_empty() => spurious += 1,
                Ok(b) => bytes += b.len() as u64,
                Err(StreamError::Closed) => open.retain(|&j| j != i),
                Err(e) => return Err(ErrorCode::Other(format!("read: {e:?}"))),
            }
        }
    }
    println!("ok bytes={bytes} wakeups={wakeups} spurious={spurious}");
    Ok(())
}

fn tcp_stuck(address: &str, total: usize) -> Result<(), ErrorCode> {
    let conn = sdk::tcp_connect(address)?;
    let ready = conn.output.subscribe();
    let chunk = vec![7u8; 64 << 10];
    let mut written = 0usize;
    let io = |e: StreamError| ErrorCode::Other(format!("{e:?}"));
    while written < total {
        let permit = conn.output.check_write().map_err(io)? as usize;
        if permit == 0 {
            // Stuck once nothing drains for 300 ms (the kernel may still
            // take a little while its buffers grow).
            let timer = sdk::monotonic_clock::subscribe_duration(300_000_000);
            if !sdk::poll(&[&ready, &timer]).contains(&0) {
                println!("ok blocked-after={written}");
                return Ok(());
            }
            continue;
        }
        let n = permit.min(chunk.len()).min(total - written);
        conn.output.write(&chunk[..n]).map_err(io)?;
        written += n;
    }
    println!("ok never-blocked {written}");
    Ok(())
}

fn ws_stuck(url: &str, close: bool, size: usize) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    let tx = stream.subscribe_send();
    let message = Message::Binary(vec![7u8; size]);
    let (mut sent, mut messages) = (0usize, 0usize);
    loop {
        if messages == 4 << 20 {
            println!("ok never-blocked messages={messages}");
            return Ok(());
        }
        match stream.send(&message) {
            Ok(()) => {
                sent += size;
                messages += 1;
            }
            Err(ErrorCode::WouldBlock) => {
                // Stuck once nothing drains for 300 ms.
                let timer = sdk::monotonic_clock::subscribe_duration(300_000_000);
                if !sdk::poll(&[&tx, &timer]).contains(&0) {
                    break;
                }
            }
            Err(e) => return Err(e),
        }
    }
    println!("ok blocked-after={sent} messages={messages}");
    if close {
        let t0 = sdk::monotonic_clock::now();
        stream.close(1000, "bye")?;
        let rx = stream.subscribe_receive();
        let end = loop {
            match sdk::receive_blocking(&stream, &rx) {
                Ok(Some(_)) => {}
                Ok(None) => break "closed".to_string(),
                Err(e) => break sdk::error_kind(&e).to_string(),
            }
        };
        let info = stream.close_info();
        let ms = (sdk::monotonic_clock::now() - t0) / 1_000_000;
        println!(
            "ok ended {end} after-ms={ms} code={:?}",
            info.map(|i| i.code)
        );
    }
    Ok(())
}

fn sleep_ms(ms: u64) {
    sdk::monotonic_clock::subscribe_duration(ms * 1_000_000).block();
}

fn tcp_backlog(address: &str, wait_ms: u64, n: usize) -> Result<(), ErrorCode> {
    let listener = sdk::tcp::listen(address)?;
    sleep_ms(wait_ms);
    let ready = listener.subscribe();
    let mut held = Vec::new();
    while held.len() < n {
        match listener.accept()? {
            Some(conn) => held.push(conn),
            None => ready.block(),
        }
    }
    println!("ok accepted {}", held.len());
    Ok(())
}

fn ws_backlog(address: &str, wait_ms: u64, n: usize) -> Result<(), ErrorCode> {
    let listener = websocket::listen(
        address,
        &ListenOptions {
            subprotocols: vec![],
        },
    )?;
    sleep_ms(wait_ms);
    let ready = listener.subscribe();
    let mut held = Vec::new();
    while held.len() < n {
        match listener.accept()? {
            Some(stream) => held.push(stream),
            None => ready.block(),
        }
    }
    println!("ok accepted {}", held.len());
    Ok(())
}

fn fail_holding(url: &str, how: &str) -> Result<(), ErrorCode> {
    let stream = sdk::connect(url, &[])?;
    println!("ok connected");
    fail_now(how, stream)
}

fn tcp_fail_holding(address: &str, how: &str) -> Result<(), ErrorCode> {
    let conn = sdk::tcp_connect(address)?;
    let io = |e: StreamError| ErrorCode::Other(format!("{e:?}"));
    if conn.output.check_write().map_err(io)? >= 7 {
        conn.output.write(b"partial").map_err(io)?;
    }
    println!("ok connected");
    fail_now(how, conn)
}

/// Ends the run the way `how` names while `held` is still held.
fn fail_now<T>(how: &str, held: T) -> Result<(), ErrorCode> {
    match how {
        // No destructors run: the stream is still held when the guest ends.
        "exit" => std::process::exit(3), // wasi:cli/exit reports it as exit(err): status 1
        "trap" => core::arch::wasm32::unreachable(),
        "memory" => {
            let mut keep = Vec::new();
            loop {
                keep.push(vec![1u8; 1 << 20]);
                std::hint::black_box(&keep);
            }
        }
        other => {
            drop(held);
            Err(ErrorCode::InvalidArgument(format!(
                "unknown failure `{other}`"
            )))
        }
    }
}

/// Accepts one WebSocket stream on `address`, closes it with `close_code`
/// if given, receives until it ends, prints its close info, then keeps the
/// stream for `hold_ms` before dropping it: the host must close the TCP
/// connection when the closing handshake is done, not when the guest lets go.
fn ws_serve_hold(address: &str, hold_ms: u64, close_code: Option<u16>) -> Result<(), ErrorCode> {
    let listener = websocket::listen(
        address,
        &ListenOptions {
            subprotocols: vec![],
        },
    )?;
    let ready = listener.subscribe();
    let stream = loop {
        match listener.accept()? {
            Some(stream) => break stream,
            None => ready.block(),
        }
    };
    if let Some(code) = close_code {
        stream.close(code, "guest closes")?;
    }
    let rx = stream.subscribe_receive();
    let mut count = 0u64;
    let end = loop {
        match stream.receive() {
            Ok(Some(_)) => count += 1,
            Ok(None) => rx.block(),
            Err(e) => break e,
        }
    };
    let info = stream.close_info().expect("an ended stream has close info");
    println!(
        "ok ended {} after {count} messages code={} reason={}",
        sdk::error_kind(&end),
        info.code,
        info.reason
    );
    sdk::monotonic_clock::subscribe_duration(hold_ms * 1_000_000).block();
    drop(stream);
    println!("ok released");
    Ok(())
}

/// Fills `set` with `listener` under keys from `first` until `register`
/// fails (at most 4 Mi); returns how many it took and the failure.
fn fill(
    set: &ReadinessSet,
    listener: &websocket::Listener,
    first: u64,
) -> (u64, Option<ErrorCode>) {
    let mut n = 0;
    while n < 1 << 22 {
        if let Err(e) = set.register_listener(listener, Interest::Accept, first + n) {
            return (n, Some(e));
        }
        n += 1;
    }
    (n, None)
}

fn readiness_sets(address: &str, sets: usize) -> Result<(), ErrorCode> {
    let options = ListenOptions {
        subprotocols: vec![],
    };
    let listener = websocket::listen(address, &options)?;
    let mut all = Vec::new();
    let mut total = 0;
    let mut first_error = None;
    for _ in 0..sets {
        let set = ReadinessSet::new();
        let (n, e) = fill(&set, &listener, total);
        total += n;
        first_error = first_error.or(e);
        all.push(set);
    }
    let lens: u64 = all.iter().map(|s| u64::from(s.len())).sum();
    println!("ok sets={sets} registrations={total} lens={lens}");
    match &first_error {
        Some(e) => println!("ok full {} {}", sdk::error_kind(e), sdk::describe(e)),
        None => println!("ok never-full"),
    }
    // A deregistration gives its place back, to any set.
    let last = all.last().expect("at least one set");
    let key = (0..total).find(|&k| all[0].deregister(k, Interest::Accept));
    let (n, _) = fill(last, &listener, total);
    println!("ok after-deregister={} (deregistered {key:?})", n);
    // A dropped set gives all of its places back.
    let dropped = u64::from(all.remove(0).len());
    let set = ReadinessSet::new();
    let (n, _) = fill(&set, &listener, total + 1);
    println!("ok after-set-drop={n} (dropped {dropped})");
    all.push(set);
    // A dropped listener takes its registrations from every set.
    drop(listener);
    let lens: u64 = all.iter().map(|s| u64::from(s.len())).sum();
    let listener = websocket::listen(address, &options)?;
    let (n, _) = fill(&all[0], &listener, 0);
    println!("ok after-listener-drop={n} (lens {lens})");
    Ok(())
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// `probe aead`: one line per check, `NAME ok DETAIL` or `NAME err ERROR`
/// (the error's `Debug`), for the host test to compare.
fn aead() {
    use sdk::aead::{Algorithm, PacketKey};
    let show = |name: &str, r: Result<Vec<u8>, sdk::aead::AeadError>| match r {
        Ok(v) => println!("{name} ok {}", hex(&v)),
        Err(e) => println!("{name} err {e:?}"),
    };
    // RFC 9001 Appendix A.5: nonce = IV XOR packet number 654360564.
    let key = PacketKey::create(
        Algorithm::Chacha20Poly1305,
        &unhex("c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8"),
    )
    .expect("a 32-byte ChaCha20-Poly1305 key");
    let mut nonce = unhex("e0459b3474bdd0e44a41c144");
    for (i, b) in 654360564u64.to_be_bytes().iter().enumerate() {
        nonce[4 + i] ^= b;
    }
    let header = unhex("4200bff4");
    let sealed = key.seal(&nonce, &header, &[1]);
    show("a5-seal", sealed.clone());
    let sealed = sealed.unwrap_or_default();
    show("a5-open", key.open(&nonce, &header, &sealed));
    let mut forged = sealed.clone();
    if let Some(last) = forged.last_mut() {
        *last ^= 1;
    }
    show("forged", key.open(&nonce, &header, &forged));
    show(
        "oversized",
        key.seal(&nonce, &header, &vec![0; (64 << 10) + 1]),
    );
    show(
        "largest",
        key.seal(&nonce, &header, &vec![0; 64 << 10])
            .map(|v| v.len().to_be_bytes().to_vec()),
    );
    show("short-nonce", key.seal(&nonce[..11], &header, &[1]));
    let algorithm =
        |alg, len: usize| PacketKey::create(alg, &vec![7; len]).map(|k| vec![k.algorithm() as u8]);
    show("aes128-key32", algorithm(Algorithm::Aes128Gcm, 32));
    show("aes256-key16", algorithm(Algorithm::Aes256Gcm, 16));
    show("aes128-key16", algorithm(Algorithm::Aes128Gcm, 16));
    // Keys until the host refuses (one is held already: `key`).
    let mut keys = Vec::new();
    let refused = loop {
        match PacketKey::create(Algorithm::Aes256Gcm, &[3; 32]) {
            Ok(k) => keys.push(k),
            Err(e) => break e,
        }
        if keys.len() > 1_000_000 {
            println!("keys never refused");
            return;
        }
    };
    println!("keys {} err {refused:?}", keys.len() + 1);
    keys.pop();
    show(
        "after-drop",
        PacketKey::create(Algorithm::Aes128Gcm, &[3; 16]).map(|_| Vec::new()),
    );
    show("still-serving", key.open(&nonce, &header, &sealed));
}
