"""JMUX raw-peer helpers for round 15 (tether jmux tcp-listen:// pipe)."""
import os, socket, struct, subprocess, threading, time, resource
TETHER = "/tmp/rt16/tether"

def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p

def status(pid):
    d = {}
    for l in open(f"/proc/{pid}/status"):
        k, v = l.split(":", 1); d[k] = v.strip()
    st = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    cpu = (int(st[11]) + int(st[12])) / os.sysconf("SC_CLK_TCK")
    return {"rss_mib": int(d["VmRSS"].split()[0]) // 1024, "hwm_mib": int(d["VmHWM"].split()[0]) // 1024,
            "fds": len(os.listdir(f"/proc/{pid}/fd")), "cpu_s": round(cpu, 2), "thr": int(d["Threads"])}

def start_jmux(extra=(), listeners=()):
    port = free_port()
    args = [TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", *listeners, "--allow", "127.0.0.1:*", *extra]
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = []
    threading.Thread(target=lambda: [out.append(l) for l in p.stdout], daemon=True).start()
    for _ in range(100):
        if any(f"tcp://127.0.0.1:{port}".encode() in l for l in out): break
        time.sleep(0.05)
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return p, s, out

def kill(p):
    try: p.kill(); p.wait(5)
    except Exception: pass

def msg(t, body, size=None):
    return struct.pack("!BHB", t, (4 + len(body)) if size is None else size, 0) + body
def OPEN(cid, url, window=1 << 20, maxp=4096):
    u = url.encode() if isinstance(url, str) else url
    return msg(100, struct.pack("!IIH", cid, window, maxp) + u)
def OSUCC(rid, sid, window=1 << 20, maxp=4096): return msg(101, struct.pack("!IIIH", rid, sid, window, maxp))
def OFAIL(rid, code=1, d=b""): return msg(102, struct.pack("!II", rid, code) + d)
def WADJ(rid, n): return msg(103, struct.pack("!II", rid, n))
def DATA(rid, b): return msg(104, struct.pack("!I", rid) + b)
def EOF(rid): return msg(105, struct.pack("!I", rid))
def CLOSE(rid): return msg(106, struct.pack("!I", rid))

class Reader:
    def __init__(self, s): self.s, self.buf = s, b""
    def next(self, timeout=5):
        self.s.settimeout(timeout)
        while True:
            if len(self.buf) >= 4:
                t, n, f = struct.unpack("!BHB", self.buf[:4])
                if n < 4: raise RuntimeError("bad size from guest")
                if len(self.buf) >= n:
                    m, self.buf = self.buf[:n], self.buf[n:]
                    return t, m[4:]
            try: c = self.s.recv(1 << 20)
            except (socket.timeout, ConnectionResetError): return None
            if not c: return "EOF"
            self.buf += c
    def until(self, pred, timeout=5):
        end = time.time() + timeout
        got = []
        while time.time() < end:
            m = self.next(max(0.01, end - time.time()))
            if m is None: break
            if m == "EOF": got.append(m); break
            got.append(m)
            if pred(m): return m, got
        return None, got

def target(kind):
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
        except OSError: pass
    def acc():
        while True:
            c, _ = ls.accept()
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]

def open_echo(s, r, cid, eport, maxp=4096, window=1 << 20):
    s.sendall(OPEN(cid, f"tcp://127.0.0.1:{eport}", window, maxp))
    m, _ = r.until(lambda m: m[0] in (101, 102) and struct.unpack("!I", m[1][:4])[0] == cid)
    return m
