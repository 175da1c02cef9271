"""Fair share vs an attacker that takes a given-up place back. 4 sources x 256 silent SOCKS5 channels to a target
that reads and never closes (so side B lingers 5 s on each given-up channel, LINGER_TIMEOUT); each attacker
source also tries one more channel every RETRY s (refused while at its share; taken as soon as A has an id and B
has room). A legitimate client on 127.0.0.9 tries 20 channels in each of several rounds.
Usage: timeout 110 python3 retake.py RETRY"""
import sys, os, time, collections, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rt3  # noqa: E402  (the snapshot's binaries)
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *
RETRY = float(sys.argv[1])
SRCS = ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]
A_ARGS = "--max-channels-per-source 256".split()
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args=A_ARGS, listeners=("socks5",)); SP = T.ports["socks5"]
def legit(n=20):
    return rt3.legit(SP, echo.port, n)
held = []; retaken = collections.Counter(); stop = False
for src in SRCS:
    for _ in range(256):
        s, why = socks(src, SP, sink.port); held.append(s)
print(f"# RETRY={RETRY}: attackers hold {len(held)}; baseline legit skipped", flush=True)
def retake(src):
    while not stop:
        try:
            s, why = socks(src, SP, sink.port, timeout=2)
            if s: held.append(s); retaken[src] += 1
        except OSError: pass
        time.sleep(RETRY)
for src in SRCS: threading.Thread(target=retake, args=(src,), daemon=True).start()
t0 = time.time()
for r in range(8):
    time.sleep(6)
    print(f"t={time.time()-t0:4.1f} s legit: {legit()}  places retaken by the attacker so far {sum(retaken.values())}", flush=True)
print("A:", status(T.A.pid), "B:", status(T.B.pid))
print("A log:", T.log("A", 3)[-400:])
stop = True; T.close()
