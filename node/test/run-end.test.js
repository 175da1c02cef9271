// What the Node host does with a guest's streams when its run ends (the
// red team of 2026-12-05, F1, F2 and F4; parity with cli/tests/shutdown.rs
// and host/tests/integration/limits.rs): a guest that returns still
// delivers what the host took to send on a TCP byte stream, then a FIN;
// a failed guest's byte streams are reset, not ended with a FIN; and its
// message streams close with 1011 and a fixed phrase, never the trap's
// text.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { spawn } from "node:child_process";
import { existsSync } from "node:fs";
import { once } from "node:events";
import { fileURLToPath } from "node:url";
import { WebSocketServer } from "ws";
import { until, sleep } from "./raw-client.js";

const CLI = fileURLToPath(new URL("../bin/tether-node.mjs", import.meta.url));
const PROBE = fileURLToPath(new URL("../../target/guests/wasm32-wasip2/release/probe.wasm", import.meta.url));

/** Runs the probe guest under tether-node with `args`; its stdout is collected in `out.text`. */
function probe(flags, args) {
  assert.ok(existsSync(PROBE), `${PROBE} is missing: build the guests (cargo build --release -p tether-guest-artifacts)`);
  const proc = spawn(process.execPath, [CLI, "run", PROBE, ...flags, "--", ...args], { stdio: ["ignore", "pipe", "pipe"] });
  const out = { text: "", log: "" };
  proc.stdout.on("data", (d) => (out.text += d));
  proc.stderr.on("data", (d) => (out.log += d));
  const exited = once(proc, "exit");
  return { proc, out, exited };
}

/** A TCP server on 127.0.0.1 whose first connection resolves `accepted`. */
async function tcpTarget() {
  const server = net.createServer();
  server.listen(0, "127.0.0.1");
  await once(server, "listening");
  const accepted = once(server, "connection").then(([sock]) => sock);
  return { server, addr: `127.0.0.1:${server.address().port}`, accepted };
}

test("a guest that returns still delivers what the host took, then a FIN", { timeout: 60_000 }, async () => {
  const target = await tcpTarget();
  const run = probe(["--allow", target.addr], ["tcp-stuck", target.addr, String(64 << 20)]);
  const sock = await target.accepted;
  sock.pause();
  // Read nothing until the guest is stuck (300 ms without room) and returned.
  await until("the probe stuck", () => /blocked-after=\d+/.test(run.out.text), 30_000).catch((e) =>
    assert.fail(`${e.message}; stdout: ${run.out.text}; log: ${run.out.log}`),
  );
  await sleep(300);
  let got = 0;
  sock.on("data", (b) => (got += b.length));
  const end = new Promise((resolve) => {
    sock.on("end", () => resolve("end"));
    sock.on("error", (e) => resolve(e.code));
  });
  sock.resume();
  assert.equal(await end, "end");
  const [code] = await run.exited;
  target.server.close();
  const written = Number(/blocked-after=(\d+)/.exec(run.out.text)[1]);
  assert.equal(code, 0, run.out.log);
  assert.equal(got, written, `the peer read a FIN after ${got} of the ${written} bytes the guest wrote`);
});

test("a failed guest's byte stream is reset, not ended with a FIN", { timeout: 60_000 }, async () => {
  const target = await tcpTarget();
  const run = probe(["--allow", target.addr], ["tcp-fail-holding", target.addr, "trap"]);
  const sock = await target.accepted;
  let got = "";
  sock.on("data", (b) => (got += b));
  const end = await new Promise((resolve) => {
    sock.on("end", () => resolve("end"));
    sock.on("error", (e) => resolve(e.code));
  });
  const [code] = await run.exited;
  target.server.close();
  assert.notEqual(code, 0, run.out.log);
  assert.equal(end, "ECONNRESET", `after ${JSON.stringify(got)} the peer must read a reset`);
});

test("a failed guest's message stream closes with 1011 and a fixed phrase", { timeout: 60_000 }, async () => {
  const wss = new WebSocketServer({ port: 0, host: "127.0.0.1" });
  await once(wss, "listening");
  const closed = once(wss, "connection").then(([ws]) => once(ws, "close"));
  const url = `ws://127.0.0.1:${wss.address().port}/`;
  const run = probe(["--allow", `127.0.0.1:${wss.address().port}`], ["fail-holding", url, "trap"]);
  const [code, reason] = await closed;
  await run.exited;
  wss.close();
  assert.equal(code, 1011);
  assert.equal(reason.toString(), "guest trapped", "the trap's text stays in the host's outcome");
});
