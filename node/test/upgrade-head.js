// Shared by the tests: a client's opening handshake (RFC 6455 section 4.1).

import crypto from "node:crypto";

/** The request head of a WebSocket upgrade to `addr` ("host:port"), with a fresh key. */
export const upgradeHead = (addr) =>
  `GET / HTTP/1.1\r\nHost: ${addr}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n` +
  `Sec-WebSocket-Key: ${crypto.randomBytes(16).toString("base64")}\r\nSec-WebSocket-Version: 13\r\n\r\n`;
