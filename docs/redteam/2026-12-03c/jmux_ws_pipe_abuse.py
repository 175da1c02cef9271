"""WebSocket framing abuse on `tether jmux ws-listen://` (the JMUX pipe over WebSocket).

Phase 0 (before any pipe peer): K half-open upgrade requests (TCP open, half a
request head, silence), then a well-formed peer tries to become the pipe:
how long until it gets its 101, what it hears meanwhile.
Phase 1 (raw WebSocket pipe peer, masked frames written by hand): one channel to
an echo target; 32 B round trips through it as the baseline, then after/while:
  frag1   : each JMUX DATA sent as 1-byte fragments (continuations)
  ping    : 125-byte pings between fragments, pongs never read
  big     : one binary message of M MiB holding 8-byte JMUX CLOSEs for unknown ids
            (each is dropped by the session): guest stall, RSS
Usage: timeout 300 nice -n 19 python3 jmux_ws_pipe_abuse.py [K_halfopen] [M_mib] [big_count]
"""
import sys, socket, struct, time, subprocess, os, base64, threading
sys.path.insert(0, "/work/rt4")
from rt import TETHER, status, kill, drain_output, frame
from jm import OPEN, DATA, CLOSE, free_port, target

K = int(sys.argv[1]) if len(sys.argv) > 1 else 1100
M = int(sys.argv[2]) if len(sys.argv) > 2 else 60
BIG = int(sys.argv[3]) if len(sys.argv) > 3 else 3

echo = target("echo")
port = free_port()
p = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
for _ in range(100):
    if any(b"pipe listening" in l for l in out): break
    time.sleep(0.1)
print("start:", status(p.pid), flush=True)

def upgrade(timeout=5):
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET / HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        c = s.recv(4096)
        if not c: raise RuntimeError(f"closed: {buf[:60]!r}")
        buf += c
    head, rest = buf.split(b"\r\n\r\n", 1)
    status_line = head.split(b"\r\n")[0]
    if b" 101 " not in status_line:
        s.close(); raise RuntimeError(status_line.decode())
    return s, rest

# ---- phase 0: half-open handshakes before the pipe peer
half = []
if K:
    for i in range(K):
        try:
            c = socket.create_connection(("127.0.0.1", port), timeout=2)
            c.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n")
            half.append(c)
        except OSError as e:
            print("half-open", i, e); break
    time.sleep(0.5)
    print(f"{len(half)} half-open upgrades held:", status(p.pid), flush=True)
t0 = time.time(); tries = []
while True:
    try:
        s, rest = upgrade(); break
    except Exception as e:
        tries.append(str(e)[:40])
        if time.time() - t0 > 30: raise
        time.sleep(0.5)
print(f"legit pipe peer got 101 after {time.time() - t0:.2f} s; {len(tries)} failed tries, first: {tries[:1]}, last: {tries[-1:]}", flush=True)
for c in half: c.close()

# ---- JMUX over the WebSocket
class WsJmux:
    def __init__(self, s, rest):
        self.s, self.buf, self.jbuf = s, rest, b""
        self.pongs = 0
    def send(self, jbytes):
        self.s.sendall(frame(2, jbytes))
    def _frame(self):
        while True:
            if len(self.buf) >= 2:
                b0, b1 = self.buf[0], self.buf[1]; n = b1 & 0x7f; off = 2
                if n == 126 and len(self.buf) >= 4: n = struct.unpack("!H", self.buf[2:4])[0]; off = 4
                elif n == 127 and len(self.buf) >= 10: n = struct.unpack("!Q", self.buf[2:10])[0]; off = 10
                elif n >= 126: n = None
                if n is not None and len(self.buf) >= off + n:
                    f = (b0 & 0x0f, self.buf[off:off + n]); self.buf = self.buf[off + n:]; return f
            c = self.s.recv(1 << 20)
            if not c: return None
            self.buf += c
    def next(self, timeout=10):
        self.s.settimeout(timeout)
        while True:
            if len(self.jbuf) >= 4:
                t, n, _ = struct.unpack("!BHB", self.jbuf[:4])
                if len(self.jbuf) >= n:
                    m, self.jbuf = self.jbuf[:n], self.jbuf[n:]; return t, m[4:]
            try:
                f = self._frame()
            except (socket.timeout, ConnectionResetError):
                return None
            if f is None: return None
            op, pl = f
            if op == 2: self.jbuf += pl
            elif op == 10: self.pongs += 1
            elif op == 8: print("close frame from host:", pl[:2].hex(), pl[2:60]); return None

w = WsJmux(s, rest)
w.send(OPEN(0, f"tcp://127.0.0.1:{echo}"))
t, b = w.next()
assert t == 101, (t, b)
gid = struct.unpack("!I", b[4:8])[0]

def rtts(n=300, send=None):
    xs = []
    for _ in range(n):
        t0 = time.perf_counter()
        (send or w.send)(DATA(gid, b"x" * 32))
        got = 0
        while got < 32:
            m = w.next(30)
            if m is None: raise RuntimeError("no echo")
            if m[0] == 104: got += len(m[1]) - 4
        xs.append((time.perf_counter() - t0) * 1e6)
    xs.sort(); return xs[len(xs) // 2], xs[int(len(xs) * .99)]

def measure(label, n=300, send=None):
    c0 = status(p.pid)["cpu_s"]
    p50, p99 = rtts(n, send)
    st = status(p.pid)
    print(f"{label:42s} p50 {p50:8.0f} us  p99 {p99:8.0f} us  tether CPU/RT {(st['cpu_s'] - c0) / n * 1e6:7.0f} us  RSS {st['rss_mib']} MiB fds {st['fds']} thr {st['threads']}", flush=True)

rtts(100)
measure("baseline (1 frame per JMUX msg)")
if os.environ.get("SKIP_FRAG"): BIGONLY = True
else: BIGONLY = False

def frag1(j):
    parts = [frame(2 if i == 0 else 0, j[i:i + 1], fin=(i == len(j) - 1)) for i in range(len(j))]
    w.s.sendall(b"".join(parts))
if not BIGONLY: measure("1-byte fragments (44 frames per msg)", 300, frag1)

def frag_ping(j):
    parts = []
    for i in range(len(j)):
        parts.append(frame(2 if i == 0 else 0, j[i:i + 1], fin=(i == len(j) - 1)))
        parts.append(frame(9, b"p" * 125))
    w.s.sendall(b"".join(parts))
if not BIGONLY:
    measure("1-byte fragments + 125 B ping between each", 300, frag_ping)
    measure("baseline again")

# big messages of cheap JMUX messages (CLOSE for unknown ids: dropped)
unit = CLOSE(0x7fff0000)  # 8 bytes
for i in range(BIG):
    blob = unit * (M * (1 << 20) // len(unit))
    if p.poll() is not None or w.s.fileno() < 0: break
    try: c0 = status(p.pid)["cpu_s"]
    except KeyError: break
    t0 = time.time()
    hdr = struct.pack("!BBQ", 0x82, 0x80 | 127, len(blob)) + b"\0\0\0\0"
    w.s.sendall(hdr); w.s.sendall(blob)
    t_sent = time.time() - t0
    # first echo after the blob: how long is the channel stalled
    w.send(DATA(gid, b"y" * 32))
    got = 0; peak = 0
    while got < 32:
        m = w.next(60)
        if m is None: print("no echo after big message"); break
        if m[0] == 104: got += len(m[1]) - 4
    try: st = status(p.pid)
    except (KeyError, FileNotFoundError): st = {}
    print(f"big message {i + 1}: {len(blob) >> 20} MiB sent in {t_sent:.2f} s; echo behind it after {time.time() - t0:.2f} s; "
          f"tether CPU {st.get('cpu_s', 0) - c0:.2f} s; RSS {st.get('rss_mib')} MiB HWM {st.get('hwm_mib')} MiB", flush=True)
    if p.poll() is not None: break
time.sleep(1)
if p.poll() is None:
    measure("after the big messages")
print("tether alive:", p.poll() is None, "exit:", p.poll())
print("log tail:", [l.decode(errors='replace').strip()[:160] for l in out[-6:]])
kill(p)
