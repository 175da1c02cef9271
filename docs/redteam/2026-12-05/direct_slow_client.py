#!/usr/bin/env python3
"""Baseline for jmux_slow_client.py: the same client straight against the same target (no tunnel).
usage: direct_slow_client.py TOTAL_MIB SLEEP_MS RCVBUF SECONDS [WRITE_BYTES]"""
import sys, time, socket, threading
TOTAL = int(sys.argv[1]) << 20; SLEEP = float(sys.argv[2]) / 1000; RCV = int(sys.argv[3]); SECS = float(sys.argv[4])
ts = socket.socket(); ts.bind(("127.0.0.1", 0)); ts.listen(4); tport = ts.getsockname()[1]
def target():
    c, _ = ts.accept(); c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); sent = 0; blk = b"d" * (int(sys.argv[5]) if len(sys.argv) > 5 else 65536)
    try:
        while sent < TOTAL: sent += c.send(blk[:TOTAL - sent])
    except OSError: pass
    c.close()
threading.Thread(target=target, daemon=True).start()
c = socket.socket()
if RCV: c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCV)
c.connect(("127.0.0.1", tport))
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
print(f"direct: read {got} of {TOTAL} in {time.time()-t0:.1f}s ({end}); KiB per second: {per}")
