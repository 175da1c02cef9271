#!/usr/bin/env python3
"""T13b: the same slow client as jmux_slow_client.py against the p2 echo guest's TCP listener: a thread sends
TOTAL MiB, the main thread reads 4 KiB every SLEEP ms with a RCVBUF-byte receive buffer.
usage: echo_slow_client.py TOTAL_MIB SLEEP_MS RCVBUF SECONDS [GUEST]"""
import sys, os, time, subprocess, socket, threading
sys.path.insert(0, os.path.dirname(__file__))
from common import *
TOTAL = int(sys.argv[1]) << 20; SLEEP = float(sys.argv[2]) / 1000; RCV = int(sys.argv[3]); SECS = float(sys.argv[4])
guest = sys.argv[5] if len(sys.argv) > 5 else "echo.wasm"
err = "/tmp/rt17/logs/echo_slow.err"
p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", f"/tmp/rt17/bin/{guest}", "--listen", "127.0.0.1:*", "--", "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"],
                     stdout=subprocess.DEVNULL, stderr=open(err, "w"))
tcp = int(wait_line(err, r"TCP on 127.0.0.1:(\d+)").group(1))
c = socket.socket()
if RCV: c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCV)
c.connect(("127.0.0.1", tcp))
def sender():
    sent = 0; blk = b"d" * 65536
    try:
        while sent < TOTAL: sent += c.send(blk[:TOTAL - sent])
        c.shutdown(socket.SHUT_WR)
    except OSError: pass
threading.Thread(target=sender, daemon=True).start()
c.settimeout(0.5); got = 0; t0 = time.time(); last = t0; lastgot = 0; per = []; end = None
while time.time() - t0 < SECS:
    try:
        d = c.recv(4096)
        if not d: end = "FIN"; break
        got += len(d)
    except socket.timeout: pass
    if SLEEP: time.sleep(SLEEP)
    if time.time() - last >= 1:
        per.append((got - lastgot) >> 10); lastgot = got; last = time.time()
print(f"{guest} tcp echo: read {got} of {TOTAL} in {time.time()-t0:.1f}s ({end}); KiB per second: {per}; host cpu {cpu(p.pid):.2f}s")
p.kill()
