#!/usr/bin/env python3
"""T5: N TCP peers each send BYTES to the echo guest's TCP listener and never read. Host RSS/CPU,
and a live TCP client's round trip, Rust host vs Node host.
usage: tcp_never_read.py rust|node N BYTES"""
import sys, os, time, subprocess, socket, signal
sys.path.insert(0, os.path.dirname(__file__))
from common import *
host, N, B = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
err = f"/tmp/rt17/logs/tcpnr_{host}.err"
base = ["/tmp/rt17/bin/echo.wasm", "--listen", "127.0.0.1:*", "--", "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"]
if host == "rust": cmd = ["/tmp/rt17/bin/tether", "run"] + base
else: cmd = ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run"] + base
p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=open(err, "w"))
tcp = int(wait_line(err, r"listening for TCP on 127.0.0.1:(\d+)", 30).group(1))
def rtt(n=50):
    s = socket.create_connection(("127.0.0.1", tcp)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    ts = []
    for i in range(n):
        t = time.perf_counter(); s.sendall(b"x" * 32); got = 0
        while got < 32: got += len(s.recv(64))
        ts.append(time.perf_counter() - t)
    s.close(); ts.sort(); return ts[len(ts)//2] * 1e6
time.sleep(0.5)
r0, c0 = rss_mib(p.pid), cpu(p.pid)
print(f"{host}: baseline rss={r0:.0f}MiB rtt p50={rtt():.0f}us")
socks = []; chunk = b"q" * 65536; t = time.time(); total = 0
for i in range(N):
    s = socket.create_connection(("127.0.0.1", tcp)); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); s.setblocking(False); socks.append([s, 0])
deadline = time.time() + 15
while time.time() < deadline:
    moved = False
    for e in socks:
        if e[1] >= B: continue
        try:
            n = e[0].send(chunk); e[1] += n; total += n; moved = True
        except BlockingIOError: pass
    if not moved: time.sleep(0.05)
    if all(e[1] >= B for e in socks): break
time.sleep(2)
print(f"{host}: {N} peers wrote {total/2**20:.0f} MiB in {time.time()-t:.1f}s (never reading): rss={rss_mib(p.pid):.0f}MiB (+{rss_mib(p.pid)-r0:.0f}) cpu +{cpu(p.pid)-c0:.2f}s rtt p50={rtt():.0f}us")
for e in socks: e[0].close()
time.sleep(1)
print(f"{host}: after close rss={rss_mib(p.pid):.0f}MiB")
p.kill(); p.wait()
