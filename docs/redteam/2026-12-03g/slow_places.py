"""Handshake places under a churning slowloris: do legitimate clients that are merely slow
(request head in two parts D s apart) keep their place?

Echo guest server (Rust host, or HOST=node). The attacker keeps A connections that send
b"GET / HTTP/1.1\\r\\nX-Slow: " and nothing more, re-opening each one the server closes
(the round-7 slowloris.py model), from SRC_A (default 127.0.0.1). Legitimate clients from
SRC_L (default 127.0.0.2) send the head in two parts D s apart, then one echo; K tries per D,
4 at a time. Prints success counts per D, with and without the attacker, and the attacker's
connect rate and host CPU.
Usage: timeout 300 nice -n 19 python3 slow_places.py A K D1,D2,...   (env PLACES= max handshakes)"""
import sys, os, time, socket, threading, selectors, base64, resource, subprocess, re
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, frame, read_frame, drain_output
from jm import HOSTK, NODE, NODE_HOST, NODE_CACHE, free_port
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
A, K = int(sys.argv[1]), int(sys.argv[2]); DS = [float(x) for x in sys.argv[3].split(",")]
SRC_A = os.environ.get("SRC_A", "127.0.0.1"); SRC_L = os.environ.get("SRC_L", "127.0.0.2")
PLACES = os.environ.get("PLACES")
extra = ((["--max-proxy-handshakes", PLACES] if os.environ.get("KIND") == "socks" else ["--max-handshakes-per-listener", PLACES]) if PLACES and os.environ.get("KIND") != "metrics" else [])
KIND = os.environ.get("KIND", "ws")
import struct
def wait_port(port):
    for _ in range(150):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); return
        except OSError: time.sleep(0.1)
if KIND == "socks":
    from jm import jmux_argv
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(512)
    def serve(c):
        try:
            while (d := c.recv(65536)): c.sendall(d)
        except OSError: pass
    def acc():
        while True:
            c, _ = ls.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start(); tport = ls.getsockname()[1]
    pipe, port = free_port(), free_port()
    pB = subprocess.Popen(jmux_argv(f"ws-listen://127.0.0.1:{pipe}", "--allow", "127.0.0.1:*"), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    wait_port(pipe)
    p = subprocess.Popen(jmux_argv(f"ws://127.0.0.1:{pipe}", f"socks5-listen://127.0.0.1:{port}", *extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    wait_port(port)
elif KIND == "metrics":
    port = free_port()
    p, _wsport = start_echo(extra=["--metrics", f"127.0.0.1:{port}"] + (["--max-concurrent-scrapes", PLACES] if PLACES else []), nofile=20000)
    wait_port(port)
elif HOSTK == "rust":
    p, port = start_echo(extra=extra, nofile=20000)
else:
    port = free_port()
    p = subprocess.Popen([NODE, "--experimental-wasm-jspi", NODE_HOST, "run", "/work/rt8/bin/echo.wasm", "--listen", "127.0.0.1:*",
                          "--cache", NODE_CACHE, *extra, "--", "server", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError: time.sleep(0.1)
out = drain_output(p)
stop = [False]; opened = [0]; pending = [0]; t_rate = [time.time()]
RATE = int(os.environ.get('RATE', 0))  # at most this many re-opens per second (0: at once)
def attacker():
    sel = selectors.DefaultSelector()
    def one():
        s = socket.socket(); s.setblocking(False); s.bind((SRC_A, 0))
        try: s.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        sel.register(s, selectors.EVENT_WRITE); opened[0] += 1
    for _ in range(A): one()
    while not stop[0]:
        for k, ev in sel.select(0.05):
            s = k.fileobj
            if ev & selectors.EVENT_WRITE:
                try: s.send(b"\x05" if KIND == "socks" else b"GET /metrics HTTP/1.1\r\nX-Slow: ")
                except OSError: pass
                sel.modify(s, selectors.EVENT_READ)
            else:
                try: d = s.recv(4096)
                except OSError: d = b""
                if not d:
                    sel.unregister(s); s.close(); pending[0] += 1
        if RATE:
            now = time.time(); allow = int((now - t_rate[0]) * RATE)
            if allow > 0:
                t_rate[0] = now
                for _ in range(min(allow, pending[0])): pending[0] -= 1; one()
        else:
            while pending[0]: pending[0] -= 1; one()
    for k in list(sel.get_map().values()): k.fileobj.close()

def legit(d):
    t0 = time.perf_counter()
    try:
        s = socket.socket(); s.bind((SRC_L, 0)); s.settimeout(5); s.connect(("127.0.0.1", port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if KIND == "metrics":
            s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
            if d: time.sleep(d)
            s.sendall(b"\r\n")
            buf = s.recv(4096); s.close()
            return ("ok" if b" 200 " in buf.split(b"\r\n")[0] else (buf.split(b"\r\n")[0].decode(errors="replace") or "closed")), time.perf_counter() - t0
        if KIND == "socks":
            s.sendall(b"\x05\x01")
            if d: time.sleep(d)
            s.sendall(b"\x00")
            r = s.recv(2)
            if r != b"\x05\x00": return (f"greeting reply {r!r}"), time.perf_counter() - t0
            s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", tport))
            r = s.recv(10)
            if len(r) < 2 or r[1] != 0: return (f"connect reply {r[:2]!r}"), time.perf_counter() - t0
            s.sendall(b"ping"); r = s.recv(4); s.close()
            return ("ok" if r == b"ping" else "no echo"), time.perf_counter() - t0
        key = base64.b64encode(os.urandom(16)).decode()
        head = f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode()
        s.sendall(head[:20])
        if d: time.sleep(d)
        s.sendall(head[20:])
        buf = b""
        while b"\r\n\r\n" not in buf:
            c = s.recv(4096)
            if not c: return ("closed" if not buf else buf.split(b"\r\n")[0].decode(errors="replace")), time.perf_counter() - t0
            buf += c
        line = buf.split(b"\r\n")[0]
        if b" 101 " not in line: return line.decode(errors="replace"), time.perf_counter() - t0
        s.sendall(frame(2, b"ping")); r = read_frame(s, buf.split(b"\r\n\r\n", 1)[1], timeout=5); s.close()
        return ("ok" if r and r[2] == b"ping" else "no echo"), time.perf_counter() - t0
    except Exception as e:
        return type(e).__name__, time.perf_counter() - t0

def trial(label):
    for d in DS:
        res = []; lock = threading.Lock()
        def w(n):
            for _ in range(n):
                r = legit(d)
                with lock: res.append(r)
        ths = [threading.Thread(target=w, args=(K // 4,)) for _ in range(4)]
        [t.start() for t in ths]; [t.join() for t in ths]
        import collections
        c = collections.Counter(r[0] for r in res)
        oks = sorted(r[1] for r in res if r[0] == "ok")
        print(f"[{label}] head split {d:.1f} s apart: {c.get('ok',0)}/{len(res)} ok {dict(c)}; ok time p50 {oks[len(oks)//2]*1000 if oks else 0:.0f} ms", flush=True)

print(f"# host={HOSTK} A={A} attacker from {SRC_A}, legit from {SRC_L}, places={PLACES or 'default'}", flush=True)
trial("no attacker")
th = threading.Thread(target=attacker, daemon=True); th.start()
time.sleep(2.5)
st = status(p.pid); c0 = st["cpu_s"]; o0 = opened[0]; t0 = time.time()
trial(f"attacker {A}")
dt = time.time() - t0; st = status(p.pid)
print(f"attacker: {(opened[0]-o0)/dt:.0f} connects/s during the trial; host CPU {(st['cpu_s']-c0)/dt*100:.0f}%; {st}", flush=True)
stop[0] = True; th.join(5); time.sleep(1)
trial("after the attacker left")
kill(p)
if KIND == 'socks': kill(pB)
