// `tether:streams/readiness`: level-triggered readiness sets. A
// registration hooks the target's `Signal`; a wake-up queues the entry
// (once, however often it is woken), `take-ready` re-checks queued entries
// and keeps those still ready, so the cost is O(1) per event and
// O(entries returned) per call, whatever the number of registrations.
// `readiness_set_entries` bounds a guest's registrations in all its sets
// together (one count per host, which runs one guest); a dropped resource
// gives its places back at once (`dropRegistrations`).

import { Signal, Pollable, yieldingReturn, REGISTRATIONS } from "./io.js";
import { E } from "./config.js";
import { MessageStream, Listener } from "./websocket.js";
import { ByteStream, ByteListener } from "./tcp.js";

const keyOf = (key, interest) => `${key}/${interest}`;

/** `readiness-set` resource. */
export class ReadinessSet {
  constructor(host) {
    this.host = host;
    // The guest's count of registrations, shared by all its sets.
    this.quota = host.readinessQuota ??= { count: 0 };
    this.entries = new Map();
    this.queue = new Set();
    this.signal = new Signal();
  }

  add(target, signal, check, key, interest) {
    const id = keyOf(key, interest);
    const old = this.entries.get(id);
    const max = this.host.limits.readinessSetEntries;
    if (!old && this.quota.count >= max) {
      throw E.invalidArgument(
        `too many readiness registrations: at most ${max} in all of this guest's readiness sets together (limit readiness_set_entries)`,
      );
    }
    if (old) this.remove(id);
    const entry = { key: BigInt(key), interest, target, signal, check, id, set: this };
    this.quota.count++;
    (target[REGISTRATIONS] ??= new Set()).add(entry);
    entry.wake = () => {
      if (!this.queue.has(entry)) this.queue.add(entry);
      this.signal.wake();
    };
    signal.waiters.add(entry.wake);
    this.entries.set(id, entry);
    // Level-triggered: an entry ready at registration is reported at once.
    this.queue.add(entry);
    this.signal.wake();
  }

  remove(id) {
    const e = this.entries.get(id);
    if (!e) return false;
    e.signal.waiters.delete(e.wake);
    this.entries.delete(id);
    this.queue.delete(e);
    e.target[REGISTRATIONS]?.delete(e);
    this.quota.count--;
    return true;
  }

  prune(entry) {
    if (entry.target.dropped) {
      this.remove(entry.id);
      return true;
    }
    return false;
  }

  registerMessageStream(target, interest, key) {
    const c = target.conn;
    if (interest === "receive") this.add(target, c.signal, () => c.receivable(), key, interest);
    else if (interest === "send") this.add(target, c.signal, () => c.sendable(), key, interest);
    else throw E.invalidArgument(`a message stream takes receive or send, not ${interest}`);
  }
  registerListener(listener, interest, key) {
    if (interest !== "accept") throw E.invalidArgument(`a listener takes accept, not ${interest}`);
    this.add(listener, listener.signal, () => listener.acceptable(), key, interest);
  }
  registerByteStream(target, interest, key) {
    const s = target.s;
    if (interest === "read") this.add(target, s.signal, () => s.readable(), key, interest);
    else if (interest === "write") this.add(target, s.signal, () => s.writable(), key, interest);
    else throw E.invalidArgument(`a byte stream takes read or write, not ${interest}`);
  }
  registerByteListener(listener, interest, key) {
    if (interest !== "accept") throw E.invalidArgument(`a byte listener takes accept, not ${interest}`);
    this.add(listener, listener.signal, () => listener.acceptable(), key, interest);
  }
  registerFutureMessageStream(future, interest, key) {
    this.registerFuture(future, interest, key, "future-message-stream");
  }
  registerFutureByteStream(future, interest, key) {
    this.registerFuture(future, interest, key, "future-byte-stream");
  }
  /** `accept` on a connect in progress: ready once `get` has its result. */
  registerFuture(future, interest, key, kind) {
    if (interest !== "accept") throw E.invalidArgument(`a ${kind} takes accept, not ${interest}`);
    this.add(future, future.signal, () => future.ended(), key, interest);
  }
  deregister(key, interest) {
    return this.remove(keyOf(key, interest));
  }
  anyReady() {
    for (const e of this.queue) {
      if (this.prune(e)) continue;
      if (e.check()) return true;
      this.queue.delete(e);
    }
    return false;
  }
  subscribe() {
    return new Pollable(this.signal, () => this.anyReady());
  }
  /** A suspending import (JSPI): a guest that only calls `take-ready` still lets the event loop run. */
  takeReady(max) {
    return yieldingReturn(this.collect(max));
  }
  collect(max) {
    const out = [];
    const again = [];
    for (const e of this.queue) {
      if (out.length >= max) break;
      this.queue.delete(e);
      if (this.prune(e)) continue;
      if (e.check()) {
        out.push([e.key, e.interest]);
        again.push(e);
      }
    }
    // Reported entries stay queued behind the rest while they stay ready.
    for (const e of again) this.queue.add(e);
    return out;
  }
  len() {
    for (const e of [...this.entries.values()]) this.prune(e);
    return this.entries.size;
  }
  [Symbol.dispose]() {
    for (const id of [...this.entries.keys()]) this.remove(id);
  }
}

/** The `tether:streams/readiness` import object for one host. */
export function readinessImports(host) {
  class HostReadinessSet extends ReadinessSet {
    constructor() {
      super(host);
    }
  }
  return { ReadinessSet: HostReadinessSet };
}

export { MessageStream, Listener, ByteStream, ByteListener };
