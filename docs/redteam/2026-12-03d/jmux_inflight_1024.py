"""1023 JMUX connects in flight (SYN-dropping target) next to one live channel.
Phases, same process: baseline (0 in flight) -> N in flight: RT p50/p99 on the
live channel, tether CPU per RT, idle CPU, RSS/fds/threads -> the moment they
all time out together (refusal burst: RT during it, log lines) -> churn:
OPEN to blackhole then CLOSE at once from the peer, id reused, K rounds.
Usage: timeout 200 nice -n 19 python3 jmux_inflight_1024.py [N] [CHURN]
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt5")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, CLOSE, Reader, target
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1023
CHURN = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
echo = target("echo")
bh = socket.socket(); bh.bind(("127.0.0.1", 0)); bh.listen(0); bh_port = bh.getsockname()[1]
fill = socket.create_connection(("127.0.0.1", bh_port))
p, s, out = start_jmux()
r = Reader(s)
ctrl = []  # non-DATA messages seen
def rtts(n):
    res = []
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(DATA(gid, b"x" * 32))
        got = 0
        while got < 32:
            m = r.next(15)
            if m is None: raise RuntimeError("no echo")
            if m[0] == 104: got += len(m[1]) - 4
            else: ctrl.append(m)
        res.append((time.perf_counter() - t) * 1e6)
    res.sort()
    return res[len(res)//2], res[int(len(res)*0.99)], res[-1]
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}"))
t, body = r.next(5); assert t == 101, (t, body)
gid = struct.unpack("!I", body[4:8])[0]
rtts(200)
def measure(label, K=1000):
    c0 = status(p.pid)["cpu_s"]; t0 = time.time(); time.sleep(2)
    idle = (status(p.pid)["cpu_s"] - c0) / (time.time() - t0) * 100
    c0 = status(p.pid)["cpu_s"]
    p50, p99, mx = rtts(K)
    cpu = (status(p.pid)["cpu_s"] - c0) / K * 1000
    st = status(p.pid)
    print(f"{label:28s} p50 {p50:7.0f} us  p99 {p99:7.0f} us  max {mx/1000:7.1f} ms  CPU/RT {cpu:.3f} ms  idle {idle:4.1f}%  "
          f"rss {st['rss_mib']} MiB fds {st['fds']} thr {st['threads']}  log lines {len(out)}", flush=True)
measure("baseline 0 in flight")
t_open = time.time()
s.sendall(b"".join(OPEN(1 + i, f"tcp://127.0.0.1:{bh_port}") for i in range(N)))
time.sleep(0.5)
measure(f"{N} in flight")
# one more OPEN past the cap: should be refused at once
t0 = time.time(); s.sendall(OPEN(5000, f"tcp://127.0.0.1:{echo}"))
seen = None
while time.time() - t0 < 5:
    m = r.next(1)
    if m and m[0] in (101, 102) and struct.unpack("!I", m[1][:4])[0] == 5000:
        seen = (m[0], time.time() - t0, m[1][8:60]); break
print("OPEN past the cap:", seen, flush=True)
if seen and seen[0] == 101:
    s.sendall(CLOSE(struct.unpack("!I", m[1][4:8])[0]))
# RT samples through the mass timeout (10 s after t_open)
while time.time() < t_open + 9.0: time.sleep(0.05)
burst = []; fails = 0
tend = time.time() + 4
while time.time() < tend:
    t = time.perf_counter(); s.sendall(DATA(gid, b"y" * 32)); got = 0
    while got < 32:
        m = r.next(15)
        if m[0] == 104: got += len(m[1]) - 4
        elif m[0] == 102: fails += 1
    burst.append((time.perf_counter() - t) * 1e6)
burst.sort()
print(f"during mass timeout: {len(burst)} RTs p50 {burst[len(burst)//2]:.0f} us p99 {burst[int(len(burst)*.99)]:.0f} us max {burst[-1]/1000:.1f} ms; OPEN FAILUREs seen {fails + sum(1 for m in ctrl if m[0]==102)}", flush=True)
time.sleep(1)
while r.next(0.3): pass
measure("after timeouts")
# churn: OPEN to blackhole + CLOSE right away, reuse ids
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
B = 100
for k in range(CHURN // B):
    s.sendall(b"".join(OPEN(10 + i, f"tcp://127.0.0.1:{bh_port}") + CLOSE(10 + i) for i in range(B)))
    # drain whatever answers come
    while True:
        m = r.next(0.02)
        if m is None: break
print(f"churn {CHURN} OPEN+CLOSE (ids 10..{10+B-1} reused): {time.time()-t0:.1f} s, tether CPU {status(p.pid)['cpu_s']-c0:.2f} s", flush=True)
measure("during/after churn")
time.sleep(11)
while r.next(0.3): pass
measure("11 s after churn")
# check the reused ids work now: OPEN id 10 to echo
s.sendall(OPEN(10, f"tcp://127.0.0.1:{echo}")); t0 = time.time(); ans = None
while time.time() - t0 < 5:
    m = r.next(1)
    if m and m[0] in (101, 102) and struct.unpack("!I", m[1][:4])[0] == 10: ans = (m[0], round(time.time()-t0, 3), m[1][8:80]); break
print("reused id 10 to live echo:", ans, flush=True)
kill(p)
txt = b"".join(out).decode(errors="replace").splitlines()
print(f"log: {len(txt)} lines, {sum(len(l)+1 for l in txt)} bytes; last 6:"); print("\n".join(txt[-6:]))
