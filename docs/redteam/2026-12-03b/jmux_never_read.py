"""Hostile pipe peer: opens C channels to targets that stream without end,
grants each the largest window (2^32-1) and then WINDOW ADJUSTs, and never
reads the pipe. Does the tether jmux process buffer without bound?
Usage: timeout 90 nice -n 19 python3 jmux_never_read.py [C]
"""
import sys, socket, struct, time
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, WADJ, Reader, target

C = int(sys.argv[1]) if len(sys.argv) > 1 else 300
src = target("source")
p, s, out = start_jmux()
s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
time.sleep(0.3)
print("start", status(p.pid))
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{src}", window=0xFFFFFFFF, maxp=0xFFFF) for i in range(C)))
for t in range(8):
    time.sleep(2)
    # also overflow the window on ids 0..C (guest's ids are 0.. in order here)
    s.sendall(b"".join(WADJ(i, 0xFFFFFFFF) for i in range(C)))
    print(f"t={2*(t+1)}s", status(p.pid))
print("log tail:", b"".join(out[-3:]).decode(errors="replace"))
kill(p)
