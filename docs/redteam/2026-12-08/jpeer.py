"""Hostile JMUX peer harness for /tmp/rt18.

Starts `tether jmux tcp-listen://...` (under nice/timeout), streaming TCP targets,
opens channels with chosen max packet sizes / windows, reads the pipe at a chosen
rate/chunk, and reports per-channel bytes over time, tether CPU and RSS.
"""
import socket, struct, threading, time, subprocess, os, sys, json

import os as _os; TETHER = _os.environ.get("TETHER", "/tmp/rt18/bin/tether")
TICK = os.sysconf("SC_CLK_TCK")


def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p


def msg(t, body):
    return struct.pack("!BHB", t, 4 + len(body), 0) + body


def OPEN(cid, url, window=1 << 20, maxp=4096):
    return msg(100, struct.pack("!IIH", cid, window, maxp) + url.encode())
def OPEN_OK(rid, sid, window, maxp): return msg(101, struct.pack("!IIIH", rid, sid, window, maxp))
def WADJ(rid, n): return msg(103, struct.pack("!II", rid, n))
def DATA(rid, b): return msg(104, struct.pack("!I", rid) + b)
def EOF(rid): return msg(105, struct.pack("!I", rid))
def CLOSE(rid): return msg(106, struct.pack("!I", rid))


def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / TICK


def rss(pid):
    for l in open(f"/proc/{pid}/status"):
        if l.startswith("VmRSS"):
            return int(l.split()[1]) // 1024
    return -1


def start_tether(extra=(), log="/tmp/rt18/out/tether.log", tmo=180):
    port = free_port()
    if os.environ.get("PEER") == "jetsocat":
        args = ["nice", "-n", "19", "timeout", str(tmo), "/work/shared/peers/jetsocat/jetsocat", "jmux-proxy",
                f"tcp-listen://127.0.0.1:{port}", "--allow-all"]
    else:
        args = ["nice", "-n", "19", "timeout", str(tmo), TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}",
                "--allow", "127.0.0.1:*", *extra]
    p = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))
    # find tether pid (child of timeout)
    for _ in range(200):
        try:
            kids = open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()
            if kids:
                k = int(kids[0])
                k2 = open(f"/proc/{k}/task/{k}/children").read().split()
                if k2:
                    tpid = int(k2[0]); break
                if "tether" in open(f"/proc/{k}/cmdline").read() or "jetsocat" in open(f"/proc/{k}/cmdline").read():
                    tpid = k; break
        except OSError:
            pass
        time.sleep(0.05)
    else:
        raise RuntimeError("no tether pid")
    # wait for listen without probe connect
    for _ in range(200):
        out = subprocess.run(["ss", "-ltnH", f"sport = :{port}"], capture_output=True, text=True).stdout
        if out.strip():
            break
        time.sleep(0.05)
    return p, tpid, port


def stop(p):
    try:
        os.killpg  # noqa
        p.terminate(); p.wait(5)
    except Exception:
        try: p.kill()
        except Exception: pass


def connect(port, rcvbuf=None):
    s = socket.socket()
    if rcvbuf:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, rcvbuf)
    s.connect(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


class Targets:
    """A listening server; behaviour per connection chosen by `kind(idx)`:
    'source' streams as fast as possible; ('rate', Bps) streams at a rate;
    'echo'; 'sink' (never reads)."""
    def __init__(self, kind, sndbuf=None):
        self.ls = socket.socket(); self.ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.ls.bind(("127.0.0.1", 0)); self.ls.listen(2048)
        self.port = self.ls.getsockname()[1]
        self.kind = kind; self.sndbuf = sndbuf; self.n = 0; self.conns = []
        self.sent = {}
        threading.Thread(target=self.acc, daemon=True).start()

    def acc(self):
        while True:
            try:
                c, _ = self.ls.accept()
            except OSError:
                return
            i = self.n; self.n += 1; self.conns.append(c)
            threading.Thread(target=self.serve, args=(c, i), daemon=True).start()

    def serve(self, c, i):
        k = self.kind(i) if callable(self.kind) else self.kind
        if self.sndbuf:
            c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, self.sndbuf)
        try:
            if k == "source":
                blob = b"s" * 65536
                while True:
                    c.sendall(blob)
            elif isinstance(k, tuple) and k[0] == "rate":
                bps = k[1]; blob = b"r" * 1024; t0 = time.time(); sent = 0
                while True:
                    if sent > bps * (time.time() - t0):
                        time.sleep(0.01); continue
                    c.sendall(blob); sent += len(blob)
            elif k == "echo":
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
            elif k == "sink":
                time.sleep(3600)
            elif k == "idle":
                while c.recv(65536):
                    pass
        except OSError:
            pass


class Reader:
    """Parses guest->peer messages; counts DATA bytes per sender channel (by our id)."""
    def __init__(self, s):
        self.s = s; self.buf = bytearray(); self.per = {}; self.types = {}
        self.opened = {}  # our id -> guest id
        self.failed = {}
        self.total = 0

    def feed(self, c):
        self.buf += c; self.total += len(c)
        b = self.buf; off = 0
        while len(b) - off >= 4:
            t = b[off]; n = (b[off + 1] << 8) | b[off + 2]
            if n < 4:
                raise RuntimeError("bad size")
            if len(b) - off < n:
                break
            self.types[t] = self.types.get(t, 0) + 1
            if t == 104:
                rid = struct.unpack_from("!I", b, off + 4)[0]
                self.per[rid] = self.per.get(rid, 0) + n - 8
            elif t == 101:
                rid, sid = struct.unpack_from("!II", b, off + 4)
                self.opened[rid] = sid
            elif t == 102:
                rid, code = struct.unpack_from("!II", b, off + 4)
                self.failed[rid] = (code, bytes(b[off + 12:off + n]))
            off += n
        del b[:off]

    def recv(self, k=1 << 16, timeout=5):
        self.s.settimeout(timeout)
        try:
            c = self.s.recv(k)
        except socket.timeout:
            return None
        if not c:
            raise EOFError
        self.feed(c)
        return len(c)

    def until_opened(self, n, timeout=30):
        t0 = time.time()
        while len(self.opened) + len(self.failed) < n and time.time() - t0 < timeout:
            self.recv()
