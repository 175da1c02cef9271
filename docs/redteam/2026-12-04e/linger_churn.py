"""Fill the far side with lingering ids while holding few channels on the near side: A and B --max-channels MAXC,
loopback counted (--max-channels-per-source MAXC/4). The attacker (127.0.0.11, T threads) opens SOCKS5 channels to
a 'silent' target (reads, never answers FIN: B lingers 5 s on each closed channel) and closes each at once.
A large legitimate source 127.0.0.40 holds L active channels (echo every 0.5 s); a newcomer on 127.0.0.9 opens
one channel after another (echo, close) for DUR s. Prints the newcomer's outcomes and waits, the large
source's channels the proxy closed, the attacker's rate, CPU.
usage: TETHER=... timeout 170 python3 linger_churn.py MAXC T L DUR"""
import sys, os, time, threading, collections, statistics
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c"); import rt3  # noqa
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status
MAXC, NT, L, DUR = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
echo, sink = Target("echo"), Target("silent")
T = Tunnel(a_args=["--max-channels", str(MAXC), "--max-channels-per-source", str(MAXC // 4)],
           b_args=["--max-channels", str(MAXC)], listeners=("socks5",))
SP = T.ports["socks5"]
large = [socks("127.0.0.40", SP, echo.port)[0] for _ in range(L)]
print(f"# {os.environ['TETHER']} max-channels {MAXC} both sides; large source holds {sum(1 for s in large if s)}; attacker {NT} threads; {DUR} s", flush=True)
stop = False; att = collections.Counter(); large_lost = [0]
def attacker():
    while not stop:
        try:
            s, why = socks("127.0.0.11", SP, sink.port, timeout=12)
            if s: s.close()
        except OSError as e: why = type(e).__name__
        att[why] += 1
def keep():
    alive = [s for s in large if s]
    while not stop:
        for s in list(alive):
            if not echo_ok(s, timeout=3): alive.remove(s); large_lost[0] += 1
        time.sleep(0.5)
leg = collections.Counter(); waits = []
def newcomer():
    while not stop:
        t = time.time()
        try:
            s, why = socks("127.0.0.9", SP, echo.port, timeout=12)
            if s: why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e: why = type(e).__name__
        leg[why] += 1; waits.append((why, time.time() - t)); time.sleep(0.1)
ths = [threading.Thread(target=attacker, daemon=True) for _ in range(NT)] + [threading.Thread(target=keep, daemon=True)]
c0, b0 = status(T.A.pid)["cpu_s"], status(T.B.pid)["cpu_s"]
for th in ths: th.start()
time.sleep(3)
a3 = sum(att.values())
nt = threading.Thread(target=newcomer, daemon=True); nt.start()
time.sleep(DUR); stop = True; nt.join(13)
ok = sorted(w for y, w in waits if y == "ok"); bad = sorted(w for y, w in waits if y != "ok")
print(f"attacker: {dict(att)} ({sum(att.values())/(DUR+3):.0f} tries/s)")
print(f"newcomer: {dict(leg)}; ok waits p50 {statistics.median(ok) if ok else 0:.2f} s max {max(ok) if ok else 0:.2f} s; failures after p50 {statistics.median(bad) if bad else 0:.2f} s")
print(f"large source's active channels closed by the proxy: {large_lost[0]} of {L}")
print(f"CPU A {status(T.A.pid)['cpu_s']-c0:.2f} s, B {status(T.B.pid)['cpu_s']-b0:.2f} s")
print("A log:", T.log("A", 5))
T.close()
