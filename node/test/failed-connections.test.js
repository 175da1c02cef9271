// Connections the Node host fails itself (parity with the Rust host):
// the red team of 2026-12-03, eighth round, finding 6. A client that sent
// one message over `maxMessageBytes` (the host answers 1009) or one
// unmasked frame (1002), then kept its socket open and silent, held it for
// ws's default close timeout, 30 s, not the `lingerTimeoutMs` the README
// promises. Now the socket is closed at the linger timeout.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { upgradeHead } from "./upgrade-head.js";

const LINGER_MS = 300;

/**
 * A raw client: upgrades, then sends `frame` and never answers the close
 * (no close frame, no FIN). Once the host's FIN came it writes a byte
 * every 50 ms, so it hears the host's reset as soon as the host's socket
 * is gone.
 */
function failingClient(addr, frame) {
  const [host, port] = addr.split(":");
  const sock = net.connect({ host, port: Number(port), allowHalfOpen: true });
  const got = { bytes: Buffer.alloc(0), closedAt: null };
  sock.on("error", () => {});
  sock.on("connect", () => sock.write(upgradeHead(addr)));
  let sent = false;
  sock.on("data", (d) => {
    got.bytes = Buffer.concat([got.bytes, d]);
    if (!sent && got.bytes.includes("\r\n\r\n")) {
      sent = true;
      sock.write(frame);
    }
  });
  sock.on("end", () => {
    const probe = setInterval(() => (sock.destroyed ? clearInterval(probe) : sock.write("x")), 50);
  });
  sock.on("close", () => (got.closedAt = performance.now()));
  return { sock, got };
}

/** A masked binary frame of `len` bytes (RFC 6455 section 5.2). */
function maskedBinary(len) {
  const head = len < 126 ? Buffer.from([0x82, 0x80 | len]) : Buffer.from([0x82, 0x80 | 126, len >> 8, len & 0xff]);
  return Buffer.concat([head, Buffer.alloc(4), Buffer.alloc(len)]);
}

for (const [what, frame, code] of [
  ["a message over maxMessageBytes (1009)", maskedBinary(2048), 1009],
  ["an unmasked frame (1002)", Buffer.from([0x82, 0x02, 0x61, 0x62]), 1002],
]) {
  test(`a connection failed for ${what} is closed at the linger timeout`, async () => {
    const host = new Host({
      policy: { listen: ["127.0.0.1:*"] },
      limits: { maxMessageBytes: 1024, lingerTimeoutMs: LINGER_MS },
    });
    const listener = await websocketImports(host).listen("127.0.0.1:0", {});
    const addr = listener.localAddress();
    const start = performance.now();
    const c = failingClient(addr, frame);
    try {
      const end = start + 10_000;
      while (c.got.closedAt === null && performance.now() < end) {
        await new Promise((r) => setTimeout(r, 20));
      }
      assert.notEqual(c.got.closedAt, null, "the socket was still open after 10 s");
      const took = c.got.closedAt - start;
      assert.ok(took < LINGER_MS + 1_500, `closed after ${Math.round(took)} ms, linger ${LINGER_MS} ms`);
      // The close frame went out first (RFC 6455 section 7.1.7).
      const body = c.got.bytes.subarray(c.got.bytes.indexOf("\r\n\r\n") + 4);
      assert.equal(body[0], 0x88, "a close frame");
      assert.equal(body.readUInt16BE(2), code);
    } finally {
      c.sock.destroy();
      listener[Symbol.dispose]();
    }
  });
}

// An empty masked ping (RFC 6455 section 5.2).
const PING = Buffer.from([0x89, 0x80, 0, 0, 0, 0]);

for (const [what, first, code] of [
  ["an unmasked frame", Buffer.from([0x82, 0x02, 0x61, 0x62]), 1002],
  // The control flood fails the stream first (1008); ws then fails it
  // again on the bad frame and resumes the socket (the red team of
  // 2026-12-04j, F1: read at 1.4 GB/s for the whole linger).
  ["1,300 pings, then an unmasked frame", Buffer.concat([...Array(1300).fill(PING), Buffer.from([0x82, 0x02, 0x61, 0x62])]), 1008],
]) test(`a peer writing on after its stream failed (${what}) is pushed back and charges nothing`, async () => {
  // The red team of 2026-12-04g, finding 2: ws resumes the socket after an
  // error and discards what comes until the close timeout, and each chunk
  // was charged to maxAssemblingBytes (1.1 GB/s read, 82% of a core, and
  // honest messages failed with 1013). Now the socket is paused, nothing
  // is charged, and it closes once the close frame is out.
  const host = new Host({
    policy: { listen: ["127.0.0.1:*"] },
    limits: { lingerTimeoutMs: 5_000 },
  });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  const addr = listener.localAddress();
  const c = failingClient(addr, first);
  try {
    const junk = Buffer.alloc(1 << 20, 0x5a);
    const start = performance.now();
    let peak = 0;
    while (performance.now() - start < 2_000 && !c.sock.destroyed) {
      if (c.got.bytes.includes("\r\n\r\n")) {
        if (!c.sock.write(junk)) await new Promise((r) => setTimeout(r, 5));
      } else await new Promise((r) => setTimeout(r, 5));
      peak = Math.max(peak, host.stats.assembling);
    }
    const sent = c.sock.bytesWritten;
    assert.ok(sent < 64 << 20, `the host took ${sent} bytes after failing the stream`);
    assert.equal(peak, 0, `the discarded bytes were charged (${peak} bytes at the peak)`);
    assert.notEqual(c.got.closedAt, null, "the socket was still open after 2 s");
    const body = c.got.bytes.subarray(c.got.bytes.indexOf("\r\n\r\n") + 4);
    const close = body.indexOf(Buffer.from([0x88]));
    assert.ok(close >= 0, `a close frame: ${body.subarray(0, 16).toString("hex")} (${body.length} bytes)`);
    assert.equal(body.readUInt16BE(close + 2), code);
  } finally {
    c.sock.destroy();
    listener[Symbol.dispose]();
  }
});
