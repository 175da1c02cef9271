// The guest's thread: builds the host, instantiates the transpiled guest
// and runs `wasi:cli/run`. The main thread (bin/tether-node.mjs) watches
// the shared `beat` array to stop a runaway guest.
//
// beat[0]: 1 while the guest runs, 0 while it waits in the host;
// beat[1]: counts the guest's returns from waiting.

import { workerData, parentPort } from "node:worker_threads";
import { Host, GuestExit } from "./host.js";
import { loadGuest } from "./transpile.js";

const { dir, policy, limits, caFiles, args, beat: shared } = workerData;
const beat = new Int32Array(shared);
const host = new Host({ policy, limits, caFiles, args });
let memories = [];

/**
 * Wraps an import that may suspend the guest (poll, block, take-ready) so
 * the watchdog sees the guest return to the host and come back. Other
 * host calls are not counted: a guest that loops on them without ever
 * waiting is stopped as a runaway (the Rust host counts every call).
 */
function watched(fn) {
  return function (...a) {
    Atomics.store(beat, 0, 0);
    const r = fn.apply(this, a);
    if (r instanceof Promise) {
      return r.finally(() => {
        Atomics.add(beat, 1, 1);
        Atomics.store(beat, 0, 1);
      });
    }
    Atomics.add(beat, 1, 1);
    Atomics.store(beat, 0, 1);
    return r;
  };
}

async function main() {
  const imports = host.imports();
  const poll = imports["wasi:io/poll"];
  poll.poll = watched(poll.poll);
  const block = poll.Pollable.prototype.block;
  poll.Pollable.prototype.block = watched(block);
  const sets = Object.getPrototypeOf(imports["tether:streams/readiness"].ReadinessSet.prototype);
  sets.takeReady = watched(sets.takeReady);
  const { instantiate, getCoreModule } = await loadGuest(dir, limits.maxMemoryBytes);
  const instantiateCore = async (module, imp) => {
    const instance = await WebAssembly.instantiate(module, imp);
    for (const v of Object.values(instance.exports)) if (v instanceof WebAssembly.Memory) memories.push(v);
    return instance;
  };
  let result = { ok: true };
  try {
    const guest = await instantiate(getCoreModule, imports, instantiateCore);
    Atomics.store(beat, 0, 1);
    const run = guest["wasi:cli/run@0.2.0"]?.run ?? guest.run.run;
    await run();
  } catch (e) {
    result = classify(e);
  }
  Atomics.store(beat, 0, 0);
  await host.shutdown(result.ok || result.exit === 0 ? null : wireReason(result));
  parentPort.postMessage({ result, peakBuffered: host.stats.peakBuffered });
}

/**
 * The 1011 close reason peers get when the run failed: a fixed phrase per
 * kind of failure, as host/src/runner.rs sends; the details (trap text,
 * a stack with host paths) stay in the outcome, never on the wire.
 */
function wireReason(r) {
  const phrases = {
    memory: "guest stopped: memory limit",
    trap: "guest trapped",
    instantiate: "guest failed to start",
  };
  return (r.kind && phrases[r.kind]) || "guest exited with an error";
}

/** Turns what the run threw into an outcome like host/src/runner.rs `RunError`. */
function classify(e) {
  if (e instanceof GuestExit) return e.code === 0 ? { ok: true } : { ok: false, exit: e.code };
  // `run` returned `err` (a Rust guest's `main` returning an error).
  if (e && Object.prototype.hasOwnProperty.call(e, "payload")) return { ok: false, exit: 1 };
  const max = limits.maxMemoryBytes;
  // memory.grow failed against the cap (capMemory) and the guest's
  // allocator aborted: the memory stands within a growth step of the cap.
  const near = memories.some((m) => m.buffer.byteLength + (4 << 20) >= max);
  if (e instanceof WebAssembly.RuntimeError && near) {
    return { ok: false, kind: "memory", error: `guest stopped: memory limit of ${max} bytes exceeded` };
  }
  if (e instanceof WebAssembly.RuntimeError) return { ok: false, kind: "trap", error: `guest trapped: ${e.message}` };
  if (e instanceof WebAssembly.LinkError || e instanceof WebAssembly.CompileError) {
    return { ok: false, kind: "instantiate", error: `cannot instantiate guest: ${e.message}` };
  }
  return { ok: false, kind: "trap", error: `guest trapped: ${e?.stack ?? e}` };
}

main().catch((e) => {
  parentPort.postMessage({ result: { ok: false, kind: "host", error: `host failed: ${e?.stack ?? e}` }, peakBuffered: host.stats.peakBuffered });
});
