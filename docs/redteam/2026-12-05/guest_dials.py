#!/usr/bin/env python3
"""T1: a guest that dials N TCP connections (probe tcp-wakeups) to a holder.
Measures tether RSS / fds / threads, and metrics scrapes, against N.
usage: guest_dials.py N [NOFILE]   (needs /tmp/rt17/bin/tether, probe.wasm)"""
import sys, os, time, subprocess, signal, resource
sys.path.insert(0, os.path.dirname(__file__))
from common import *
N = int(sys.argv[1]); nofile = int(sys.argv[2]) if len(sys.argv) > 2 else None
hold = subprocess.Popen([sys.executable, os.path.join(os.path.dirname(__file__), "holder.py"), "0", "50"], stdout=subprocess.PIPE, text=True)
port = int(hold.stdout.readline().split()[1])
err = f"/tmp/rt17/logs/dials_{N}.err"
def lim():
    if nofile: resource.setrlimit(resource.RLIMIT_NOFILE, (nofile, nofile))
t = subprocess.Popen(["/tmp/rt17/bin/tether", "run", "/tmp/rt17/bin/probe.wasm", "--max-memory-mib", "16",
    "--allow", f"127.0.0.1:{port}", "--listen", "127.0.0.1:*", "--metrics", "127.0.0.1:0", "--",
    "tcp-wakeups", f"127.0.0.1:{port}", str(N)], stdout=subprocess.PIPE, stderr=open(err, "w"), text=True, preexec_fn=lim)
m = wait_line(err, r"metrics on http://([0-9.:]+)/metrics")
addr = m.group(1)
time.sleep(0.3)
if t.poll() is not None: print("exited", t.poll(), t.stdout.read()); sys.exit(1)
print(f"N={N} start rss={rss_mib(t.pid):.1f}MiB fds={fds(t.pid)}")
last = -1; t0 = time.time()
while time.time() - t0 < 40:
    f = fds(t.pid)
    if t.poll() is not None: break
    if f == last: break
    last = f; time.sleep(1.0)
print(f"N={N} after dials {time.time()-t0:.1f}s rss={rss_mib(t.pid):.1f}MiB hwm={hwm_mib(t.pid):.1f}MiB fds={fds(t.pid)} threads={threads(t.pid)} cpu={cpu(t.pid):.2f}s exited={t.poll()}")
ok = 0; fails = []
for i in range(5):
    r = scrape(addr, 2)
    if r[0]: ok += 1; body = r[2]
    else: fails.append(r[2][:100])
    time.sleep(0.2)
print(f"metrics scrapes ok {ok}/5 {fails[:1]}")
if ok:
    for l in body.splitlines():
        if l.startswith("tether_connections_open"): print("  ", l)
t.send_signal(signal.SIGKILL); t.wait()
print("guest stdout:", (t.stdout.read() or "")[:200].strip())
print("stderr tail:", open(err).read()[-400:].strip())
hold.terminate(); print("holder:", hold.communicate()[0].strip())
