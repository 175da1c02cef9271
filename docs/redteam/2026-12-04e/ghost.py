"""Clients that close while waiting (ghosts) on a JMUX side whose far side is full. B --max-channels BMAX, A default
(1024), loopback counted (--max-channels-per-source 256). 8 legitimate sources (127.0.0.21-28) hold BMAX/8 channels
each to an echo target; every 1 s one of them closes a channel and opens a new one (churn). The attacker
(127.0.0.11, G threads) sends SOCKS5 clients to a silent target and closes each 0.3 s later if it is not answered.
A newcomer on 127.0.0.9 tries a channel every 0.5 s (up to 12 s each). Prints the newcomer's and the churners'
outcomes and what the attacker got.
usage: TETHER=... timeout 100 python3 ghost.py BMAX G DUR"""
import sys, os, time, threading, collections, statistics, socket, struct
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04c"); import rt3  # noqa
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import Target, Tunnel, socks, echo_ok, status
BMAX, G, DUR = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
echo, sink = Target("echo"), Target("silent")
T = Tunnel(a_args="--max-channels-per-source 256".split(), b_args=["--max-channels", str(BMAX)], listeners=("socks5",))
SP = T.ports["socks5"]
srcs = [f"127.0.0.{21 + i}" for i in range(8)]
hold = {s: [socks(s, SP, echo.port)[0] for _ in range(BMAX // 8)] for s in srcs}
print(f"# {os.environ['TETHER']} B max {BMAX}: legit hold {sum(1 for v in hold.values() for s in v if s)}; {G} ghost threads; {DUR} s", flush=True)
stop = False; gh = collections.Counter(); churn = collections.Counter(); new = collections.Counter(); nw = []
def ghost():
    while not stop:
        s = socket.socket(); s.bind(("127.0.0.11", 0)); s.settimeout(2)
        try:
            s.connect(("127.0.0.1", SP)); s.sendall(b"\x05\x01\x00"); s.recv(2)
            s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", sink.port))
            s.settimeout(0.3); r = s.recv(10); gh["answered " + (str(r[1]) if len(r) > 1 else "closed")] += 1
        except socket.timeout: gh["closed while waiting"] += 1
        except OSError as e: gh[type(e).__name__] += 1
        s.close()
        if gh.get("answered 1", 0) and not gh.get("closed while waiting"): time.sleep(0.01)
def churner():
    i = 0
    while not stop:
        time.sleep(1); src = srcs[i % 8]; i += 1
        v = hold[src]
        if v and v[0]: v.pop(0).close()
        t = time.time()
        try: s, why = socks(src, SP, echo.port, timeout=12)
        except OSError as e: s, why = None, type(e).__name__
        churn[why] += 1
        if s: v.append(s)
def newcomer():
    while not stop:
        t = time.time()
        try:
            s, why = socks("127.0.0.9", SP, echo.port, timeout=12)
            if s: why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e: why = type(e).__name__
        new[why] += 1; nw.append(time.time() - t); time.sleep(0.5)
ths = [threading.Thread(target=ghost, daemon=True) for _ in range(G)]
c0 = status(T.A.pid)["cpu_s"]
for th in ths: th.start()
time.sleep(1)
for f in (churner, newcomer): threading.Thread(target=f, daemon=True).start()
time.sleep(DUR); stop = True; time.sleep(1)
print(f"newcomer: {dict(new)}  wait p50 {statistics.median(nw):.2f} s max {max(nw):.2f} s")
print(f"churning holders' reopen: {dict(churn)}")
print(f"ghost clients: {dict(gh)}")
print(f"A CPU {status(T.A.pid)['cpu_s']-c0:.2f} s; B {status(T.B.pid)}")
print("A log:", T.log("A", 6))
T.close()
