"""Wake-ups under a spent max_buffered_bytes budget: C clients each send
PER MiB to the echo guest (64 KiB messages) and do not read (SO_RCVBUF 4
KiB; MSG_KIB to change), so the budget (BUDGET MiB) is spent and their streams are held back.
Then, for DUR s, each client reads 4 KiB every 100 ms: every read lets the
host send a little more, and every such release dips the sum under the
budget. Prints the host's CPU over the trickle phase and a live client's
round trip during it.
Usage: timeout 300 nice -n 19 python3 budget_dips.py C [BUDGET_MiB] [PER_MiB] [DUR]
(env TETHER, G as rt.py)"""
import sys, os, socket, time, resource, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
C = int(sys.argv[1])
BUDGET = float(sys.argv[2]) if len(sys.argv) > 2 else 4
PER = float(sys.argv[3]) if len(sys.argv) > 3 else 1
DUR = float(sys.argv[4]) if len(sys.argv) > 4 else 10
MPORT = socket.socket(); MPORT.bind(("127.0.0.1", 0)); mport = MPORT.getsockname()[1]; MPORT.close()
p, port = start_echo(extra=["--max-buffered-bytes", str(int(BUDGET * (1 << 20))), "--metrics", f"127.0.0.1:{mport}"], nofile=20000)
def buffered():
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
    return next((float(l.split()[-1]) / 2**20 for l in text.splitlines() if l.startswith("tether_buffered_bytes")), float("nan"))
drain_output(p)
MSG = int(float(os.environ.get("MSG_KIB", "64")) * 1024)
blob = frame(2, b"w" * MSG) * max(1, 65536 // MSG)
cs = []
for _ in range(C):
    c, _, _ = ws_connect(port)
    c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.setblocking(False)
    cs.append([c, 0, b""])
end = time.time() + 15
while time.time() < end:
    busy = False
    for e in cs:
        while e[1] < PER * (1 << 20):
            try:
                if not e[2]: e[2] = blob
                n = e[0].send(e[2]); e[1] += n; e[2] = e[2][n:]
                busy = True
                if e[2]: break
            except (BlockingIOError, InterruptedError):
                break
    if not busy:
        break
    time.sleep(0.05)
time.sleep(1)
print(f"# C={C} messages {MSG} B, budget {BUDGET} MiB, each sent {sum(e[1] for e in cs) / C / 2**20:.2f} MiB; host buffers {buffered():.1f} MiB; host {status(p.pid)}", flush=True)
lat = []
stop = False
def live():
    s, _, rest = ws_connect(port)
    while not stop:
        t0 = time.perf_counter(); s.sendall(frame(2, b"x" * 32)); r = read_frame(s, rest, 10)
        if r is None: lat.append(float("inf")); return
        rest = r[3]; lat.append((time.perf_counter() - t0) * 1e6)
        time.sleep(0.01)
t = threading.Thread(target=live, daemon=True); t.start()
a = status(p.pid); t0 = time.time(); read = 0
while time.time() - t0 < DUR:
    for e in cs:
        try: read += len(e[0].recv(4096))
        except (BlockingIOError, InterruptedError): pass
    time.sleep(0.1)
b = status(p.pid); el = time.time() - t0
print(f"host buffers after the trickle {buffered():.1f} MiB", flush=True)
stop = True; t.join(12)
lat.sort()
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] if lat else float("nan")
print(f"trickle {el:.1f} s: clients read {read / 2**20:.1f} MiB; host cpu {(b['cpu_s'] - a['cpu_s']) / el * 100:.0f}%; live round trip p50 {q(0.5):.0f} us p99 {q(0.99):.0f} us ({len(lat)})", flush=True)
for e in cs: e[0].close()
kill(p)
