"""Refused OPENs (target outside the guest's --allow) hold --max-channels slots
until their answer is out: R refused OPENs then one OPEN to a live echo, in one
TCP write (tcp-listen pipe, raw peer reading everything). Baseline R=0.
Usage: timeout 60 nice -n 19 python3 jmux_refused_hold_slots.py R...
"""
import sys, socket, struct, time
sys.path.insert(0, "/work/rt5")
from rt import kill
from jm import start_jmux, OPEN, Reader, target
echo = target("echo")
p, s, out = start_jmux(); r = Reader(s); nid = 1
for R in [int(a) for a in sys.argv[1:]] or [0, 1000, 5000]:
    blob = b"".join(OPEN(nid + i, "tcp://10.1.2.3:9") for i in range(R)); nid += R
    legit = nid; nid += 1
    t0 = time.time(); s.sendall(blob + OPEN(legit, f"tcp://127.0.0.1:{echo}")); res = None
    while time.time() - t0 < 20:
        m = r.next(5)
        if m is None: break
        if m[0] in (101, 102) and struct.unpack("!I", m[1][:4])[0] == legit:
            res = ("SUCCESS" if m[0] == 101 else "FAILURE " + m[1][8:60].decode(errors="replace"), round(time.time() - t0, 3)); break
    print(f"refused OPENs before it: {R:6d}  legit OPEN -> {res}", flush=True)
    time.sleep(0.5)
    while r.next(0.3): pass
kill(p)
