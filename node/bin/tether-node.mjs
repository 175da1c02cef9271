#!/usr/bin/env node
// tether-node run GUEST.wasm [HOST OPTIONS] [-- GUEST ARGS]
//
// Runs an unchanged Tether guest component on Node.js through jco (JSPI),
// under the same policy flags, limits and exit codes as `tether run`:
// the guest's own exit status, or 1 with `tether: <error>` on stderr when
// it trapped, ran out of memory, ran away or could not be instantiated.
// Needs Node 24 (`WebAssembly.Suspending`); scripts/setup installs it.

// First: sizes libuv's thread pool before anything uses it.
import "../src/pool-size.js";
import { readFile, writeFile } from "node:fs/promises";
import { Worker } from "node:worker_threads";
import { setFlagsFromString } from "node:v8";
import { basename, dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { transpileCached } from "../src/transpile.js";
import { DEFAULT_LIMITS } from "../src/config.js";
import { Rule } from "../src/policy.js";

const here = dirname(fileURLToPath(import.meta.url));

const USAGE = `usage: tether-node run GUEST.wasm [OPTIONS] [-- GUEST ARGS]

options (as \`tether run\`):
  --allow RULE, --deny RULE, --listen RULE   policy rules (HOST:PORT), repeatable
  --ca-file PEM                              trust this CA for wss:// (repeatable)
  --max-memory-mib N                         guest linear memory cap (default 256)
  --max-message-bytes N, --inbound-buffer-bytes N, --outbound-buffer-bytes N
  --max-assembling-bytes N                   host-wide unfinished/untaken inbound bytes (default 256 MiB)
  --max-dns-lookups N, --max-dns-lookups-per-guest N
                                             name lookups in flight (defaults 64 and 16; the smaller applies: one guest)
  --max-batch-messages N, --readiness-set-entries N, --max-handshakes-per-listener N
  --max-connections-per-source N             connections one source (IPv4 address, IPv6 /64) holds over every
                                             listener, WebSocket and TCP (default 256, loopback clients not
                                             counted; given, loopback clients count too)
  --max-connections N                        connections the host holds over every listener, WebSocket and TCP,
                                             whatever their source, loopback included (default three quarters
                                             of the file descriptor limit)
  --connect-timeout-ms N, --handshake-timeout-ms N, --linger-timeout-ms N
  --max-run-ms N                             runaway limit (default 10000)
  --max-aead-keys N                          live tether:streams/aead packet keys (default 4096)
  --cache DIR                                transpile cache (default target/node-cache)
  --report FILE                              write {"outcome", "error", "peak_buffered"} as JSON`;

const NUMERIC = {
  "--max-message-bytes": "maxMessageBytes",
  "--inbound-buffer-bytes": "inboundBufferBytes",
  "--outbound-buffer-bytes": "outboundBufferBytes",
  "--max-assembling-bytes": "maxAssemblingBytes",
  "--max-dns-lookups": "maxDnsLookups",
  "--max-dns-lookups-per-guest": "maxDnsLookupsPerGuest",
  "--max-batch-messages": "maxBatchMessages",
  "--readiness-set-entries": "readinessSetEntries",
  "--max-handshakes-per-listener": "maxHandshakesPerListener",
  "--connect-timeout-ms": "connectTimeoutMs",
  "--handshake-timeout-ms": "handshakeTimeoutMs",
  "--linger-timeout-ms": "lingerTimeoutMs",
  "--max-run-ms": "maxRunWithoutYieldMs",
  "--max-aead-keys": "maxAeadKeys",
};

function fail(msg) {
  process.stderr.write(`tether: ${msg}\n`);
  process.exit(2);
}

function parseArgs(argv) {
  if (argv[0] !== "run" || !argv[1]) fail(USAGE);
  const opts = {
    guest: argv[1],
    policy: { allow: [], deny: [], listen: [] },
    limits: { ...DEFAULT_LIMITS },
    caFiles: [],
    cache: resolve(here, "../../target/node-cache"),
    report: null,
    args: [],
  };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    if (a === "--") {
      opts.args = argv.slice(i + 1);
      break;
    }
    const val = () => {
      const v = argv[++i];
      if (v === undefined) fail(`${a} needs a value`);
      return v;
    };
    if (a === "--allow" || a === "--deny" || a === "--listen") {
      const rule = val();
      try {
        new Rule(rule);
      } catch (e) {
        fail(e.message);
      }
      opts.policy[a.slice(2)].push(rule);
    } else if (a === "--ca-file") opts.caFiles.push(val());
    else if (a === "--max-memory-mib") opts.limits.maxMemoryBytes = Number(val()) * (1 << 20);
    else if (a === "--cache") opts.cache = resolve(val());
    else if (a === "--report") opts.report = val();
    else if (a === "--max-connections-per-source") {
      // As `tether run`: given, the bound applies to loopback clients too.
      const n = Number(val());
      if (!Number.isInteger(n) || n < 1 || n > 1 << 20) fail(`${a}: expected an integer from 1 to 1048576`);
      opts.limits.maxConnectionsPerSource = n;
      opts.limits.countLoopbackConnections = true;
    } else if (a === "--max-connections") {
      const n = Number(val());
      if (!Number.isInteger(n) || n < 1 || n > 1 << 24) fail(`${a}: expected an integer from 1 to 16777216`);
      opts.limits.maxConnections = n;
    } else if (NUMERIC[a]) {
      const n = Number(val());
      if (!Number.isInteger(n) || n < 1) fail(`${a}: expected a positive integer`);
      opts.limits[NUMERIC[a]] = n;
    } else if (a === "--help" || a === "-h") {
      process.stdout.write(`${USAGE}\n`);
      process.exit(0);
    } else fail(`unknown option ${a}\n${USAGE}`);
  }
  return opts;
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  if (typeof WebAssembly.Suspending !== "function") setFlagsFromString("--experimental-wasm-jspi");
  const wasm = await readFile(opts.guest).catch((e) => fail(`reading ${opts.guest}: ${e.message}`));
  let dir;
  try {
    dir = await transpileCached(wasm, opts.cache);
  } catch (e) {
    fail(`transpiling ${opts.guest}: ${e.message ?? e}`);
  }
  const beat = new SharedArrayBuffer(8);
  const worker = new Worker(join(here, "../src/worker.js"), {
    workerData: {
      dir,
      policy: opts.policy,
      limits: opts.limits,
      caFiles: opts.caFiles,
      args: [basename(opts.guest, ".wasm"), ...opts.args],
      beat,
    },
    stdout: false,
    stderr: false,
  });
  const report = await watch(worker, new Int32Array(beat), opts.limits.maxRunWithoutYieldMs);
  if (opts.report) {
    const r = report.result;
    await writeFile(
      opts.report,
      JSON.stringify({
        outcome: r.ok ? "ok" : r.kind ?? "exit",
        exit: r.exit ?? null,
        error: r.error ?? null,
        peak_buffered: report.peakBuffered ?? 0,
      }),
    );
  }
  const r = report.result;
  if (r.ok) process.exit(0);
  if (r.exit !== undefined) process.exit(Math.max(0, Math.min(255, r.exit)));
  process.stderr.write(`tether: ${r.error}\n`);
  process.exit(1);
}

/**
 * Waits for the worker's report, stopping it when the guest runs longer
 * than `maxRunMs` without waiting in the host (the check runs every
 * quarter of the limit, so a runaway is stopped within 1.25x of it).
 */
function watch(worker, beat, maxRunMs) {
  return new Promise((resolvePromise) => {
    let settled = false;
    const finish = (report) => {
      if (settled) return;
      settled = true;
      clearInterval(timer);
      resolvePromise(report);
    };
    let lastSeq = -1;
    let runningSince = null;
    const step = Math.max(5, Math.floor(maxRunMs / 4));
    const timer = setInterval(() => {
      const running = Atomics.load(beat, 0) === 1;
      const seq = Atomics.load(beat, 1);
      const now = Date.now();
      if (!running) {
        runningSince = null;
        return;
      }
      if (seq !== lastSeq || runningSince === null) {
        lastSeq = seq;
        runningSince = now;
        return;
      }
      if (now - runningSince >= maxRunMs) {
        worker.terminate();
        finish({
          result: {
            ok: false,
            kind: "runaway",
            error: `guest stopped: it ran for more than ${maxRunMs}ms without returning to the host (runaway loop?)`,
          },
          peakBuffered: 0,
        });
      }
    }, step);
    timer.unref();
    worker.on("message", (m) => finish(m));
    worker.on("error", (e) => finish({ result: { ok: false, kind: "host", error: `host failed: ${e?.stack ?? e}` } }));
    worker.on("exit", (code) => finish({ result: code === 0 ? { ok: true } : { ok: false, exit: code } }));
  });
}

main();
