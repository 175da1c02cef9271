"""Fresh sources, one quiet channel each, take a legitimate source's interactive channels (a message every
THINK s, echo target) one by one. --max-channels 64: L (127.0.0.9) holds 32 interactive channels, 32 sources
(127.0.2.x) hold one silent channel each (every channel in use); then 31 more fresh sources (127.0.3.x) open
one channel each. Usage: timeout 110 python3 churn.py THINK"""
import sys, os, time, collections, threading, socket
os.environ.setdefault("TETHER", "/work/rt10/tether")
os.environ["G"] = "/work/rt10"; os.environ["JMUX_WASM"] = "/work/rt10/jmux.wasm"
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *
THINK = float(sys.argv[1])
A_ARGS = "--max-channels 64 --max-channels-per-source 64".split()
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args=A_ARGS, listeners=("socks5",)); SP = T.ports["socks5"]
L = []
for _ in range(32):
    s, why = socks("127.0.0.9", SP, echo.port); assert s, why; L.append(s)
dead = set(); stop = False
def interact():
    while not stop:
        for i, s in enumerate(L):
            if i not in dead and not echo_ok(s, b"k", timeout=1): dead.add(i)
        time.sleep(THINK)
threading.Thread(target=interact, daemon=True).start()
fill = [socks(f"127.0.2.{i}", SP, sink.port) for i in range(1, 33)]
print(f"# THINK={THINK}: L holds 32 interactive, fillers {collections.Counter(w for _, w in fill)}", flush=True)
time.sleep(2)
got = collections.Counter(); t0 = time.time()
for i in range(1, 32):
    s, why = socks(f"127.0.3.{i}", SP, sink.port); got[why] += 1; time.sleep(0.1)
print(f"31 fresh sources: {dict(got)} in {time.time()-t0:.1f} s", flush=True)
time.sleep(2 * THINK + 2)
print(f"L's interactive channels broken: {len(dead)} of 32", flush=True)
s, why = socks("127.0.0.9", SP, echo.port)
print("L opens a new channel:", why, flush=True)
print("A log:", T.log("A", 3)[-400:])
stop = True; T.close()
