// `tether:streams/aead` (on the h/aead branch's WIT): packet keys held by
// the host, sealing and opening with node:crypto (OpenSSL: AES-NI, and
// assembly ChaCha20-Poly1305). The same bounds and errors as the Rust
// host: 12-byte nonces, 16-byte tags, at most 65,536 bytes of payload or
// associated data per call, at most `maxAeadKeys` live keys per instance.

import { createCipheriv, createDecipheriv } from "node:crypto";

const KEY_BYTES = { "chacha20-poly1305": 32, "aes-128-gcm": 16, "aes-256-gcm": 32 };
const MAX_PER_CALL = 65536;
const TAG = 16;

const fail = (tag, val) => ({ tag, val });

function checkCall(nonce, aad, data) {
  if (nonce.length !== 12) throw fail("invalid-nonce-length", 12);
  if (aad.length > MAX_PER_CALL || data.length > MAX_PER_CALL) throw fail("too-large", MAX_PER_CALL);
}

/** The `tether:streams/aead` import object for one host. */
export function aeadImports(host) {
  let live = 0;
  class PacketKey {
    static create(algorithm, key) {
      const need = KEY_BYTES[algorithm];
      if (key.length !== need) throw fail("invalid-key-length", need);
      if (live >= host.limits.maxAeadKeys) throw fail("too-many-keys", host.limits.maxAeadKeys);
      live++;
      const k = new PacketKey();
      k.alg = algorithm;
      k.key = Buffer.from(key);
      key.fill(0);
      return k;
    }
    algorithm() {
      return this.alg;
    }
    seal(nonce, aad, payload) {
      checkCall(nonce, aad, payload);
      const c = createCipheriv(this.alg, this.key, nonce, { authTagLength: TAG });
      c.setAAD(aad, { plaintextLength: payload.length });
      const body = c.update(payload);
      c.final();
      const out = new Uint8Array(body.length + TAG);
      out.set(body, 0);
      out.set(c.getAuthTag(), body.length);
      return out;
    }
    open(nonce, aad, sealed) {
      checkCall(nonce, aad, sealed);
      if (sealed.length < TAG) throw fail("authentication-failed");
      const n = sealed.length - TAG;
      const d = createDecipheriv(this.alg, this.key, nonce, { authTagLength: TAG });
      d.setAAD(aad, { plaintextLength: n });
      d.setAuthTag(sealed.subarray(n));
      const body = d.update(sealed.subarray(0, n));
      try {
        d.final();
      } catch {
        throw fail("authentication-failed");
      }
      return body;
    }
    [Symbol.dispose]() {
      if (this.key) {
        this.key.fill(0);
        this.key = null;
        live--;
      }
    }
  }
  return { PacketKey };
}
