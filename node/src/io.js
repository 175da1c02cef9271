// wasi:io (poll, streams, error), wasi:clocks (monotonic and wall) and the
// wasi:cli stdio streams, event-driven: a pollable is a condition on a
// `Signal` that the resource fires on every state change, and `poll`
// (a JSPI suspending import) parks the guest on a promise that the first
// such wake-up (or the earliest clock deadline) resolves. Nothing ticks.
//
// These replace preview2-shim's io, clocks and stdio so that every
// pollable and stream the guest holds is ours (jco checks the resource
// class of each handle it lowers).

import { hrtime } from "node:process";
import { performance } from "node:perf_hooks";
import { writeSync } from "node:fs";

/** A set of wake-up callbacks that a resource fires when its state changes. */
export class Signal {
  constructor() {
    this.waiters = new Set();
  }
  /** Calls every waiter once (each removes itself when it is done). */
  wake() {
    if (this.waiters.size === 0) return;
    for (const w of [...this.waiters]) w();
  }
}

/** The readiness registrations on a resource (a `Set` of entries under this key). */
export const REGISTRATIONS = Symbol("readiness registrations");

/**
 * Removes every readiness registration on `target` from its set, at once:
 * call it when the resource is dropped, so its places in the guest's
 * `readiness_set_entries` go back without waiting for a `take-ready`.
 */
export function dropRegistrations(target) {
  const entries = target[REGISTRATIONS];
  if (!entries) return;
  for (const e of [...entries]) e.set.remove(e.id);
}

/** `wasi:io/poll` pollable: ready when `check()` is true. */
export class Pollable {
  /**
   * @param {Signal|null} signal fired when the condition may have changed
   * @param {() => boolean} check the condition
   * @param {bigint|null} deadline a monotonic-clock instant (ns) for clock pollables
   */
  constructor(signal, check, deadline = null) {
    this.signal = signal;
    this.check = check;
    this.deadline = deadline;
  }
  ready() {
    if (this.deadline !== null) return hrtime.bigint() >= this.deadline;
    return this.check();
  }
  block() {
    if (this.ready()) {
      if (performance.now() - lastYield < YIELD_AFTER_MS) return undefined;
      return turn().then(() => this.block());
    }
    return waitAny([this]).then(() => {
      lastYield = performance.now();
      return this.block();
    });
  }
  [Symbol.dispose]() {}
}

/** A pollable that is always ready (stdio, finished resources). */
export const readyPollable = () => new Pollable(null, () => true);

/** Resolves once any pollable of `list` may have become ready. */
function waitAny(list) {
  return new Promise((resolve) => {
    let timer = null;
    const signals = new Set();
    let earliest = null;
    const done = () => {
      for (const s of signals) s.waiters.delete(done);
      if (timer !== null) clearTimeout(timer);
      resolve();
    };
    for (const p of list) {
      if (p.deadline !== null) {
        if (earliest === null || p.deadline < earliest) earliest = p.deadline;
      } else if (p.signal) {
        signals.add(p.signal);
      }
    }
    for (const s of signals) s.waiters.add(done);
    if (earliest !== null) {
      const ns = earliest - hrtime.bigint();
      // setTimeout has millisecond granularity: round up, never early
      // (`ready` re-checks the deadline, so a late wake-up is exact).
      const ms = ns <= 0n ? 0 : Number((ns + 999_999n) / 1_000_000n);
      timer = setTimeout(done, ms);
    }
  });
}

/**
 * The longest a guest that always finds something ready keeps the event
 * loop from running (socket reads, timers, the other streams' wake-ups),
 * ms. Like the Rust host's cooperative yield every `epoch_tick`: a guest
 * busy with one ready stream must not starve the rest.
 */
const YIELD_AFTER_MS = 2;
let lastYield = performance.now();

const turn = () =>
  new Promise((resolve) =>
    setImmediate(() => {
      lastYield = performance.now();
      resolve();
    }),
  );

/**
 * Returns `value`, or a promise of it after one turn of the event loop
 * when the guest has not let the loop run for `YIELD_AFTER_MS` (for
 * suspending imports that never wait, such as `take-ready`).
 */
export function yieldingReturn(value) {
  if (performance.now() - lastYield < YIELD_AFTER_MS) return value;
  return turn().then(() => value);
}

/** `wasi:io/poll#poll`: indices of the ready pollables, waiting for one. */
export function poll(list) {
  const ready = [];
  for (let i = 0; i < list.length; i++) if (list[i].ready()) ready.push(i);
  if (ready.length > 0) {
    if (performance.now() - lastYield < YIELD_AFTER_MS) return new Uint32Array(ready);
    return turn().then(() => poll(list));
  }
  if (list.length === 0) throw new Error("wasi:io/poll: poll of an empty list would block forever");
  return waitAny(list).then(() => {
    lastYield = performance.now();
    return poll(list);
  });
}

/** `wasi:io/error` error resource. */
export class IoError {
  constructor(message) {
    this.message = message;
  }
  toDebugString() {
    return this.message;
  }
  [Symbol.dispose]() {}
}

/** A stream-error: `closed`, or `last-operation-failed` with an `IoError`. */
export const streamClosed = () => ({ tag: "closed" });
export const streamFailed = (message) => ({ tag: "last-operation-failed", val: new IoError(message) });

/**
 * `wasi:io/streams` input-stream over a source object that implements
 * `read(len) -> Uint8Array | throws stream-error`, `ready()`, `signal`,
 * and `dropInput()`.
 */
export class InputStream {
  constructor(source) {
    this.source = source;
  }
  read(len) {
    return this.source.read(Number(len));
  }
  blockingRead(len) {
    if (this.source.readable()) return this.read(len);
    return waitAny([this.subscribe()]).then(() => this.blockingRead(len));
  }
  skip(len) {
    return BigInt(this.read(len).length);
  }
  blockingSkip(len) {
    const r = this.blockingRead(len);
    return r instanceof Promise ? r.then((b) => BigInt(b.length)) : BigInt(r.length);
  }
  subscribe() {
    return new Pollable(this.source.signal, () => this.dropped || this.source.readable());
  }
  [Symbol.dispose]() {
    this.dropped = true;
    this.source.dropInput?.();
    this.source.signal?.wake();
  }
}

/**
 * `wasi:io/streams` output-stream over a sink that implements
 * `checkWrite() -> bigint | throws`, `write(bytes)`, `flush()`,
 * `writable()`, `signal` and `dropOutput()`.
 */
export class OutputStream {
  constructor(sink) {
    this.sink = sink;
  }
  checkWrite() {
    return this.sink.checkWrite();
  }
  write(buf) {
    return this.sink.write(buf);
  }
  blockingWriteAndFlush(buf) {
    if (this.sink.blocking) return this.sink.write(buf);
    let off = 0;
    const step = () => {
      while (off < buf.length) {
        const n = Number(this.sink.checkWrite());
        if (n === 0) return waitAny([this.subscribe()]).then(step);
        const take = Math.min(n, buf.length - off);
        this.sink.write(buf.subarray(off, off + take));
        off += take;
      }
      return this.blockingFlush();
    };
    return step();
  }
  flush() {
    return this.sink.flush();
  }
  blockingFlush() {
    this.sink.flush();
    if (this.sink.flushed()) return undefined;
    return waitAny([this.subscribe()]).then(() => this.blockingFlush());
  }
  writeZeroes(len) {
    return this.write(new Uint8Array(Number(len)));
  }
  blockingWriteZeroesAndFlush(len) {
    return this.blockingWriteAndFlush(new Uint8Array(Number(len)));
  }
  splice(src, len) {
    const bytes = src.read(len);
    this.write(bytes);
    return BigInt(bytes.length);
  }
  blockingSplice(src, len) {
    return this.splice(src, len);
  }
  subscribe() {
    return new Pollable(this.sink.signal, () => this.dropped || this.sink.writable());
  }
  [Symbol.dispose]() {
    this.dropped = true;
    this.sink.dropOutput?.();
    this.sink.signal?.wake();
  }
}

/** A file descriptor sink (stdout, stderr): writes are synchronous. */
class FdSink {
  constructor(fd) {
    this.fd = fd;
    this.signal = null;
    this.blocking = true;
  }
  checkWrite() {
    return 1n << 20n;
  }
  write(buf) {
    let off = 0;
    while (off < buf.length) {
      try {
        off += writeSync(this.fd, buf, off, buf.length - off);
      } catch (e) {
        if (e.code === "EAGAIN") continue;
        throw streamFailed(e.message);
      }
    }
  }
  flush() {}
  flushed() {
    return true;
  }
  writable() {
    return true;
  }
}

/** stdin: the guests read none; an empty stream that is at its end. */
class EmptySource {
  constructor() {
    this.signal = null;
  }
  read() {
    throw streamClosed();
  }
  readable() {
    return true;
  }
}

const stdoutStream = new OutputStream(new FdSink(1));
const stderrStream = new OutputStream(new FdSink(2));
const stdinStream = new InputStream(new EmptySource());

/**
 * The wall clock's Unix time in ms with a microsecond fraction:
 * `performance.timeOrigin` (taken from the system clock at start, to the
 * microsecond) plus `performance.now()`, moved to `Date.now()` again when
 * the two part by more than 1 ms (the system clock was set).
 */
let wallAnchorMs = performance.timeOrigin;
function wallNowMs() {
  const now = wallAnchorMs + performance.now();
  const coarse = Date.now();
  if (now < coarse - 1 || now > coarse + 2) {
    wallAnchorMs = coarse - performance.now();
    return coarse;
  }
  return now;
}

/**
 * `wasi:clocks/wall-clock`, to the microsecond. preview2-shim's reads
 * `Date.now()`, milliseconds, twice (its seconds and nanoseconds could
 * come from either side of a second): a one-way delay measured against
 * a sender's nanosecond stamp came out up to 1 ms short.
 */
export const wallClock = {
  now: () => {
    const us = BigInt(Math.floor(wallNowMs() * 1000));
    return { seconds: us / 1_000_000n, nanoseconds: Number(us % 1_000_000n) * 1000 };
  },
  resolution: () => ({ seconds: 0n, nanoseconds: 1000 }),
};

/** `wasi:clocks/monotonic-clock`, nanoseconds from `hrtime`. */
export const monotonicClock = {
  now: () => hrtime.bigint(),
  resolution: () => 1n,
  subscribeInstant: (when) => new Pollable(null, null, BigInt(when)),
  subscribeDuration: (ns) => new Pollable(null, null, hrtime.bigint() + BigInt(ns)),
};

/** The imports this file provides, keyed as jco's `instantiate` wants them. */
export function ioImports() {
  return {
    "wasi:io/poll": { Pollable, poll },
    "wasi:io/error": { Error: IoError },
    "wasi:io/streams": { InputStream, OutputStream },
    "wasi:clocks/monotonic-clock": monotonicClock,
    "wasi:clocks/wall-clock": wallClock,
    "wasi:cli/stdout": { getStdout: () => stdoutStream },
    "wasi:cli/stderr": { getStderr: () => stderrStream },
    "wasi:cli/stdin": { getStdin: () => stdinStream },
  };
}
