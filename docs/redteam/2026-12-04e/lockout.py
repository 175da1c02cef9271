"""After one far-side refusal, a re-sent OPEN to a target whose connect hangs (a full accept queue: the far side's
connect takes its 10 s timeout) keeps "a re-sent OPEN unanswered", and new clients are refused although both
sides have free channels. A and B --max-channels MAXC, A --max-channels-per-source MAXC/4 (loopback counted).
t=0: four attacker sources (127.0.0.11-14) hold MAXC channels to a silent target (both sides full).
t=1: 127.0.0.11 closes K of them (K > its share: every source closes all) (A frees the ids, B lingers 5 s); X clients from 127.0.0.15 ask for the hanging
target: A opens them, B refuses them as too many; they wait and their OPENs go again.
t=7: the attacker closes every channel it holds (after B's linger).  A legitimate client on 127.0.0.9 tries one
channel to an echo target every 0.5 s from t=0 to t=DUR. Prints its outcome per try, and the attacker's X outcomes.
usage: TETHER=... timeout 100 python3 lockout.py MAXC K X DUR [LH]"""
import sys, os, time, threading, collections
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c"); import rt3  # noqa
from rt3 import blackhole
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status
MAXC, K, X, DUR = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
LH = int(sys.argv[5]) if len(sys.argv) > 5 else 0  # channels the legitimate source holds first (so it cannot take by the fair share)
echo, sink = Target("echo"), Target("silent")
bh_port, keep_bh = blackhole()
T = Tunnel(a_args=["--max-channels", str(MAXC), "--max-channels-per-source", str(MAXC // 4)],
           b_args=["--max-channels", str(MAXC)], listeners=("socks5",))
SP = T.ports["socks5"]
lheld = [socks("127.0.0.9", SP, echo.port)[0] for _ in range(LH)]
held = {src: [] for src in ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]}
for src in held:
    for _ in range((MAXC - LH) // 4):
        s, why = socks(src, SP, sink.port); held[src].append(s)
print(f"# {os.environ['TETHER']} MAXC={MAXC} K={K} X={X}: attacker holds {sum(1 for v in held.values() for s in v if s)}", flush=True)
t0 = time.time(); legit = []; xs = collections.Counter(); xsocks = []
def legit_loop():
    while time.time() - t0 < DUR:
        t = time.time()
        try:
            s, why = socks("127.0.0.9", SP, echo.port, timeout=12)
            if s: why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e: why = type(e).__name__
        legit.append((round(t - t0, 1), why, round(time.time() - t, 2)))
        time.sleep(max(0, 0.5 - (time.time() - t)))
def x_client():
    t = time.time()
    try:
        s, why = socks("127.0.0.15", SP, bh_port, timeout=30)
        if s: xsocks.append(s)
    except OSError as e: why = type(e).__name__
    xs[(why, round(time.time() - t, 0))] += 1
lt = threading.Thread(target=legit_loop); lt.start()
time.sleep(1)
victims = held["127.0.0.11"][:K] if K <= len(held["127.0.0.11"]) else [s for v in held.values() for s in v]
for s in victims: s.close()
time.sleep(float(os.environ.get("XDELAY", "0.1")))  # before the X clients
xt = [threading.Thread(target=x_client, daemon=True) for _ in range(X)]
for t in xt: t.start()
time.sleep(6)
for v in held.values():
    for s in v:
        if s: s.close()
print(f"t={time.time()-t0:.1f}: attacker closed everything", flush=True)
lt.join()
for t in xt: t.join(1)
line = collections.OrderedDict()
for at, why, took in legit:
    print(f"  legit t={at:5.1f} s: {why} ({took} s)")
print("X clients (outcome, seconds):", dict(xs))
print(f"CPU A {status(T.A.pid)['cpu_s']:.2f} s, B {status(T.B.pid)['cpu_s']:.2f} s")
print("A log:", T.log("A", 12))
T.close()
