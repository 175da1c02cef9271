// The Rust policy crate's cases (policy/src/tests.rs, host.rs, internal.rs)
// against the JS port in src/policy.js, and the loopback spellings table
// read from policy/src/spellings.rs itself, so the two cannot drift apart
// silently. Run: node --test node/test/ (scripts/test does).

import { test } from "node:test";
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { Policy, Rule, parseHost, fmtIp, internalRange, NameCheck } from "../src/policy.js";
import net from "node:net";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { tcpImports } from "../src/tcp.js";

const policy = (allow, deny = [], listen = ["127.0.0.1:*"]) => new Policy({ allow, deny, listen });
const host = (text) => parseHost(text);

/** The whole decision, with the resolver of the Rust tests. */
function decide(p, text, port) {
  let h;
  try {
    h = parseHost(text);
  } catch (e) {
    return { err: e.message };
  }
  try {
    const check = p.checkName(h, port);
    let ips;
    if (h.ip) ips = [h.ip];
    else if (h.name === "localhost") ips = [host("127.0.0.1").ip, host("::1").ip];
    else if (h.name === "rebind.example") ips = [host("10.9.9.9").ip];
    else ips = [host("93.184.215.14").ip];
    return { ok: p.checkResolved(h, check, ips.map((ip) => ({ ip, port }))) };
  } catch (why) {
    return { err: String(why) };
  }
}
const ok = (r, what) => assert.ok(r.ok, `${what}: ${r.err}`);
const err = (r, what) => {
  assert.ok(r.err, `${what}: expected an error, got ${JSON.stringify(r.ok?.map((a) => fmtIp(a.ip)))}`);
  return r.err;
};
const bindable = (p, ip, port) => {
  try {
    p.checkListen(host(ip).ip, port);
    return true;
  } catch {
    return false;
  }
};

test("deny by default", () => {
  const p = new Policy();
  assert.throws(() => p.checkName(host("example.com"), 443));
  assert.throws(() => p.checkName(host("127.0.0.1"), 80));
  assert.equal(bindable(p, "127.0.0.1", 0), false);
});

test("names, suffixes and ports", () => {
  let p = policy(["example.com:443", "*.corp.net:8000-8999"]);
  assert.equal(p.checkName(host("EXAMPLE.com."), 443), NameCheck.Named);
  assert.throws(() => p.checkName(host("example.com"), 80));
  assert.equal(p.checkName(host("a.b.corp.net"), 8080), NameCheck.Wildcard);
  assert.throws(() => p.checkName(host("corp.net"), 8080));
  assert.throws(() => p.checkName(host("a.corp.net"), 9000));
  p = policy(["EXAMPLE.COM.:443", "*.Corp.NET.:*"]);
  assert.equal(p.checkName(host("example.com"), 443), NameCheck.Named);
  assert.equal(p.checkName(host("x.corp.net"), 1), NameCheck.Wildcard);
});

test("ip rules and cidr", () => {
  const p = policy(["127.0.0.0/8:*", "[::1]:22"]);
  ok(decide(p, "127.1.2.3", 5), "127.1.2.3");
  ok(decide(p, "[::1]", 22), "[::1]:22");
  err(decide(p, "::1", 23), "::1:23");
  err(decide(p, "10.0.0.1", 5), "10.0.0.1");
  assert.equal(p.checkName(host("localhost"), 5), NameCheck.NeedsAddress);
  assert.deepEqual(decide(p, "localhost", 5).ok.map((a) => fmtIp(a.ip)), ["127.0.0.1"]);
  err(decide(p, "rebind.example", 5), "rebind");
});

test("deny wins on names and resolved addresses", () => {
  const p = policy(["*:*", "internal:*"], ["10.0.0.0/8:*", "secret.example:*"]);
  err(decide(p, "secret.example", 1));
  err(decide(p, "SECRET.example.", 1));
  assert.match(err(decide(p, "10.2.3.4", 1)), /`10\.0\.0\.0\/8:\*`/);
  assert.match(err(decide(p, "rebind.example", 443)), /10\.9\.9\.9:443 is denied by rule `10\.0\.0\.0\/8:\*`/);
  assert.match(err(decide(p, "[::ffff:10.0.0.1]", 443)), /reaches 10\.0\.0\.1/);
  ok(decide(p, "example.com", 443), "example.com");
});

test("bad rules are rejected with a reason", () => {
  for (const bad of [
    "example.com", "x:99999", "x:9-1", "x:+80", "x:", "1.2.3.4/40:1", "[::1]/129:1", "name/8:1",
    "a*b:1", "*.:1", "*./8:1", "*.1.2:1", "*/8:1", "internal/8:1", "[fe80::1%eth0]:1", "256.1.1.1:1", "[::1:1",
  ]) {
    assert.throws(() => new Rule(bad), (e) => e.message.includes(bad), bad);
  }
  assert.deepEqual(new Rule("internal").ports, { lo: 0, hi: 65535 });
  assert.equal(new Rule("INTERNAL:443").kind, "internal");
  for (const s of ["internal.:*", "INTERNAL.:443"]) assert.equal(new Rule(s).kind, "internal", s);
});

test("listen rules match bind addresses without loopback aliasing", () => {
  const p = new Policy({ listen: ["127.0.0.1:*", "[::1]:8000"] });
  assert.ok(bindable(p, "127.0.0.1", 0));
  assert.ok(bindable(p, "::ffff:127.0.0.1", 0));
  assert.ok(bindable(p, "::1", 8000));
  assert.ok(!bindable(p, "::1", 8001));
  assert.ok(!bindable(p, "0.0.0.0", 0));
  assert.ok(!bindable(p, "::", 8000));
});

test("an IPv6 listen rule covers IPv4 binds only inside the mapped range", () => {
  // Parity with policy/src/tests.rs
  // an_ipv6_listen_rule_covers_ipv4_binds_only_inside_the_mapped_range.
  const v6 = new Policy({ listen: ["[::]/0:*"] });
  for (const b of ["0.0.0.0", "127.0.0.1", "::ffff:0.0.0.0", "10.0.0.1"]) assert.ok(!bindable(v6, b, 80), b);
  for (const b of ["::", "::1", "fd00::1", "::7f00:1"]) assert.ok(bindable(v6, b, 80), b);
  const mapped = new Policy({ listen: ["[::ffff:127.0.0.0]/104:*", "[::ffff:0:0]/96:9000"] });
  assert.ok(bindable(mapped, "127.0.0.1", 80));
  assert.ok(bindable(mapped, "0.0.0.0", 9000));
  assert.ok(!bindable(mapped, "0.0.0.0", 80));
  const four = new Policy({ listen: ["0.0.0.0/0:*"] });
  assert.ok(bindable(four, "0.0.0.0", 80));
  assert.ok(bindable(four, "::ffff:10.0.0.1", 80));
  for (const b of ["::", "::7f00:1", "64:ff9b::7f00:1"]) assert.ok(!bindable(four, b, 80), b);
});

/** policy/src/spellings.rs LOOPBACK, parsed from the Rust source. */
function loopbackTable() {
  const src = readFileSync(new URL("../../policy/src/spellings.rs", import.meta.url), "utf8");
  const re = /\bs\(\s*"([^"]*)",\s*(V4|V6),\s*(true|false),\s*(true|false),\s*(true|false),/g;
  return [...src.matchAll(re)].map((m) => ({ text: m[1], reaches: m[2] === "V6" ? "::1" : "127.0.0.1", inTcp: m[5] === "true" }));
}

test("every loopback spelling meets the loopback rules", () => {
  const table = loopbackTable();
  assert.ok(table.length >= 30, `the table has ${table.length} spellings`);
  const deny = policy(["*:*"], ["127.0.0.0/8:*", "[::1]/128:*"]);
  const allow = policy(["127.0.0.1:*", "[::1]:*"]);
  const mappedDeny = policy(["*:*"], ["[::ffff:127.0.0.0]/104:*", "[::1]:*"]);
  const oddDeny = policy(["*:*"], ["0x7f.0.0.0/8:*", "[0::1]/128:*"]);
  const byName = policy(["*:*"], ["internal"]);
  const wildcardOnly = policy(["*:*", "*.example:*"]);
  const explicit = policy(["*:*", "internal:*"]);
  for (const s of table.filter((s) => s.inTcp)) {
    const rule = s.reaches === "::1" ? "[::1]" : "127.0.0.0/8";
    assert.ok(err(decide(deny, s.text, 80), s.text).includes(`\`${rule}`), s.text);
    ok(decide(allow, s.text, 80), s.text);
    for (const [name, p] of [["mapped", mappedDeny], ["odd", oddDeny], ["internal", byName]]) {
      assert.match(err(decide(p, s.text, 80), `${name} ${s.text}`), /denied by rule/, `${name} ${s.text}`);
    }
    assert.match(err(decide(wildcardOnly, s.text, 80), s.text), /internal/, s.text);
    ok(decide(explicit, s.text, 80), s.text);
  }
});

test("wildcards do not reach internal addresses", () => {
  const p = policy(["*:*"]);
  for (const internal of [
    "10.0.0.1", "169.254.169.254", "[fd00::1]", "[fe80::1]", "[::ffff:169.254.169.254]", "[64:ff9b::a9fe:a9fe]",
    "100.64.0.1", "224.0.0.1", "255.255.255.255", "rebind.example", "localhost",
  ]) {
    assert.match(err(decide(p, internal, 80), internal), /is internal/, internal);
  }
  ok(decide(p, "1.1.1.1", 80), "1.1.1.1");
  ok(decide(p, "example.com", 80), "example.com");
  ok(decide(policy(["rebind.example:80"]), "rebind.example", 80), "named");
  ok(decide(policy(["*:*", "10.0.0.0/8:*"]), "rebind.example", 80), "cidr");
  ok(decide(policy(["*.example:*", "internal:80"]), "rebind.example", 80), "internal:80");
  err(decide(policy(["*.example:*"]), "rebind.example", 80), "suffix only");
  ok(decide(policy(["*:*", "internal:*"]), "169.254.169.254", 80), "allow all");
  assert.match(err(decide(policy(["rebind.example:*"], ["internal"]), "rebind.example", 80)), /`internal`/);
});

test("ipv4 forms as inet_aton reads them", () => {
  for (const text of [
    "127.0.0.1", "2130706433", "0177.0.0.1", "0x7f.1", "0X7F.0.0.1", "127.1", "127.0.1", "0x7f000001",
    "017700000001", "127.0.0.1.", "0177.0.0.01", "0x00007f.1",
  ]) {
    assert.equal(fmtIp(host(text).ip), "127.0.0.1", text);
  }
  assert.equal(fmtIp(host("0").ip), "0.0.0.0");
  assert.equal(fmtIp(host("0x").ip), "0.0.0.0");
  assert.equal(fmtIp(host("10.0x10.0377.255").ip), "10.16.255.255");
  assert.equal(fmtIp(host("1.65535").ip), "1.0.255.255");
  for (const bad of ["256.0.0.1", "1.2.3.256", "1.65536.1", "4294967296", "1.2.3.4.5", "09.0.0.1", "1..1", "x.1", "0x1g.1"]) {
    assert.throws(() => parseHost(bad), undefined, bad);
  }
});

test("the internal preset covers what SSRF filters block", () => {
  for (const [addr, cidr] of [
    ["127.0.0.1", "127.0.0.0/8"], ["0.0.0.0", "0.0.0.0/8"], ["::", "::/128"], ["::1", "::1/128"],
    ["10.1.2.3", "10.0.0.0/8"], ["172.31.255.255", "172.16.0.0/12"], ["192.168.1.1", "192.168.0.0/16"],
    ["100.100.100.200", "100.64.0.0/10"], ["169.254.169.254", "169.254.0.0/16"], ["fd00:ec2::254", "fc00::/7"],
    ["fe80::1", "fe80::/10"], ["ff02::1", "ff00::/8"], ["239.255.255.250", "224.0.0.0/4"],
    ["255.255.255.255", "255.255.255.255/32"], ["::ffff:169.254.169.254", "169.254.0.0/16"],
    ["::ffff:10.0.0.1", "10.0.0.0/8"], ["64:ff9b::a9fe:a9fe", "169.254.0.0/16"], ["::192.168.0.1", "192.168.0.0/16"],
  ]) {
    assert.equal(internalRange(host(addr).ip)?.cidr, cidr, addr);
  }
  assert.equal(internalRange(host("1.1.1.1").ip), null);
});

test("this machine's own addresses meet the loopback rules", () => {
  const local = ["192.0.2.2", "[fd00::2]", "[2001:db8::5]", "127.0.0.1"].map((t) => host(t).ip);
  const on = (p, text) => {
    const h = host(text);
    try {
      const check = p.checkName(h, 80, local);
      return { ok: p.checkResolved(h, check, [{ ip: h.ip, port: 80 }], local) };
    } catch (why) {
      return { err: String(why) };
    }
  };
  const own = ["192.0.2.2", "[::ffff:192.0.2.2]", "0xc0.0.2.2", "[2001:db8::5]"];
  for (const rules of [
    policy(["*:*"], ["internal"]),
    policy(["*:*"], ["127.0.0.0/8:*", "[::1]/128:*"]),
    policy(["*:*"], []),
  ]) {
    for (const text of own) {
      assert.match(err(on(rules, text), text), /this host/);
      ok(decide(rules, text, 80), `${text} without the machine's addresses`);
    }
    ok(on(rules, "93.184.215.14"), "another address");
  }
  for (const allow of ["192.0.2.2:*", "192.0.2.0/24:*", "internal"]) ok(on(policy([allow]), "192.0.2.2"), allow);
  ok(on(policy(["[2001:db8::5]:*"]), "[2001:db8::5]"), "its own rule");
  for (const [allow, text] of [
    ["127.0.0.1:*", "192.0.2.2"],
    ["127.0.0.0/8:*", "192.0.2.2"],
    ["[::1]:*", "[2001:db8::5]"],
  ]) {
    err(on(policy([allow]), text), `${allow} does not open ${text}`);
  }
  assert.match(err(on(policy(["192.0.2.2:*"], ["127.0.0.0/8:*"]), "192.0.2.2"), "loopback deny"), /this host/);
  const named = policy(["myself.example:80"]);
  const h = host("myself.example");
  const check = named.checkName(h, 80, local);
  assert.equal(named.checkResolved(h, check, [{ ip: host("192.0.2.2").ip, port: 80 }], local).length, 1);
  const denied = policy(["myself.example:80"], ["internal"]);
  assert.throws(
    () => denied.checkResolved(h, denied.checkName(h, 80, local), [{ ip: host("192.0.2.2").ip, port: 80 }], local),
    /denied by rule `internal`/,
  );
});

for (const kind of ["websocket", "tcp"]) {
  test(`a ${kind} listener on [::] under a rule for [::] alone does not reach IPv4`, async () => {
    // The red team of 2026-12-04g, F3: the socket was dual-stack, so an
    // IPv4 client on 127.0.0.1 reached it, though no rule allowed
    // listening on IPv4 (parity with host/src/net.rs
    // an_ipv6_listener_does_not_reach_ipv4).
    const host = new Host({ policy: { listen: ["[::]:*"] } });
    const imports = kind === "websocket" ? websocketImports(host) : tcpImports(host);
    const listener = await (kind === "websocket" ? imports.listen("[::]:0", {}) : imports.listen("[::]:0"));
    const port = Number(listener.localAddress().split(":").pop());
    const reach = (h) =>
      new Promise((resolve) => {
        const s = net.connect({ host: h, port });
        s.on("connect", () => (s.destroy(), resolve(true)));
        s.on("error", () => resolve(false));
      });
    try {
      assert.equal(await reach("::1"), true, "[::1] did not reach the [::] listener");
      assert.equal(await reach("127.0.0.1"), false, "127.0.0.1 reached a listener on [::] under a rule for [::] alone");
    } finally {
      listener[Symbol.dispose]();
    }
  });
}
