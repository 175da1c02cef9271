"""A peer that never answers the host's close and then goes completely silent (no reads, no
writes, no FIN). N clients each make the host fail the connection, then do nothing:
  big       a 2 KiB message over --max-message-bytes 1024 (host closes 1009)
  unmasked  an unmasked frame (host closes 1002)
  backlog   first queue BACKLOG bytes of echoes the client never reads (SO_RCVBUF 4 KiB), then the big message
Prints the host's fds/RSS over time (the host should reset each one at linger_timeout, 5 s).
WASM=echo.wasm|echo-p3.wasm, HOST=node for the Node host (echo.wasm).
Usage: timeout 120 nice -n 19 python3 silent_close.py MODE N [BACKLOG]"""
import sys, os, time, socket, subprocess, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, drain_output
from jm import HOSTK, NODE, NODE_HOST, NODE_CACHE, free_port
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
MODE, N = sys.argv[1], int(sys.argv[2]); BACKLOG = int(sys.argv[3]) if len(sys.argv) > 3 else 4 << 20
if HOSTK == "rust":
    p, port = start_echo(extra=["--max-message-bytes", "1024"] if MODE != "backlog" else ["--max-message-bytes", "65536"], nofile=20000)
else:
    port = free_port()
    p = subprocess.Popen([NODE, "--experimental-wasm-jspi", NODE_HOST, "run", "/work/rt8/bin/echo.wasm", "--listen", "127.0.0.1:*",
                          "--cache", NODE_CACHE, "--max-message-bytes", "1024" if MODE != "backlog" else "65536", "--", "server", f"127.0.0.1:{port}"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError: time.sleep(0.1)
out = drain_output(p)
time.sleep(0.5)
st0 = status(p.pid)
print(f"# host={HOSTK} wasm={os.environ.get('WASM','echo.wasm')} mode={MODE} N={N}; before {st0}", flush=True)
socks = []
for i in range(N):
    s = socket.socket()
    if MODE == "backlog": s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(("127.0.0.1", port))
    import base64
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b""
    while b"\r\n\r\n" not in buf: buf += s.recv(1)
    socks.append(s)
t_conn = time.time()
if MODE == "backlog":
    m = frame(2, b"b" * 60000); s_t = time.time()
    for s in socks:
        s.setblocking(False); sent = 0
        while sent < BACKLOG and time.time() - s_t < 20:
            try: sent += s.send(m[sent % len(m):] if sent % len(m) else m)
            except BlockingIOError: time.sleep(0.001); continue
        s.setblocking(True)
    time.sleep(1)
    print(f"backlog queued: {status(p.pid)}", flush=True)
t0 = time.time()
for s in socks:
    try:
        if MODE == "unmasked": s.sendall(frame(2, b"x" * 10, mask=False))
        else:
            s.settimeout(2); s.sendall(frame(2, b"y" * 70000 if MODE == "backlog" else b"y" * 2048))
    except OSError as e:
        pass
print(f"triggered the host's close on {N} in {time.time()-t0:.2f} s", flush=True)
for t in [float(x) for x in os.environ.get("TIMES", "0.5,2,4,5.5,7,10,15").split(",")]:
    while time.time() - t0 < t: time.sleep(0.05)
    print(f"  t={t:>4} s: {status(p.pid)}", flush=True)
# what did the clients get? (they read now)
import collections
c = collections.Counter()
for s in socks:
    s.setblocking(False)
    try:
        d = s.recv(1 << 20); c["data" if d else "eof"] += 1
    except BlockingIOError: c["nothing"] += 1
    except ConnectionResetError: c["reset"] += 1
    except OSError as e: c[type(e).__name__] += 1
print("clients, reading at the end:", dict(c), flush=True)
kill(p)
