// Destination policy: which destinations a guest may dial and where it may
// listen. Deny by default. A port of the Rust crate `tether-policy`
// (policy/src): the same rule grammar, host spellings, address
// equivalents, internal ranges and decisions, so `--allow`, `--deny` and
// `--listen` mean the same on Node as on wasmtime. node/test/policy.test.js
// runs the Rust crate's table of cases against it.
//
// Addresses are { v6: boolean, n: BigInt } (32 or 128 bits).

const MAX_NAME_BYTES = 253;
const MAX_LABEL_BYTES = 63;
const V4_ALL = (1n << 32n) - 1n;
const V6_ALL = (1n << 128n) - 1n;
const MAPPED = 0xffffn << 32n;
const NAT64_PREFIX = 0x0064ff9bn << 96n;

/** An IPv4 address from its 32-bit value. */
export const v4 = (n) => ({ v6: false, n: BigInt(n) });
/** An IPv6 address from its 128-bit value. */
export const v6 = (n) => ({ v6: true, n: BigInt(n) });
const same = (a, b) => a.v6 === b.v6 && a.n === b.n;

/** Formats an address as `127.0.0.1` or `::1` (RFC 5952 compression). */
export function fmtIp(a) {
  if (!a.v6) {
    return [24n, 16n, 8n, 0n].map((s) => String((a.n >> s) & 255n)).join(".");
  }
  const groups = [];
  for (let i = 7; i >= 0; i--) groups.push(Number((a.n >> BigInt(16 * i)) & 0xffffn));
  // IPv4-mapped addresses keep their dotted tail, as Rust prints them.
  if (a.n >> 32n === 0xffffn) return `::ffff:${fmtIp(v4(a.n & V4_ALL))}`;
  let best = -1, bestLen = 1;
  for (let i = 0; i < 8; ) {
    if (groups[i] !== 0) { i++; continue; }
    let j = i;
    while (j < 8 && groups[j] === 0) j++;
    if (j - i > bestLen) { best = i; bestLen = j - i; }
    i = j;
  }
  const hex = (g) => g.map((x) => x.toString(16)).join(":");
  if (best < 0) return hex(groups);
  return `${hex(groups.slice(0, best))}::${hex(groups.slice(best + bestLen))}`;
}

/** `ip:port`, brackets around IPv6. */
export const fmtSock = (a, port) => (a.v6 ? `[${fmtIp(a)}]:${port}` : `${fmtIp(a)}:${port}`);

function parseIpv6(text) {
  if (!/^[0-9a-fA-F:.]+$/.test(text)) return null;
  let tail = [];
  let body = text;
  const lastColon = text.lastIndexOf(":");
  if (text.slice(lastColon + 1).includes(".")) {
    const m = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(text.slice(lastColon + 1));
    if (!m) return null;
    const b = m.slice(1).map(Number);
    if (b.some((x) => x > 255) || m.slice(1).some((x) => x.length > 1 && x[0] === "0")) return null;
    tail = [(b[0] << 8) | b[1], (b[2] << 8) | b[3]];
    body = text[lastColon - 1] === ":" ? text.slice(0, lastColon + 1) : text.slice(0, lastColon);
    if (body === "") return null;
  }
  const parts = body.split("::");
  if (parts.length > 2) return null;
  const group = (s) => (s === "" ? [] : s.split(":"));
  const head = group(parts[0]);
  const rest = parts.length === 2 ? group(parts[1]) : [];
  const all = [...head, ...rest];
  if (all.some((g) => !/^[0-9a-fA-F]{1,4}$/.test(g))) return null;
  const count = all.length + tail.length;
  let groups;
  if (parts.length === 2) {
    if (count > 7) return null;
    groups = [...head, ...Array(8 - count).fill("0"), ...rest].map((g) => parseInt(g, 16));
  } else {
    if (count !== 8) return null;
    groups = all.map((g) => parseInt(g, 16));
  }
  groups = [...groups, ...tail];
  let n = 0n;
  for (const g of groups) n = (n << 16n) | BigInt(g);
  return v6(n);
}

function isNumber(part) {
  if (part !== "" && /^[0-9]+$/.test(part)) return true;
  if (/^0x/i.test(part)) return /^[0-9a-fA-F]*$/.test(part.slice(2));
  return false;
}

function ipv4Part(part) {
  let digits, radix;
  if (/^0x/i.test(part)) { digits = part.slice(2); radix = 16; }
  else if (part.length > 1 && part[0] === "0") { digits = part.slice(1); radix = 8; }
  else { digits = part; radix = 10; }
  digits = digits.replace(/^0+/, "");
  if (digits === "") return 0n;
  const valid = { 16: /^[0-9a-fA-F]+$/, 8: /^[0-7]+$/, 10: /^[0-9]+$/ }[radix];
  if (!valid.test(digits)) return null;
  let v = 0n;
  for (const c of digits) {
    v = v * BigInt(radix) + BigInt(parseInt(c, radix));
    if (v > V4_ALL) return null;
  }
  return v;
}

function parseIpv4(text) {
  const t = text.endsWith(".") ? text.slice(0, -1) : text;
  const parts = t.split(".");
  if (!isNumber(parts[parts.length - 1])) return { addr: null };
  if (parts.length > 4) return { err: "an IPv4 address has at most four parts" };
  const values = [];
  for (const p of parts) {
    if (p === "") return { err: "empty IPv4 part" };
    const v = ipv4Part(p);
    if (v === null) return { err: "not a valid IPv4 part" };
    values.push(v);
  }
  const last = values.pop();
  if (values.some((v) => v > 255n)) return { err: "an IPv4 part before the last is above 255" };
  const room = 8n * BigInt(5 - (values.length + 1));
  if (room < 32n && last >= 1n << room) return { err: "the last IPv4 part is too large for the bytes left" };
  let addr = last;
  values.forEach((v, i) => { addr |= v << BigInt(24 - 8 * i); });
  return { addr: v4(addr) };
}

/**
 * Parses a host as a guest or a peer wrote it (see `parse_host` in
 * policy/src/host.rs): `{ ip, zone }` or `{ name }`.
 * Throws `HostError` (message `invalid host ...: reason`).
 */
export function parseHost(text) {
  const err = (reason) => {
    const e = new Error(`invalid host \`${text}\`: ${reason}`);
    e.reason = reason;
    return e;
  };
  let bare = text, bracketed = false;
  if (text.startsWith("[")) {
    if (!text.endsWith("]")) throw err("`[` without `]`");
    bare = text.slice(1, -1);
    bracketed = true;
  }
  if (bare === "") throw err("empty host");
  if (bracketed || bare.includes(":")) {
    const pct = bare.indexOf("%");
    const addrText = pct < 0 ? bare : bare.slice(0, pct);
    const zone = pct < 0 ? null : bare.slice(pct + 1);
    const ip = parseIpv6(addrText);
    if (!ip) throw err("not an IPv6 address");
    if (zone !== null && !(zone.length > 0 && zone.length <= 64 && /^[A-Za-z0-9_.-]+$/.test(zone))) {
      throw err("bad IPv6 zone id");
    }
    return { ip, zone };
  }
  const r = parseIpv4(bare);
  if (r.err) throw err(r.err);
  if (r.addr) return { ip: r.addr, zone: null };
  const name = bare.endsWith(".") ? bare.slice(0, -1) : bare;
  if (name.length > MAX_NAME_BYTES) throw err("name longer than 253 bytes");
  for (const label of name.split(".")) {
    if (label === "") throw err("empty label");
    if (label.length > MAX_LABEL_BYTES) throw err("label longer than 63 bytes");
    if (!/^[A-Za-z0-9_-]+$/.test(label)) {
      throw err("a name holds only ASCII letters, digits, `-`, `_` and dots (write IDNs as xn--)");
    }
  }
  return { name: name.toLowerCase() };
}

/** A host as it goes before `:PORT`. */
export const fmtHost = (h) =>
  h.name !== undefined ? h.name : h.ip.v6 ? `[${fmtIp(h.ip)}${h.zone ? `%${h.zone}` : ""}]` : fmtIp(h.ip);

/** The IPv4 address an IPv6 address carries (mapped, compatible, NAT64). */
export function embeddedIpv4(a) {
  if (a.n >> 32n === 0xffffn) return v4(a.n & V4_ALL);
  if (a.n >> 32n === 0n && a.n > 1n) return v4(a.n & V4_ALL);
  if (a.n >> 32n === NAT64_PREFIX >> 32n) return v4(a.n & V4_ALL);
  return null;
}

/** `addr` and the same host in the other family's spelling. */
export function twins(a) {
  const four = a.v6 ? embeddedIpv4(a) : a;
  const out = [a];
  if (four) {
    for (const t of [four, v6(MAPPED | four.n)]) if (!out.some((o) => same(o, t))) out.push(t);
  }
  return out;
}

/** Every address `a` stands for (see `equivalents` in policy/src/host.rs). */
export function equivalents(a) {
  const out = twins(a);
  if (out.some((o) => same(o, v4(0)))) out.push(...twins(v4(0x7f000001)));
  if (same(a, v6(0))) out.push(v6(1));
  return out;
}

function inNet(ip, net, prefix) {
  if (ip.v6 !== net.v6) return false;
  const bits = ip.v6 ? 128n : 32n;
  const all = ip.v6 ? V6_ALL : V4_ALL;
  const p = BigInt(prefix);
  const mask = p === 0n ? 0n : (all << (bits - p)) & all;
  return (ip.n & mask) === (net.n & mask);
}

const R4 = (a, b, c, d, prefix, cidr, what) => ({
  net: v4((a << 24) + (b << 16) + (c << 8) + d), prefix, cidr, what,
});
const R6 = (n, prefix, cidr, what) => ({ net: v6(n), prefix, cidr, what });

/** The ranges SSRF filters block: the `internal` preset. */
export const INTERNAL_RANGES = [
  R4(0, 0, 0, 0, 8, "0.0.0.0/8", "unspecified / this network (RFC 1122)"),
  R4(10, 0, 0, 0, 8, "10.0.0.0/8", "private (RFC 1918)"),
  R4(100, 64, 0, 0, 10, "100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)"),
  R4(127, 0, 0, 0, 8, "127.0.0.0/8", "loopback"),
  R4(169, 254, 0, 0, 16, "169.254.0.0/16", "link-local, cloud metadata 169.254.169.254 (RFC 3927)"),
  R4(172, 16, 0, 0, 12, "172.16.0.0/12", "private (RFC 1918)"),
  R4(192, 168, 0, 0, 16, "192.168.0.0/16", "private (RFC 1918)"),
  R4(224, 0, 0, 0, 4, "224.0.0.0/4", "multicast"),
  R4(255, 255, 255, 255, 32, "255.255.255.255/32", "broadcast"),
  R6(0n, 128, "::/128", "unspecified"),
  R6(1n, 128, "::1/128", "loopback"),
  R6(0xfc00n << 112n, 7, "fc00::/7", "unique local (RFC 4193)"),
  R6(0xfe80n << 112n, 10, "fe80::/10", "link-local"),
  R6(0xfec0n << 112n, 10, "fec0::/10", "site-local (deprecated, RFC 3879)"),
  R6(0xff00n << 112n, 8, "ff00::/8", "multicast"),
];

/** The internal range `a` (or an equivalent) is in, or null. */
export function internalRange(a) {
  for (const e of equivalents(a)) {
    const r = INTERNAL_RANGES.find((r) => inNet(e, r.net, r.prefix));
    if (r) return r;
  }
  return null;
}

function parsePorts(port) {
  const num = (p) => {
    if (!/^[0-9]+$/.test(p)) throw "bad port";
    const v = Number(p);
    if (v > 65535) throw "port above 65535";
    return v;
  };
  if (port === "*") return { lo: 0, hi: 65535 };
  const dash = port.indexOf("-");
  if (dash >= 0) {
    const lo = num(port.slice(0, dash)), hi = num(port.slice(dash + 1));
    if (lo > hi) throw "port range is reversed";
    return { lo, hi };
  }
  const p = num(port);
  return { lo: p, hi: p };
}

/** One `HOST:PORT` rule (grammar: policy/src/lib.rs). */
export class Rule {
  /** Parses a rule; throws an Error naming the rule and the reason. */
  constructor(text) {
    const fail = (reason) =>
      new Error(`invalid rule \`${text}\`: ${reason} (expected HOST:PORT, e.g. \`example.com:443\`, \`*.example.com:*\`, \`127.0.0.1:8000-8999\`, \`[::1]:*\`, \`10.0.0.0/8:*\`, \`internal:*\`)`);
    this.text = text;
    let host, port;
    if (text.toLowerCase() === "internal") { host = text; port = "*"; }
    else {
      const i = text.lastIndexOf(":");
      if (i < 0) throw fail("missing `:PORT`");
      host = text.slice(0, i); port = text.slice(i + 1);
    }
    try { this.ports = parsePorts(port); } catch (e) { throw fail(e); }
    let prefix = null;
    const slash = host.indexOf("/");
    if (slash >= 0) {
      const p = host.slice(slash + 1);
      if (!/^[0-9]+$/.test(p) || Number(p) > 255) throw fail("bad CIDR prefix");
      prefix = Number(p);
      host = host.slice(0, slash);
    }
    if (host === "*" && prefix === null) { this.kind = "any"; return; }
    if (host.toLowerCase() === "internal" && prefix === null) { this.kind = "internal"; return; }
    if (host.startsWith("*.")) {
      if (prefix !== null) throw fail("a CIDR block needs an IP address");
      let h;
      try { h = parseHost(host.slice(2)); } catch (e) { throw fail(`bad wildcard suffix: ${e.reason}`); }
      if (h.ip) throw fail("a wildcard suffix is a name, not an IP");
      this.kind = "suffix"; this.suffix = `.${h.name}`; return;
    }
    let h;
    try { h = parseHost(host); } catch (e) { throw fail(`bad host pattern: ${e.reason}`); }
    if (h.ip) {
      if (h.zone) throw fail("a rule matches addresses on every interface: drop the zone id");
      const max = h.ip.v6 ? 128 : 32;
      const p = prefix ?? max;
      if (p > max) throw fail("CIDR prefix too long");
      this.kind = "net"; this.net = h.ip; this.prefix = p; return;
    }
    if (prefix !== null) throw fail("a CIDR block needs an IP address");
    if (h.name === "internal") { this.kind = "internal"; return; }
    this.kind = "exact"; this.name = h.name;
  }
  toString() { return this.text; }
  portOk(port) { return port >= this.ports.lo && port <= this.ports.hi; }
  isWildcard() { return this.kind === "any" || this.kind === "suffix"; }
  namesAddresses() { return this.kind === "internal" || this.kind === "net"; }
  matchedEquivalent(a) {
    switch (this.kind) {
      case "any": return a;
      case "internal": return internalRange(a) ? a : null;
      case "net": return equivalents(a).find((e) => inNet(e, this.net, this.prefix)) ?? null;
      default: return null;
    }
  }
  matchesIp(a, port) { return this.portOk(port) && this.matchedEquivalent(a) !== null; }
  matchesName(name, port) {
    if (!this.portOk(port)) return false;
    if (this.kind === "any") return true;
    if (this.kind === "exact") return this.name === name;
    if (this.kind === "suffix") return name.endsWith(this.suffix);
    return false;
  }
  matchesBind(a, port) {
    if (!this.portOk(port)) return false;
    if (this.kind === "any") return true;
    if (this.kind !== "net") return false;
    // In the rule's family (Rule::matches_bind): an IPv6 rule covers IPv4
    // binds only inside ::ffff:0:0/96, and an IPv4 rule no IPv6 bind.
    const isMapped = (x) => x.v6 && x.n >> 32n === 0xffffn;
    const four = a.v6 ? (isMapped(a) ? v4(a.n & V4_ALL) : null) : a;
    if (!this.net.v6) return four !== null && inNet(four, this.net, this.prefix);
    if (four === null) return inNet(a, this.net, this.prefix);
    return this.prefix >= 96 && isMapped(this.net) && inNet(v6(MAPPED | four.n), this.net, this.prefix);
  }
}

/**
 * The loopback address (127.0.0.1 or ::1, by the family of what `addr`
 * reaches) when `addr` or one of its equivalents is among `local`, this
 * machine's interface addresses, and is not loopback or unspecified
 * already (`own_loopback` in policy/src/lib.rs).
 */
function ownLoopback(addr, local) {
  if (local.length === 0) return null;
  const eq = equivalents(addr);
  const loopbackOrAny = (a) =>
    a.v6 ? a.n === 1n || a.n === 0n : a.n >> 24n === 127n || a.n === 0n;
  if (eq.some(loopbackOrAny)) return null;
  const hit = eq.find((a) => local.some((l) => twins(l).some((t) => same(t, a))));
  if (!hit) return null;
  const mapped = hit.v6 && hit.n >> 32n === 0xffffn;
  return hit.v6 && !mapped ? v6(1n) : v4(0x7f000001n);
}

/** What the allow rules said about a name before DNS. */
export const NameCheck = { Named: "named", Wildcard: "wildcard", NeedsAddress: "needs-address" };

/** The destinations and bind addresses a guest may use (deny by default). */
export class Policy {
  constructor({ allow = [], deny = [], listen = [] } = {}) {
    const parse = (list) => list.map((r) => (r instanceof Rule ? r : new Rule(r)));
    this.allow = parse(allow);
    this.deny = parse(deny);
    this.listen = parse(listen);
  }

  /**
   * Checks host:port before DNS; returns a NameCheck, throws a reason
   * string. `local`: this machine's interface addresses (see `checkIp`).
   */
  checkName(host, port, local = []) {
    if (host.ip) {
      this.checkIp(host.ip, port, NameCheck.NeedsAddress, local);
      return NameCheck.NeedsAddress;
    }
    const name = host.name;
    const denied = this.deny.find((r) => r.matchesName(name, port));
    if (denied) throw `${name}:${port} is denied by rule \`${denied}\``;
    if (this.allow.some((r) => !r.isWildcard() && r.matchesName(name, port))) return NameCheck.Named;
    if (this.allow.some((r) => r.isWildcard() && r.matchesName(name, port))) return NameCheck.Wildcard;
    if (this.allow.some((r) => r.namesAddresses() && r.portOk(port))) return NameCheck.NeedsAddress;
    throw `${name}:${port} is not allowed (no --allow rule matches)`;
  }

  /**
   * Decides one address; throws the reason string. `local`: this
   * machine's interface addresses; one of them reaches the local host, so
   * loopback's deny rules apply to it and a wildcard does not reach it;
   * a rule for itself or `internal` admits it (`check_ip_on` in
   * policy/src/lib.rs).
   */
  checkIp(addr, port, check, local = []) {
    const dest = fmtSock(addr, port);
    const own = ownLoopback(addr, local);
    for (const rule of this.deny) {
      if (!rule.portOk(port)) continue;
      const hit = rule.matchedEquivalent(addr) ?? (own && rule.matchedEquivalent(own));
      if (hit) {
        let via = "";
        if (own && same(hit, own)) via = ` (${fmtIp(addr)} is an address of this host: it reaches ${fmtIp(own)})`;
        else if (!same(hit, addr)) via = ` (${fmtIp(addr)} reaches ${fmtIp(hit)})`;
        throw `${dest} is denied by rule \`${rule}\`${via}`;
      }
    }
    if (check === NameCheck.Named) return;
    // An own address: a rule for itself or `internal` admits it, a
    // loopback rule does not (it would open the other interfaces).
    const admits = (r) => r.matchesIp(addr, port) || (own && r.kind === "internal" && r.portOk(port));
    if (this.allow.some((r) => r.namesAddresses() && admits(r))) return;
    const wildcard = check === NameCheck.Wildcard || this.allow.some((r) => r.kind === "any" && r.portOk(port));
    const range = internalRange(addr);
    if (wildcard && !range && !own) return;
    if (wildcard && range) {
      throw `${dest} is internal (${range.cidr}: ${range.what}): a wildcard --allow does not reach internal addresses; allow it by address, CIDR block or \`internal\``;
    }
    if (wildcard && own) {
      throw `${dest} is an address of this host (it reaches the local host, like ${fmtIp(own)}): a wildcard --allow does not reach it; allow it by address, CIDR block or \`internal\``;
    }
    throw `${dest} is not allowed (no --allow rule matches)`;
  }

  /** Keeps the resolved [{ip, port}] the guest may dial, in order; throws when none is left. */
  checkResolved(host, check, addrs, local = []) {
    const refused = [], kept = [];
    for (const a of addrs) {
      try { this.checkIp(a.ip, a.port, check, local); kept.push(a); } catch (why) { refused.push(why); }
    }
    if (kept.length === 0) {
      if (refused.length === 0) throw `${fmtHost(host)} has no addresses`;
      if (host.ip || refused.length === 1) throw refused.join("; ");
      throw `${fmtHost(host)} resolves only to addresses that are not allowed: ${refused.join("; ")}`;
    }
    return kept;
  }

  /** Checks a bind address; throws the reason string. */
  checkListen(ip, port) {
    if (!this.listen.some((r) => r.matchesBind(ip, port))) {
      throw `listening on ${fmtSock(ip, port)} is not allowed (no --listen rule matches)`;
    }
  }
}
