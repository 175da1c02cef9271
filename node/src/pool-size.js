// Sizes libuv's thread pool before anything uses it (import this module
// first). Name lookups (getaddrinfo) run on that pool and a lookup a
// silent resolver never answers holds its thread until the resolver's own
// timeout, so the pool gets the host's lookup places (`LookupPlaces` in
// net.js: the smaller of --max-dns-lookups and
// --max-dns-lookups-per-guest, read from the command line here) on top of
// libuv's default 4 threads for files and crypto. A UV_THREADPOOL_SIZE
// set by the user is kept.

import { DEFAULT_LIMITS } from "./config.js";

/** libuv's default pool size, left for everything but name lookups. */
const OTHER_WORK_THREADS = 4;

/** Host options only: what follows `--` belongs to the guest. */
const end = process.argv.indexOf("--");
const hostArgs = end >= 0 ? process.argv.slice(0, end) : process.argv;

function flag(name, fallback) {
  const i = hostArgs.indexOf(name);
  const n = i >= 0 ? Number(hostArgs[i + 1]) : NaN;
  return Number.isInteger(n) && n > 0 ? n : fallback;
}

const places = Math.min(
  flag("--max-dns-lookups", DEFAULT_LIMITS.maxDnsLookups),
  flag("--max-dns-lookups-per-guest", DEFAULT_LIMITS.maxDnsLookupsPerGuest),
);
// libuv caps the pool at 1024 threads.
process.env.UV_THREADPOOL_SIZE ||= String(Math.min(1024, places + OTHER_WORK_THREADS));
