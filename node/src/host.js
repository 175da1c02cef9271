// One Tether host on Node: the policy, the limits, the statistics and the
// whole import object a Tether guest needs (tether:streams, wasi:io, the
// clocks and stdio from this folder; the rest of wasi:cli and random
// from preview2-shim).

import { cli, random } from "@bytecodealliance/preview2-shim";
import { Policy } from "./policy.js";
import { DEFAULT_LIMITS, Stats } from "./config.js";
import { ioImports, Signal } from "./io.js";
import { websocketImports } from "./websocket.js";
import { tcpImports } from "./tcp.js";
import { readinessImports } from "./readiness.js";
import { aeadImports } from "./aead.js";

/** Thrown by `wasi:cli/exit` to unwind the guest with its status. */
export class GuestExit extends Error {
  constructor(code) {
    super(`guest exited with status ${code}`);
    this.code = code;
  }
}

/** The host state shared by every resource of one guest run. */
export class Host {
  /**
   * @param {{allow?: string[], deny?: string[], listen?: string[]}} policy rules as on the CLI
   * @param {Partial<typeof DEFAULT_LIMITS>} limits overrides of the defaults
   * @param {string[]} caFiles PEM files trusted for wss:// (replacing the system roots when given)
   * @param {string[]} args the guest's arguments, program name first
   */
  constructor({ policy = {}, limits = {}, caFiles = [], args = [] } = {}) {
    this.policy = new Policy(policy);
    this.limits = { ...DEFAULT_LIMITS, ...limits };
    this.caFiles = caFiles;
    this.args = args;
    this.stats = new Stats();
    this.conns = new Set();
    this.socks = new Set();
    this.changed = new Signal();
  }

  /** The import object for jco's `instantiate`. */
  imports() {
    const args = this.args;
    return {
      ...ioImports(),
      "tether:streams/types": {},
      "tether:streams/websocket": websocketImports(this),
      "tether:streams/tcp": tcpImports(this),
      "tether:streams/readiness": readinessImports(this),
      "tether:streams/aead": aeadImports(this),
      "wasi:cli/environment": {
        getEnvironment: () => [],
        getArguments: () => args,
        initialCwd: () => undefined,
      },
      "wasi:cli/exit": {
        exit: (status) => {
          throw new GuestExit(status.tag === "err" ? 1 : 0);
        },
        exitWithCode: (code) => {
          throw new GuestExit(code);
        },
      },
      "wasi:cli/terminal-input": cli.terminalInput,
      "wasi:cli/terminal-output": cli.terminalOutput,
      "wasi:cli/terminal-stdin": cli.terminalStdin,
      "wasi:cli/terminal-stdout": cli.terminalStdout,
      "wasi:cli/terminal-stderr": cli.terminalStderr,
      "wasi:random/insecure-seed": random.insecureSeed,
      "wasi:random/insecure": random.insecure,
      "wasi:random/random": random.random,
    };
  }

  /**
   * Ends the run: closes every open message stream (1000 after its queue
   * when the guest succeeded, 1011 with `failure`, a fixed phrase,
   * otherwise); ends every TCP byte stream after what the guest wrote
   * (FIN), or resets it (RST, its queue dropped) when the guest failed;
   * and resolves once every message stream is gone and every byte stream
   * has sent its bytes and FIN, or the linger time passed (as Rust's
   * `HostCtx::drained`: exiting earlier drops what the host still held).
   */
  async shutdown(failure) {
    const drains = [];
    for (const s of [...this.socks]) {
      const sock = s.sock;
      if (failure) {
        sock.resetAndDestroy();
        continue;
      }
      if (!sock.writableEnded) sock.end();
      if (!sock.writableFinished && !sock.destroyed) {
        drains.push(
          new Promise((resolve) => {
            sock.once("finish", resolve);
            sock.once("close", resolve);
          }),
        );
      }
    }
    for (const c of [...this.conns]) {
      if (failure) {
        if (!c.ended) {
          c.closing = true;
          c.ws.close(1011, failure.slice(0, 120));
          setTimeout(() => c.ws.terminate(), this.limits.lingerTimeoutMs).unref();
        }
      } else {
        c.startClose(1000, "");
      }
    }
    const deadline = Date.now() + this.limits.lingerTimeoutMs;
    while (this.conns.size > 0 && Date.now() < deadline) {
      await new Promise((resolve) => {
        const t = setTimeout(resolve, Math.max(1, deadline - Date.now()));
        const done = () => {
          this.changed.waiters.delete(done);
          clearTimeout(t);
          resolve();
        };
        this.changed.waiters.add(done);
      });
    }
    let timer;
    await Promise.race([
      Promise.all(drains),
      new Promise((resolve) => (timer = setTimeout(resolve, Math.max(0, deadline - Date.now())))),
    ]);
    clearTimeout(timer);
  }
}
