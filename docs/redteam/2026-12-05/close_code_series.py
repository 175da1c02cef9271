#!/usr/bin/env python3
"""T6: a peer closes N connections with distinct close codes 3000..4999: metrics series and scrape cost.
usage: close_code_series.py N"""
import sys, os, time, subprocess, socket, struct
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
N = int(sys.argv[1])
err = "/tmp/rt17/logs/closecodes.err"
p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", "/tmp/rt17/bin/echo.wasm", "--listen", "127.0.0.1:*", "--metrics", "127.0.0.1:0", "--",
                      "server", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(err, "w"))
ws = int(wait_line(err, r"listening on 127.0.0.1:(\d+)").group(1)); addr = wait_line(err, r"metrics on http://([0-9.:]+)/").group(1)
def measure(tag):
    ts = []; size = 0
    for i in range(20):
        ok, dt, body = scrape(addr); ts.append(dt); size = len(body)
    ts.sort(); print(f"{tag}: scrape p50 {ts[10]*1e3:.2f} ms, {size} bytes, {body.count(chr(10))} lines")
measure("baseline")
t = time.time(); c0 = cpu(p.pid)
for i in range(N):
    s, rest = wsraw.connect("127.0.0.1", ws); s.sendall(wsraw.frame(8, struct.pack("!H", 3000 + i % 2000) + b"x")); 
    wsraw.Reader(s, rest).until_close(2); s.close()
print(f"{N} closes in {time.time()-t:.1f}s host cpu {cpu(p.pid)-c0:.2f}s")
measure(f"after {N} distinct codes")
p.kill()
