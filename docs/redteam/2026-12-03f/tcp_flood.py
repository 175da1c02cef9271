"""Echo guest's TCP listener (`echo server ADDR --tcp TCP_ADDR`) under a connect flood.
Phase idle: C connections that connect and send nothing (held open).
Phase churn: for DUR s, W threads connect and close at once (with RST half the time).
Phase halfclose: C connections send 1 KiB, shut down their write side and never read.
A live TCP client measures connect time and 32 B round trips in each phase.
Usage: timeout 300 nice -n 19 python3 tcp_flood.py C [DUR]
"""
import sys, os, socket, time, threading, resource, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, drain_output
from jm import free_port

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
C = int(sys.argv[1]); DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 10
tp = free_port()
p, port = start_echo(guest_args=["server", "127.0.0.1:0", "--tcp", f"127.0.0.1:{tp}"], nofile=20000)
out = drain_output(p); time.sleep(0.5)

def live(n=200):
    t0 = time.perf_counter()
    s = socket.create_connection(("127.0.0.1", tp), timeout=10); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    xs = []
    for i in range(n):
        t1 = time.perf_counter(); s.sendall(b"x" * 32); got = 0
        while got < 32:
            d = s.recv(64)
            if not d: return "closed"
            got += len(d)
        xs.append((time.perf_counter() - t1) * 1e6)
        if i == 0: first = (time.perf_counter() - t0) * 1000
    s.close(); xs.sort()
    return f"connect+first echo {first:.1f} ms, RT p50 {xs[n//2]:.0f} us p99 {xs[int(n*.99)]:.0f} us"

def line(label, c0=None, t0=None):
    st = status(p.pid)
    extra = f", host CPU {(st['cpu_s']-c0)/(time.time()-t0)*100:.0f}%" if c0 is not None else ""
    print(f"[{label}] live: {live()}; rss {st['rss_mib']} MiB fds {st['fds']}{extra}", flush=True)

print(f"# C={C} DUR={DUR}", flush=True)
line("baseline")
cs = []
t0 = time.time()
for i in range(C):
    cs.append(socket.create_connection(("127.0.0.1", tp)))
print(f"{C} idle connections made in {time.time()-t0:.2f} s", flush=True)
time.sleep(1)
c0 = status(p.pid)["cpu_s"]; t0 = time.time(); time.sleep(2)
line(f"{C} idle", c0, t0)
for c in cs: c.close()
cs = []
time.sleep(1)
stop = [False]; made = [0]
def churn(k):
    while not stop[0]:
        try:
            c = socket.create_connection(("127.0.0.1", tp), timeout=5)
            if k % 2: c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            c.close(); made[0] += 1
        except OSError:
            pass
ths = [threading.Thread(target=churn, args=(k,), daemon=True) for k in range(8)]
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
for t in ths: t.start()
time.sleep(DUR / 2)
line(f"churn, {made[0]/(time.time()-t0):.0f} connects/s", c0, t0)
time.sleep(DUR / 2)
stop[0] = True
for t in ths: t.join()
print(f"churn: {made[0]} connects in {time.time()-t0:.1f} s", flush=True)
time.sleep(2)
line("after churn")
for i in range(C):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    c.connect(("127.0.0.1", tp)); c.sendall(b"h" * 1024); c.shutdown(socket.SHUT_WR); cs.append(c)
time.sleep(2)
line(f"{C} half-closed, never reading")
time.sleep(6)
line(f"{C} half-closed, 8 s later")
for c in cs: c.close()
time.sleep(2)
line("after all closed")
print("alive", p.poll() is None, "log:", b"".join(out[-3:]).decode(errors="replace")[-400:])
kill(p)
