"""Echo guest (server): C clients that send and never read (SO_RCVBUF 4 KiB).
What host memory does each one pin, and does anything bound the total?
kind ws: each client sends PER bytes in 64 KiB binary messages; kind tcp: PER bytes on the
guest's --tcp listener. Prints host RSS as clients are added, per-client cost, and a live
client's round trip at the end (same kind).
Usage: timeout 300 nice -n 19 python3 slow_readers.py ws|tcp C [PER_MiB]
"""
import sys, os, socket, time, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output
from jm import free_port

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
KIND = sys.argv[1]; C = int(sys.argv[2]); PER = float(sys.argv[3]) if len(sys.argv) > 3 else 4
tp = free_port()
p, port = start_echo(guest_args=["server", "127.0.0.1:0", "--tcp", f"127.0.0.1:{tp}"], nofile=20000)
out = drain_output(p)
time.sleep(0.5)
b = status(p.pid)
print(f"# kind={KIND} C={C} each sends up to {PER} MiB and never reads", flush=True)
print("start", b, flush=True)

def live():
    if KIND == "ws":
        s, _, rest = ws_connect(port); xs = []
        for _ in range(100):
            t0 = time.perf_counter(); s.sendall(frame(2, b"x" * 32)); r = read_frame(s, rest, 10)
            if r is None: return "no echo"
            rest = r[3]; xs.append((time.perf_counter() - t0) * 1e6)
    else:
        s = socket.create_connection(("127.0.0.1", tp)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1); xs = []
        s.settimeout(10)
        for _ in range(100):
            t0 = time.perf_counter(); s.sendall(b"x" * 32); got = 0
            while got < 32:
                d = s.recv(64)
                if not d: return "closed"
                got += len(d)
            xs.append((time.perf_counter() - t0) * 1e6)
    s.close(); xs.sort()
    return f"p50 {xs[50]:.0f} us p99 {xs[98]:.0f} us"

cs = []; sent = []; rem = []
blob = frame(2, b"w" * 65536) if KIND == "ws" else b"w" * 65536
def push_all(rounds=3):
    for _ in range(rounds):
        for i, c in enumerate(cs):
            while sent[i] < PER * (1 << 20):
                try:
                    if not rem[i]: rem[i] = blob
                    n = c.send(rem[i]); sent[i] += n; rem[i] = rem[i][n:]
                    if rem[i]: break
                except (BlockingIOError, InterruptedError):
                    break
                except OSError:
                    sent[i] = 1 << 40; break
        time.sleep(0.3)

step = max(1, C // 5)
while len(cs) < C:
    for _ in range(step):
        if KIND == "ws":
            c, _, _ = ws_connect(port)
        else:
            c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); c.connect(("127.0.0.1", tp))
        c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        c.setblocking(False); cs.append(c); sent.append(0); rem.append(b"")
    push_all()
    a = status(p.pid)
    tot = sum(min(x, PER * (1 << 20)) for x in sent)
    print(f"  {len(cs)} clients, they wrote {tot/2**20:.0f} MiB: host rss {a['rss_mib']} MiB (+{(a['rss_mib']-b['rss_mib'])/len(cs)*1024:.0f} KiB per client) fds {a['fds']} cpu {a['cpu_s']:.1f}", flush=True)
print("live client:", live(), flush=True)
for c in cs: c.close()
time.sleep(3)
print("after the clients closed:", status(p.pid), "alive", p.poll() is None)
kill(p)
