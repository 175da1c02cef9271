"""Finding 3 of docs/redteam/2026-12-04c with a patient legitimate client: 4 sources x 256 silent SOCKS5
channels to a target that reads and never closes (so side B lingers 5 s on each channel closed towards it),
each attacker source retrying one more channel every RETRY s; in each round a legitimate client on 127.0.0.9
opens N channels at once to an echo target, each waiting up to 12 s (more than B's 5 s linger), echoes 4
bytes and closes. Prints per round the outcomes and the waits (s), and the places the attacker took back.
Usage: TETHER=... timeout 200 python3 retake_wait.py RETRY N ROUNDS"""
import sys, os, time, collections, threading
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c")
import rt3  # noqa: E402,F401  (sets the binaries' defaults; TETHER from the environment wins)
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status  # noqa: E402
RETRY, N, ROUNDS = float(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
SRCS = ["127.0.0.11", "127.0.0.12", "127.0.0.13", "127.0.0.14"]
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args="--max-channels-per-source 256".split(), listeners=("socks5",)); SP = T.ports["socks5"]
held = []; retaken = collections.Counter(); stop = False
for src in SRCS:
    for _ in range(256):
        s, why = socks(src, SP, sink.port); held.append(s)
print(f"# {os.environ.get('TETHER')} RETRY={RETRY}: attackers hold {sum(1 for s in held if s)}", flush=True)


def retake(src):
    while not stop:
        try:
            s, why = socks(src, SP, sink.port, timeout=2)
            if s: held.append(s); retaken[src] += 1
        except OSError: pass
        time.sleep(RETRY)


def one(out):
    t = time.time()
    try:
        s, why = socks("127.0.0.9", SP, echo.port, timeout=12)
        if s:
            why = "ok" if echo_ok(s) else "no echo"; s.close()
    except OSError as e:
        why = type(e).__name__
    out.append((why, time.time() - t))


for src in SRCS: threading.Thread(target=retake, args=(src,), daemon=True).start()
t0 = time.time()
for r in range(ROUNDS):
    time.sleep(1)
    out = []; ths = [threading.Thread(target=one, args=(out,)) for _ in range(N)]
    for th in ths: th.start(); time.sleep(0.02)
    for th in ths: th.join()
    c = collections.Counter(w for w, _ in out)
    waits = sorted(round(d, 1) for w, d in out if w == "ok")
    print(f"t={time.time()-t0:5.1f} s legit: {dict(c)} waits {waits}  places taken back by the attacker so far {sum(retaken.values())}", flush=True)
print("A:", status(T.A.pid), "B:", status(T.B.pid))
stop = True; T.close()
