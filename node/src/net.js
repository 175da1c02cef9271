// Name resolution under the policy: resolve first, then decide on every
// address the socket could really reach, and dial exactly the addresses
// that passed (no second resolution). Mirrors host/src/net.rs.

import { lookup } from "node:dns/promises";
import { isIP } from "node:net";
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
    return { host, check: policy.checkName(host, port) };
  } catch (why) {
    throw E.denied(why);
  }
}

/**
 * Resolves and filters: the [{ip, port, text}] the guest may dial, in
 * order. Rejects with `dns-failure` or `denied`.
 */
export async function resolveAllowed(policy, host, check, port) {
  let ips;
  if (host.ip) {
    ips = [host.ip];
  } else {
    let found;
    try {
      found = await lookup(host.name, { all: true, verbatim: true });
    } catch (e) {
      throw fromNodeError(e);
    }
    ips = found.map((f) => parseHost(f.address).ip);
  }
  let kept;
  try {
    kept = policy.checkResolved(host, check, ips.map((ip) => ({ ip, port })));
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
