//! The check behind the `tether-quic` fuzz target `link`: it takes the
#![allow(dead_code)] // the fuzz target uses one check
//! fuzzer's bytes and panics when a property fails.
//!
//! Shared by the cargo-fuzz target (`fuzz_targets/link.rs`, nightly) and
//! the corpus replay test (`tests/fuzz_corpus.rs`, stable), both through
//! `#[path]`, so CI replays every committed input through exactly the
//! check the fuzzer ran.
//!
//! Random bytes rarely get past QUIC's packet protection, so besides raw
//! datagrams the check forges Initial packets that decrypt: Initial keys
//! come from the destination connection id alone (RFC 9001 section 5.2),
//! so the fuzzer's frames reach the frame parser, the connection state
//! machine and the TLS handshake (a real ClientHello, captured once, can
//! lead them).

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use arbitrary::{Result, Unstructured};
use bytes::BytesMut;
use tether_quic::quinn_proto::{ClientConfig, ConnectionId, ServerConfig, crypto::Keys};
use tether_quic::{App, EchoServer, Identity, Link, MAX_MTU, Options};

/// The target names, as the corpus folders are named.
pub const TARGETS: &[&str] = &["link"];

/// Runs the check of target `name` on `data`.
pub fn run(name: &str, data: &[u8]) {
    match name {
        "link" => link(data),
        other => panic!("no fuzz target `{other}`"),
    }
}

/// Whether to print each step (`FUZZ_TRACE=1`), to read a failing input.
fn trace() -> bool {
    static TRACE: OnceLock<bool> = OnceLock::new();
    *TRACE.get_or_init(|| std::env::var_os("FUZZ_TRACE").is_some())
}

/// QUIC version 1 (RFC 9000).
const V1: u32 = 1;

/// What every execution shares: configurations built once, and the
/// frames of a real client's first Initial packet.
struct Shared {
    options: Options,
    server: Arc<ServerConfig>,
    client: ClientConfig,
    /// The decrypted payload of a real client Initial (a CRYPTO frame with
    /// a ClientHello, then PADDING), trailing padding removed.
    hello_frames: Vec<u8>,
    /// The source connection id that client used (its transport parameters
    /// name it, so a forged packet carrying its ClientHello must too).
    hello_scid: Vec<u8>,
}

fn shared() -> &'static Shared {
    static SHARED: OnceLock<Shared> = OnceLock::new();
    SHARED.get_or_init(|| {
        let identity = Identity::generate(&["localhost"]).expect("identity");
        let options = Options::default();
        let server = tether_quic::config::server_config(&identity, &options).expect("server");
        let client =
            tether_quic::config::client_config(&identity.cert_der, &options).expect("client");
        let now = Instant::now();
        let mut link =
            Link::client_with(now, client.clone(), "localhost", &options).expect("client");
        let first = link.poll_transmit(now).expect("a ClientHello").to_vec();
        let header = LongHeader::parse(&first).expect("a long header");
        let keys = initial_keys(&server, &header.dcid);
        let frames = open_initial(&keys, &first, &header).expect("the client's Initial opens");
        let end = frames.iter().rposition(|b| *b != 0).map_or(0, |i| i + 1);
        Shared {
            options,
            server,
            client,
            hello_frames: frames[..end].to_vec(),
            hello_scid: header.scid,
        }
    })
}

/// Initial keys for a connection whose client chose `dcid`, server side:
/// `local` protects what the server sends, `remote` what the client sends.
/// They depend on `dcid` alone (RFC 9001 section 5.2), so up to 64 sets
/// are kept (emptied when full): deriving them (HKDF) cost ~7% of a run.
fn initial_keys(server: &ServerConfig, dcid: &[u8]) -> Rc<Keys> {
    thread_local! {
        static CACHE: RefCell<HashMap<Vec<u8>, Rc<Keys>>> = RefCell::new(HashMap::new());
    }
    CACHE.with_borrow_mut(|cache| {
        if let Some(keys) = cache.get(dcid) {
            return keys.clone();
        }
        if cache.len() >= 64 {
            cache.clear();
        }
        let keys = Rc::new(
            server
                .crypto
                .initial_keys(V1, &ConnectionId::new(dcid))
                .expect("version 1"),
        );
        cache.insert(dcid.to_vec(), keys.clone());
        keys
    })
}

/// The fields of a long header (RFC 9000 section 17.2) this check needs.
struct LongHeader {
    dcid: Vec<u8>,
    scid: Vec<u8>,
    /// Offset of the packet number.
    pn_offset: usize,
    /// The Length field: packet number and protected payload, bytes.
    length: usize,
}

impl LongHeader {
    fn parse(d: &[u8]) -> Option<LongHeader> {
        if d.first()? & 0x80 == 0 {
            return None;
        }
        let mut i = 5;
        let dl = usize::from(*d.get(i)?);
        let dcid = d.get(i + 1..i + 1 + dl)?.to_vec();
        i += 1 + dl;
        let sl = usize::from(*d.get(i)?);
        let scid = d.get(i + 1..i + 1 + sl)?.to_vec();
        i += 1 + sl;
        let (token_len, n) = varint(d.get(i..)?)?;
        i += n + usize::try_from(token_len).ok()?;
        let (length, n) = varint(d.get(i..)?)?;
        i += n;
        Some(LongHeader {
            dcid,
            scid,
            pn_offset: i,
            length: usize::try_from(length).ok()?,
        })
    }
}

/// A QUIC variable-length integer (RFC 9000 section 16) and its length.
fn varint(b: &[u8]) -> Option<(u64, usize)> {
    let first = *b.first()?;
    let n = 1usize << (first >> 6);
    let mut v = u64::from(first & 0x3f);
    for x in b.get(1..n)? {
        v = (v << 8) | u64::from(*x);
    }
    Some((v, n))
}

/// Removes the protection of the client Initial `d` with the client's keys
/// and returns its frames.
fn open_initial(keys: &Keys, d: &[u8], h: &LongHeader) -> Option<Vec<u8>> {
    let mut packet = d.get(..h.pn_offset + h.length)?.to_vec();
    keys.header.remote.decrypt(h.pn_offset, &mut packet);
    let pn_len = usize::from(packet[0] & 3) + 1;
    let mut pn = 0u64;
    for b in &packet[h.pn_offset..h.pn_offset + pn_len] {
        pn = (pn << 8) | u64::from(*b);
    }
    let header_len = h.pn_offset + pn_len;
    let mut payload = BytesMut::from(&packet[header_len..]);
    keys.packet
        .remote
        .decrypt(pn, &packet[..header_len], &mut payload)
        .ok()?;
    Some(payload.to_vec())
}

/// Builds a protected Initial packet carrying `frames`, padded to at least
/// `min_size` bytes, sealed with `from_client`'s side of `keys`.
fn seal_initial(
    keys: &Keys,
    from_client: bool,
    dcid: &[u8],
    scid: &[u8],
    pn: u32,
    frames: &[u8],
    min_size: usize,
) -> Vec<u8> {
    let (packet_key, header_key) = if from_client {
        (&keys.packet.remote, &keys.header.remote)
    } else {
        (&keys.packet.local, &keys.header.local)
    };
    let pn_len = 4;
    let tag = packet_key.tag_len();
    let mut header = vec![0xC0 | (pn_len as u8 - 1)];
    header.extend_from_slice(&V1.to_be_bytes());
    header.push(dcid.len() as u8);
    header.extend_from_slice(dcid);
    header.push(scid.len() as u8);
    header.extend_from_slice(scid);
    header.push(0); // no token
    let fixed = header.len() + 2 + pn_len + tag;
    // The sample for header protection needs 4 + 16 bytes after the
    // packet number start, and the Length field is 2 bytes here (< 16384).
    let body_len = frames
        .len()
        .max(min_size.saturating_sub(fixed))
        .max(20)
        .min(16383 - pn_len - tag);
    let mut body = frames[..frames.len().min(body_len)].to_vec();
    body.resize(body_len, 0); // PADDING frames
    let length = (pn_len + body_len + tag) as u16;
    header.extend_from_slice(&(0x4000 | length).to_be_bytes());
    let pn_offset = header.len();
    header.extend_from_slice(&pn.to_be_bytes());
    let header_len = header.len();
    let mut packet = header;
    packet.extend_from_slice(&body);
    packet.resize(packet.len() + tag, 0);
    packet_key.encrypt(u64::from(pn), &mut packet, header_len);
    header_key.encrypt(pn_offset, &mut packet);
    packet
}

/// How a datagram on its way between the two links is changed.
#[derive(Debug)]
enum Mutation {
    Keep,
    Drop,
    Duplicate,
    Truncate(u16),
    Flip { at: u16, mask: u8 },
}

/// One step of the `link` target.
#[derive(Debug)]
enum Op {
    /// Raw bytes to the server.
    ToServer(Vec<u8>),
    /// Raw bytes to the client.
    ToClient(Vec<u8>),
    /// A client Initial that decrypts, with these frames, to the server
    /// (`dcid` picks the connection; 8 bytes or more to be accepted).
    Initial {
        dcid: Vec<u8>,
        pn: u32,
        frames: Vec<u8>,
    },
    /// The captured ClientHello, followed by these frames.
    Hello { dcid: [u8; 8], frames: Vec<u8> },
    /// A server Initial that decrypts, with these frames, to the client.
    ServerInitial {
        scid: Vec<u8>,
        pn: u32,
        frames: Vec<u8>,
    },
    /// The next datagram the client sends, to the server.
    ClientToServer(Mutation),
    /// The next datagram the server sends, to the client.
    ServerToClient(Mutation),
    /// Time passes (milliseconds), timers run.
    Tick(u16),
    /// The client closes.
    Close(u32),
}

impl Mutation {
    fn read(u: &mut Unstructured) -> Result<Mutation> {
        Ok(match u.choose_index(5)? {
            0 => Mutation::Keep,
            1 => Mutation::Drop,
            2 => Mutation::Duplicate,
            3 => Mutation::Truncate(u.arbitrary()?),
            _ => Mutation::Flip {
                at: u.arbitrary()?,
                mask: u.arbitrary()?,
            },
        })
    }
}

impl Op {
    /// One step from the fuzzer's bytes (`arbitrary` without its derive,
    /// whose feature would rebuild wasmtime in the main workspace).
    fn read(u: &mut Unstructured) -> Result<Op> {
        Ok(match u.choose_index(9)? {
            0 => Op::ToServer(u.arbitrary()?),
            1 => Op::ToClient(u.arbitrary()?),
            2 => Op::Initial {
                dcid: u.arbitrary()?,
                pn: u.arbitrary()?,
                frames: u.arbitrary()?,
            },
            3 => Op::Hello {
                dcid: u.arbitrary()?,
                frames: u.arbitrary()?,
            },
            4 => Op::ServerInitial {
                scid: u.arbitrary()?,
                pn: u.arbitrary()?,
                frames: u.arbitrary()?,
            },
            5 => Op::ClientToServer(Mutation::read(u)?),
            6 => Op::ServerToClient(Mutation::read(u)?),
            7 => Op::Tick(u.arbitrary()?),
            _ => Op::Close(u.arbitrary()?),
        })
    }
}

fn read_ops(data: &[u8]) -> Result<Vec<Op>> {
    let mut u = Unstructured::new(data);
    let mut ops = Vec::new();
    while !u.is_empty() && ops.len() < 64 {
        ops.push(Op::read(&mut u)?);
    }
    Ok(ops)
}

/// Everything a link wants to send now (asserting it stops and that no
/// datagram exceeds the largest MTU).
fn drain(link: &mut Link, now: Instant, out: &mut Vec<Vec<u8>>) {
    for _ in 0..10_000 {
        match link.poll_transmit(now) {
            Some(d) => {
                assert!(!d.is_empty(), "an empty datagram");
                assert!(
                    d.len() <= usize::from(MAX_MTU),
                    "datagram of {} bytes",
                    d.len()
                );
                if out.len() < 64 {
                    out.push(d.to_vec());
                }
            }
            None => return,
        }
    }
    panic!("poll_transmit never ran dry");
}

fn mutate(m: &Mutation, d: Vec<u8>) -> Vec<Vec<u8>> {
    match m {
        Mutation::Keep => vec![d],
        Mutation::Drop => vec![],
        Mutation::Duplicate => vec![d.clone(), d],
        Mutation::Truncate(n) => vec![d[..usize::from(*n) % (d.len() + 1)].to_vec()],
        Mutation::Flip { at, mask } => {
            let mut d = d;
            if !d.is_empty() {
                let i = usize::from(*at) % d.len();
                d[i] ^= mask;
            }
            vec![d]
        }
    }
}

/// `link`: a client and a server [`Link`] (the server behind an
/// [`EchoServer`]) fed raw datagrams, Initial packets that decrypt and
/// carry arbitrary frames (a real ClientHello among them, or none), and
/// each other's datagrams dropped, duplicated, truncated or bit-flipped,
/// with time passing. No panic; `poll_transmit` runs dry and never returns
/// an empty datagram or one beyond 16383 bytes; every datagram handed in
/// is counted; a link that reports an error says it is closed.
pub fn link(data: &[u8]) {
    let Ok(ops) = read_ops(data) else {
        return;
    };
    let sh = shared();
    let mut now = Instant::now();
    let mut server = Link::server_with(now, sh.server.clone(), &sh.options);
    let mut echo = EchoServer::new();
    let mut client: Option<Link> = None;
    let (mut to_server, mut to_client) = (Vec::new(), Vec::new());
    let (mut server_in, mut client_in) = (0u64, 0u64);
    let mut client_id: Option<(Vec<u8>, Vec<u8>)> = None;
    for op in ops {
        if trace() {
            eprintln!("op {op:?}");
        }
        match op {
            Op::ToServer(d) => {
                server.handle_datagram(now, &d);
                server_in += 1;
            }
            Op::ToClient(d) => {
                let c =
                    client.get_or_insert_with(|| new_client(now, &mut to_server, &mut client_id));
                c.handle_datagram(now, &d);
                client_in += 1;
            }
            Op::Initial { dcid, pn, frames } => {
                let dcid = &dcid[..dcid.len().min(20)];
                let keys = initial_keys(&sh.server, dcid);
                let d = seal_initial(&keys, true, dcid, &[7; 8], pn, &frames, 1200);
                server.handle_datagram(now, &d);
                server_in += 1;
            }
            Op::Hello { dcid, frames } => {
                let mut all = sh.hello_frames.clone();
                all.extend_from_slice(&frames);
                let keys = initial_keys(&sh.server, &dcid);
                let d = seal_initial(&keys, true, &dcid, &sh.hello_scid, 0, &all, 1200);
                server.handle_datagram(now, &d);
                server_in += 1;
            }
            Op::ServerInitial { scid, pn, frames } => {
                let c =
                    client.get_or_insert_with(|| new_client(now, &mut to_server, &mut client_id));
                let (odcid, cscid) = client_id.clone().expect("the client's first datagram");
                let keys = initial_keys(&sh.server, &odcid);
                let scid = &scid[..scid.len().min(20)];
                let d = seal_initial(&keys, false, &cscid, scid, pn, &frames, 0);
                c.handle_datagram(now, &d);
                client_in += 1;
            }
            Op::ClientToServer(m) => {
                client.get_or_insert_with(|| new_client(now, &mut to_server, &mut client_id));
                if !to_server.is_empty() {
                    for d in mutate(&m, to_server.remove(0)) {
                        server.handle_datagram(now, &d);
                        server_in += 1;
                    }
                }
            }
            Op::ServerToClient(m) => {
                if !to_client.is_empty()
                    && let Some(c) = client.as_mut()
                {
                    for d in mutate(&m, to_client.remove(0)) {
                        c.handle_datagram(now, &d);
                        client_in += 1;
                    }
                }
            }
            Op::Tick(ms) => {
                now += Duration::from_millis(u64::from(ms));
                server.handle_timeout(now);
                if let Some(c) = client.as_mut() {
                    c.handle_timeout(now);
                }
            }
            Op::Close(code) => {
                if let Some(c) = client.as_mut() {
                    c.close(now, code, b"fuzz");
                    assert!(c.is_closed());
                }
            }
        }
        echo.pump(&mut server, now);
        drain(&mut server, now, &mut to_client);
        while server.poll_event(now).is_some() {}
        if let Some(c) = client.as_mut() {
            drain(c, now, &mut to_server);
            while c.poll_event(now).is_some() {}
        }
        if trace() {
            eprintln!(
                "server {:?} connected {} error {:?}",
                server.stats(),
                server.is_connected(),
                server.error()
            );
        }
        assert_eq!(server.stats().datagrams_in, server_in);
        assert!(server.error().is_none() || server.is_closed());
        if let Some(c) = client.as_ref() {
            assert_eq!(c.stats().datagrams_in, client_in);
            assert!(c.error().is_none() || c.is_closed());
        }
    }
}

/// A client link; its first datagram is queued for the server, and its
/// original destination and source connection ids are noted.
fn new_client(
    now: Instant,
    to_server: &mut Vec<Vec<u8>>,
    ids: &mut Option<(Vec<u8>, Vec<u8>)>,
) -> Link {
    let sh = shared();
    let mut c =
        Link::client_with(now, sh.client.clone(), "localhost", &sh.options).expect("client");
    drain(&mut c, now, to_server);
    let h = LongHeader::parse(to_server.first().expect("a first datagram")).expect("long header");
    *ids = Some((h.dcid, h.scid));
    c
}
