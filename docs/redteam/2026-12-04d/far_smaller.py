"""A far side with fewer channels than the near side: side B runs with --max-channels FAR, side A with the
default 1,024 (and --max-channels-per-source 256, counting loopback as for remote clients). One source
(127.0.0.11) opens FAR silent SOCKS5 channels and holds them (B full, A not); then a legitimate client on
127.0.0.9 opens N channels to an echo target at once, each waiting up to 12 s. Prints the outcomes and waits.
Usage: TETHER=... timeout 100 python3 far_smaller.py FAR N"""
import sys, os, time, collections, threading
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c")
import rt3  # noqa: E402,F401
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status  # noqa: E402
FAR, N = int(sys.argv[1]), int(sys.argv[2])
sink, echo = Target("silent"), Target("echo")
T = Tunnel(a_args="--max-channels-per-source 256".split(), b_args=f"--max-channels {FAR}".split(),
           listeners=("socks5",))
SP = T.ports["socks5"]
held = [socks("127.0.0.11", SP, sink.port)[0] for _ in range(FAR)]
print(f"# {os.environ.get('TETHER')}: 127.0.0.11 holds {sum(1 for s in held if s)} of B's {FAR}", flush=True)
time.sleep(1)
out = []


def one():
    t = time.time()
    try:
        s, why = socks("127.0.0.9", SP, echo.port, timeout=12)
        if s:
            why = "ok" if echo_ok(s) else "no echo"
            out.append((why, time.time() - t, s)); return
    except OSError as e:
        why = type(e).__name__
    out.append((why, time.time() - t, None))


ths = [threading.Thread(target=one) for _ in range(N)]
for th in ths: th.start(); time.sleep(0.02)
for th in ths: th.join()
c = collections.Counter(w for w, _, _ in out)
print(f"legit: {dict(c)} waits {sorted(round(d, 1) for _, d, _ in out)}")
print(f"attacker channels still open: {sum(1 for s in held if s and s.fileno() >= 0)} (sockets, not checked for a close)")
print("A:", status(T.A.pid), "B:", status(T.B.pid))
T.close()
