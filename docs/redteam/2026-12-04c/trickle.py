"""JMUX fair share vs a trickle: K sources x N SOCKS5 channels to a sink target (reads, never answers),
each channel sending 1 byte every PERIOD s (MODE=trickle) or nothing (MODE=silent, the control).
Then a legitimate SOCKS5 client on 127.0.0.9 (echo target) tries 20 channels, 7 s after the attack.
Usage: TETHER=/work/rt10/tether timeout 120 python3 trickle.py MODE N PERIOD SRC1 [SRC2 ...]
env A_ARGS (default --max-channels-per-source 256)"""
import sys, os, time, collections, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rt3  # noqa: E402  (the snapshot's binaries)
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *

MODE, N, PERIOD, SRCS = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4:]
A_ARGS = os.environ.get("A_ARGS", "--max-channels-per-source 256").split()
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args=A_ARGS, listeners=("socks5",))
SP = T.ports["socks5"]

def legit(n=20):
    return rt3.legit(SP, echo.port, n)

print(f"# {os.environ['TETHER']} MODE={MODE} N={N} PERIOD={PERIOD} sources={SRCS} A_ARGS={A_ARGS}", flush=True)
print("baseline legit:", legit(), flush=True)
held = []; stop = False
def trickle():
    while not stop:
        t = time.time()
        for s in list(held):
            try: s.send(b"x")
            except OSError: pass
        time.sleep(max(0, PERIOD - (time.time() - t)))
if MODE == "trickle":
    threading.Thread(target=trickle, daemon=True).start()
for src in SRCS:
    c = collections.Counter(); t0 = time.time()
    for _ in range(N):
        try:
            s, why = socks(src, SP, sink.port)
            if s: held.append(s)
        except OSError as e:
            why = type(e).__name__
        c[why] += 1
    print(f"attacker {src}: {dict(c)} in {time.time()-t0:.1f} s", flush=True)
time.sleep(7)
print("legit 7 s after the attack:", legit(), f"attacker sockets open: {sum(alive(s) for s in held)} of {len(held)}", flush=True)
time.sleep(10)
print("legit 17 s after the attack:", legit(), f"attacker sockets open: {sum(alive(s) for s in held)} of {len(held)}", flush=True)
print("A:", status(T.A.pid), "B:", status(T.B.pid))
print("A log tail:", T.log("A", 4)[-600:])
stop = True
for s in held: s.close()
T.close()
