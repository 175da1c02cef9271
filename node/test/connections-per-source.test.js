// Accepted connections per source over every listener of a Node host
// (parity with host/src/connections.rs, `max_connections_per_source`):
// handshake places bounded what a client holds while it upgrades, but
// once upgraded (or accepted on a byte-listener) nothing bounded how many
// connections one address kept, so one address could take every file
// descriptor of the process. Now a source holds at most
// `maxConnectionsPerSource` connections over the WebSocket and TCP
// listeners together, from accept until the socket closes; past it a
// WebSocket client gets 503 and a TCP client is closed, while other
// sources are served.
//
// Enough sources at their bound still took every descriptor, so the host
// also holds at most `maxConnections` accepted connections in all,
// loopback included (host/src/connections.rs, `max_connections`): past
// it any source is refused alike.

import { test } from "node:test";
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { once, EventEmitter } from "node:events";
import { fileURLToPath } from "node:url";
import WebSocket from "ws";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { tcpImports } from "../src/tcp.js";
import { ConnectionsBySource, connectionsBySource } from "../src/sources.js";
import { DEFAULT_LIMITS, defaultMaxConnections } from "../src/config.js";
import { upgradeHead } from "./upgrade-head.js";
import { client, until, sleep } from "./raw-client.js";

const CLI = fileURLToPath(new URL("../bin/tether-node.mjs", import.meta.url));
const ECHO = fileURLToPath(new URL("../../target/guests/wasm32-wasip2/release/echo.wasm", import.meta.url));
const REFUSED_BUSY = "HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";


/** A TCP client from `localAddress` whose `text` came back: it is held open. */
async function tcpEchoed(addr, text, localAddress) {
  const c = client(addr, text, localAddress);
  await until(`the TCP echo of ${text}`, () => c.got.bytes.length >= text.length || c.got.closed);
  assert.equal(c.got.bytes.toString(), text, `TCP ${text} from ${localAddress ?? "127.0.0.1"} echoed`);
  return c;
}

/** A WebSocket client from `localAddress` that upgraded and had `text` echoed: it is held open. */
async function wsEchoed(addr, text, localAddress) {
  const ws = new WebSocket(`ws://${addr}/`, { localAddress });
  ws.on("error", () => {});
  const within = (what, event) =>
    once(ws, event, { signal: AbortSignal.timeout(5_000) }).catch((e) => assert.fail(`${what}: ${e.message}`));
  await within(`the upgrade of ${text}`, "open");
  ws.send(text);
  const [data] = await within(`the echo of ${text}`, "message");
  assert.equal(data.toString(), text);
  return ws;
}

/** A TCP client from `localAddress` that sent `text` and was closed without an echo. */
async function tcpRefused(addr, text, localAddress) {
  const c = client(addr, text, localAddress);
  await until(`the refused TCP client's close (${text})`, () => c.got.closed || c.got.bytes.length > 0);
  assert.equal(c.got.bytes.length, 0, `no echo for TCP ${text} past the bound`);
  assert.ok(c.got.closed);
}

/**
 * Starts the echo guest under tether-node, one WebSocket and one TCP
 * listener on ephemeral ports (`server ADDR 0 --tcp TCP_ADDR`), with the
 * host options `flags`; resolves once both are bound.
 */
async function startEcho(flags) {
  assert.ok(existsSync(ECHO), `${ECHO} is missing: build the guests (cargo build --release -p tether-guest-artifacts)`);
  const args = [CLI, "run", ECHO, "--listen", "127.0.0.1:*", ...flags];
  args.push("--", "server", "127.0.0.1:0", "0", "--tcp", "127.0.0.1:0");
  const proc = spawn(process.execPath, args, { stdio: ["ignore", "ignore", "pipe"] });
  let log = "";
  proc.stderr.on("data", (d) => (log += d));
  let exited = null;
  proc.on("exit", (code) => (exited = code));
  const bound = () => /listening on (\S+)/.exec(log) && /listening for TCP on (\S+)/.exec(log);
  await until("the echo guest's listeners", () => bound() || exited !== null, 30_000).catch((e) => {
    proc.kill();
    assert.fail(`${e.message}; its log: ${log}`);
  });
  assert.equal(exited, null, `tether-node exited with ${exited}: ${log}`);
  return { proc, ws: /listening on (\S+)/.exec(log)[1], tcp: /listening for TCP on (\S+)/.exec(log)[1] };
}

/**
 * A TCP client from `source` echoed by the listener at `port`, retried
 * every 20 ms until a place comes back (at most 5 s after one closed).
 */
async function servedAgain(port, source) {
  const end = Date.now() + 5_000;
  for (let i = 0; ; i++) {
    const c = client(port, `again ${i}`, source);
    await until("an answer or a close", () => c.got.closed || c.got.bytes.length >= `again ${i}`.length);
    if (c.got.bytes.toString() === `again ${i}`) return c;
    if (Date.now() > end) assert.fail(`no connection from ${source} served 5 s after one closed`);
    await sleep(20);
  }
}

test("one source holds at most maxConnectionsPerSource connections over the WebSocket and TCP listeners", { timeout: 60_000 }, async () => {
  // Given on the command line, the bound counts loopback clients too.
  const echo = await startEcho(["--max-connections-per-source", "4"]);
  const held = [];
  const closeAll = () => held.forEach((c) => (c instanceof WebSocket ? c.terminate() : c.sock.destroy()));
  try {
    // Two WebSocket and two TCP connections from 127.0.0.1: the bound.
    held.push(await wsEchoed(echo.ws, "ws 1"), await wsEchoed(echo.ws, "ws 2"));
    held.push(await tcpEchoed(echo.tcp, "tcp 1"), await tcpEchoed(echo.tcp, "tcp 2"));

    // A fifth WebSocket client is answered 503 at once (not at the 10 s
    // handshake timeout), a fifth TCP client closed without an echo.
    const start = performance.now();
    const busy = client(echo.ws, upgradeHead(echo.ws));
    await until("the fifth WebSocket client's close", () => busy.got.closed);
    assert.equal(busy.got.bytes.toString(), REFUSED_BUSY);
    assert.ok(busy.got.closedAt - start < 2_000, `refused after ${Math.round(busy.got.closedAt - start)} ms`);
    await tcpRefused(echo.tcp, "tcp 5");

    // Another source is served on both listeners.
    held.push(await wsEchoed(echo.ws, "other ws", "127.0.0.2"));
    held.push(await tcpEchoed(echo.tcp, "other tcp", "127.0.0.2"));

    // A WebSocket connection closes: its place serves a TCP connection
    // from 127.0.0.1 (once the host has seen the close), and the source
    // is at its bound again.
    const [ws1] = held.splice(0, 1);
    ws1.close(1000);
    await once(ws1, "close");
    held.push(await servedAgain(echo.tcp, "127.0.0.1"));
    await tcpRefused(echo.tcp, "tcp 5 again");
    assert.equal(held.filter((c) => c instanceof WebSocket && c.readyState !== WebSocket.OPEN).length, 0, "held streams stay open");
  } finally {
    closeAll();
    echo.proc.kill();
  }
});

test("a counted socket gives its place back once, however it closes", async () => {
  const host = new Host({
    policy: { listen: ["127.0.0.1:*"] },
    limits: {
      maxConnectionsPerSource: 3,
      countLoopbackConnections: true,
      maxHandshakesPerSource: 1,
      handshakeTimeoutMs: 800,
      lingerTimeoutMs: 300,
    },
  });
  const wsl = await websocketImports(host).listen("127.0.0.1:0", {});
  const tcpl = await tcpImports(host).listen("127.0.0.1:0");
  const ws = wsl.localAddress();
  const tcp = tcpl.localAddress();
  const counts = connectionsBySource(host);
  const held = () => counts.held("127.0.0.1");
  const clients = [];
  const settled = async (what, n) => {
    await until(`${what}: ${n} held`, () => held() === n);
    await sleep(50);
    assert.equal(held(), n, `${what}: no place given back twice`);
  };
  try {
    // An upgraded stream held throughout.
    const anchor = client(ws, upgradeHead(ws));
    clients.push(anchor);
    await until("the anchor's 101", () => anchor.got.bytes.includes("\r\n\r\n"));
    const anchorStream = wsl.accept();
    assert.ok(anchorStream);
    await settled("the anchor", 1);

    // A refused upgrade (HTTP/1.0: 400).
    const old = client(ws, "GET / HTTP/1.0\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n");
    clients.push(old);
    await until("the 400", () => old.got.closed);
    assert.match(old.got.bytes.toString(), /^HTTP\/1\.1 400 /);
    await settled("after a refused upgrade", 1);

    // A silent client holds the source's one handshake place; the next
    // one is answered 503 by the handshake places (it held a connection
    // place meanwhile); the silent one is cut at the handshake timeout.
    const silent = client(ws, null);
    clients.push(silent);
    await settled("a silent handshake", 2);
    const second = client(ws, upgradeHead(ws));
    clients.push(second);
    await until("the handshake places' 503", () => second.got.closed);
    assert.match(second.got.bytes.toString(), /^HTTP\/1\.1 503 /);
    await settled("after the handshake places' 503", 2);
    await until("the silent client cut at the handshake timeout", () => silent.got.closed);
    await settled("after the handshake timeout", 1);

    // A TCP connection the client resets, one the guest drops, one still
    // queued when the listener goes.
    const reset = client(tcp, "x");
    clients.push(reset);
    await settled("a TCP connection", 2);
    reset.sock.resetAndDestroy();
    await settled("after a reset", 1);
    const dropped = client(tcp, null);
    clients.push(dropped);
    await settled("a TCP connection for the guest", 2);
    // The reset one waits in the queue too (closed): the guest takes both.
    for (let r; (r = tcpl.accept()); ) r.forEach((x) => x[Symbol.dispose]());
    await until("the guest's drop closes it", () => dropped.got.closed);
    await settled("after the guest's drop", 1);
    const queued = client(tcp, null);
    clients.push(queued);
    await settled("a queued TCP connection", 2);
    tcpl[Symbol.dispose]();
    await settled("after the listener went", 1);

    // The guest drops the upgraded stream: the last place comes back.
    anchorStream[Symbol.dispose]();
    await until("the anchor's close", () => anchor.got.closed);
    await settled("after the anchor", 0);
    assert.equal(counts.bySource.size, 0, "no source left in the map");
    assert.equal(counts.total, 0, "no host place left");
  } finally {
    for (const c of clients) c.sock.destroy();
    wsl[Symbol.dispose]();
    if (!tcpl.stopped) tcpl[Symbol.dispose]();
  }
});

test("loopback clients are not counted unless countLoopbackConnections; a source is an IPv4 address or an IPv6 /64", async () => {
  assert.equal(DEFAULT_LIMITS.maxConnectionsPerSource, 256);
  assert.equal(DEFAULT_LIMITS.countLoopbackConnections, false);
  const sock = (addr) => Object.assign(new EventEmitter(), { remoteAddress: addr });

  const counts = new ConnectionsBySource(2, false);
  for (const addr of ["127.0.0.1", "127.9.9.9", "::1", "::ffff:127.0.0.1"]) {
    for (let i = 0; i < 5; i++) assert.ok(counts.take(sock(addr)), `${addr} is not counted`);
  }
  assert.equal(counts.bySource.size, 0);
  const first = sock("10.0.0.1");
  assert.ok(counts.take(first));
  assert.ok(counts.take(sock("10.0.0.1")));
  assert.ok(!counts.take(sock("10.0.0.1")), "past the bound");
  assert.ok(!counts.take(sock("::ffff:10.0.0.1")), "IPv4-mapped IPv6 is the same source");
  assert.ok(counts.take(sock("10.0.0.2")), "another source");
  first.emit("close");
  assert.equal(counts.held("10.0.0.1"), 1);
  assert.ok(counts.take(sock("10.0.0.1")), "a place came back");
  assert.ok(counts.take(sock("2001:db8:1:2::1")));
  assert.ok(counts.take(sock("2001:db8:1:2:ffff::9")));
  assert.ok(!counts.take(sock("2001:db8:1:2:aaaa::5")), "the same /64");
  assert.ok(counts.take(sock("2001:db8:1:3::1")), "another /64");

  const strict = new ConnectionsBySource(1, true);
  assert.ok(strict.take(sock("127.0.0.1")));
  assert.ok(!strict.take(sock("::ffff:127.0.0.1")), "loopback counted when asked");
  assert.ok(strict.take(sock("::1")));
  assert.ok(!strict.take(sock("::1")));

  // By default a real loopback client holds no place on a host.
  const host = new Host({ policy: { listen: ["127.0.0.1:*"] }, limits: { maxConnectionsPerSource: 1 } });
  const tcpl = await tcpImports(host).listen("127.0.0.1:0");
  const clients = [];
  try {
    for (let i = 0; i < 3; i++) clients.push(await tcpAccepted(tcpl, `loop ${i}`));
    assert.equal(connectionsBySource(host).held("127.0.0.1"), 0);
  } finally {
    clients.forEach((c) => c.sock.destroy());
    tcpl[Symbol.dispose]();
  }
});

/** Connects to `listener` (no guest: nothing echoes) and takes the connection the host queued. */
async function tcpAccepted(listener, name) {
  const c = client(listener.localAddress(), name);
  await until(`${name} accepted`, () => listener.queue.length > 0 || c.got.closed);
  assert.ok(!c.got.closed, `${name} was closed`);
  listener.accept();
  return c;
}

/** A WebSocket client from `localAddress` answered 503 at once (not at the 10 s handshake timeout). */
async function wsRefused(addr, localAddress) {
  const start = performance.now();
  const busy = client(addr, upgradeHead(addr), localAddress);
  await until(`the refused WebSocket client's close (${localAddress})`, () => busy.got.closed);
  assert.equal(busy.got.bytes.toString(), REFUSED_BUSY);
  assert.ok(busy.got.closedAt - start < 2_000, `refused after ${Math.round(busy.got.closedAt - start)} ms`);
}

test("the host holds at most maxConnections connections over the WebSocket and TCP listeners, whatever their source", { timeout: 60_000 }, async () => {
  // Loopback clients are not counted per source (no
  // --max-connections-per-source), but they hold the host's places.
  const echo = await startEcho(["--max-connections", "4"]);
  const held = [];
  const closeAll = () => held.forEach((c) => (c instanceof WebSocket ? c.terminate() : c.sock.destroy()));
  try {
    // Two WebSocket and two TCP connections from two sources: the bound.
    held.push(await wsEchoed(echo.ws, "ws 1", "127.0.0.1"), await wsEchoed(echo.ws, "ws 2", "127.0.0.2"));
    held.push(await tcpEchoed(echo.tcp, "tcp 1", "127.0.0.1"), await tcpEchoed(echo.tcp, "tcp 2", "127.0.0.2"));

    // A fifth connection, from a third source that holds none, is refused
    // on both listeners.
    await wsRefused(echo.ws, "127.0.0.3");
    await tcpRefused(echo.tcp, "tcp 5", "127.0.0.3");

    // A WebSocket connection closes: its place serves a connection from
    // the third source (once the host has seen the close), and the host
    // is at its bound again.
    const [ws1] = held.splice(0, 1);
    ws1.close(1000);
    await once(ws1, "close");
    held.push(await servedAgain(echo.tcp, "127.0.0.3"));
    await wsRefused(echo.ws, "127.0.0.1");
    await tcpRefused(echo.tcp, "tcp 5 again", "127.0.0.3");
    assert.equal(held.filter((c) => c instanceof WebSocket && c.readyState !== WebSocket.OPEN).length, 0, "held streams stay open");
  } finally {
    closeAll();
    echo.proc.kill();
  }
});

test("every connection holds one of the host's places, loopback too; a refusal holds nothing; the default leaves a quarter of the descriptors", (t) => {
  const sock = (addr) => Object.assign(new EventEmitter(), { remoteAddress: addr });
  const counts = new ConnectionsBySource(2, false, 3);
  const first = sock("10.0.0.1");
  assert.ok(counts.take(first));
  assert.ok(counts.take(sock("10.0.0.2")));
  assert.ok(counts.take(sock("127.0.0.1")), "loopback: not counted per source");
  assert.ok(!counts.take(sock("10.0.0.3")), "past the host's bound");
  assert.ok(!counts.take(sock("127.0.0.1")), "loopback too");
  assert.equal(counts.held("10.0.0.3"), 0, "a refusal holds nothing");
  assert.equal(counts.total, 3);
  first.emit("close");
  assert.equal(counts.total, 2);
  assert.ok(counts.take(sock("10.0.0.3")), "a place came back");
  assert.ok(!counts.take(sock("10.0.0.4")));

  // The host's bound is checked first: a source under its own bound is
  // refused without a place of its source.
  const a = new ConnectionsBySource(1, true, 1);
  assert.ok(a.take(sock("10.0.0.1")));
  assert.ok(!a.take(sock("10.0.0.2")));
  assert.equal(a.held("10.0.0.2"), 0);

  // Three quarters of the soft "Max open files" (at least 64), 49152
  // when unlimited or unreadable.
  const dir = mkdtempSync(join(tmpdir(), "tether-limits-"));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const limits = (soft) => {
    const path = join(dir, `limits-${soft}`);
    writeFileSync(
      path,
      "Limit                     Soft Limit           Hard Limit           Units     \n" +
        "Max file size             unlimited            unlimited            bytes     \n" +
        `Max open files            ${soft.padEnd(20)} 1048576              files     \n`,
    );
    return path;
  };
  assert.equal(defaultMaxConnections(limits("20000")), 15000);
  assert.equal(defaultMaxConnections(limits("1023")), 765);
  assert.equal(defaultMaxConnections(limits("50")), 64);
  assert.equal(defaultMaxConnections(limits("1048576")), 65536);
  assert.equal(defaultMaxConnections(limits("unlimited")), 49152);
  assert.equal(defaultMaxConnections(join(dir, "missing")), 49152);
  assert.equal(DEFAULT_LIMITS.maxConnections, defaultMaxConnections());
});
