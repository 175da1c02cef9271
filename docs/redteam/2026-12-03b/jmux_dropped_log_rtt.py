"""Companion of jmux_dropped_log_flood.py: round trips of a live channel
while a second stream of messages for unknown ids arrives on the same pipe
(each costs the guest a log line), against the same count of 1-byte DATA
messages for the live channel's own sink (no log line).
Usage: timeout 120 nice -n 19 python3 jmux_dropped_log_rtt.py
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, EOF, Reader, target
echo = target("echo")
p, s, out = start_jmux()
r = Reader(s)
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}")); t, b = r.next(5); gid = struct.unpack("!I", b[4:8])[0]
lock = threading.Lock()
RATE = int(sys.argv[1]) if len(sys.argv) > 1 else 50  # messages per 5 ms
def rtt(k):
    xs = []
    for _ in range(k):
        t0 = time.perf_counter()
        with lock: s.sendall(DATA(gid, b"x" * 32))
        while True:
            m = r.next(30)
            if m is None: raise SystemExit(f"no echo in 30 s; log lines {len(out)}")
            if m[0] == 104: break
        xs.append((time.perf_counter() - t0) * 1e6)
        time.sleep(0.002)
    xs.sort(); return f"p50 {xs[len(xs)//2]:.0f} us p99 {xs[int(len(xs)*.99)]:.0f} us"
print("baseline:", rtt(500))
stop = [False]
def flood():
    i = 0
    while not stop[0]:
        batch = b"".join(EOF(100000 + i + j) for j in range(RATE)); i += RATE
        with lock: s.sendall(batch)
        time.sleep(0.005)
th = threading.Thread(target=flood, daemon=True); th.start()
time.sleep(1)
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
res = rtt(100)
print(f"during a flood of EOFs for unknown ids ({RATE*200} msgs/s offered, {RATE*200*8//1000} KB/s): {res}; tether CPU {(status(p.pid)['cpu_s']-c0)/(time.time()-t0)*100:.0f}%; log lines so far {len(out)}")
stop[0] = True; th.join()
kill(p)
