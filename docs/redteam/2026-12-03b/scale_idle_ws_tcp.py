"""Round trip and host CPU of ONE active stream while N idle streams are open:
`tether run echo.wasm server ... --tcp ...`, N idle WebSocket + N idle TCP.
Usage: timeout 300 nice -n 19 python3 scale_idle_ws_tcp.py 0 1000 4000
"""
import sys, socket, time, resource, re
sys.path.insert(0, "/work/rt3")
from rt import start_echo, status, kill, ws_connect, frame
from jm import free_port
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
Ns = [int(a) for a in sys.argv[1:]] or [0, 1000, 4000]
tp = free_port()
p, port = start_echo(extra=["--listen", "127.0.0.1:*"], nofile=20000, guest_args=["server", "127.0.0.1:0", "20000", "--tcp", f"127.0.0.1:{tp}"])
from rt import drain_output; out = drain_output(p)
time.sleep(0.5)

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise RuntimeError("closed")
        b += c
    return b

def rt_ws(s, k):
    xs = []
    f = frame(2, b"x" * 32)
    for _ in range(k):
        t = time.perf_counter(); s.sendall(f); recv_exact(s, 34); xs.append((time.perf_counter() - t) * 1e6)
    xs.sort(); return xs[len(xs)//2], xs[int(len(xs)*.99)]

def rt_tcp(s, k):
    xs = []
    for _ in range(k):
        t = time.perf_counter(); s.sendall(b"y" * 32); recv_exact(s, 32); xs.append((time.perf_counter() - t) * 1e6)
    xs.sort(); return xs[len(xs)//2], xs[int(len(xs)*.99)]

ws, _, _ = ws_connect(port)
tc = socket.create_connection(("127.0.0.1", tp)); tc.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rt_ws(ws, 200); rt_tcp(tc, 200)
idle = []
print(f"{'N idle each':>12} {'ws p50':>7} {'ws p99':>7} {'ws cpu us/RT':>12} {'tcp p50':>7} {'tcp p99':>7} {'tcp cpu us/RT':>13} {'idle cpu%':>9} {'rss MiB':>7}")
for n in Ns:
    while len(idle) < 2 * n:
        a, _, _ = ws_connect(port); idle.append(a)
        b = socket.create_connection(("127.0.0.1", tp)); idle.append(b)
    time.sleep(1)
    c0 = status(p.pid)["cpu_s"]; time.sleep(3); idlecpu = (status(p.pid)["cpu_s"] - c0) / 3 * 100
    K = 2000
    c0 = status(p.pid)["cpu_s"]; w50, w99 = rt_ws(ws, K); wc = (status(p.pid)["cpu_s"] - c0) / K * 1e6
    c0 = status(p.pid)["cpu_s"]; t50, t99 = rt_tcp(tc, K); tcpu = (status(p.pid)["cpu_s"] - c0) / K * 1e6
    st = status(p.pid)
    print(f"{n:>12} {w50:>7.0f} {w99:>7.0f} {wc:>12.1f} {t50:>7.0f} {t99:>7.0f} {tcpu:>13.1f} {idlecpu:>9.1f} {st['rss_mib']:>7}", flush=True)
for s in idle: s.close()
kill(p)
