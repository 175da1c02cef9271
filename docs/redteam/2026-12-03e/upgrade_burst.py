"""Burst of N simultaneous WebSocket upgrades to `echo server` (p2 or node):
every request head is written before any answer is read, so up to
max_handshakes_per_listener handshakes wait for room in the 64-entry
accept backlog at once. Host CPU per upgrade and time to the last 101,
for N = 64 (fits the backlog) up to 1000.

Usage: timeout 300 nice -n 19 python3 upgrade_burst.py [p2|p3|node] [N...]
"""
import sys, os, socket, time, subprocess, resource, re, base64, select
sys.path.insert(0, "/work/rt6")
from rt import status, kill, drain_output

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
B = "/work/rt6/bin"
TARGET = sys.argv[1]
NS = [int(a) for a in sys.argv[2:]] or [64, 250, 1000]
def pre():
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
if TARGET == "node":
    args = ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/rt6/node/bin/tether-node.mjs", "run",
            f"{B}/echo.wasm", "--listen", "127.0.0.1:*", "--cache", "/work/rt6/node-cache", "--", "server", "127.0.0.1:0"]
else:
    args = [f"{B}/tether", "run", f"{B}/{'echo-p3.wasm' if TARGET == 'p3' else 'echo.wasm'}", "--listen", "127.0.0.1:*", "--", "server", "127.0.0.1:0"]
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
try:
    port = None
    for _ in range(50):
        m = re.search(rb"listening on 127\.0\.0\.1:(\d+)", p.stdout.readline())
        if m: port = int(m.group(1)); break
    drain_output(p)
    print(f"# {TARGET}: N simultaneous upgrades", flush=True)
    print(f"{'N':>6} {'ok':>6} {'last 101 ms':>11} {'host cpu ms':>11} {'cpu us/upgrade':>14}", flush=True)
    for n in NS:
        socks = []
        for i in range(n):
            s = socket.socket(); s.setblocking(True)
            s.connect(("127.0.0.1", port)); socks.append(s)
        time.sleep(0.3)
        c0 = status(p.pid)["cpu_s"]; t0 = time.perf_counter()
        for s in socks:
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall((f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                       f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
        pending = {s.fileno(): s for s in socks}
        for s in socks: s.setblocking(False)
        ok = 0; last = t0
        ep = select.epoll()
        for fd in pending: ep.register(fd, select.EPOLLIN)
        deadline = time.time() + 30
        while pending and time.time() < deadline:
            for fd, _ in ep.poll(0.5):
                s = pending.pop(fd, None)
                if s is None: continue
                ep.unregister(fd)
                try:
                    d = s.recv(4096)
                except OSError:
                    d = b""
                if b" 101 " in d[:20]:
                    ok += 1; last = time.perf_counter()
        time.sleep(0.5)
        c1 = status(p.pid)["cpu_s"]
        print(f"{n:>6} {ok:>6} {(last-t0)*1e3:>11.0f} {(c1-c0)*1e3:>11.0f} {(c1-c0)/max(ok,1)*1e6:>14.0f}", flush=True)
        for s in socks: s.close()
        time.sleep(1.0)
finally:
    kill(p)
