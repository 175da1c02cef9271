"""Is the host bound ever exceeded? --max-connections M; N WebSocket upgrades sent at once (non-blocking, from 50
sources), held; counts 101 / 503 / other and the host's descriptors. usage: timeout 60 python3 burst.py M N"""
import sys, socket, time, select, base64, os, resource
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
import rt
M, N = int(sys.argv[1]), int(sys.argv[2])
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
p, port = rt.start_echo(extra=["--max-connections", str(M)]); out = rt.drain_output(p); time.sleep(0.3)
socks = []
for i in range(N):
    s = socket.socket(); s.setblocking(False); s.bind((f"127.0.9.{i % 50 + 1}", 0))
    try: s.connect(("127.0.0.1", port))
    except BlockingIOError: pass
    socks.append(s)
time.sleep(0.2)
req = (f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "
       f"{base64.b64encode(os.urandom(16)).decode()}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
for s in socks:
    try: s.send(req)
    except OSError: pass
res = {}; t0 = time.time(); ep = select.epoll(); byfd = {s.fileno(): s for s in socks}
for s in socks: ep.register(s.fileno(), select.EPOLLIN)
while len(res) < N and time.time() - t0 < 10:
    for fd, _ in ep.poll(0.2):
        s = byfd[fd]; ep.unregister(fd)
        try: d = s.recv(64)
        except OSError: d = b""
        res[s.fileno()] = "101" if b" 101 " in d else "503" if b" 503 " in d else "closed/other"
import collections
c = collections.Counter(res.values()); c["no answer"] = N - len(res)
time.sleep(0.3)
print(f"# {rt.TETHER} max_connections={M}, {N} at once: {dict(c)}; host {rt.status(p.pid)}")
rt.kill(p)
