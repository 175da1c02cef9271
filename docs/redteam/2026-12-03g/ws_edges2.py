"""Two Rust-host upgrade cases that got no HTTP answer in ws_edges.py: what exactly happens."""
import sys, os, time, socket, base64
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, kill, status, drain_output
p, port = start_echo(); out = drain_output(p)
def key(): return base64.b64encode(os.urandom(16)).decode()
std = lambda: f"Host: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key()}\r\nSec-WebSocket-Version: 13\r\n"
cases = {**{f"{5+k} header lines": "GET / HTTP/1.1\r\n" + std() + "".join(f"X-{i}: y\r\n" for i in range(k)) + "\r\n" for k in range(117, 124)},
 "127 header lines": "GET / HTTP/1.1\r\n" + std() + "".join(f"X-{i}: y\r\n" for i in range(122)) + "\r\n",
 "128 header lines": "GET / HTTP/1.1\r\n" + std() + "".join(f"X-{i}: y\r\n" for i in range(123)) + "\r\n",
 "129 header lines": "GET / HTTP/1.1\r\n" + std() + "".join(f"X-{i}: y\r\n" for i in range(124)) + "\r\n",
 "bare LF head, then CRLFCRLF": f"GET / HTTP/1.1\nHost: x\nUpgrade: websocket\nConnection: Upgrade\nSec-WebSocket-Key: {key()}\nSec-WebSocket-Version: 13\n\n\r\n\r\n",
 "bare LF head only (LF LF)": f"GET / HTTP/1.1\nHost: x\nUpgrade: websocket\nConnection: Upgrade\nSec-WebSocket-Key: {key()}\nSec-WebSocket-Version: 13\n\n",
}
for name, req in cases.items():
    s = socket.create_connection(("127.0.0.1", port), timeout=12); t0 = time.time(); s.sendall(req.encode())
    buf = b""; how = "eof"
    try:
        while True:
            c = s.recv(65536)
            if not c: break
            buf += c
            if b"\r\n\r\n" in buf: how = "answer"; break
    except socket.timeout: how = "timeout"
    except ConnectionResetError: how = "reset"
    print(f"{name:<30} {how} after {time.time()-t0:.2f} s: {buf[:120]!r}", flush=True)
print("log:", b"".join(out[-4:]).decode(errors="replace"))
kill(p)
