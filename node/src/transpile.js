// Transpiles a guest component with jco once per content hash: the JS
// bindings and core modules go to `<cache>/<sha256>/`, and a second run of
// the same wasm only loads them.

import { createHash } from "node:crypto";
import { mkdir, readFile, rename, rm, stat, writeFile } from "node:fs/promises";
import { join } from "node:path";

/** jco's options: JSPI, with the waits and the binds suspending. */
const ASYNC_IMPORTS = [
  "wasi:io/poll@0.2.12#poll",
  "wasi:io/poll@0.2.12#[method]pollable.block",
  "wasi:io/streams@0.2.12#[method]input-stream.blocking-read",
  "wasi:io/streams@0.2.12#[method]input-stream.blocking-skip",
  "wasi:io/streams@0.2.12#[method]output-stream.blocking-write-and-flush",
  "wasi:io/streams@0.2.12#[method]output-stream.blocking-flush",
  "wasi:io/streams@0.2.12#[method]output-stream.blocking-write-zeroes-and-flush",
  "wasi:io/streams@0.2.12#[method]output-stream.blocking-splice",
  "tether:streams/websocket@0.1.0#listen",
  "tether:streams/tcp@0.1.0#listen",
  "tether:streams/readiness@0.1.0#[method]readiness-set.take-ready",
];
const ASYNC_EXPORTS = ["wasi:cli/run@0.2.0#run"];

/** Bumped when the options above change, so old cache entries are not reused. */
const CACHE_VERSION = "3";

/**
 * Returns the directory holding `guest.js` and its core modules for
 * `wasm` (bytes), transpiling on a cache miss.
 */
export async function transpileCached(wasm, cacheDir) {
  const hash = createHash("sha256").update(CACHE_VERSION).update(wasm).digest("hex").slice(0, 32);
  const dir = join(cacheDir, hash);
  try {
    await stat(join(dir, "done"));
    return dir;
  } catch {}
  const { transpile } = await import("@bytecodealliance/jco");
  const { files } = await transpile(wasm, {
    name: "guest",
    instantiation: "async",
    asyncMode: "jspi",
    asyncImports: ASYNC_IMPORTS,
    asyncExports: ASYNC_EXPORTS,
    noTypescript: true,
    quiet: true,
  });
  // jco's debug logger reads process.env.JCO_DEBUG on every call, several
  // times per host call (an environment lookup each): decide once, at
  // load. Measured on the echo guest: round trip p50 97-145 us instead of
  // 117-219 us, interleaved runs on a loaded machine.
  const js = Buffer.from(files["guest.js"]).toString("utf8");
  const slow = `  const _debugLog = (...args) => {
    if (!globalThis?.process?.env?.JCO_DEBUG) { return; }`;
  if (js.includes(slow)) {
    files["guest.js"] = Buffer.from(
      js.replace(
        slow,
        `  const _debugLog = globalThis?.process?.env?.JCO_DEBUG ? (...args) => console.debug(...args) : () => {};
  const _debugLogUnused = (...args) => {
    if (!globalThis?.process?.env?.JCO_DEBUG) { return; }`,
      ),
    );
  }
  const tmp = `${dir}.tmp${process.pid}`;
  await rm(tmp, { recursive: true, force: true });
  await mkdir(tmp, { recursive: true });
  for (const [name, bytes] of Object.entries(files)) {
    const path = join(tmp, name);
    await mkdir(join(path, ".."), { recursive: true });
    await writeFile(path, bytes);
  }
  await writeFile(join(tmp, "done"), "");
  try {
    await rename(tmp, dir);
  } catch {
    // Another run won the race: its copy is as good as ours.
    await rm(tmp, { recursive: true, force: true });
  }
  return dir;
}

/** Reads a LEB128 u32 at `pos`: [value, next position]. */
function leb(bytes, pos) {
  let v = 0, shift = 0, b;
  do {
    b = bytes[pos++];
    v += (b & 0x7f) * 2 ** shift;
    shift += 7;
  } while (b & 0x80);
  return [v, pos];
}

function encodeLeb(v) {
  const out = [];
  do {
    let b = v % 128;
    v = Math.floor(v / 128);
    if (v > 0) b |= 0x80;
    out.push(b);
  } while (v > 0);
  return out;
}

/**
 * Sets the maximum of every memory a core module defines to `maxBytes`
 * (rounded down to 64 KiB pages), so `memory.grow` past the host's limit
 * fails in the guest as it does under wasmtime's store limiter.
 */
export function capMemory(bytes, maxBytes) {
  const maxPages = Math.floor(maxBytes / 65536);
  let pos = 8;
  while (pos < bytes.length) {
    const id = bytes[pos];
    const [size, body] = leb(bytes, pos + 1);
    if (id === 5) {
      let p = body;
      const [count, p1] = leb(bytes, p);
      p = p1;
      const out = encodeLeb(count);
      for (let i = 0; i < count; i++) {
        const flags = bytes[p++];
        const [min, p2] = leb(bytes, p);
        p = p2;
        let max = maxPages;
        if (flags & 1) {
          const [m, p3] = leb(bytes, p);
          p = p3;
          max = Math.min(m, maxPages);
        }
        out.push(flags | 1, ...encodeLeb(min), ...encodeLeb(Math.max(min, max)));
      }
      const section = [5, ...encodeLeb(out.length), ...out];
      const result = new Uint8Array(bytes.length - (body + size - pos) + section.length);
      result.set(bytes.subarray(0, pos), 0);
      result.set(section, pos);
      result.set(bytes.subarray(body + size), pos + section.length);
      return result;
    }
    pos = body + size;
  }
  return bytes;
}

/** Loads the transpiled guest: its `instantiate` and a core-module loader that caps memories. */
export async function loadGuest(dir, maxMemoryBytes) {
  const mod = await import(join(dir, "guest.js"));
  const getCoreModule = async (name) => {
    const bytes = new Uint8Array(await readFile(join(dir, name)));
    return WebAssembly.compile(capMemory(bytes, maxMemoryBytes));
  };
  return { instantiate: mod.instantiate, getCoreModule };
}
