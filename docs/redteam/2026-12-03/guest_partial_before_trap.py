"""A5b: send-many with invalid UTF-8 in element 500: do elements 0..499 reach the peer before the guest traps?
(The generated bindings lift the whole list first, so they would trap before sending anything.)"""
import sys, time, socket, threading, base64, hashlib, subprocess
sys.path.insert(0, "/work/rt2")
from rt import *
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(4)
port = ls.getsockname()[1]; got = []
def serve():
    c, _ = ls.accept(); buf = b""
    while b"\r\n\r\n" not in buf: buf += c.recv(4096)
    head, rest = buf.split(b"\r\n\r\n", 1)
    key = [l.split(b":", 1)[1].strip() for l in head.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
    acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
    c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    c.settimeout(3); buf = rest
    try:
        while True:
            d = c.recv(65536)
            if not d: break
            buf += d
    except OSError: pass
    i = 0
    while i + 2 <= len(buf):
        op, n = buf[i] & 15, buf[i + 1] & 127; j = i + 2
        if n == 126: n = struct.unpack("!H", buf[j:j+2])[0]; j += 2
        elif n == 127: n = struct.unpack("!Q", buf[j:j+8])[0]; j += 8
        k = buf[j:j+4]; j += 4
        got.append((op, bytes(b ^ k[x % 4] for x, b in enumerate(buf[j:j+n]))[:8])); i = j + n
threading.Thread(target=serve, daemon=True).start()
r = subprocess.run(["timeout", "20", TETHER, "run", f"{G}/hguest2.wasm", "--allow", "127.0.0.1:*", "--", "sm-badutf8-later", f"ws://127.0.0.1:{port}/"], capture_output=True, text=True)
time.sleep(1)
print("guest rc", r.returncode, [l for l in (r.stdout + r.stderr).splitlines() if "utf-8" in l or "calling" in l])
print(f"peer received {sum(1 for o, _ in got if o == 1)} text messages before the trap; frames: {got[:2]} ... {got[-2:]}")
