// max_assembling_bytes on Node: what streams read toward messages the
// guest has not taken (unfinished, or complete and queued) counts against
// one host-wide budget past each stream's 64 KiB, and a read past it fails
// its stream with 1013 (parity with host/tests/integration/ws_hostile.rs;
// the red teams of 2026-12-02 and 2026-12-03).

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import crypto from "node:crypto";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { ASSEMBLY_ALLOWANCE_BYTES } from "../src/config.js";
import { upgradeHead } from "./upgrade-head.js";
import { until as untilWithin } from "./raw-client.js";

const until = (what, f, ms = 10_000) => untilWithin(what, f, ms);

const MIB = 1 << 20;
const BUDGET = 6 * MIB;
const PART = 5 * (MIB >> 1); // 2.5 MiB a peer: two fit in the budget, three do not.

/** A client frame (masked, RFC 6455 section 5.2). */
function frame(opcode, payload, fin = true) {
  const len = payload.length;
  const head = len < 126 ? Buffer.alloc(2) : len < 65536 ? Buffer.alloc(4) : Buffer.alloc(10);
  head[0] = (fin ? 0x80 : 0) | opcode;
  if (len < 126) head[1] = 0x80 | len;
  else if (len < 65536) {
    head[1] = 0x80 | 126;
    head.writeUInt16BE(len, 2);
  } else {
    head[1] = 0x80 | 127;
    head.writeBigUInt64BE(BigInt(len), 2);
  }
  const mask = crypto.randomBytes(4);
  const body = Buffer.from(payload);
  for (let i = 0; i < body.length; i++) body[i] ^= mask[i & 3];
  return Buffer.concat([head, mask, body]);
}

/** A raw WebSocket client of `addr` (from `localAddress`, if given): the socket once upgraded, and the bytes it received since. */
function upgrade(addr, localAddress) {
  const [host, port] = addr.split(":");
  return new Promise((resolve, reject) => {
    const sock = net.connect({ host, port: Number(port), localAddress });
    const got = { bytes: Buffer.alloc(0), ended: false };
    sock.on("error", () => {});
    sock.on("close", () => (got.ended = true));
    sock.on("connect", () => sock.write(upgradeHead(addr)));
    let upgraded = false;
    sock.on("data", (d) => {
      got.bytes = Buffer.concat([got.bytes, d]);
      if (!upgraded) {
        const end = got.bytes.indexOf("\r\n\r\n");
        if (end < 0) return;
        if (!got.bytes.subarray(0, 12).toString().includes("101")) return reject(new Error(got.bytes.toString()));
        upgraded = true;
        got.bytes = got.bytes.subarray(end + 4);
        resolve({ sock, got });
      }
    });
  });
}

/** The close code of the first close frame `got` holds, or undefined. */
function closeCode(got) {
  const b = got.bytes;
  return b.length >= 4 && (b[0] & 0x0f) === 0x08 ? b.readUInt16BE(2) : undefined;
}

async function listening(limits) {
  const host = new Host({ policy: { listen: ["127.0.0.1:*"] }, limits: { maxMessageBytes: 4 * MIB, maxAssemblingBytes: BUDGET, lingerTimeoutMs: 500, ...limits } });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  return { host, listener, addr: listener.localAddress() };
}

test("pings and pongs between fragments do not reset the count", async () => {
  const { host, listener, addr } = await listening();
  const chunk = Buffer.alloc(32 << 10, 0x41);
  // PART of one unfinished message in 32 KiB fragments, a pong (or a
  // ping) after each: the control frames must not start the count again.
  const unfinished = (control) => {
    const out = [];
    for (let sent = 0; sent < PART; sent += chunk.length) {
      out.push(frame(sent === 0 ? 0x2 : 0x0, chunk, false), frame(control, Buffer.from("k")));
    }
    return Buffer.concat(out);
  };
  const peers = [];
  for (const [n, control] of [[1, 0xa], [2, 0x9]]) {
    const p = await upgrade(addr);
    p.sock.write(unfinished(control));
    await until(`peer ${n}'s fragments charged (${host.stats.assembling} bytes)`, () => host.stats.assembling >= n * (PART - ASSEMBLY_ALLOWANCE_BYTES));
    peers.push(p);
  }
  const third = await upgrade(addr);
  third.sock.write(unfinished(0xa));
  await until("the third peer's 1013", () => closeCode(third.got) !== undefined);
  assert.equal(closeCode(third.got), 1013);
  assert.ok(host.stats.peakAssembling <= BUDGET, `peak ${host.stats.peakAssembling}`);
  // The peers that held their fragments give them back when they leave.
  for (const p of [...peers, third]) p.sock.destroy();
  await until(`nothing charged (${host.stats.assembling})`, () => host.stats.assembling === 0);
  listener[Symbol.dispose]();
});

test("complete messages the guest has not taken stay charged", async () => {
  const { host, listener, addr } = await listening();
  const peers = [];
  for (const n of [1, 2]) {
    const p = await upgrade(addr);
    p.sock.write(frame(0x2, Buffer.alloc(PART, n)));
    await until(`peer ${n}'s message charged (${host.stats.assembling} bytes)`, () => host.stats.assembling >= n * (PART - ASSEMBLY_ALLOWANCE_BYTES));
    peers.push(p);
  }
  const third = await upgrade(addr);
  third.sock.write(frame(0x2, Buffer.alloc(PART, 3)));
  await until("the third peer's 1013", () => closeCode(third.got) !== undefined);
  assert.equal(closeCode(third.got), 1013);
  assert.ok(host.stats.peakAssembling <= BUDGET, `peak ${host.stats.peakAssembling}`);
  // The guest takes the first two streams and their messages: the charge
  // is given back, and the messages are whole.
  for (const n of [1, 2]) {
    const stream = listener.accept();
    await until(`stream ${n}'s message`, () => stream.conn.inbound.length > 0);
    const m = stream.receive();
    assert.equal(m.tag, "binary");
    assert.equal(m.val.length, PART);
    assert.equal(m.val[0], n);
  }
  const failed = listener.accept();
  await until("the third stream ends", () => failed.conn.ended);
  assert.throws(() => failed.receive(), (e) => e.tag === "other" && /max_assembling_bytes/.test(e.val));
  assert.equal(host.stats.assembling, 0);
  for (const p of peers) p.sock.destroy();
  listener[Symbol.dispose]();
});

test("one source holds at most a share of the budget", async () => {
  // host/tests/integration/ws_hostile.rs
  // one_source_holds_at_most_a_share_of_the_assembling_budget: five peers
  // from 127.0.0.2 with 1.5 MiB unfinished each under an 8 MiB budget get
  // a quarter of it (2 MiB) between them; a 1.75 MiB message from
  // 127.0.0.1 goes through. Before, they parked 7.5 MB and it got 1013.
  const { host, listener, addr } = await listening({
    maxMessageBytes: 2 * MIB,
    maxAssemblingBytes: 8 * MIB,
    countLoopbackConnections: true,
  });
  const attackers = [];
  let honest = null;
  try {
    let failed = 0;
    for (let n = 0; n < 5; n++) {
      const p = await upgrade(addr, "127.0.0.2");
      p.sock.write(frame(0x2, Buffer.alloc(3 * (MIB >> 1), 0x41), false));
      await new Promise((r) => setTimeout(r, 300));
      if (closeCode(p.got) === 1013) failed++;
      attackers.push(p);
    }
    assert.equal(failed, 4, "the attacker's streams past its share");
    assert.ok(host.stats.assembling <= 2 * MIB, `one source parked ${host.stats.assembling} bytes`);
    honest = await upgrade(addr);
    honest.sock.write(frame(0x2, Buffer.alloc(7 * (MIB >> 2), 0x42)));
    await until("the other source's message is read", () => [...host.conns].some((c) => c.inbound.some((m) => m.msg.val.length === 7 * (MIB >> 2))));
    assert.equal(closeCode(honest.got), undefined, "the other source's stream was failed");
  } finally {
    // (Also when an assertion failed: an open socket would hold the run.)
    for (const p of [...attackers, honest]) p?.sock.destroy();
    // The honest message stays charged while it waits, unaccepted, in the
    // listener's queue: disposing the listener gives it back.
    listener[Symbol.dispose]();
  }
  await until(`nothing charged (${host.stats.assembling})`, () => host.stats.assembling === 0);
});
