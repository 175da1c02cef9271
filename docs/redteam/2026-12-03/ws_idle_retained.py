"""A2b: after one large message is received and echoed, does an idle connection keep the frame buffer?
Echo guest; K peers one after another each send one complete M-MiB message, read the whole echo, then idle.
usage: ws_idle_retained.py K M [KiB]  (M in MiB, or in KiB with a third argument KiB)"""
import sys, time
sys.path.insert(0, "/work/rt2")
from rt import *
K, M = int(sys.argv[1]), int(sys.argv[2]); UNIT = 10 if len(sys.argv) > 3 else 20
p, port = start_echo(); out = drain_output(p)
try:
    time.sleep(0.3); b = status(p.pid); print("baseline", b, flush=True)
    held = []; msg = frame(2, b"\x01" * (M << UNIT))
    for i in range(K):
        s, _, _ = ws_connect(port); s.sendall(msg)
        r = read_frame(s, timeout=20)
        time.sleep(0.5); a = status(p.pid)
        if i % 25 == 0 or i == K - 1: print(f"peer {i}: echo {len(r[2])>>UNIT if r else None} MiB, idle now: rss {a['rss_mib']} MiB", flush=True)
        held.append(s)
    time.sleep(2); a = status(p.pid)
    print(f"{K} idle peers after one {M} MiB echo each: rss {b['rss_mib']} -> {a['rss_mib']} (+{a['rss_mib']-b['rss_mib']}) MiB")
    for s in held: s.close()
    time.sleep(1); print("after close", status(p.pid))
finally:
    kill(p)
