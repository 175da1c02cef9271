// `tether:streams/tcp` on node:net: byte streams with `wasi:io` input and
// output streams. Inbound bytes are bounded (the socket is paused while
// `tcp_read_chunk_bytes` wait unread); outbound bytes are bounded by what
// `check-write` grants (`tcp_write_buffer_bytes` minus what node has not
// handed to the kernel yet). TCP_NODELAY on every socket.

import net from "node:net";
import { Signal, InputStream, OutputStream, streamClosed, streamFailed, dropRegistrations } from "./io.js";
import { PendingConnect, AcceptQueue } from "./ready.js";
import { E, fromNodeError } from "./config.js";
import { splitHostPort, checkDestination, resolveAllowed, lookupPlaces, sockAddr } from "./net.js";
import { parseBind } from "./websocket.js";
import { connectionsBySource } from "./sources.js";

/** One TCP connection's state: the source of its input stream and the sink of its output stream. */
class Sock {
  constructor(host, sock) {
    this.host = host;
    this.sock = sock;
    this.signal = new Signal();
    this.chunks = [];
    this.queued = 0;
    this.eof = false;
    this.error = null;
    this.unsent = 0;
    this.pending = new Set();
    this.shut = false;
    this.paused = false;
    this.holders = 3;
    this.peer = sockAddr(sock.remoteAddress, sock.remotePort);
    this.local = sockAddr(sock.localAddress, sock.localPort);
    sock.setNoDelay(true);
    sock.on("data", (b) => {
      this.chunks.push(b);
      this.queued += b.length;
      if (!this.paused && this.queued >= host.limits.tcpReadChunkBytes) {
        this.paused = true;
        sock.pause();
      }
      this.signal.wake();
    });
    sock.on("end", () => {
      this.eof = true;
      this.signal.wake();
    });
    sock.on("error", (e) => {
      this.error = e;
      this.signal.wake();
    });
    sock.on("close", () => {
      this.eof = true;
      this.closed = true;
      this.signal.wake();
    });
    host.socks.add(this);
    sock.once("close", () => host.socks.delete(this));
  }

  // input-stream source
  readable() {
    return this.chunks.length > 0 || this.eof || this.error !== null;
  }
  read(len) {
    if (this.chunks.length === 0) {
      if (this.error) throw streamFailed(this.error.message);
      if (this.eof) throw streamClosed();
      return new Uint8Array(0);
    }
    const max = Math.min(len, this.host.limits.tcpReadChunkBytes);
    let out;
    const first = this.chunks[0];
    if (first.length <= max) {
      this.chunks.shift();
      out = first;
    } else {
      out = first.subarray(0, max);
      this.chunks[0] = first.subarray(max);
    }
    this.queued -= out.length;
    if (this.paused && this.queued < this.host.limits.tcpReadChunkBytes) {
      this.paused = false;
      this.sock.resume();
    }
    return out;
  }
  dropInput() {
    this.release();
  }

  // output-stream sink
  room() {
    return Math.max(0, this.host.limits.tcpWriteBufferBytes - this.unsent);
  }
  checkWrite() {
    if (this.error) throw streamFailed(this.error.message);
    if (this.shut || this.closed) throw streamClosed();
    return BigInt(this.room());
  }
  write(buf) {
    if (this.error) throw streamFailed(this.error.message);
    if (this.shut || this.closed) throw streamClosed();
    if (buf.length > this.room()) throw streamFailed(`write of ${buf.length} bytes exceeds check-write's ${this.room()}`);
    if (buf.length === 0) return;
    this.unsent += buf.length;
    const entry = { n: buf.length };
    this.pending.add(entry);
    this.sock.write(buf, () => this.sent(entry));
    // Written to the kernel at once: the room is back now, not a turn later.
    if (this.sock.writableLength === 0) for (const e of this.pending) this.sent(e);
  }
  sent(entry) {
    if (!this.pending.delete(entry)) return;
    this.unsent -= entry.n;
    this.signal.wake();
  }
  flush() {}
  flushed() {
    return this.unsent === 0 || this.error !== null || this.closed;
  }
  writable() {
    return this.room() > 0 || this.error !== null || this.shut || this.closed;
  }
  dropOutput() {
    this.release();
  }

  release() {
    this.holders--;
    if (this.holders === 0) {
      this.sock.end();
      const t = setTimeout(() => this.sock.resetAndDestroy(), this.host.limits.lingerTimeoutMs);
      this.sock.once("close", () => clearTimeout(t));
    }
  }
}

/** `byte-stream` resource. */
export class ByteStream {
  constructor(s) {
    this.s = s;
  }
  shutdownSend() {
    if (this.s.closed) throw E.closed();
    if (!this.s.shut) {
      this.s.shut = true;
      this.s.sock.end();
    }
  }
  peerAddress() {
    return this.s.peer;
  }
  localAddress() {
    return this.s.local;
  }
  [Symbol.dispose]() {
    this.dropped = true;
    dropRegistrations(this);
    this.s.release();
  }
}

const triple = (s) => [new ByteStream(s), new InputStream(s), new OutputStream(s)];

/** `future-byte-stream` resource. */
export class FutureByteStream extends PendingConnect {
  cancel() {
    this.sock?.destroy();
  }
  discard(streams) {
    streams.forEach((r) => r[Symbol.dispose]());
  }
}

function connect(host, address) {
  const { host: hostText, port } = splitHostPort(address);
  const { host: parsed, check } = checkDestination(host.policy, hostText, port);
  const fut = new FutureByteStream();
  (async () => {
    const timer = setTimeout(() => {
      fut.settle({ tag: "err", val: E.timeout() });
      fut.sock?.destroy();
    }, host.limits.connectTimeoutMs);
    try {
      const gone = () => fut.dropped || fut.result !== null;
      const places = lookupPlaces(host);
      const addrs = await resolveAllowed(host.policy, parsed, check, port, places, gone, host.limits.connectTimeoutMs);
      if (gone()) return;
      if (addrs.length === 0) {
        // The wait for a lookup place ran out: the connect's time is up.
        clearTimeout(timer);
        fut.settle({ tag: "err", val: E.timeout() });
        return;
      }
      const sock = net.connect({ host: addrs[0].text, port, noDelay: true });
      fut.sock = sock;
      sock.once("connect", () => {
        clearTimeout(timer);
        if (fut.result) return sock.destroy();
        const s = new Sock(host, sock);
        fut.settle({ tag: "ok", val: triple(s) });
      });
      sock.once("error", (e) => {
        clearTimeout(timer);
        fut.settle({ tag: "err", val: fromNodeError(e) });
      });
    } catch (e) {
      clearTimeout(timer);
      fut.settle({ tag: "err", val: e.tag ? e : fromNodeError(e) });
    }
  })();
  return fut;
}

/** `byte-listener` resource: accepted connections wait in its queue. */
export class ByteListener extends AcceptQueue {
  wrap(sock) {
    return triple(sock);
  }
  closeQueued(sock) {
    sock.sock.destroy();
  }
}

function listen(host, address) {
  const bind = parseBind(address);
  try {
    host.policy.checkListen(bind.ip, bind.port);
  } catch (why) {
    throw E.denied(why);
  }
  const server = net.createServer({ noDelay: true, pauseOnConnect: false });
  const listener = new ByteListener(host, server);
  const connections = connectionsBySource(host);
  server.on("connection", (sock) => {
    if (listener.stopped) return sock.destroy();
    // A source that holds its bound of connections over every listener
    // of the host, or any client of a host that holds its own bound, is
    // closed at once.
    if (!connections.take(sock)) return sock.destroy();
    listener.push(new Sock(host, sock));
  });
  return new Promise((resolve, reject) => {
    server.once("error", (e) => reject(E.other(e.message)));
    server.listen({ host: bind.text, port: bind.port, backlog: host.limits.acceptBacklog, ipv6Only: bind.ipv6Only }, () =>
      resolve(listener),
    );
  });
}

/** The `tether:streams/tcp` import object for one host. */
export function tcpImports(host) {
  return {
    ByteStream,
    FutureByteStream,
    ByteListener,
    connect: (address) => connect(host, address),
    listen: (address) => listen(host, address),
  };
}
