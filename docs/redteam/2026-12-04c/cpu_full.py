"""A's CPU per new client at a full session (1,024 channels from 4 sources, each moving 1 byte every 0.5 s, so
no look finds a quiet channel): N SOCKS5 clients from 16 fresh sources, 4 threads. Usage: timeout 110 python3 cpu_full.py N"""
import sys, os, time, collections, threading
os.environ.setdefault("TETHER", "/work/rt10/tether")
os.environ["G"] = "/work/rt10"; os.environ["JMUX_WASM"] = "/work/rt10/jmux.wasm"
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *
N = int(sys.argv[1])
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args="--max-channels-per-source 256".split(), listeners=("socks5",)); SP = T.ports["socks5"]
held = []; stop = False
for src in ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]:
    for _ in range(256): held.append(socks(src, SP, sink.port)[0])
def trickle():
    while not stop:
        for s in held: s.send(b"x")
        time.sleep(0.5)
threading.Thread(target=trickle, daemon=True).start()
time.sleep(1)
def idle_cpu(dt):
    c = status(T.A.pid)["cpu_s"]; time.sleep(dt); return status(T.A.pid)["cpu_s"] - c
base = idle_cpu(3)
got = collections.Counter(); lock = threading.Lock()
def w(k, t):
    for i in range(k):
        try: s, why = socks(f"127.0.4.{(t * k + i) % 16 + 1}", SP, echo.port)
        except OSError as e: why = type(e).__name__
        if s: s.close()
        with lock: got[why] += 1
c0 = status(T.A.pid)["cpu_s"]; t0 = time.time()
ts = [threading.Thread(target=w, args=(N // 4, t)) for t in range(4)]; [t.start() for t in ts]; [t.join() for t in ts]
dt = time.time() - t0; c1 = status(T.A.pid)["cpu_s"]
print(f"A CPU with the trickle alone: {base/3*100:.0f}% of a core; {N} new clients in {dt:.1f} s ({N/dt:.0f}/s): {dict(got)}, "
      f"A CPU {c1-c0:.2f} s ({(c1-c0-base/3*dt)/N*1e6:.0f} us per client over the trickle's)", flush=True)
print("A log:", T.log("A", 2)[-300:])
stop = True; T.close()
