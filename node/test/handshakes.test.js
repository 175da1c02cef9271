// Handshake places of a Node host listener (parity with
// host/tests/integration/ws_hostile.rs
// `silent_handshakes_give_their_places_to_new_clients_at_the_bound`):
// clients that connect and never finish their request head used to hold
// every `maxHandshakesPerListener` place until the handshake timeout, so
// every other client got 503. At the bound a new connection now takes the
// place of the oldest silent one 1 s after its accept; younger silent
// ones keep theirs and the new connection gets 503.

import { test } from "node:test";
import assert from "node:assert/strict";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { sourceOf } from "../src/sources.js";
import { HANDSHAKE_EVICT_AFTER_MS } from "../src/config.js";
import { upgradeHead } from "./upgrade-head.js";
import { client, until, sleep } from "./raw-client.js";

const CAP = 4;


test("silent handshakes give their places to new clients at the bound", async () => {
  const host = new Host({
    policy: { listen: ["127.0.0.1:*"] },
    limits: { maxHandshakesPerListener: CAP, handshakeTimeoutMs: 30_000 },
  });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  const addr = listener.localAddress();
  // CAP silent clients, half of them with half a request head.
  const silent = [];
  const others = [];
  try {
    await run(addr, listener, silent, others);
  } finally {
    for (const c of [...silent, ...others]) c.sock.destroy();
    listener[Symbol.dispose]();
  }
});

async function run(addr, listener, silent, others) {
  for (let i = 0; i < CAP; i++) {
    silent.push(client(addr, i % 2 ? "GET / HTTP/1.1\r\nX-Slow: " : null));
    await sleep(20);
  }
  await sleep(100);
  // Younger than the grace: a new client is refused.
  const early = client(addr, upgradeHead(addr));
  others.push(early);
  await until("the early client's 503", () => early.got.closed);
  assert.match(early.got.bytes.toString(), /^HTTP\/1\.1 503 /);
  assert.ok(silent.every((c) => !c.got.closed), "a young silent client lost its place");
  await sleep(HANDSHAKE_EVICT_AFTER_MS + 100);
  // Past the grace: good clients upgrade; one silent client gave its place up.
  for (let i = 0; i < 3; i++) {
    const good = client(addr, upgradeHead(addr));
    others.push(good);
    await until(`good client ${i}'s 101`, () => good.got.bytes.includes("\r\n\r\n"));
    assert.match(good.got.bytes.toString(), /^HTTP\/1\.1 101 /);
    const stream = listener.accept();
    assert.ok(stream, "the upgraded stream is queued for the guest");
    good.sock.destroy();
  }
  await sleep(100);
  assert.deepEqual(
    silent.map((c) => c.got.closed),
    [true, false, false, false],
    "the oldest silent client gave its place to the first good one; the next ones found it free",
  );
}

// Parity with ws_hostile.rs `one_source_holds_at_most_its_share_of_the_handshake_places`:
// an attacker that reopens faster than the grace keeps all its places
// young; from one address it now holds at most `maxHandshakesPerSource`,
// its connections past that get 503 at once, and a client from another
// address (127.0.0.2) upgrades.
test("one source holds at most its share of the handshake places", async () => {
  const host = new Host({
    policy: { listen: ["127.0.0.1:*"] },
    limits: { maxHandshakesPerListener: 8, maxHandshakesPerSource: 4, handshakeTimeoutMs: 30_000 },
  });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  const addr = listener.localAddress();
  const attacker = [];
  const others = [];
  try {
    for (let i = 0; i < 8; i++) attacker.push(client(addr, null));
    await until("the attacker's connections past its share closed", () =>
      attacker.filter((c) => c.got.closed).length === 4,
    );
    for (const c of attacker.filter((c) => c.got.closed)) {
      assert.match(c.got.bytes.toString(), /^HTTP\/1\.1 503 /);
    }
    for (let i = 0; i < 2; i++) {
      const good = client(addr, upgradeHead(addr), "127.0.0.2");
      others.push(good);
      await until(`the other source's ${i}th 101`, () => good.got.bytes.includes("\r\n\r\n"));
      assert.match(good.got.bytes.toString(), /^HTTP\/1\.1 101 /);
      assert.ok(listener.accept(), "the upgraded stream is queued for the guest");
      good.sock.destroy();
    }
    await sleep(50);
    assert.equal(attacker.filter((c) => !c.got.closed).length, 4, "the attacker's young places stay");
  } finally {
    for (const c of [...attacker, ...others]) c.sock.destroy();
    listener[Symbol.dispose]();
  }
});

test("a source is an IPv4 address or an IPv6 /64", () => {
  assert.equal(sourceOf("10.0.0.1"), "10.0.0.1");
  assert.equal(sourceOf("::ffff:10.0.0.1"), "10.0.0.1");
  assert.equal(sourceOf("2001:db8:1:2:aaaa::1"), sourceOf("2001:db8:1:2:bbbb::2"));
  assert.equal(sourceOf("2001:db8:1:2::1"), "2001:db8:1:2::/64");
  assert.notEqual(sourceOf("2001:db8:1:2::1"), sourceOf("2001:db8:1:3::1"));
  assert.equal(sourceOf("::1"), "0:0:0:0::/64");
  assert.equal(sourceOf("fe80::1%eth0"), "fe80:0:0:0::/64");
});
