"""Cost of the 100 ms re-sends: B --max-channels BMAX held full by 127.0.0.21 (echo target); then W clients from
W/4 sources wait (each up to the 10 s handshake timeout, B refusing as too many), again every 10 s for DUR s.
Prints A's and B's CPU during the waits, and during the same time idle before. usage: timeout 100 python3 amp.py BMAX W DUR"""
import sys, os, time, threading, collections
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c"); import rt3  # noqa
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, status
BMAX, W, DUR = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
echo = Target("echo")
T = Tunnel(a_args="--max-channels-per-source 256".split(), b_args=["--max-channels", str(BMAX)], listeners=("socks5",))
SP = T.ports["socks5"]
hold = [socks("127.0.0.21", SP, echo.port)[0] for _ in range(BMAX)]
a0, b0 = status(T.A.pid)["cpu_s"], status(T.B.pid)["cpu_s"]; time.sleep(DUR)
a1, b1 = status(T.A.pid)["cpu_s"], status(T.B.pid)["cpu_s"]
res = collections.Counter(); stop = False
def client(src):
    while not stop:
        t = time.time()
        try: s, why = socks(src, SP, echo.port, timeout=12)
        except OSError as e: why = type(e).__name__
        res[(why, round(time.time() - t))] += 1
        if time.time() - t < 1: time.sleep(1)
ths = [threading.Thread(target=client, args=(f"127.0.0.{31 + i % (W // 4)}",), daemon=True) for i in range(W)]
for t in ths: t.start()
time.sleep(DUR); stop = True
a2, b2 = status(T.A.pid)["cpu_s"], status(T.B.pid)["cpu_s"]
print(f"# {os.environ['TETHER']} B max {BMAX} full; {W} clients waiting, {DUR} s")
print(f"idle {DUR} s: CPU A {a1-a0:.2f} s, B {b1-b0:.2f} s; with the waiting clients: A {a2-a1:.2f} s, B {b2-b1:.2f} s")
print("client outcomes (why, seconds):", dict(res))
gl = [l for l in T.aout if b"refused so far by a peer" in l]
print("A:", gl[-1].decode().strip() if gl else None)
T.close()
