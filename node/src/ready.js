// What both kinds of connect and both kinds of listener share: a connect
// in progress (`future-message-stream`, `future-byte-stream`) and an
// accept queue (`listener`, `byte-listener`), each with its `Signal`.
// Mirrors host/src/ready.rs and host/src/accept.rs.

import { Signal, Pollable, dropRegistrations } from "./io.js";
import { E } from "./config.js";

/**
 * A connect in progress: `get` returns nothing, then the result once,
 * then `err(closed)`. Subclasses say how to cancel the attempt
 * (`cancel`) and how to close a result nobody took (`discard`).
 */
export class PendingConnect {
  constructor() {
    this.signal = new Signal();
    this.result = null;
    this.taken = false;
    this.dropped = false;
  }
  /** Sets the result (`{tag: "ok"|"err", val}`) unless one is set. */
  settle(result) {
    if (this.result) return;
    this.result = result;
    this.signal.wake();
  }
  /** `get` would return something: the result, or `closed` after it was taken. */
  ended() {
    return this.result !== null || this.taken || this.dropped;
  }
  subscribe() {
    return new Pollable(this.signal, () => this.ended());
  }
  get() {
    if (this.taken) return { tag: "err", val: E.closed() };
    if (!this.result) return undefined;
    this.taken = true;
    return this.result;
  }
  [Symbol.dispose]() {
    this.dropped = true;
    dropRegistrations(this);
    if (!this.result) this.cancel();
    else if (!this.taken && this.result.tag === "ok") this.discard(this.result.val);
    this.signal.wake();
  }
}

/**
 * A listener's queue of accepted connections: `accept` takes the oldest
 * (wrapped by `wrap`), `closed` once the listener stopped and the queue
 * is empty. Dropping it stops the server and closes what nobody took
 * (`closeQueued`).
 */
export class AcceptQueue {
  constructor(host, server) {
    this.host = host;
    this.server = server;
    this.signal = new Signal();
    this.queue = [];
    this.stopped = false;
    this.dropped = false;
  }
  push(conn) {
    this.queue.push(conn);
    this.signal.wake();
  }
  localAddress() {
    const a = this.server.address();
    return a.family === "IPv6" ? `[${a.address}]:${a.port}` : `${a.address}:${a.port}`;
  }
  accept() {
    if (this.queue.length > 0) return this.wrap(this.queue.shift());
    if (this.stopped) throw E.closed();
    return undefined;
  }
  acceptable() {
    return this.queue.length > 0 || this.stopped;
  }
  subscribe() {
    return new Pollable(this.signal, () => this.acceptable());
  }
  [Symbol.dispose]() {
    this.dropped = true;
    dropRegistrations(this);
    this.stopped = true;
    this.server.close();
    for (const c of this.queue) this.closeQueued(c);
    this.queue = [];
    this.stopping?.();
    this.signal.wake();
  }
}
