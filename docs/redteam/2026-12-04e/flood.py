"""CPU cost of refusals under a connect flood. The echo server holds HELD upgraded connections (from 127.0.5.x,
HELD per source <= 200), then FLOOD seconds of connects (up to 256 in flight, from 127.0.6.1 unless MODE=per_source:
from 127.0.5.1, which is at its bound) that each wait for the answer and close. A held connection echoes 4 bytes
every 20 ms meanwhile. Prints connects/s answered, host CPU during the flood, echo p50/p99/max.
usage: TETHER=... G=... timeout 170 python3 flood.py MODE(host|per_source) HELD FLOOD [extra tether options]"""
import os, sys, socket, time, select, errno, statistics, threading
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
import rt
from jm import free_port
mode, HELD, FLOOD = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
extra = sys.argv[4:]
mport = free_port()
p, port = rt.start_echo(extra=["--metrics", f"127.0.0.1:{mport}", *extra])
out = rt.drain_output(p); time.sleep(0.3)
held = []
for i in range(HELD):
    held.append(rt.ws_connect(port, source=f"127.0.5.{i // 200 + 1}")[0])
probe = held[-1]

def metrics():
    s = socket.create_connection(("127.0.0.1", mport), timeout=2); s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    b = b""
    while (c := s.recv(65536)): b += c
    return sum(float(l.split()[1]) for l in b.decode().splitlines() if l.startswith("tether_connection_refusals_total"))

lat = []; stop = False
def echoer():
    while not stop:
        t = time.time(); probe.sendall(rt.frame(2, b"ping")); got = b""
        probe.settimeout(5)
        while len(got) < 6: got += probe.recv(64)
        lat.append(time.time() - t); time.sleep(0.02)
th = threading.Thread(target=echoer, daemon=True); th.start()
src = "127.0.5.1" if mode == "per_source" else "127.0.6.1"
r0 = metrics(); c0 = rt.status(p.pid)["cpu_s"]; t0 = time.time()
ep = select.epoll(); inflight = {}; done = 0; errs = 0
while time.time() - t0 < FLOOD:
    while len(inflight) < 256:
        s = socket.socket(); s.setblocking(False); s.bind((src, 0))
        try: s.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        except OSError: errs += 1; s.close(); continue
        ep.register(s.fileno(), select.EPOLLIN | select.EPOLLERR | select.EPOLLHUP); inflight[s.fileno()] = s
    for fd, ev in ep.poll(0.05):
        s = inflight.pop(fd); ep.unregister(fd); s.close(); done += 1
el = time.time() - t0
c1 = rt.status(p.pid)["cpu_s"]; r1 = metrics()
stop = True; time.sleep(0.1)
lat_ms = sorted(x * 1000 for x in lat)
print(f"# {rt.TETHER} mode={mode} held={HELD} {' '.join(extra)}")
print(f"flood {el:.1f} s: {done} connects answered ({done/el:.0f}/s), refusals counted {r1-r0:.0f}, connect errors {errs}")
print(f"host CPU during the flood {c1-c0:.2f} s ({(c1-c0)/el*100:.0f}% of one core), {(c1-c0)/max(1,done)*1e6:.0f} us per refusal")
print(f"held client's echo during the flood: n={len(lat_ms)} p50 {statistics.median(lat_ms):.2f} ms p99 {lat_ms[int(len(lat_ms)*.99)]:.2f} ms max {lat_ms[-1]:.1f} ms")
print("host", rt.status(p.pid))
rt.kill(p)
