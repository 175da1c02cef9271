// Name resolution under the policy: resolve first, then decide on every
// address the socket could really reach, and dial exactly the addresses
// that passed (no second resolution). Mirrors host/src/net.rs.

import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
import { networkInterfaces } from "node:os";
import { parseHost, fmtHost, fmtIp } from "./policy.js";
import { E, fromNodeError } from "./config.js";

/** Splits `host:port` (IPv6 in brackets); throws `invalid-url`. */
export function splitHostPort(address) {
  const i = address.lastIndexOf(":");
  if (i <= 0) throw E.invalidUrl(`${address}: expected HOST:PORT`);
  const host = address.slice(0, i);
  const portText = address.slice(i + 1);
  if (!/^[0-9]{1,5}$/.test(portText) || Number(portText) > 65535) throw E.invalidUrl(`${address}: bad port`);
  if (host.includes(":") && !host.startsWith("[")) throw E.invalidUrl(`${address}: put an IPv6 address in brackets`);
  return { host, port: Number(portText) };
}

/** How long `localAddresses` reuses what it read, ms. */
const LOCAL_ADDRESSES_MAX_AGE_MS = 1000;
let localCache = { at: -Infinity, list: [] };

/**
 * This machine's interface addresses, which the policy treats as the local
 * host (a connect to the host's own public address reaches services bound
 * to 0.0.0.0 like 127.0.0.1 does). Read again at a decision once the last
 * read is older than 1 s; no timer. Mirrors `net::local_addresses`.
 */
export function localAddresses() {
  const now = performance.now();
  if (now - localCache.at < LOCAL_ADDRESSES_MAX_AGE_MS) return localCache.list;
  let list = localCache.list;
  try {
    list = Object.values(networkInterfaces())
      .flat()
      .map((i) => parseHost(i.address.includes(":") ? `[${i.address.split("%")[0]}]` : i.address).ip);
  } catch {
    // Keep the last list.
  }
  localCache = { at: now, list };
  return list;
}

/**
 * The policy's verdict on `hostText:port` before DNS. Returns the parsed
 * host and the name check; throws `invalid-url` or `denied` at once.
 */
export function checkDestination(policy, hostText, port) {
  let host;
  try {
    host = parseHost(hostText);
  } catch (e) {
    throw E.invalidUrl(e.message);
  }
  try {
    return { host, check: policy.checkName(host, port, host.ip ? localAddresses() : []) };
  } catch (why) {
    throw E.denied(why);
  }
}

/**
 * Name lookups in flight at once for one host (getaddrinfo on libuv's
 * thread pool, which `bin/pool-size.js` sizes to leave threads for the
 * rest). A lookup keeps its place until getaddrinfo returns, even after
 * its connect timed out: the thread is held until then. Lookups past the
 * bound wait in order; one whose connect ended meanwhile gives its turn
 * away without looking up. Mirrors host/src/net.rs `resolve_in_place`
 * (`max_dns_lookups`, `max_dns_lookups_per_guest`: a Node host runs one
 * guest, so the smaller of the two applies). Without it, 16 lookups a
 * silent resolver never answers filled libuv's 4 threads, and every other
 * name failed with `timeout` for about 80 s (the red team of 2026-12-03,
 * third round).
 */
export class LookupPlaces {
  /** @param {number} max lookups in flight at once (>= 1) */
  constructor(max) {
    this.max = Math.max(1, max);
    this.used = 0;
    this.waiting = [];
  }

  /**
   * Runs `lookup()` in a place, waiting for one if all are taken, at most
   * `waitMs` (the connect's time left): a waiter whose connect timed out
   * leaves the queue then, as the Rust host's does, instead of taking a
   * place later and starting a lookup nobody waits for (the red team of
   * 2026-12-03, fourth round: 1,000 such waiters made Node send 92-156
   * resolver queries where Rust sent 64, and a later name waited 8.6 s
   * after the attack). When the turn comes and `gone()` is true, the place
   * passes on. Either way `undefined` is returned without a lookup.
   */
  async run(lookup, gone = () => false, waitMs = Infinity) {
    if (this.used < this.max) {
      this.used++;
    } else {
      const got = await new Promise((resolve) => {
        const waiter = { resolve, timer: null };
        if (Number.isFinite(waitMs)) {
          waiter.timer = setTimeout(() => {
            const i = this.waiting.indexOf(waiter);
            if (i >= 0) this.waiting.splice(i, 1);
            resolve(false);
          }, Math.max(0, waitMs));
          waiter.timer.unref?.();
        }
        this.waiting.push(waiter);
      });
      if (!got) return undefined;
    }
    // Here the place is ours (taken, or handed over by `release`).
    if (gone()) {
      this.release();
      return undefined;
    }
    try {
      return await lookup();
    } finally {
      this.release();
    }
  }

  release() {
    const next = this.waiting.shift();
    if (next) {
      clearTimeout(next.timer);
      next.resolve(true);
    } else {
      this.used--;
    }
  }
}

/** The host's lookup places, made at first use from its limits. */
export function lookupPlaces(host) {
  return (host.lookupPlaces ??= new LookupPlaces(
    Math.min(host.limits.maxDnsLookups, host.limits.maxDnsLookupsPerGuest),
  ));
}

/**
 * Resolves and filters: the [{ip, port, text}] the guest may dial, in
 * order, looking names up in one of `places` ([LookupPlaces]), waiting
 * for one at most `waitMs`. `gone()` says the connect ended while the
 * lookup waited for a place (then, or when the wait ran out, the result
 * is an empty list). Rejects with `dns-failure` or `denied`.
 */
export async function resolveAllowed(policy, host, check, port, places, gone, waitMs = Infinity) {
  let ips;
  if (host.ip) {
    ips = [host.ip];
  } else {
    let found;
    try {
      found = await places.run(() => lookup(host.name, { all: true, verbatim: true }), gone, waitMs);
    } catch (e) {
      throw fromNodeError(e);
    }
    if (found === undefined) return [];
    ips = found.map((f) => parseHost(f.address).ip);
  }
  let kept;
  try {
    kept = policy.checkResolved(host, check, ips.map((ip) => ({ ip, port })), localAddresses());
  } catch (why) {
    throw E.denied(why);
  }
  return kept.map((a) => ({ ...a, text: fmtIp(a.ip), family: a.ip.v6 ? 6 : 4 }));
}

/** A `lookup` for node:net / http that answers with the pre-checked address only. */
export function pinnedLookup(addr) {
  return (_name, opts, cb) => {
    if (typeof opts === "function") cb = opts;
    if (opts && opts.all) cb(null, [{ address: addr.text, family: addr.family }]);
    else cb(null, addr.text, addr.family);
  };
}

/** `ip:port` of a node socket's remote or local end. */
export function sockAddr(address, port) {
  if (!address) return "";
  return isIP(address) === 6 ? `[${address}]:${port}` : `${address}:${port}`;
}

export { fmtHost };
