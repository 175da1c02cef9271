// Where accepted connections come from: the source a client counts
// against (an IPv4 address, an IPv6 /64), and the connections each source
// and the whole host hold over every listener of a host, WebSocket and
// TCP (`maxConnectionsPerSource`, `maxConnections`). Mirrors
// host/src/places.rs `source_of` and host/src/connections.rs.

/**
 * The source a client counts against, for `maxHandshakesPerSource` and
 * `maxConnectionsPerSource`: an IPv4 address (also IPv4-mapped IPv6), or
 * an IPv6 address's /64 prefix (host/src/places.rs `source_of`). `addr`:
 * Node's `remoteAddress`.
 */
export function sourceOf(addr) {
  if (!addr) return "";
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(addr);
  if (mapped) return mapped[1];
  if (!addr.includes(":")) return addr;
  const [head, tail] = addr.replace(/%.*$/, "").split("::");
  const h = head ? head.split(":") : [];
  const t = tail === undefined ? null : tail ? tail.split(":") : [];
  const groups = t === null ? h : [...h, ...Array(8 - h.length - t.length).fill("0"), ...t];
  return `${groups.slice(0, 4).map((g) => parseInt(g, 16).toString(16)).join(":")}::/64`;
}

/** Whether `addr` (Node's `remoteAddress`) is loopback: 127.0.0.0/8 (also IPv4-mapped) or ::1. */
export function isLoopback(addr) {
  return /^(::ffff:)?127\./i.test(addr ?? "") || addr === "::1";
}

/**
 * The connections every source holds at once, and the host in all, shared
 * by the listeners of one host (host/src/connections.rs `BySource`): a
 * connection holds a place of the host's and of its source's from its
 * accept (a WebSocket client still in its handshake counts) until its
 * socket closes, however it closes; a source at its bound has its new
 * connections closed at once while other sources are served, and past
 * the host's bound every new connection is. Without the first, one
 * address that keeps its connections open takes every file descriptor of
 * the process and the memory each connection holds; without the second,
 * enough addresses together do. Loopback clients count against their
 * source only with `countLoopback` (on a listener bound to loopback they
 * are the machine's own programs, and behind a reverse proxy on the same
 * machine every client is loopback), against the host always.
 */
export class ConnectionsBySource {
  /**
   * @param {number} max connections per source (at least 1)
   * @param {boolean} countLoopback whether loopback clients count per source
   * @param {number} maxTotal connections in all (at least 1; default: no bound)
   */
  constructor(max, countLoopback, maxTotal = Infinity) {
    this.max = Math.max(1, max);
    this.countLoopback = countLoopback;
    this.maxTotal = Math.max(1, maxTotal);
    this.bySource = new Map();
    /** Connections held in all, loopback included. */
    this.total = 0;
    /** Bytes each counted source charges to maxAssemblingBytes (websocket.js `Charges`). */
    this.assembling = new Map();
  }

  /** Whether a client at `addr` counts against its source (not loopback, unless countLoopback). */
  counts(addr) {
    return this.countLoopback || !isLoopback(addr);
  }

  /** Bytes `source` charges to maxAssemblingBytes now. */
  assemblingOf(source) {
    return this.assembling.get(source) ?? 0;
  }

  /** Adds `n` (may be negative) to what `source` charges to maxAssemblingBytes. */
  addAssembling(source, n) {
    const now = this.assemblingOf(source) + n;
    if (now > 0) this.assembling.set(source, now);
    else this.assembling.delete(source);
  }

  /**
   * Takes a place for `sock`, a socket just accepted: true when it may be
   * served (the host holds fewer than `maxTotal`, and its source is not
   * counted or holds fewer than `max`; the places come back on the
   * socket's 'close'), false when either bound is held already (the
   * caller closes it; a refusal holds nothing).
   */
  take(sock) {
    if (this.total >= this.maxTotal) return false;
    const counted = this.countLoopback || !isLoopback(sock.remoteAddress);
    const source = sourceOf(sock.remoteAddress);
    const n = this.bySource.get(source) ?? 0;
    if (counted && n >= this.max) return false;
    this.total++;
    if (counted) this.bySource.set(source, n + 1);
    sock.once("close", () => {
      this.total--;
      if (!counted) return;
      const left = this.bySource.get(source) - 1;
      if (left > 0) this.bySource.set(source, left);
      else this.bySource.delete(source);
    });
    return true;
  }

  /** Connections the source of `addr` holds now. */
  held(addr) {
    return this.bySource.get(sourceOf(addr)) ?? 0;
  }
}

/** The host's count of connections per source and in all, made at first use from its limits. */
export function connectionsBySource(host) {
  return (host.connectionsBySource ??= new ConnectionsBySource(
    host.limits.maxConnectionsPerSource,
    host.limits.countLoopbackConnections,
    host.limits.maxConnections,
  ));
}
