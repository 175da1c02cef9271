"""Host threads held by DNS lookups a JMUX pipe peer asks for.
tether jmux runs in a private mount namespace whose /etc/resolv.conf points
at 127.0.0.1:53, where this script's UDP socket takes queries and never
answers (a slow or blackholed resolver). The peer sends N OPENs to distinct
names; each becomes tokio::net::lookup_host = one blocking getaddrinfo
thread, which the host's 10 s connect timeout does not stop.
Needs root (mount namespace, port 53). Nothing outside the namespace changes.
Usage: timeout 120 nice -n 19 python3 jmux_slow_dns_threads.py [N]
"""
import sys, socket, time, subprocess, os, threading
sys.path.insert(0, "/work/rt3")
from rt import TETHER, status, kill, drain_output
from jm import OPEN, Reader, free_port, target, DATA
import struct

N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
open("/work/rt3/resolv.blackhole.conf", "w").write("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); dns.bind(("127.0.0.1", 53))
q = [0]
def sink():
    while True:
        dns.recvfrom(4096); q[0] += 1
threading.Thread(target=sink, daemon=True).start()
port = free_port()
cmd = f"mount --bind /work/rt3/resolv.blackhole.conf /etc/resolv.conf && exec {TETHER} jmux tcp-listen://127.0.0.1:{port} --allow-all"
p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
for _ in range(50):
    try: s = socket.create_connection(("127.0.0.1", port)); break
    except OSError: time.sleep(0.1)
r = Reader(s)
echo = target("echo")
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}")); t, b = r.next(5); gid = struct.unpack("!I", b[4:8])[0]
def rtt(k=300):
    xs = []
    for _ in range(k):
        t0 = time.perf_counter(); s.sendall(DATA(gid, b"x" * 32))
        while True:
            m = r.next(5)
            if m and m[0] == 104: break
        xs.append((time.perf_counter() - t0) * 1e6)
    xs.sort(); return xs[len(xs)//2]
print("start", status(p.pid), "rtt p50", round(rtt()))
s.sendall(b"".join(OPEN(1 + i, f"tcp://n{i}.slow.test:80") for i in range(N)))
for t in range(12):
    time.sleep(2)
    st = status(p.pid)
    print(f"t={2*(t+1)}s threads {st['threads']} rss {st['rss_mib']} MiB fds {st['fds']} cpu {st['cpu_s']:.2f}s dns queries {q[0]} rtt p50 {rtt(100):.0f} us", flush=True)
kill(p)
print("log:", b"".join(out[-2:]).decode(errors="replace"))
