// tether:streams/readiness on Node: `readiness_set_entries` bounds a
// guest's registrations in all its readiness sets together, and every way
// a registration ends gives its place back (the red team of 2026-12-02
// found the bound per set only: 40 sets held 40 times the limit).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readinessImports } from "../src/readiness.js";
import { Signal, dropRegistrations } from "../src/io.js";

/** A resource that can be registered for `accept`, never ready. */
const listener = () => ({ signal: new Signal(), acceptable: () => false, dropped: false });

test("registrations are bounded across all of a guest's sets", () => {
  const { ReadinessSet } = readinessImports({ limits: { readinessSetEntries: 4 } });
  const [a, b] = [new ReadinessSet(), new ReadinessSet()];
  const l = listener();
  for (let key = 0; key < 2; key++) a.registerListener(l, "accept", key);
  for (let key = 0; key < 2; key++) b.registerListener(l, "accept", key);
  const full = (set, key) =>
    assert.throws(
      () => set.registerListener(l, "accept", key),
      (e) => e.tag === "invalid-argument" && /readiness_set_entries/.test(e.val),
    );
  full(a, 9);
  full(new ReadinessSet(), 0);
  // Replacing a registration takes no new place.
  a.registerListener(l, "accept", 0);
  // A deregistration gives one place back.
  assert.equal(a.deregister(0n, "accept"), true);
  a.registerListener(l, "accept", 7);
  full(b, 9);
  // A dropped set gives its places back.
  a[Symbol.dispose]();
  b.registerListener(l, "accept", 2);
  b.registerListener(l, "accept", 3);
  full(b, 9);
  // A dropped resource gives its places back at once.
  l.dropped = true;
  dropRegistrations(l);
  assert.equal(b.len(), 0);
  const c = new ReadinessSet();
  for (let key = 0; key < 4; key++) c.registerListener(listener(), "accept", key);
  full(c, 9);
});
