//! [`Client`]: the measured workload on a client [`Link`], phase by phase,
//! every echoed byte checked against what was sent.
//!
//! Phases (written as on the command line):
//! - `rtt:N:SIZE`: N round trips of SIZE bytes, one at a time, on one
//!   bidirectional stream kept open across `rtt` phases;
//! - `stream:BYTES`: BYTES sent on a fresh bidirectional stream while its
//!   echo is read back, then finished; done when the echo's end arrives
//!   (BYTES may end in `k` or `m`: KiB, MiB);
//! - `dgram:N:SIZE`: N datagram round trips of SIZE bytes, one at a time;
//! - `idle:MS`: nothing for MS milliseconds (the connection's own timers
//!   still run).
//!
//! Each finished phase yields a [`Report`]; the handshake yields one first.
//! After the last phase the client closes the connection (code 0, `done`).

use std::collections::VecDeque;
use std::str::FromStr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use quinn_proto::{Dir, Event, ReadError, StreamId, WriteError};

use crate::{App, Error, Link, pattern};

/// One step of the workload; see the module docs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Round trips on one stream: count, message size (bytes).
    Rtt { count: usize, size: usize },
    /// A verified echo of this many bytes on a new stream.
    Stream { bytes: u64 },
    /// Datagram round trips: count, datagram size (bytes).
    Datagrams { count: usize, size: usize },
    /// A quiet period.
    Idle { duration: Duration },
}

fn parse_size(s: &str) -> Option<u64> {
    let (digits, unit) = match s.as_bytes().last()? {
        b'k' | b'K' => (&s[..s.len() - 1], 1 << 10),
        b'm' | b'M' => (&s[..s.len() - 1], 1 << 20),
        _ => (s, 1),
    };
    digits.parse::<u64>().ok()?.checked_mul(unit)
}

impl FromStr for Phase {
    type Err = Error;

    fn from_str(s: &str) -> Result<Phase, Error> {
        let bad = || {
            Error::Config(format!(
                "bad phase `{s}` (rtt:N:SIZE, stream:BYTES, dgram:N:SIZE, idle:MS)"
            ))
        };
        let parts: Vec<&str> = s.split(':').collect();
        let num = |i: usize| -> Result<u64, Error> {
            parts.get(i).and_then(|p| parse_size(p)).ok_or_else(bad)
        };
        let phase = match (parts[0], parts.len()) {
            ("rtt", 3) => Phase::Rtt {
                count: num(1)? as usize,
                size: num(2)? as usize,
            },
            ("stream", 2) => Phase::Stream { bytes: num(1)? },
            ("dgram", 3) => Phase::Datagrams {
                count: num(1)? as usize,
                size: num(2)? as usize,
            },
            ("idle", 2) => Phase::Idle {
                duration: Duration::from_millis(num(1)?),
            },
            _ => return Err(bad()),
        };
        match phase {
            Phase::Rtt { size: 0, .. } | Phase::Datagrams { size: 0, .. } => Err(bad()),
            p => Ok(p),
        }
    }
}

/// The result of the handshake or of one phase. [`Report::to_line`] and
/// [`Report::parse_line`] carry it through a guest's stdout.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// The handshake finished: its duration and the agreed ALPN.
    Handshake { elapsed: Duration, alpn: String },
    /// Round-trip times (ns) of `size`-byte messages.
    Rtt { size: usize, samples_ns: Vec<u64> },
    /// A verified echo of `bytes` bytes took `elapsed` (first byte written
    /// to the echo's end).
    Stream { bytes: u64, elapsed: Duration },
    /// Datagram round-trip times (ns) of `size`-byte datagrams.
    Datagrams { size: usize, samples_ns: Vec<u64> },
    /// An idle phase ended after `elapsed`.
    Idle { elapsed: Duration },
}

impl Report {
    /// One line of text: `handshake NS ALPN`, `rtt SIZE NS...`,
    /// `stream BYTES NS`, `dgram SIZE NS...`, `idle NS`.
    pub fn to_line(&self) -> String {
        let list = |v: &[u64]| v.iter().map(u64::to_string).collect::<Vec<_>>().join(" ");
        match self {
            Report::Handshake { elapsed, alpn } => {
                format!("handshake {} {alpn}", elapsed.as_nanos())
            }
            Report::Rtt { size, samples_ns } => format!("rtt {size} {}", list(samples_ns)),
            Report::Stream { bytes, elapsed } => format!("stream {bytes} {}", elapsed.as_nanos()),
            Report::Datagrams { size, samples_ns } => {
                format!("dgram {size} {}", list(samples_ns))
            }
            Report::Idle { elapsed } => format!("idle {}", elapsed.as_nanos()),
        }
    }

    /// Parses a line written by [`Report::to_line`]; `None` for any other
    /// line.
    pub fn parse_line(line: &str) -> Option<Report> {
        let mut words = line.split_whitespace();
        let kind = words.next()?;
        let rest: Vec<&str> = words.collect();
        let n = |i: usize| rest.get(i).and_then(|w| w.parse::<u64>().ok());
        let all = |from: usize| -> Option<Vec<u64>> {
            rest[from.min(rest.len())..]
                .iter()
                .map(|w| w.parse().ok())
                .collect()
        };
        Some(match kind {
            "handshake" => Report::Handshake {
                elapsed: Duration::from_nanos(n(0)?),
                alpn: rest.get(1).unwrap_or(&"").to_string(),
            },
            "rtt" => Report::Rtt {
                size: n(0)? as usize,
                samples_ns: all(1)?,
            },
            "stream" => Report::Stream {
                bytes: n(0)?,
                elapsed: Duration::from_nanos(n(1)?),
            },
            "dgram" => Report::Datagrams {
                size: n(0)? as usize,
                samples_ns: all(1)?,
            },
            "idle" => Report::Idle {
                elapsed: Duration::from_nanos(n(0)?),
            },
            _ => return None,
        })
    }
}

/// A stream written from the pattern and read back against it.
struct Echoed {
    id: StreamId,
    written: u64,
    read: u64,
}

enum State {
    Connecting,
    Next,
    Rtt {
        count: usize,
        size: u64,
        samples: Vec<u64>,
        t0: Instant,
        /// Stream offsets at which this round's message starts and ends.
        end: u64,
    },
    Stream {
        s: Echoed,
        total: u64,
        finished: bool,
        t0: Instant,
    },
    Datagrams {
        count: usize,
        size: usize,
        samples: Vec<u64>,
        t0: Instant,
        waiting: Option<Bytes>,
    },
    Idle {
        t0: Instant,
        until: Instant,
    },
    Done,
}

/// The workload; see the module docs.
pub struct Client {
    phases: VecDeque<Phase>,
    state: State,
    reports: VecDeque<Report>,
    rtt: Option<Echoed>,
    error: Option<Error>,
    datagram_seq: u64,
}

/// Largest single stream write, bytes.
const WRITE_CHUNK: usize = 64 << 10;

impl Client {
    /// A client that runs `phases` once connected, then closes.
    pub fn new(phases: Vec<Phase>) -> Client {
        Client {
            phases: phases.into(),
            state: State::Connecting,
            reports: VecDeque::new(),
            rtt: None,
            error: None,
            datagram_seq: 0,
        }
    }

    /// The next finished result, in order.
    pub fn poll_report(&mut self) -> Option<Report> {
        self.reports.pop_front()
    }

    /// Why the workload stopped early, if it did.
    pub fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    /// True while connected and running a phase (not before the handshake
    /// and not after the last phase).
    pub fn is_connected(&self) -> bool {
        !matches!(self.state, State::Connecting | State::Done)
    }

    /// True during an `idle` phase.
    pub fn is_idle(&self) -> bool {
        matches!(self.state, State::Idle { .. })
    }

    fn fail(&mut self, link: &mut Link, now: Instant, e: Error) {
        if self.error.is_none() {
            self.error = Some(e);
        }
        if !link.is_closed() {
            link.close(now, 1, b"client error");
        }
        self.state = State::Done;
    }

    /// Writes pattern bytes on `s` up to `limit`. Errors when the stream
    /// was stopped.
    fn write(conn: &mut quinn_proto::Connection, s: &mut Echoed, limit: u64) -> Result<(), Error> {
        while s.written < limit {
            let max = ((limit - s.written) as usize).min(WRITE_CHUNK);
            let data = pattern::window(s.written, max);
            match conn.send_stream(s.id).write(data) {
                Ok(n) => s.written += n as u64,
                Err(WriteError::Blocked) => break,
                Err(e) => return Err(Error::Stream(format!("writing stream {}: {e}", s.id))),
            }
        }
        Ok(())
    }

    /// Reads and checks what arrived on `s`. Returns true at the echo's
    /// end (the peer finished the stream).
    fn read(conn: &mut quinn_proto::Connection, s: &mut Echoed) -> Result<bool, Error> {
        let mut recv = conn.recv_stream(s.id);
        let mut chunks = recv
            .read(true)
            .map_err(|e| Error::Stream(format!("reading stream {}: {e}", s.id)))?;
        let mut result = Ok(false);
        loop {
            match chunks.next(usize::MAX) {
                Ok(Some(chunk)) => {
                    if chunk.offset != s.read || !pattern::matches(s.read, &chunk.bytes) {
                        result = Err(Error::Verify(format!(
                            "stream {}: {} bytes at offset {} differ from what was sent",
                            s.id,
                            chunk.bytes.len(),
                            chunk.offset
                        )));
                        break;
                    }
                    s.read += chunk.bytes.len() as u64;
                    if s.read > s.written {
                        result = Err(Error::Verify(format!(
                            "stream {}: echo of {} bytes, only {} sent",
                            s.id, s.read, s.written
                        )));
                        break;
                    }
                }
                Ok(None) => {
                    result = Ok(true);
                    break;
                }
                Err(ReadError::Blocked) => break,
                Err(ReadError::Reset(code)) => {
                    result = Err(Error::Stream(format!(
                        "stream {} reset by the peer (code {code})",
                        s.id
                    )));
                    break;
                }
            }
        }
        let _ = chunks.finalize();
        result
    }

    fn open(conn: &mut quinn_proto::Connection) -> Result<Echoed, Error> {
        let id = conn
            .streams()
            .open(Dir::Bi)
            .ok_or_else(|| Error::Stream("the peer allows no more streams".into()))?;
        Ok(Echoed {
            id,
            written: 0,
            read: 0,
        })
    }

    /// Runs the current phase as far as it goes. Returns false when it
    /// cannot go further until more input arrives.
    fn step(&mut self, link: &mut Link, now: Instant) -> Result<bool, Error> {
        let Some(conn) = link.connection() else {
            return Ok(false);
        };
        match &mut self.state {
            State::Connecting | State::Done => Ok(false),
            State::Next => {
                let Some(phase) = self.phases.pop_front() else {
                    link.close(now, 0, b"done");
                    self.state = State::Done;
                    return Ok(false);
                };
                self.state = match phase {
                    Phase::Rtt { count, size } => {
                        if self.rtt.is_none() {
                            self.rtt = Some(Client::open(conn)?);
                        }
                        let start = self.rtt.as_ref().map_or(0, |s| s.written);
                        State::Rtt {
                            count,
                            size: size as u64,
                            samples: Vec::with_capacity(count),
                            t0: now,
                            end: start + size as u64,
                        }
                    }
                    Phase::Stream { bytes } => State::Stream {
                        s: Client::open(conn)?,
                        total: bytes,
                        finished: false,
                        t0: now,
                    },
                    Phase::Datagrams { count, size } => {
                        let max = conn.datagrams().max_size().unwrap_or(0);
                        if size > max {
                            return Err(Error::Config(format!(
                                "datagrams of {size} bytes do not fit: the limit is {max}"
                            )));
                        }
                        State::Datagrams {
                            count,
                            size,
                            samples: Vec::with_capacity(count),
                            t0: now,
                            waiting: None,
                        }
                    }
                    Phase::Idle { duration } => State::Idle {
                        t0: now,
                        until: now + duration,
                    },
                };
                Ok(true)
            }
            State::Rtt {
                count,
                size,
                samples,
                t0,
                end,
            } => {
                let s = self.rtt.as_mut().expect("rtt stream opened");
                if samples.len() == *count {
                    self.reports.push_back(Report::Rtt {
                        size: *size as usize,
                        samples_ns: std::mem::take(samples),
                    });
                    self.state = State::Next;
                    return Ok(true);
                }
                Client::write(conn, s, *end)?;
                if Client::read(conn, s)? {
                    return Err(Error::Stream(
                        "the echo of the round-trip stream ended".into(),
                    ));
                }
                if s.read < *end {
                    return Ok(false);
                }
                samples.push(now.saturating_duration_since(*t0).as_nanos() as u64);
                *t0 = now;
                *end += *size;
                Ok(true)
            }
            State::Stream {
                s,
                total,
                finished,
                t0,
            } => {
                Client::write(conn, s, *total)?;
                if s.written == *total && !*finished {
                    conn.send_stream(s.id)
                        .finish()
                        .map_err(|e| Error::Stream(format!("finishing stream {}: {e}", s.id)))?;
                    *finished = true;
                }
                let before = s.read;
                let end = Client::read(conn, s)?;
                if end {
                    if s.read != *total {
                        return Err(Error::Verify(format!(
                            "stream {}: the echo ended after {} of {} bytes",
                            s.id, s.read, total
                        )));
                    }
                    self.reports.push_back(Report::Stream {
                        bytes: *total,
                        elapsed: now.saturating_duration_since(*t0),
                    });
                    self.state = State::Next;
                    return Ok(true);
                }
                // Reading freed window: more may be writable at once.
                Ok(s.read > before && s.written < *total)
            }
            State::Datagrams {
                count,
                size,
                samples,
                t0,
                waiting,
            } => {
                if samples.len() == *count {
                    self.reports.push_back(Report::Datagrams {
                        size: *size,
                        samples_ns: std::mem::take(samples),
                    });
                    self.state = State::Next;
                    return Ok(true);
                }
                if waiting.is_none() {
                    self.datagram_seq += 1;
                    let d = Bytes::from(pattern::bytes(self.datagram_seq * 7919, *size));
                    conn.datagrams()
                        .send(d.clone(), false)
                        .map_err(|e| Error::Stream(format!("sending a datagram: {e}")))?;
                    *waiting = Some(d);
                    *t0 = now;
                }
                let mut progressed = false;
                while let Some(d) = conn.datagrams().recv() {
                    if Some(&d) != waiting.as_ref() {
                        return Err(Error::Verify(format!(
                            "datagram echo of {} bytes differs from the {} bytes sent",
                            d.len(),
                            size
                        )));
                    }
                    samples.push(now.saturating_duration_since(*t0).as_nanos() as u64);
                    *waiting = None;
                    progressed = true;
                }
                Ok(progressed)
            }
            State::Idle { t0, until } => {
                if now < *until {
                    return Ok(false);
                }
                self.reports.push_back(Report::Idle {
                    elapsed: now.saturating_duration_since(*t0),
                });
                self.state = State::Next;
                Ok(true)
            }
        }
    }
}

impl App for Client {
    fn pump(&mut self, link: &mut Link, now: Instant) {
        while let Some(event) = link.poll_event(now) {
            match event {
                Event::Connected => {
                    self.reports.push_back(Report::Handshake {
                        elapsed: link.handshake_time().unwrap_or_default(),
                        alpn: String::from_utf8_lossy(link.alpn().unwrap_or_default()).into_owned(),
                    });
                    self.state = State::Next;
                }
                Event::ConnectionLost { .. } if !matches!(self.state, State::Done) => {
                    let e = link
                        .error()
                        .cloned()
                        .unwrap_or_else(|| Error::Lost("connection lost".into()));
                    self.error.get_or_insert(e);
                    self.state = State::Done;
                }
                _ => {}
            }
        }
        if let Some(e) = link.error()
            && !matches!(self.state, State::Done)
        {
            let e = e.clone();
            self.fail(link, now, e);
            return;
        }
        loop {
            match self.step(link, now) {
                Ok(true) => continue,
                Ok(false) => break,
                Err(e) => {
                    self.fail(link, now, e);
                    break;
                }
            }
        }
    }

    fn poll_timeout(&self) -> Option<Instant> {
        match self.state {
            State::Idle { until, .. } => Some(until),
            _ => None,
        }
    }

    fn is_done(&self) -> bool {
        matches!(self.state, State::Done)
    }
}
