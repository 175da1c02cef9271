// Shared by the tests: raw TCP clients that record what the host does,
// and waiting for a condition.

import assert from "node:assert/strict";
import net from "node:net";

/**
 * Connects to `addr` ("host:port") from `localAddress` (default: the
 * system's choice), sends `first` once connected, and records what comes
 * back (`got.bytes`) and whether and when (`got.closedAt`, ms) it closed.
 */
export function client(addr, first, localAddress) {
  const [host, port] = addr.split(":");
  const sock = net.connect({ host, port: Number(port), localAddress });
  const got = { bytes: Buffer.alloc(0), closed: false, closedAt: null };
  sock.on("error", () => {});
  sock.on("connect", () => first && sock.write(first));
  sock.on("data", (d) => (got.bytes = Buffer.concat([got.bytes, d])));
  sock.on("close", () => {
    got.closed = true;
    got.closedAt = performance.now();
  });
  return { sock, got };
}

/** Resolves once `f()` is true, checked every 10 ms; fails naming `what` after `ms`. */
export async function until(what, f, ms = 5_000) {
  const end = Date.now() + ms;
  while (!f()) {
    if (Date.now() > end) assert.fail(`not within ${ms} ms: ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Resolves after `ms` milliseconds. */
export const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
