"""Host-wide max_buffered_bytes with many streams held back by a spent budget.

Echo guest server. N "slow" WebSocket clients: each keeps sending 16 KiB binary messages
(never stops) and reads only READ bytes every PERIOD s (SO_RCVBUF 4 KiB), so the echoes pile up
in the host past the 64 KiB allowance; with a small --max-buffered-bytes the budget is spent and
the streams are held back, and every read by a slow client is a small release ("dip").
A live client does 32 B round trips (2 ms apart) meanwhile.
Measured over DUR s after a FILL s warm-up: tether CPU %, context switches/s of all its threads
(wake-ups), live p50/p99, RSS, and bytes the slow clients read.
Usage: timeout 300 nice -n 19 python3 held_back.py N BUDGET_BYTES [DUR] [FILL]
  env BUF=per-stream inbound/outbound buffer bytes (default 262144), READ (1024), PERIOD (0.1)"""
import sys, os, time, socket, threading, resource, statistics
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
N = int(sys.argv[1]); BUDGET = int(sys.argv[2])
DUR = float(sys.argv[3]) if len(sys.argv) > 3 else 8; FILL = float(sys.argv[4]) if len(sys.argv) > 4 else 4
BUF = int(os.environ.get("BUF", 262144)); READ = int(os.environ.get("READ", 1024)); PERIOD = float(os.environ.get("PERIOD", 0.1)); SENDMAX = int(os.environ.get("SENDMAX", 1))
from jm import free_port
MPORT = free_port()
p, port = start_echo(extra=["--max-buffered-bytes", str(BUDGET), "--inbound-buffer-bytes", str(BUF),
                            "--outbound-buffer-bytes", str(BUF), "--metrics", f"127.0.0.1:{MPORT}"], nofile=20000)
out = drain_output(p)

def buffered():
    import urllib.request
    try:
        t = urllib.request.urlopen(f"http://127.0.0.1:{MPORT}/metrics", timeout=3).read().decode()
        return [l.split()[-1] for l in t.splitlines() if l.startswith("tether_buffered_bytes")][0]
    except Exception as e:
        return f"?({e})"
def ctxsw(pid):
    n = 0
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            for l in open(f"/proc/{pid}/task/{t}/status"):
                if "ctxt_switches" in l: n += int(l.split()[1])
        except OSError: pass
    return n

live_s, _, _ = ws_connect(port)
BIG = int(os.environ.get("LIVEBIG", 0)); WIN = int(os.environ.get("LIVEWIN", 8))
def live_bulk(dur):
    """pipelined echo of BIG-byte messages, WIN in flight (sender thread + reader); returns (messages, MB/s, p50 ms)"""
    import collections
    m = frame(2, b"B" * BIG); inflight = collections.deque(); cv = threading.Condition(); stop_b = [False]
    def sender():
        while not stop_b[0]:
            with cv:
                while len(inflight) >= WIN and not stop_b[0]: cv.wait(0.1)
                if stop_b[0]: return
                inflight.append(time.perf_counter())
            try: live_s.sendall(m)
            except OSError: return
    live_s.settimeout(10); th = threading.Thread(target=sender, daemon=True); th.start()
    buf = b""; n = 0; lat = []; end = time.time() + dur
    while time.time() < end:
        r = read_frame(live_s, buf, timeout=10)
        if r is None: break
        buf = r[3]
        if r[0] == 2:
            with cv: n += 1; lat.append(time.perf_counter() - inflight.popleft()); cv.notify()
    with cv: stop_b[0] = True; cv.notify()
    th.join()
    while True:
        with cv:
            if not inflight: break
        r = read_frame(live_s, buf, timeout=10)
        if r is None: break
        buf = r[3]
        if r[0] == 2:
            with cv: inflight.popleft()
    lat.sort()
    return n, n * BIG / dur / 1e6, (lat[len(lat)//2] * 1000 if lat else 0)
def live(dur):
    if BIG:
        n, mbs, p50 = live_bulk(dur)
        return n, mbs, p50   # printed as RTs, p50, p99 fields: messages, MB/s, p50 ms
    xs = []; end = time.time() + dur
    while time.time() < end:
        t0 = time.perf_counter(); live_s.sendall(frame(2, b"x" * 32)); r = read_frame(live_s, timeout=10)
        if r is None: xs.append(10e6); break
        xs.append((time.perf_counter() - t0) * 1e6); time.sleep(0.002)
    xs.sort(); return len(xs), xs[len(xs) // 2], xs[int(len(xs) * .99)]

slow = []
for i in range(N):
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(os.environ.get("RCVBUF", 4096)))
    s.connect(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    import base64
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    s.setblocking(False); slow.append([s, b"", 0, None, b""])
MSG = frame(2, b"m" * 16384)
stop = False; got = [0]; sent = [0]
def pump():
    while not stop:
        t0 = time.time()
        for c in slow:
            s = c[0]
            for _ in range(SENDMAX):
                if not c[1]: c[1] = MSG
                try:
                    n = s.send(c[1]); c[1] = c[1][n:]; sent[0] += n
                except (BlockingIOError, InterruptedError): break
                except OSError: c[1] = b"x"; break
            try:
                d = s.recv(READ); got[0] += len(d); c[2] += len(d)
                if not d and not c[3]: c[3] = 'eof'
                elif d: c[4] = (c[4] + d)[-64:]
            except (BlockingIOError, InterruptedError): pass
            except OSError as e:
                if not c[3]: c[3] = type(e).__name__
        dt = time.time() - t0
        if dt < PERIOD: time.sleep(PERIOD - dt)
print(f"# N={N} budget={BUDGET} per-stream buffers={BUF} slow read {READ} B / {PERIOD} s; tether {p.pid}", flush=True)
st = status(p.pid); c0 = st["cpu_s"]; w0 = ctxsw(p.pid); t0 = time.time()
n, p50, p99 = live(4)
dt = time.time() - t0; st = status(p.pid)
print(f"[no slow traffic, {N} connected] live {n} RTs p50 {p50:.0f} us p99 {p99:.0f} us; CPU {(st['cpu_s']-c0)/dt*100:.0f}%; "
      f"ctxsw {(ctxsw(p.pid)-w0)/dt:.0f}/s; rss {st['rss_mib']} MiB", flush=True)
th = threading.Thread(target=pump, daemon=True); th.start()
time.sleep(FILL)
PH = int(os.environ.get('PHASES', 2))
for k in range(PH):
    per0 = [c[2] for c in slow]
    st = status(p.pid); c0 = st["cpu_s"]; w0 = ctxsw(p.pid); g0 = got[0]; s0 = sent[0]; t0 = time.time()
    n, p50, p99 = live(DUR / 2)
    dt = time.time() - t0; st = status(p.pid)
    per = sorted(c[2] - a for c, a in zip(slow, per0)); z = sum(1 for x in per if x == 0)
    print(f"  per slow stream read in phase: min {per[0]} median {per[len(per)//2]} max {per[-1]} B; streams that got nothing: {z}", flush=True)
    print(f"  tether_buffered_bytes now {buffered()}", flush=True)
    print(f"[slow clients pumping #{k}] live {n} RTs p50 {p50:.0f} us p99 {p99:.0f} us; CPU {(st['cpu_s']-c0)/dt*100:.0f}%; "
          f"ctxsw {(ctxsw(p.pid)-w0)/dt:.0f}/s; slow read {(got[0]-g0)/dt/1e6:.2f} MB/s sent {(sent[0]-s0)/dt/1e6:.2f} MB/s; rss {st['rss_mib']} MiB", flush=True)
import subprocess as sp
def ssum():
    r = sp.run(["ss", "-tnH", "state", "established"], capture_output=True, text=True).stdout.split("\n")
    hs = [l.split() for l in r if f"127.0.0.1:{port} " in l and l.split()[2].endswith(f":{port}")]
    cs = [l.split() for l in r if l.split()[3:4] == [f"127.0.0.1:{port}"]] if False else [l.split() for l in r if len(l.split()) > 3 and l.split()[3] == f"127.0.0.1:{port}"]
    def q(rows, i): xs = sorted(int(x[i]) for x in rows); return (len(xs), sum(xs), xs[len(xs)//2] if xs else 0)
    print(f"ss: host side (n, sum, median) recv-q {q(hs,0)} send-q {q(hs,1)}; client side recv-q {q(cs,0)} send-q {q(cs,1)}", flush=True)
if os.environ.get("SS"): ssum()
stop = True; th.join()
import collections
print('slow streams ended:', collections.Counter(c[3] for c in slow), flush=True)
print('tail of one ended stream:', next((c[4] for c in slow if c[3]), b'')[-16:], flush=True)
for c in slow: c[0].close()
time.sleep(1)
print("after:", status(p.pid), "alive", p.poll() is None, flush=True)
kill(p)
