// The Node host refuses the upgrade requests the Rust host refuses
// (host/src/websocket/upgrade.rs; the red team of 2026-12-03, eighth
// round, finding 9): node's own parser let a 16,385-byte head, 125 or more
// header lines and `HTTP/2.0` through to a 101.

import { test } from "node:test";
import assert from "node:assert/strict";
import net from "node:net";
import { Host } from "../src/host.js";
import { websocketImports } from "../src/websocket.js";
import { MAX_REQUEST_HEAD_BYTES, MAX_REQUEST_HEADERS } from "../src/config.js";
import { upgradeHead } from "./upgrade-head.js";

/** Sends `request` and returns the status line of the answer. */
function statusOf(addr, request) {
  const [host, port] = addr.split(":");
  return new Promise((resolve) => {
    const sock = net.connect({ host, port: Number(port) });
    let got = "";
    sock.on("error", () => {});
    sock.on("connect", () => sock.write(request));
    sock.on("data", (d) => {
      got += d.toString("latin1");
      if (got.includes("\r\n")) {
        sock.destroy();
        resolve(got.split("\r\n")[0]);
      }
    });
    sock.on("close", () => resolve(got.split("\r\n")[0]));
  });
}

/** A good upgrade head with `extra` header lines before its blank line. */
const withHeaders = (addr, extra) => upgradeHead(addr).replace(/\r\n\r\n$/, `\r\n${extra.join("")}\r\n`);

test("upgrade requests past the Rust host's bounds are refused alike", async () => {
  const host = new Host({ policy: { listen: ["127.0.0.1:*"] } });
  const listener = await websocketImports(host).listen("127.0.0.1:0", {});
  const addr = listener.localAddress();
  try {
    const base = upgradeHead(addr).split("\r\n").length - 3;
    const lines = (n) => Array.from({ length: n }, (_, i) => `X-${i}: v\r\n`);
    const most = withHeaders(addr, lines(MAX_REQUEST_HEADERS - base));
    const padTo = (n) => {
      const head = withHeaders(addr, ["X-Pad: \r\n"]);
      return head.replace("X-Pad: ", `X-Pad: ${"p".repeat(n - head.length)}`);
    };
    const cases = [
      ["a good head", upgradeHead(addr), /^HTTP\/1\.1 101 /],
      [`${MAX_REQUEST_HEADERS} header lines`, most, /^HTTP\/1\.1 101 /],
      [`${MAX_REQUEST_HEADERS + 1} header lines`, withHeaders(addr, lines(MAX_REQUEST_HEADERS + 1 - base)), /^HTTP\/1\.1 431 /],
      [`a head of ${MAX_REQUEST_HEAD_BYTES} bytes`, padTo(MAX_REQUEST_HEAD_BYTES), /^HTTP\/1\.1 101 /],
      [`a head of ${MAX_REQUEST_HEAD_BYTES + 1} bytes`, padTo(MAX_REQUEST_HEAD_BYTES + 1), /^HTTP\/1\.1 431 /],
      ["HTTP/2.0", upgradeHead(addr).replace("HTTP/1.1", "HTTP/2.0"), /^HTTP\/1\.1 400 /],
      ["HTTP/1.0", upgradeHead(addr).replace("HTTP/1.1", "HTTP/1.0"), /^HTTP\/1\.1 400 /],
      // The red team of 2026-12-04g, F5: node upgraded these, where the
      // Rust host refuses them (host/src/websocket/upgrade.rs).
      ["Sec-WebSocket-Version: 8", upgradeHead(addr).replace("Sec-WebSocket-Version: 13", "Sec-WebSocket-Version: 8"), /^HTTP\/1\.1 426 /],
      ["two Sec-WebSocket-Version", withHeaders(addr, ["Sec-WebSocket-Version: 13\r\n"]), /^HTTP\/1\.1 400 /],
      ["no Host", upgradeHead(addr).replace(/Host: [^\r]*\r\n/, ""), /^HTTP\/1\.1 400 /],
      ["two Host", withHeaders(addr, ["Host: other\r\n"]), /^HTTP\/1\.1 400 /],
      ["a body (Content-Length: 5)", withHeaders(addr, ["Content-Length: 5\r\n"]) + "hello", /^HTTP\/1\.1 400 /],
      ["Transfer-Encoding: chunked", withHeaders(addr, ["Transfer-Encoding: chunked\r\n"]) + "0\r\n\r\n", /^HTTP\/1\.1 400 /],
      ["a frame after the head", upgradeHead(addr) + "\x82\x80abcd", /^HTTP\/1\.1 400 /],
      ["Content-Length: 0", withHeaders(addr, ["Content-Length: 0\r\n"]), /^HTTP\/1\.1 101 /],
    ];
    for (const [what, request, want] of cases) {
      assert.match(await statusOf(addr, request), want, what);
    }
  } finally {
    listener[Symbol.dispose]();
  }
});
