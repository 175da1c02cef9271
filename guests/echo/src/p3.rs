//! The echo guest on the component-model-async interface (`wit-p3`,
//! `tether:streams-async`): the same modes, arguments and output lines as
//! `main.rs` (the p2 build), so `tether bench echo` and `tether bench load`
//! drive both the same way.
//!
//! ```text
//! echo-p3 client URL [SUBPROTOCOL...]   echo every message until the peer closes
//! echo-p3 server ADDR [MAX_CONNECTIONS] [--tcp TCP_ADDR]
//!                                       accept streams and echo them (0 = forever);
//!                                       --tcp: also TCP byte streams on TCP_ADDR
//! echo-p3 ping URL PHASE...             measure round trips against an echo server
//! echo-p3 race URL TICK_URL             echo URL's messages, racing every wait
//!                                       against TICK_URL's messages (timers)
//! ```
//!
//! `ping` phases are those of `main.rs` (`rtt:N:SIZE`, `nagle:N:SIZE`,
//! `pipeline:N:SIZE:WINDOW`), with the same output lines.
//!
//! `server` keeps one future per open stream and one per listener's
//! accept in one `FuturesUnordered`. Each future waits inside an async
//! import (`receive-ready`, `send-ready`, `accept-ready`, a `stream<u8>`
//! read or write) and takes its data with the non-blocking call, so any
//! of them can be dropped without losing a message (`tether_guest_sdk::p3`); the host reports a finished call through the component's
//! waitable set, and the runtime wakes and polls only the future whose
//! call finished: a wake-up costs O(ready streams), not O(open streams),
//! like the p2 build's readiness set. With `--tcp` the byte streams'
//! halves are echoed the same way; when the peer half-closes, the guest
//! ends its outgoing `stream<u8>` (FIN after what is queued) and drops the
//! connection (the host delivers what is still queued). `MAX_CONNECTIONS`
//! counts both kinds.

#![no_main]

mod phase;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Poll, Waker};
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt};
use phase::{Phase, samples_line};

wit_bindgen::generate!({
    path: "../../wit-p3",
    world: "tether:streams-async/command",
    with: {
        "tether:streams-async/types@0.1.0": tether_guest_sdk::p3::types,
        "tether:streams-async/websocket@0.1.0": tether_guest_sdk::p3::websocket,
        "tether:streams-async/tcp@0.1.0": tether_guest_sdk::p3::tcp,
    },
});

use tether_guest_sdk::p3::{
    ConnectOptions, ErrorCode, ListenOptions, Message, MessageStream, describe, error_kind as kind,
    message_len as len, tcp, websocket,
};
use wit_bindgen::StreamResult;

struct Echo;

impl Guest for Echo {
    async fn run() -> Result<(), ()> {
        let args: Vec<String> = std::env::args().collect();
        let result = match args.get(1).map(String::as_str) {
            Some("client") if args.len() >= 3 => client(&args[2], &args[3..]).await,
            Some("server") if args.len() >= 3 => {
                let mut rest = args[3..].iter().map(String::as_str).peekable();
                let max = rest
                    .next_if(|n| n.parse::<u64>().is_ok())
                    .map_or(0, |n| n.parse().unwrap());
                let tcp = match (rest.next(), rest.next(), rest.next()) {
                    (Some("--tcp"), Some(addr), None) => Some(addr),
                    (None, _, _) => None,
                    _ => return usage(),
                };
                server(&args[2], max, tcp).await
            }
            Some("ping") if args.len() >= 4 => ping(&args[2], &args[3..]).await,
            Some("race") if args.len() == 4 => race(&args[2], &args[3]).await,
            _ => return usage(),
        };
        result.map_err(|e| {
            eprintln!("echo-p3: {}", describe(&e));
            println!("error {} {}", kind(&e), describe(&e));
        })
    }
}

export!(Echo);

fn usage() -> Result<(), ()> {
    eprintln!(
        "usage: echo-p3 client URL [SUBPROTOCOL...] | echo-p3 server ADDR [MAX_CONNECTIONS] [--tcp TCP_ADDR] | echo-p3 ping URL PHASE... | echo-p3 race URL TICK_URL"
    );
    Err(())
}

async fn connect(url: &str, subprotocols: &[String]) -> Result<MessageStream, ErrorCode> {
    let options = ConnectOptions {
        subprotocols: subprotocols.to_vec(),
        headers: Vec::new(),
    };
    websocket::connect(url.to_string(), options).await
}

async fn client(url: &str, subprotocols: &[String]) -> Result<(), ErrorCode> {
    let stream = connect(url, subprotocols).await?;
    println!(
        "connected protocol={}",
        stream.subprotocol().unwrap_or_default()
    );
    let (mut count, mut bytes) = (0u64, 0u64);
    let end = loop {
        match stream.next_message().await {
            Ok(Some(m)) => {
                bytes += len(&m) as u64;
                count += 1;
                if let Err(e) = stream.send_message(&m).await {
                    break Err(e);
                }
            }
            Ok(None) => break Ok(()),
            Err(e) => break Err(e),
        }
    };
    let info = stream.close_info();
    println!(
        "echoed {count} messages {bytes} bytes close={} reason={}",
        info.as_ref().map(|c| c.code).unwrap_or(0),
        info.map(|c| c.reason).unwrap_or_default()
    );
    end
}

/// What a future of the server's set reports when it finishes.
enum Event {
    /// The WebSocket listener's `accept` returned.
    Ws(Result<MessageStream, ErrorCode>),
    /// The TCP listener's `accept` returned.
    Tcp(Result<tcp::ByteStream, ErrorCode>),
    /// A stream's echo ended.
    Finished,
}

type Pending<'a> = Pin<Box<dyn Future<Output = Event> + 'a>>;

/// Echo server: every open stream's echo and each listener's pending
/// `accept` are futures of one `FuturesUnordered`, polled only when the
/// call they wait on finished (see the module docs).
async fn server(addr: &str, max_connections: u64, tcp_addr: Option<&str>) -> Result<(), ErrorCode> {
    let options = ListenOptions {
        subprotocols: Vec::new(),
    };
    let listener = websocket::listen(addr, &options)?;
    eprintln!("echo-p3: listening on {}", listener.local_address());
    let tcp_listener = match tcp_addr {
        Some(a) => {
            let l = tcp::listen(a)?;
            eprintln!("echo-p3: listening for TCP on {}", l.local_address());
            Some(l)
        }
        None => None,
    };
    fn ws_accept(l: &websocket::Listener) -> Pending<'_> {
        Box::pin(async move { Event::Ws(l.next_stream().await) })
    }
    fn tcp_accept(l: &tcp::ByteListener) -> Pending<'_> {
        Box::pin(async move { Event::Tcp(l.next_connection().await) })
    }
    // Declared after the listeners, so dropped (the pending `accept`s
    // cancelled) before them.
    let mut set: FuturesUnordered<Pending<'_>> = FuturesUnordered::new();
    set.push(ws_accept(&listener));
    if let Some(l) = &tcp_listener {
        set.push(tcp_accept(l));
    }
    let mut finished = 0u64;
    let result = loop {
        if max_connections != 0 && finished >= max_connections {
            break Ok(());
        }
        match set.next().await {
            Some(Event::Ws(Ok(stream))) => {
                set.push(ws_accept(&listener));
                set.push(Box::pin(async move {
                    echo_ws(stream).await;
                    Event::Finished
                }));
            }
            Some(Event::Tcp(Ok(stream))) => {
                if let Some(l) = &tcp_listener {
                    set.push(tcp_accept(l));
                }
                set.push(Box::pin(async move {
                    echo_tcp(stream).await;
                    Event::Finished
                }));
            }
            Some(Event::Ws(Err(e)) | Event::Tcp(Err(e))) => break Err(e),
            Some(Event::Finished) => finished += 1,
            None => break Ok(()),
        }
    };
    drop(set);
    result
}

/// Echoes one WebSocket stream's messages until it ends.
async fn echo_ws(stream: MessageStream) {
    while let Ok(Some(m)) = stream.next_message().await {
        if stream.send_message(&m).await.is_err() {
            break;
        }
    }
}

/// Bytes asked for per read of an incoming `stream<u8>`.
const TCP_READ_BYTES: usize = 64 << 10;

/// Echoes one TCP byte stream until the peer half-closes (then ends the
/// outgoing stream: FIN after the echoed bytes) or it fails.
async fn echo_tcp(stream: tcp::ByteStream) {
    let (mut tx, data) = tether_guest_sdk::p3::wit_stream::new::<u8>();
    let _sent = stream.send(data);
    let (mut rx, _received) = stream.receive();
    loop {
        // Wait for bytes (or the end) with a zero-length read, and take
        // the buffer only then: a pending read holds its buffer in guest
        // memory, and 64 KiB for each idle connection ended the guest at
        // its memory limit at 4,000 idle connections.
        let (result, _) = rx.read(Vec::new()).await;
        if !matches!(result, StreamResult::Complete(_)) {
            break;
        }
        let (result, buf) = rx.read(Vec::with_capacity(TCP_READ_BYTES)).await;
        match result {
            StreamResult::Complete(_) => {
                if !tx.write_all(buf).await.is_empty() {
                    // The outgoing stream ended: the connection failed.
                    return;
                }
            }
            StreamResult::Dropped | StreamResult::Cancelled => break,
        }
    }
    drop(tx);
}

/// A window gate between `pipeline`'s sender and receiver, which run as
/// two futures of one task: the receiver counts echoes and wakes the
/// sender parked on a full window.
struct Window {
    received: Cell<usize>,
    parked: RefCell<Option<Waker>>,
}

impl Window {
    fn received(&self) {
        self.received.set(self.received.get() + 1);
        if let Some(w) = self.parked.borrow_mut().take() {
            w.wake();
        }
    }

    /// Waits until fewer than `window` messages sent so far are unechoed.
    async fn room(&self, sent: usize, window: usize) {
        std::future::poll_fn(|cx| {
            if sent - self.received.get() < window {
                Poll::Ready(())
            } else {
                *self.parked.borrow_mut() = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await
    }
}

async fn ping(url: &str, phases: &[String]) -> Result<(), ErrorCode> {
    let stream = connect(url, &[]).await?;
    let receive = async || -> Result<Message, ErrorCode> {
        stream.next_message().await?.ok_or(ErrorCode::Closed)
    };
    for phase in phases {
        match Phase::parse(phase).map_err(ErrorCode::InvalidArgument)? {
            Phase::RoundTrips {
                name,
                n,
                size,
                sends,
            } => {
                let message = Message::Binary(vec![0x5a; size]);
                let mut samples = Vec::with_capacity(n);
                for _ in 0..n {
                    let t0 = Instant::now();
                    for _ in 0..sends {
                        stream.send_message(&message).await?;
                    }
                    for _ in 0..sends {
                        receive().await?;
                    }
                    samples.push(t0.elapsed().as_nanos() as u64);
                }
                println!("{}", samples_line(name, &samples));
            }
            Phase::Pipeline { n, size, window } => {
                let message = Message::Binary(vec![0xa5; size]);
                let gate = Window {
                    received: Cell::new(0),
                    parked: RefCell::new(None),
                };
                let t0 = Instant::now();
                // The receiver first: after it counts an echo, the sender
                // is polled in the same pass and sees the room.
                let receiver = async {
                    for _ in 0..n {
                        let m = receive().await?;
                        if len(&m) != size {
                            return Err(ErrorCode::ProtocolError(format!(
                                "echo of {} bytes, sent {size}",
                                len(&m)
                            )));
                        }
                        gate.received();
                    }
                    Ok(())
                };
                let sender = async {
                    for sent in 0..n {
                        gate.room(sent, window).await;
                        stream.send_message(&message).await?;
                    }
                    Ok::<(), ErrorCode>(())
                };
                // The first error ends both (a parked sender included).
                futures::future::try_join(receiver, sender).await?;
                println!("pipeline {n} {size} {}", t0.elapsed().as_nanos());
            }
        }
    }
    stream.close(1000, "done")?;
    // Wait for the closing handshake so the server sees a clean close.
    while stream.next_message().await?.is_some() {}
    Ok(())
}

/// `race`: echoes every message of the stream at `url`, racing each wait
/// (for a message, for room to send its echo) against the next message of
/// the stream at `tick_url`, whose peer sends one every 0-1 ms: the
/// guest's timer. When the tick wins, the other future is dropped, which
/// cancels its pending host call; a receive is retried, and a send is
/// retried with the same message. Prints `raced N messages,
/// R receives and S sends cancelled`. Nothing may be lost or doubled.
async fn race(url: &str, tick_url: &str) -> Result<(), ErrorCode> {
    use futures::future::{Either, select};
    use std::pin::pin;
    let stream = connect(url, &[]).await?;
    let ticks = connect(tick_url, &[]).await?;
    let tick = async || match ticks.next_message().await {
        Ok(Some(_)) => Ok(()),
        Ok(None) => Err(ErrorCode::Other("the tick stream ended".into())),
        Err(e) => Err(e),
    };
    let (mut echoed, mut receives, mut sends) = (0u64, 0u64, 0u64);
    loop {
        // The tick first: when both finished, the receive is the one
        // dropped.
        let message = loop {
            match select(pin!(tick()), pin!(stream.next_message())).await {
                Either::Left((t, _)) => {
                    t?;
                    receives += 1;
                }
                Either::Right((m, _)) => break m?,
            }
        };
        let Some(message) = message else { break };
        loop {
            match select(pin!(tick()), pin!(stream.send_message(&message))).await {
                Either::Left((t, _)) => {
                    t?;
                    sends += 1;
                }
                Either::Right((sent, _)) => break sent?,
            }
        }
        echoed += 1;
    }
    println!("raced {echoed} messages, {receives} receives and {sends} sends cancelled");
    Ok(())
}
