// Control frames on Node: a peer's pings and pongs are read at most
// CONTROL_FRAMES_PER_SECOND a second past a burst of CONTROL_FRAME_BURST, and a peer that stays
// past that pace for CONTROL_FLOOD_MS is failed with 1008 (parity with
// host/tests/integration/ws_hostile.rs
// a_ping_flood_is_paced_then_failed_with_1008 and host/src/websocket.rs's
// unit test; red team 2026-12-03, eighth round, finding 8).

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import crypto from "node:crypto";
import { Host } from "../src/host.js";
import { websocketImports, ControlPace, CONTROL_FRAME_BURST, CONTROL_FLOOD_MS } from "../src/websocket.js";
import { upgradeHead } from "./upgrade-head.js";
import { until } from "./raw-client.js";

test("a burst of control frames goes at once, then each waits its interval; a flood is failed", () => {
  const burst = CONTROL_FRAME_BURST;
  const pace = new ControlPace(0);
  const waits = Array.from({ length: burst + 3 }, () => pace.readOne(0));
  assert.ok(waits.slice(0, burst).every((w) => w === 0), String(waits.slice(0, 8)));
  const interval = ControlPace.INTERVAL;
  assert.deepEqual(waits.slice(burst).map((w) => Math.round(w / interval)), [1, 2, 3]);
  // An idle peer earns the burst back.
  const later = ControlPace.FULL + 1000;
  assert.ok(Array.from({ length: burst }, () => pace.readOne(later)).every((w) => w === 0));
  // Past the pace, read as soon as allowed (up to 2 ms late): a flood
  // once that has lasted CONTROL_FLOOD_MS.
  let now = later;
  for (;;) {
    const w = pace.readOne(now);
    if (w === "flood") break;
    now += w > 0 ? w + 2 : 0;
  }
  assert.ok(now - later > CONTROL_FLOOD_MS && now - later < CONTROL_FLOOD_MS + 200, `flood after ${now - later} ms`);
  // A read more than CONTROL_FLOOD_MS past the full bucket at once.
  const chunk = new ControlPace(0);
  let read = 0;
  while (chunk.readOne(0) !== "flood") read++;
  assert.equal(read, burst + CONTROL_FLOOD_MS / interval);
  // At the pace, never held back.
  const steady = new ControlPace(0);
  assert.ok(Array.from({ length: 4 * burst }, (_, k) => steady.readOne(k * interval)).every((w) => w === 0));
});

test("a ping flood from a peer that reads its pongs is paced, then failed with 1008", async () => {
  const host = new Host({ policy: { listen: ["127.0.0.1:*"] } });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  const addr = listener.localAddress();
  const [h, port] = addr.split(":");
  const sock = net.connect({ host: h, port: Number(port) });
  sock.on("error", () => {});
  let got = Buffer.alloc(0);
  let upgraded = false;
  let closed = false;
  sock.on("close", () => (closed = true));
  await new Promise((resolve, reject) => {
    sock.on("connect", () => sock.write(upgradeHead(addr)));
    sock.on("data", (d) => {
      // Keep the first and the last 64 KiB: pongs, then the close.
      got = Buffer.concat([got, d]);
      if (got.length > 256 << 10) got = Buffer.concat([got.subarray(0, 64 << 10), got.subarray(got.length - (64 << 10))]);
      if (upgraded) return;
      const end = got.indexOf("\r\n\r\n");
      if (end < 0) return;
      if (!got.subarray(0, 12).toString().includes("101")) return reject(new Error(got.toString()));
      upgraded = true;
      got = got.subarray(end + 4);
      resolve();
    });
  });
  const stream = listener.accept();
  assert.ok(stream, "the host accepted the stream");
  // Empty masked pings (6 bytes each), 10,000 a write.
  const ping = Buffer.from([0x89, 0x80, ...crypto.randomBytes(4)]);
  const batch = Buffer.concat(Array.from({ length: 10_000 }, () => ping));
  const started = performance.now();
  let sent = 0;
  while (!closed && sent < 512 << 20 && performance.now() - started < 8000) {
    sent += batch.length;
    if (!sock.write(batch)) {
      const drained = await Promise.race([
        new Promise((r) => sock.once("drain", () => r(true))),
        new Promise((r) => setTimeout(() => r(false), 1000)),
      ]);
      if (!drained) break;
    }
  }
  const took = Math.round(performance.now() - started);
  assert.ok(sent < 64 << 20, `the host read ${sent} bytes of empty pings in ${took} ms`);
  // (`ws` hands over a whole read of pings, 64 KiB or 10,922 of them, far
  // more than CONTROL_FLOOD_MS past the pace: the first read may already
  // fail the connection, before its pong goes out.)
  const close = Buffer.from([0x88, 0x1a, 0x03, 0xf0]);
  await until("the host's 1008 close", () => got.indexOf(close) >= 0, 10_000);
  assert.equal(got.subarray(got.indexOf(close) + 4).toString(), "too many pings and pongs");
  await until("the stream ends", () => stream.conn.ended, 10_000);
  assert.throws(() => stream.receive(), (e) => e.tag === "protocol-error" && /past 64 a second \(after a burst of 1024\)/.test(e.val));
  sock.destroy();
  listener[Symbol.dispose]();
});
