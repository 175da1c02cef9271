"""Many sources, each within the per-source bound, hold upgraded WebSocket connections open until the
host's descriptors run out; then a client from 127.0.0.2 tries 20 upgrades and a scraper 20 metrics scrapes.

usage: held_many.py SOURCES PER_SOURCE NOFILE [tether run options...]

The echo server runs with RLIMIT_NOFILE = NOFILE (soft and hard) and `--metrics 127.0.0.1:PORT`. Sources
are 127.0.1.1 ... 127.0.1.SOURCES (`--max-connections-per-source` is given so loopback counts, as remote
clients would). Prints what the attackers got (101, 503, other), the legitimate client's answers and how
long each took, the scrapes' outcomes, and the host's RSS and descriptors while held.
Environment: TETHER, G (folder of echo.wasm), as in ../2026-12-03g/rt.py.
"""
import os, resource, socket, statistics, sys, time, collections

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-03g"))
import rt  # noqa: E402
from jm import free_port  # noqa: E402

n_src, per, nofile = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
extra = sys.argv[4:]
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
mport = free_port()
p, port = rt.start_echo(extra=["--metrics", f"127.0.0.1:{mport}", "--max-connections-per-source", "256", *extra],
                        nofile=nofile)
out = rt.drain_output(p)
time.sleep(0.3)

held, answers = [], collections.Counter()
t0 = time.time()
for i in range(n_src):
    for _ in range(per):
        try:
            s, head, _ = rt.ws_connect(port, timeout=0.5, source=f"127.0.1.{i + 1}")
            held.append(s); answers["101"] += 1
        except Exception as e:  # refused, reset, timeout
            answers["503" if "503" in str(e) else "other"] += 1
open_s = time.time() - t0
time.sleep(0.5)
during = rt.status(p.pid)


def legit():
    s, _, rest = rt.ws_connect(port, timeout=2, source="127.0.0.2")
    s.sendall(rt.frame(2, b"ping"))
    got = rest
    while len(got) < 6:
        c = s.recv(4096)
        if not c:
            raise RuntimeError("closed before the echo")
        got += c
    s.close()


def scrape():
    s = socket.create_connection(("127.0.0.1", mport), timeout=2)
    s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    got = b""
    while True:
        c = s.recv(65536)
        if not c:
            break
        got += c
    s.close()
    if not got.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(got[:30].decode(errors="replace"))


def tries(f, n=20):
    outcome, times = collections.Counter(), []
    for _ in range(n):
        t = time.time()
        try:
            f(); outcome["ok"] += 1
        except Exception as e:
            k = "503" if "503" in str(e) else type(e).__name__
            outcome[k] += 1
        times.append(time.time() - t)
        time.sleep(0.05)
    return dict(outcome), f"p50 {statistics.median(times) * 1000:.1f} ms, max {max(times) * 1000:.0f} ms"


print(f"# {os.environ.get('TETHER')} NOFILE={nofile}")
print(f"attackers: {n_src} x {per} tried in {open_s:.1f} s: {dict(answers)}")
print(f"host held: {during}")
print("legitimate client:", *tries(legit))
print("metrics scrapes:", *tries(scrape))
for s in held:
    s.close()
p.kill()
