// Name lookups on Node: at most the host's lookup places at once, each
// held until getaddrinfo returns (a connect that timed out does not free
// its thread), waiting lookups served in order and skipped once their
// connect ended; libuv's pool sized for them (the red team of 2026-12-03,
// third round: 16 lookups a silent resolver never answered took all 4
// pool threads, and every other name timed out for about 80 s).

import { test } from "node:test";
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { LookupPlaces, lookupPlaces } from "../src/net.js";
import { DEFAULT_LIMITS } from "../src/config.js";

/** A lookup the test finishes by hand. */
function pending(log, name) {
  let finish;
  const done = new Promise((resolve) => (finish = resolve));
  return { run: () => (log.push(name), done), finish };
}

const turn = () => new Promise((resolve) => setImmediate(resolve));

test("at most max lookups run; each keeps its place until it returns; waiters go in order", async () => {
  const places = new LookupPlaces(2);
  const started = [];
  const l = ["a", "b", "c", "d"].map((n) => pending(started, n));
  const results = l.map((x) => places.run(x.run));
  await turn();
  assert.deepEqual(started, ["a", "b"]);
  l[1].finish(["b"]);
  assert.deepEqual(await results[1], ["b"]);
  await turn();
  assert.deepEqual(started, ["a", "b", "c"], "the first waiter took the freed place");
  l[0].finish(["a"]);
  await turn();
  assert.deepEqual(started, ["a", "b", "c", "d"]);
  assert.equal(places.used, 2);
  l[2].finish([]);
  l[3].finish([]);
  await Promise.all(results);
  assert.equal(places.used, 0, "every place given back");
});

test("a waiter whose connect ended gives its turn away without looking up", async () => {
  const places = new LookupPlaces(1);
  const started = [];
  const first = pending(started, "first");
  const r1 = places.run(first.run);
  let gone = false;
  const r2 = places.run(pending(started, "gone").run, () => gone);
  const third = pending(started, "third");
  const r3 = places.run(third.run);
  gone = true;
  first.finish(["x"]);
  assert.equal(await r2, undefined);
  await turn();
  assert.deepEqual(started, ["first", "third"]);
  third.finish(["y"]);
  assert.deepEqual(await r3, ["y"]);
  await r1;
  assert.equal(places.used, 0);
});

test("a waiter leaves the queue when its wait runs out, and its place goes to nobody", async () => {
  const places = new LookupPlaces(1);
  const started = [];
  const first = pending(started, "first");
  const r1 = places.run(first.run);
  const t0 = performance.now();
  const late = await places.run(pending(started, "late").run, () => false, 30);
  assert.equal(late, undefined);
  assert.ok(performance.now() - t0 >= 25, "left only at its deadline");
  assert.equal(places.waiting.length, 0, "out of the queue");
  first.finish(["x"]);
  await r1;
  assert.equal(places.used, 0);
  assert.deepEqual(started, ["first"], "the late waiter never looked up");
});

test("a failing lookup gives its place back", async () => {
  const places = new LookupPlaces(1);
  await assert.rejects(places.run(() => Promise.reject(new Error("ENOTFOUND"))));
  assert.equal(places.used, 0);
});

test("a host's places are the smaller of its two lookup limits", () => {
  const host = { limits: { ...DEFAULT_LIMITS, maxDnsLookups: 64, maxDnsLookupsPerGuest: 16 } };
  assert.equal(lookupPlaces(host).max, 16);
  assert.equal(lookupPlaces(host), lookupPlaces(host), "one per host");
  const small = { limits: { ...DEFAULT_LIMITS, maxDnsLookups: 3 } };
  assert.equal(lookupPlaces(small).max, 3);
});

test("libuv's pool starts with the lookup places plus 4 threads, from the host options only", (t) => {
  const poolSize = new URL("../src/pool-size.js", import.meta.url).href;
  const dir = mkdtempSync(join(tmpdir(), "tether-pool-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const script = join(dir, "print.mjs");
  // Imports pool-size.js first (as tether-node.mjs does), then makes the
  // pool start (40 reads at once) and counts its threads (libuv names
  // them `libuv-worker`): the variable must be set before the pool starts.
  writeFileSync(
    script,
    `await import(${JSON.stringify(poolSize)});
const { readFile } = await import("node:fs/promises");
const { readdirSync, readFileSync } = await import("node:fs");
await Promise.all(Array.from({ length: 40 }, () => readFile("/proc/self/status")));
const names = readdirSync("/proc/self/task").map((t) => readFileSync(\`/proc/self/task/\${t}/comm\`, "utf8").trim());
console.log(String(names.filter((n) => n.startsWith("libuv")).length));
`,
  );
  const env = { ...process.env };
  delete env.UV_THREADPOOL_SIZE;
  // As tether-node's command line: run GUEST [HOST OPTIONS] [-- GUEST ARGS].
  const size = (...args) =>
    execFileSync(process.execPath, [script, "run", "g.wasm", ...args], { env, encoding: "utf8" }).trim();
  assert.equal(size(), "20");
  assert.equal(size("--max-dns-lookups", "2"), "6");
  assert.equal(size("--max-dns-lookups-per-guest", "40", "--max-dns-lookups", "50"), "44");
  assert.equal(size("--", "--max-dns-lookups", "2"), "20", "a guest argument is not a host option");
  assert.equal(
    execFileSync(process.execPath, [script], { env: { ...env, UV_THREADPOOL_SIZE: "7" }, encoding: "utf8" }).trim(),
    "7",
    "the user's own setting is kept",
  );
});
