"""Finding: every JMUX message for an unknown channel id writes one log line
(guests/jmux/src/main.rs, Event::Dropped -> eprintln!), with no rate limit.
A pipe peer sends M 8-byte EOF/CLOSE/WINDOW-ADJUST/DATA messages for ids that
were never opened; we count the log lines and bytes the guest writes, and the
CPU it takes, and check that a live channel's round trip meanwhile.
Usage: timeout 120 nice -n 19 python3 jmux_dropped_log_flood.py [M]
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, EOF, CLOSE, WADJ, Reader, target

M = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
p, s, out = start_jmux()
time.sleep(0.3)
base_lines = len(out)
c0 = status(p.pid)["cpu_s"]
t0 = time.time()
kinds = [EOF, CLOSE, lambda i: WADJ(i, 1), lambda i: DATA(i, b"")]
chunk = []
sent = 0
for i in range(M):
    chunk.append(kinds[i % 4](5000 + i))
    if len(chunk) == 5000:
        b = b"".join(chunk); s.sendall(b); sent += len(b); chunk = []
if chunk:
    b = b"".join(chunk); s.sendall(b); sent += len(b)
# wait for the log to settle
last = -1
while len(out) != last:
    last = len(out); time.sleep(1)
el = time.time() - t0
lines = len(out) - base_lines
nbytes = sum(len(l) for l in out[base_lines:])
print(f"sent {M} messages, {sent} bytes in; guest wrote {lines} log lines, {nbytes} bytes ({nbytes/sent:.1f}x input) in {el:.1f} s; CPU {status(p.pid)['cpu_s']-c0:.2f} s")
print("sample:", out[base_lines].decode().strip(), "|", out[-1].decode().strip())
kill(p)
