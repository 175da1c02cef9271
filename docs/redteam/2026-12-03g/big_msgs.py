"""Slow readers with large messages: N clients each send K binary messages of SIZE bytes to the
echo guest (default limits: max_message_bytes 64 MiB, max_buffered_bytes 256 MiB) and never read
(SO_RCVBUF 4 KiB). What does the host hold, against the budget?
Usage: timeout 200 nice -n 19 python3 big_msgs.py N [K] [SIZE]   (WASM=, HOST=node)"""
import sys, os, time, socket, threading, resource, urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output
from jm import free_port
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
N = int(sys.argv[1]); K = int(sys.argv[2]) if len(sys.argv) > 2 else 3; SIZE = int(sys.argv[3]) if len(sys.argv) > 3 else 60 << 20
MP = free_port()
extra = [] if os.environ.get("HOST") == "node" else ["--metrics", f"127.0.0.1:{MP}"]
if os.environ.get("QUIC"):   # the quic-echo server instead (test CA of round 5)
    import subprocess, re
    Q = "/work/rt6/q"; cert = open(f"{Q}/leaf.hex").read().strip(); key = open(f"{Q}/key.hex").read().strip()
    from rt import TETHER, G
    host = [TETHER, "run", f"{G}/quic-echo.wasm", "--listen", "127.0.0.1:*", *extra] if os.environ.get("HOST") != "node" else \
        ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/rt8/node/bin/tether-node.mjs", "run", f"{G}/quic-echo.wasm", "--listen", "127.0.0.1:*", "--cache", "/tmp/rt8g-node-cache"]
    p = subprocess.Popen([*host, "--", "server", "listen", "127.0.0.1:0", "--cert", cert, "--key", key], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(400):
        m = re.search(rb"listening 127\.0\.0\.1:(\d+)", p.stdout.readline())
        if m: port = int(m.group(1)); break
    out = drain_output(p)
else:
    p, port = start_echo(extra=extra, nofile=20000); out = drain_output(p)
def buffered():
    if os.environ.get("HOST") == "node": return "n/a"
    try:
        t = urllib.request.urlopen(f"http://127.0.0.1:{MP}/metrics", timeout=3).read().decode()
        return " ".join(l for l in t.splitlines() if l.startswith(("tether_buffered_bytes", "tether_assembling")))
    except Exception as e: return f"?{e}"
live, _, _ = ws_connect(port)
def rt():
    if os.environ.get("QUIC"): return 1.0
    t0 = time.perf_counter(); live.sendall(frame(2, b"x" * 32)); r = read_frame(live, timeout=10); return (time.perf_counter() - t0) * 1e6 if r else None
print(f"# N={N} K={K} SIZE={SIZE}: before {status(p.pid)} live RT {rt():.0f} us", flush=True)
M = frame(2, b"M" * SIZE)
sent = [0] * N
def connect_one():
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); s.connect(("127.0.0.1", port))
    import base64
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    b = b""
    while b"\r\n\r\n" not in b: b += s.recv(1)
    s.settimeout(30)
    return s
socks = [connect_one() for _ in range(N)]
print(f"  {N} clients upgraded: {status(p.pid)}", flush=True)
def client(i):
    s = socks[i]
    try:
        for _ in range(K):
            mv = memoryview(M); o = 0
            while o < len(M): n = s.send(mv[o:o + (1 << 20)]); o += n; sent[i] += n
    except OSError: pass
    if not SEQ: time.sleep(3600)
SEQ = os.environ.get("SEQ")
def seq():
    for i in range(N): client(i); time.sleep(float(SEQ))
ths = [threading.Thread(target=client, args=(i,), daemon=True) for i in range(N)] if not SEQ else [threading.Thread(target=seq, daemon=True)]
[t.start() for t in ths]
for t in range(0, int(os.environ.get('OBS', 30)), 3):
    time.sleep(3)
    if p.poll() is not None:
        print(f"  t={t+3:>2} s: HOST EXITED with {p.returncode}; clients sent {sum(sent)/2**20:.0f} MiB; output: {b''.join(out).decode(errors='replace')[-1500:]}", flush=True)
        break
    print(f"  t={t+3:>2} s: clients sent {sum(sent)/2**20:.0f} MiB; host {status(p.pid)}; {buffered()}; live RT {rt() or 0:.0f} us", flush=True)
import subprocess as sp
r = sp.run(["ss", "-tnH"], capture_output=True, text=True).stdout.splitlines()
mine = [l for l in r if f":{port} " in l + " "]
print("ss lines for the port:", len(mine)); print("\n".join(mine[:6]))
r = sp.run(["ss", "-ltnH"], capture_output=True, text=True).stdout.splitlines()
print("listen:", [l for l in r if f":{port}" in l])
print("guest log:", b"".join(out[-8:]).decode(errors="replace")[-1500:])
kill(p)
