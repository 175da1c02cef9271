"""Does every OPEN get an answer? L live channels, then M OPENs past the cap,
sent in bursts; a separate reader (its own dup'ed fd, blocking) counts answers.
Usage: timeout 120 nice -n 19 python3 jmux_open_answers.py L M
"""
import sys, socket, struct, time, threading, os
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, target

L = int(sys.argv[1]); M = int(sys.argv[2])
echo = target("echo")
p, s, out = start_jmux()
s.settimeout(None)
rs = socket.socket(fileno=os.dup(s.fileno())); rs.settimeout(None)
counts = {}; buf = bytearray(); last = [time.time()]
def reader():
    global buf
    while True:
        c = rs.recv(1 << 20)
        if not c: break
        buf += c
        while len(buf) >= 4:
            t, n, f = struct.unpack("!BHB", buf[:4])
            if len(buf) < n: break
            counts[t] = counts.get(t, 0) + 1
            del buf[:n]
        last[0] = time.time()
threading.Thread(target=reader, daemon=True).start()
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{echo}") for i in range(L)))
time.sleep(2)
print("after live opens", counts)
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
for k in range(0, M, 5000):
    s.sendall(b"".join(OPEN(100000 + k + i, f"tcp://127.0.0.1:{echo}") for i in range(min(5000, M - k))))
while time.time() - last[0] < 3: time.sleep(0.5)
print(f"after {M} OPENs past cap: {counts}; answered {counts.get(101,0)+counts.get(102,0)-L} of {M}; CPU {status(p.pid)['cpu_s']-c0:.2f} s")
p_ok = p.poll() is None
s.sendall(OPEN(999999, f"tcp://127.0.0.1:{echo}"))
last[0] = time.time()
while time.time() - last[0] < 3: time.sleep(0.5)
print(f"after one more OPEN: {counts}; answered {counts.get(101,0)+counts.get(102,0)-L} of {M+1}")
print("log lines", len(out), "tail:", b"".join(out[-2:]).decode(errors="replace"))
kill(p)
