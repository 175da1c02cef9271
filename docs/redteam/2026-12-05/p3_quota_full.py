#!/usr/bin/env python3
"""T7: --readiness-set-entries E, then N idle WebSocket clients: does the p3 echo server keep serving
(only the new stream closed, as the p2 echo since the 2026-12-03 eighth round) or exit with every stream?
usage: p3_quota_full.py GUEST E N"""
import sys, os, time, subprocess, socket, struct
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
guest, E, N = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
err = f"/tmp/rt17/logs/quota_{guest}.err"
p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", f"/tmp/rt17/bin/{guest}", "--listen", "127.0.0.1:*", "--readiness-set-entries", str(E), "--",
                      "server", "127.0.0.1:0"], stdout=open(err + ".out", "w"), stderr=open(err, "w"))
ws = int(wait_line(err, r"listening on 127.0.0.1:(\d+)").group(1))
first, frest = wsraw.connect("127.0.0.1", ws); fr = wsraw.Reader(first, frest)
first.sendall(wsraw.frame(2, b"hello")); first.settimeout(3); print("first client echo before:", fr.read()[::2])
held = []; refused = 0
for i in range(N):
    try:
        s, rest = wsraw.connect("127.0.0.1", ws); held.append((s, rest))
    except Exception as e: refused += 1
    time.sleep(0.002)
time.sleep(1)
closed = 0
for s, rest in held:
    s.settimeout(0.05)
    try:
        d = s.recv(100)
        if not d or d[0] & 0x0f == 8: closed += 1
    except socket.timeout: pass
    except OSError: closed += 1
print(f"{guest} entries={E}: {N} more clients: {len(held)} upgraded, {refused} refused, {closed} closed by the host; process alive: {p.poll() is None}")
try:
    first.sendall(wsraw.frame(2, b"again")); print("first client echo after:", fr.read()[::2])
except Exception as e: print("first client after:", repr(e))
try:
    s, rest = wsraw.connect("127.0.0.1", ws); print("a new client after: upgraded")
except Exception as e: print("a new client after:", repr(e))
print("guest out:", open(err + ".out").read().strip()[-300:], "| stderr:", open(err).read().strip().replace("\n", " | ")[-300:])
p.kill()
