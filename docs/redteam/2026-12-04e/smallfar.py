"""JMUX with a far side smaller than the near side: B --max-channels BMAX, A default (1024), loopback counted
(--max-channels-per-source 256). SRCS sources x W workers loop for DUR s: SOCKS5 CONNECT to an echo target
(wait up to 12 s), echo 4 bytes, hold HOLD s, close. A 'large' source 127.0.0.30 holds L channels echoing
every 0.5 s; we count how many of them the proxy closed. Prints channels/s, outcomes, open-latency p50/p99.
usage: TETHER=... timeout 170 python3 smallfar.py BMAX SRCS W HOLD L DUR"""
import sys, os, time, threading, collections, statistics
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c"); import rt3  # noqa
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status
BMAX, NS, W, HOLD, L, DUR = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4]), int(sys.argv[5]), float(sys.argv[6])
echo = Target("echo")
T = Tunnel(a_args="--max-channels-per-source 256".split(), b_args=["--max-channels", str(BMAX)], listeners=("socks5",))
SP = T.ports["socks5"]
large = []
for _ in range(L):
    s, why = socks("127.0.0.30", SP, echo.port); large.append(s)
print(f"# {os.environ['TETHER']} B max-channels {BMAX}; large source holds {sum(1 for s in large if s)} of {L}; {NS} sources x {W} workers, hold {HOLD} s, {DUR} s", flush=True)
stop = False; res = collections.Counter(); lat = []; large_lost = [0]
def worker(src):
    while not stop:
        t = time.time()
        try:
            s, why = socks(src, SP, echo.port, timeout=12)
            if s:
                lat.append(time.time() - t)
                why = "ok" if echo_ok(s) else "no echo"
                time.sleep(HOLD); s.close()
        except OSError as e:
            why = type(e).__name__
        res[why] += 1
        if why != "ok": time.sleep(0.05)
def keep():
    alive = [s for s in large if s]
    while not stop:
        for s in list(alive):
            if not echo_ok(s, timeout=3):
                alive.remove(s); large_lost[0] += 1
        time.sleep(0.5)
lg = collections.Counter()
def large_new():
    while not stop:
        try:
            s, why = socks("127.0.0.30", SP, echo.port, timeout=12)
            if s: why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e: why = type(e).__name__
        lg[why] += 1; time.sleep(0.5)
ths = [threading.Thread(target=large_new, daemon=True)] + [threading.Thread(target=worker, args=(f"127.0.0.{21 + i}",), daemon=True) for i in range(NS) for _ in range(W)]
ths.append(threading.Thread(target=keep, daemon=True))
c0 = status(T.A.pid)["cpu_s"]; b0 = status(T.B.pid)["cpu_s"]; t0 = time.time()
for th in ths: th.start()
time.sleep(DUR); stop = True; time.sleep(0.5)
el = time.time() - t0
l = sorted(lat)
print(f"outcomes {dict(res)}; opened {len(l)} = {len(l)/DUR:.1f}/s")
if l: print(f"open latency p50 {statistics.median(l)*1000:.0f} ms p90 {l[int(len(l)*.9)]*1000:.0f} ms p99 {l[int(len(l)*.99)]*1000:.0f} ms max {l[-1]*1000:.0f} ms")
print(f"large source's new channels (one every 0.5 s): {dict(lg)}")
print(f"large source's long-lived channels closed by the proxy: {large_lost[0]} of {L}")
print(f"CPU A {status(T.A.pid)['cpu_s']-c0:.2f} s, B {status(T.B.pid)['cpu_s']-b0:.2f} s over {el:.0f} s")
gu = [l for l in T.aout if b"given up so far" in l]
print("A fair-share give-ups (last power-of-two log line):", gu[-1].decode().strip() if gu else None)
print("A log:", T.log("A", 3))
T.close()
