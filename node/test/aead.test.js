// tether:streams/aead on node:crypto: the RFC 9001 appendix A.5 vector
// (ChaCha20-Poly1305 short header packet), forged tags and the bounds.

import { test } from "node:test";
import assert from "node:assert/strict";
import { aeadImports } from "../src/aead.js";

const hex = (s) => Uint8Array.from(Buffer.from(s, "hex"));
const { PacketKey } = aeadImports({ limits: { maxAeadKeys: 3 } });

function nonce() {
  const iv = hex("e0459b3474bdd0e44a41c144");
  const pn = 654360564n;
  for (let i = 0; i < 8; i++) iv[11 - i] ^= Number((pn >> BigInt(8 * i)) & 0xffn);
  return iv;
}

test("RFC 9001 A.5 ChaCha20-Poly1305 seals byte for byte and opens back", () => {
  const key = PacketKey.create("chacha20-poly1305", hex("c6d98ff3441c3fe1b2182094f69caa2ed4b716b65488960a7a984979fb23e1c8"));
  const sealed = key.seal(nonce(), hex("4200bff4"), hex("01"));
  assert.equal(Buffer.from(sealed).toString("hex"), "655e5cd55c41f69080575d7999c25a5bfb");
  assert.deepEqual([...key.open(nonce(), hex("4200bff4"), sealed)], [1]);
  const forged = Uint8Array.from(sealed);
  forged[forged.length - 1] ^= 1;
  assert.throws(() => key.open(nonce(), hex("4200bff4"), forged), (e) => e.tag === "authentication-failed");
  assert.throws(() => key.open(nonce(), hex("4200bff4"), new Uint8Array(3)), (e) => e.tag === "authentication-failed");
  key[Symbol.dispose]();
});

test("bounds are errors: key length, nonce length, size, live keys", () => {
  assert.throws(() => PacketKey.create("aes-128-gcm", new Uint8Array(32)), (e) => e.tag === "invalid-key-length" && e.val === 16);
  const keys = [0, 1, 2].map(() => PacketKey.create("aes-256-gcm", new Uint8Array(32)));
  assert.throws(() => PacketKey.create("aes-256-gcm", new Uint8Array(32)), (e) => e.tag === "too-many-keys" && e.val === 3);
  assert.throws(() => keys[0].seal(new Uint8Array(8), new Uint8Array(0), new Uint8Array(1)), (e) => e.tag === "invalid-nonce-length");
  assert.throws(() => keys[0].seal(new Uint8Array(12), new Uint8Array(0), new Uint8Array(65537)), (e) => e.tag === "too-large");
  keys[0][Symbol.dispose]();
  const again = PacketKey.create("aes-128-gcm", new Uint8Array(16));
  const sealed = again.seal(new Uint8Array(12), new Uint8Array(4), new Uint8Array(100));
  assert.equal(sealed.length, 116);
  assert.equal(again.open(new Uint8Array(12), new Uint8Array(4), sealed).length, 100);
});
