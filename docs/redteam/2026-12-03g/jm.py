"""JMUX helpers: a `tether jmux tcp-listen://` process, targets, message codec."""
import sys, socket, struct, threading, time, subprocess, os
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import TETHER, status, kill, drain_output

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def start_jmux(extra=()):
    port = free_port()
    args = [TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*", *extra]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = drain_output(p)
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port), timeout=1)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            return p, s, out
        except OSError:
            time.sleep(0.1)
    kill(p); raise RuntimeError("jmux did not listen: " + repr(b"".join(out)))

def msg(t, body):
    return struct.pack("!BHB", t, 4 + len(body), 0) + body

def OPEN(cid, url, window=1 << 20, maxp=4096):
    return msg(100, struct.pack("!IIH", cid, window, maxp) + url.encode() if isinstance(url, str) else struct.pack("!IIH", cid, window, maxp) + url)
def WADJ(rid, n): return msg(103, struct.pack("!II", rid, n))
def DATA(rid, b): return msg(104, struct.pack("!I", rid) + b)
def EOF(rid): return msg(105, struct.pack("!I", rid))
def CLOSE(rid): return msg(106, struct.pack("!I", rid))

class Reader:
    def __init__(self, s):
        self.s, self.buf = s, b""
    def next(self, timeout=5):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                t, n, f = struct.unpack("!BHB", self.buf[:4])
                if n < 4: raise RuntimeError("bad size from guest")
                if len(self.buf) >= n:
                    m, self.buf = self.buf[:n], self.buf[n:]
                    return t, m[4:]
            try:
                c = self.s.recv(1 << 20)
            except (socket.timeout, ConnectionResetError):
                return None
            if not c: return None
            self.buf += c

def target(kind):
    """kind: echo | source | sink-never-read. Returns port."""
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(1024)
    conns = []
    def serve(c):
        try:
            if kind == "echo":
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
            elif kind == "source":
                blob = b"s" * 65536
                while True: c.sendall(blob)
            else:
                conns.append(c); time.sleep(3600)
        except OSError:
            pass
    def acc():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]

# --- round 8: run the JMUX guest on the Rust host (HOST=rust, default) or the Node host (HOST=node)
HOSTK = os.environ.get("HOST", "rust")
NODE = "/work/main/target/peers/node/bin/node"
NODE_HOST = os.environ.get("NODE_HOST", "/work/rt8/node/bin/tether-node.mjs")
NODE_CACHE = os.environ.get("NODE_CACHE", "/tmp/rt8g-node-cache")
JMUX_WASM = os.environ.get("JMUX_WASM", "/work/rt8/bin/jmux.wasm")

def jmux_argv(*proxy_args):
    """argv running `jmux-proxy PROXY_ARGS` on the chosen host. On node, host policy:
    --allow 127.0.0.1:* (targets, pipe), --listen 127.0.0.1:* (listeners)."""
    if HOSTK == "rust":
        return [TETHER, "jmux", *proxy_args]
    return [NODE, "--experimental-wasm-jspi", NODE_HOST, "run", JMUX_WASM,
            "--allow", "127.0.0.1:*", "--listen", "127.0.0.1:*", "--cache", NODE_CACHE,
            "--", "jmux-proxy", *proxy_args]
