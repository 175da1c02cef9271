"""TCP_NODELAY on the sockets the host accepts: a metrics scrape against a guest's WebSocket accept,
traced with `strace -f -e trace=accept4,setsockopt` on the tether process (Linux, root or ptrace allowed).
usage: nodelay_metrics.py"""
import sys, os, subprocess, time, urllib.request, re
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

fh = open(os.path.join(OUT, "nodelay_metrics.txt"), "w")
p = Proc([TETHER, "run", f"{BIN}/echo.wasm", "--listen", "127.0.0.1:*", "--metrics", "127.0.0.1:0", "--",
          "server", "127.0.0.1:0", "0"])
mport = int(p.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)").group(1))
wport = int(p.wait_line(r"echo: listening on 127\.0\.0\.1:(\d+)").group(1))
trace = os.path.join(OUT, "nodelay_metrics.strace")
st = subprocess.Popen(["strace", "-f", "-qq", "-e", "trace=accept4,setsockopt", "-o", trace, "-p", str(p.pid)])
time.sleep(1.0)
for _ in range(3):
    urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read()
    time.sleep(0.2)
log(fh, "scrapes done (metrics port %d)" % mport)
for _ in range(3):
    w = WS(wport); w.send(b"x"); time.sleep(0.2); w.recv_all(0.5); w.s.close(); time.sleep(0.2)
log(fh, "WebSocket connections done (guest port %d)" % wport)
time.sleep(0.5)
st.terminate(); st.wait(5); p.kill()
lines = open(trace).read().splitlines()
acc = [l for l in lines if "accept4" in l and "= -1" not in l and "resumed" not in l or ("accept4 resumed" in l and "= -1" not in l)]
nod = [l for l in lines if "TCP_NODELAY" in l]
for l in lines: log(fh, "  " + l[:200])
log(fh, f"accepts: {len(acc)}; setsockopt(TCP_NODELAY) calls: {len(nod)}")
