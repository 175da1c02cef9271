// Every limit of the Node host, with the defaults and units of the Rust
// host's `Limits` (host/src/config.rs), and the `error-code` constructors
// of `tether:streams/types` (wit/tether.wit).

import { readFileSync } from "node:fs";

/** The most `maxConnections` defaults to (host/src/connections.rs `DEFAULT_MAX_CONNECTIONS_CAP`). */
export const MAX_CONNECTIONS_CAP = 65536;

/**
 * The default of `maxConnections`: three quarters of the process's soft
 * "Max open files" limit (file descriptors) read from `limits` (Linux's
 * /proc/self/limits; Node has no getrlimit, and raises the soft limit to
 * the hard one at start), at least 64, so that a quarter stays for the
 * guests' dials, files and listeners, and at most `MAX_CONNECTIONS_CAP`
 * (65536: a held connection costs memory, and a hard limit of a million
 * descriptors would otherwise let them take tens of GiB); 49152 when the
 * limit is unlimited or cannot be read (host/src/connections.rs
 * `default_max_connections`).
 */
export function defaultMaxConnections(limits = "/proc/self/limits") {
  let soft;
  try {
    soft = /^Max open files\s+(\d+)\s/m.exec(readFileSync(limits, "utf8"))?.[1];
  } catch {
    // Not Linux, or no /proc.
  }
  if (soft === undefined) return 49152;
  return Math.min(MAX_CONNECTIONS_CAP, Math.max(64, Math.floor(Number(soft) / 4) * 3));
}

/** Defaults of host/src/config.rs `Limits`. Bytes are bytes, times milliseconds. */
export const DEFAULT_LIMITS = Object.freeze({
  maxMessageBytes: 64 << 20,
  maxAssemblingBytes: 256 << 20,
  inboundBufferBytes: 1 << 20,
  outboundBufferBytes: 1 << 20,
  maxBatchMessages: 1024,
  tcpWriteBufferBytes: 256 << 10,
  tcpReadChunkBytes: 64 << 10,
  acceptBacklog: 64,
  readinessSetEntries: 1 << 16,
  maxHandshakesPerListener: 1024,
  maxHandshakesPerSource: 256,
  /**
   * Accepted connections one source (an IPv4 address, an IPv6 /64) holds
   * at once over every listener of the host, WebSocket and TCP: from its
   * accept (a handshake counts) until its socket closes. Past it a new
   * connection from that source is closed at once (a WebSocket client is
   * answered 503 first) while other sources are served. Loopback clients
   * count only with `countLoopbackConnections` (src/sources.js).
   */
  maxConnectionsPerSource: 256,
  /**
   * Whether loopback clients (127.0.0.0/8, ::1) count against
   * `maxConnectionsPerSource`: not by default, since on a listener bound to
   * loopback they are this machine's own programs, and behind a reverse
   * proxy on the same machine every client is loopback.
   */
  countLoopbackConnections: false,
  /**
   * Accepted connections the host holds at once over every listener,
   * WebSocket and TCP, whatever their source (loopback included): from
   * its accept (a handshake counts) until its socket closes. Past it a
   * new connection is closed at once (a WebSocket client is answered 503
   * first). Without it, enough sources at their `maxConnectionsPerSource`
   * took every file descriptor of the process (80 addresses at 256 fill
   * 20,000), and the guests could then dial nothing. Default: three
   * quarters of the soft file descriptor limit (`defaultMaxConnections`).
   */
  maxConnections: defaultMaxConnections(),
  connectTimeoutMs: 10_000,
  handshakeTimeoutMs: 10_000,
  lingerTimeoutMs: 5_000,
  maxMemoryBytes: 256 << 20,
  maxRunWithoutYieldMs: 10_000,
  maxAeadKeys: 4096,
  maxDnsLookups: 64,
  maxDnsLookupsPerGuest: 16,
});

/**
 * Largest request head (request line and headers) a WebSocket listener
 * takes, bytes; past it, 431 (host/src/websocket.rs MAX_REQUEST_HEAD_BYTES).
 */
export const MAX_REQUEST_HEAD_BYTES = 16 << 10;

/**
 * Most header lines an upgrade request may have; past it, 431
 * (host/src/websocket/upgrade.rs MAX_REQUEST_HEADERS, tungstenite's bound).
 */
export const MAX_REQUEST_HEADERS = 124;

/**
 * Bytes toward one inbound message each stream reads outside the host-wide
 * `maxAssemblingBytes` (host/src/websocket.rs ASSEMBLY_ALLOWANCE_BYTES).
 */
export const ASSEMBLY_ALLOWANCE_BYTES = 64 << 10;

/**
 * How long after its accept a client without a request head may lose its
 * handshake place to a new connection when a listener runs
 * `maxHandshakesPerListener` handshakes, ms (host/src/places.rs EVICT_AFTER).
 */
export const HANDSHAKE_EVICT_AFTER_MS = 1_000;

/** Each queued WebSocket message counts its payload plus this (host/src/websocket.rs QUEUED_MESSAGE_OVERHEAD). */
export const QUEUED_MESSAGE_OVERHEAD = 64;

/** `error-code` values, thrown by the host functions (jco lowers a thrown payload as `err`). */
export const E = {
  invalidUrl: (s) => ({ tag: "invalid-url", val: String(s) }),
  denied: (s) => ({ tag: "denied", val: String(s) }),
  dnsFailure: (s) => ({ tag: "dns-failure", val: String(s) }),
  connectionRefused: (s) => ({ tag: "connection-refused", val: String(s) }),
  timeout: () => ({ tag: "timeout" }),
  tlsFailure: (s) => ({ tag: "tls-failure", val: String(s) }),
  protocolError: (s) => ({ tag: "protocol-error", val: String(s) }),
  closed: () => ({ tag: "closed" }),
  messageTooLarge: (n) => ({ tag: "message-too-large", val: BigInt(n) }),
  wouldBlock: () => ({ tag: "would-block" }),
  invalidArgument: (s) => ({ tag: "invalid-argument", val: String(s) }),
  other: (s) => ({ tag: "other", val: String(s) }),
};

const TLS_CODES = /^(ERR_TLS|ERR_SSL|CERT_|UNABLE_TO_|DEPTH_ZERO|SELF_SIGNED|HOSTNAME_MISMATCH|ERR_OSSL)/;

/** Maps a Node socket, DNS or TLS error to an `error-code`. */
export function fromNodeError(e) {
  const code = e?.code ?? "";
  const msg = e?.message ?? String(e);
  if (code === "ECONNREFUSED") return E.connectionRefused(msg);
  if (code === "ENOTFOUND" || code === "EAI_AGAIN" || code === "EAI_FAIL" || code === "ENODATA") return E.dnsFailure(msg);
  if (code === "ETIMEDOUT") return E.timeout();
  // The rustls wording the Rust host reports, then Node's own message.
  if (/^(UNABLE_TO_|SELF_SIGNED|DEPTH_ZERO|CERT_UNTRUSTED)/.test(code)) {
    return E.tlsFailure(`invalid peer certificate: UnknownIssuer (${msg})`);
  }
  if (code === "ERR_TLS_CERT_ALTNAME_INVALID") return E.tlsFailure(`invalid peer certificate: certificate not valid for name (${msg})`);
  if (TLS_CODES.test(code) || /certificate|SSL|TLS|wrong version number/i.test(msg)) return E.tlsFailure(msg);
  if (code === "ECONNRESET" || code === "EPIPE") return E.protocolError(msg);
  return E.other(msg);
}

/** Running totals the conformance driver reads: bytes queued in message-stream buffers. */
export class Stats {
  constructor() {
    this.buffered = 0;
    this.peakBuffered = 0;
    /** Bytes charged to `maxAssemblingBytes` (host/src/lib.rs Stats::assembling_bytes). */
    this.assembling = 0;
    this.peakAssembling = 0;
  }
  addAssembling(n) {
    this.assembling += n;
    if (this.assembling > this.peakAssembling) this.peakAssembling = this.assembling;
  }
  subAssembling(n) {
    this.assembling -= n;
  }
  add(n) {
    this.buffered += n;
    if (this.buffered > this.peakBuffered) this.peakBuffered = this.buffered;
  }
  sub(n) {
    this.buffered -= n;
  }
}
