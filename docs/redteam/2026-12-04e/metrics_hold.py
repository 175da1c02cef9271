"""fds through the metrics endpoint (not counted in max_connections): N connections to --metrics held silent
(or sending a partial request), then the host's descriptors, and whether a fresh scrape and a WebSocket client
are served. usage: TETHER=... G=... timeout 120 python3 metrics_hold.py N"""
import sys, socket, time, resource
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
import rt
from jm import free_port
N = int(sys.argv[1])
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
mport = free_port()
p, port = rt.start_echo(extra=["--metrics", f"127.0.0.1:{mport}", "--max-connections", "64"], nofile=512)
out = rt.drain_output(p); time.sleep(0.3)
print(f"# {rt.TETHER} nofile=512 max_connections=64; host before {rt.status(p.pid)}")
held = []; errs = 0
for i in range(N):
    try:
        s = socket.socket(); s.bind((f"127.0.7.{i % 250 + 1}", 0)); s.settimeout(2); s.connect(("127.0.0.1", mport))
        s.sendall(b"GET /metrics HTTP/1.1\r\n"); held.append(s)
    except OSError: errs += 1
time.sleep(1)
print(f"held {len(held)} partial scrapes (errors {errs}); host {rt.status(p.pid)}")
alive = 0
for s in held:
    s.setblocking(False)
    try:
        d = s.recv(100, socket.MSG_PEEK); alive += (d == b"") is False and 0
    except BlockingIOError: alive += 1
    except OSError: pass
print(f"still open and unanswered after 1 s: {alive}")
try:
    ws, _, _ = rt.ws_connect(port, timeout=2, source="127.0.8.1"); print("WebSocket client: upgraded"); ws.close()
except Exception as e: print("WebSocket client:", e)
time.sleep(5)
alive = 0
for s in held:
    try:
        d = s.recv(100, socket.MSG_PEEK)
    except BlockingIOError: alive += 1
    except OSError: pass
print(f"still open after 6 s (scrape timeout 5 s): {alive}; host {rt.status(p.pid)}")
rt.kill(p)
