// wasi:clocks/wall-clock as the guest gets it from Host.imports(): to the
// microsecond and in step with the system clock. preview2-shim's clock
// read Date.now() (milliseconds), so a guest timing a one-way delay
// against a sender's nanosecond stamp came out up to 1 ms short (the
// conformance case `wake-ups.first-message-after-idle` passed on Node
// at 1.1 ms real).

import { test } from "node:test";
import assert from "node:assert/strict";
import { Host } from "../src/host.js";

const clock = new Host({ policy: {}, limits: {} }).imports()["wasi:clocks/wall-clock"];
const ns = (t) => t.seconds * 1_000_000_000n + BigInt(t.nanoseconds);

test("resolution is a microsecond", () => {
  const r = clock.resolution();
  assert.equal(r.seconds, 0n);
  assert.ok(r.nanoseconds <= 1000, `resolution ${r.nanoseconds} ns`);
});

test("readings within a millisecond differ, and follow Date.now()", () => {
  // 2,000 readings over at least 2 ms: a millisecond clock gives at most
  // 3 distinct values, all whole milliseconds.
  const seen = new Set();
  let fractional = 0;
  const until = performance.now() + 2;
  let last = 0n;
  for (let n = 0; n < 2000 || performance.now() < until; n++) {
    const t = clock.now();
    assert.ok(t.nanoseconds >= 0 && t.nanoseconds < 1_000_000_000, `nanoseconds ${t.nanoseconds}`);
    const v = ns(t);
    assert.ok(v >= last, "the wall clock went back without the system clock being set");
    last = v;
    seen.add(v);
    if (v % 1_000_000n !== 0n) fractional++;
  }
  assert.ok(seen.size > 50, `${seen.size} distinct readings over 2 ms`);
  assert.ok(fractional > seen.size / 2, `${fractional} readings with a sub-millisecond part`);
  const drift = Number(ns(clock.now()) / 1_000_000n) - Date.now();
  assert.ok(Math.abs(drift) <= 2, `${drift} ms from Date.now()`);
});
