"""WebSocket upgrade and framing edge cases against the echo guest (WASM=, HOST=node).
Prints what the host answered for each case."""
import sys, os, time, socket, subprocess, base64, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, frame, read_frame, close_code, drain_output
from jm import HOSTK, NODE, NODE_HOST, NODE_CACHE, free_port
if HOSTK == "rust":
    p, port = start_echo()
else:
    port = free_port()
    p = subprocess.Popen([NODE, "--experimental-wasm-jspi", NODE_HOST, "run", "/work/rt8/bin/echo.wasm", "--listen", "127.0.0.1:*",
                          "--cache", NODE_CACHE, "--", "server", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError: time.sleep(0.1)
out = drain_output(p)
def key(): return base64.b64encode(os.urandom(16)).decode()
def up(extra="", path="/", first=None, raw=None):
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    req = raw if raw is not None else (first or f"GET {path} HTTP/1.1") + f"\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key()}\r\nSec-WebSocket-Version: 13\r\n{extra}\r\n"
    try: s.sendall(req.encode() if isinstance(req, str) else req)
    except OSError as e: return s, f"send failed {type(e).__name__}", b""
    buf = b""
    try:
        while b"\r\n\r\n" not in buf:
            c = s.recv(65536)
            if not c: break
            buf += c
    except OSError as e:
        return s, f"{type(e).__name__} after {len(buf)} B", b""
    head, _, rest = buf.partition(b"\r\n\r\n")
    return s, head.decode(errors="replace"), rest
def show(name, r):
    s, head, rest = r
    lines = head.split("\r\n")
    ext = [l for l in lines if l.lower().startswith(("sec-websocket-extensions", "sec-websocket-protocol"))]
    print(f"{name:<48} -> {lines[0] if lines else '?'} {ext}", flush=True)
    return s, rest
show("plain", up())
s, rest = show("permessage-deflate offered", up("Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n"))
s.sendall(frame(2, b"\x00" * 10, rsv=4)); r = read_frame(s, rest, 3)
print(f"{'  then an RSV1 (compressed) frame':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("valid upgrade, then RSV2|RSV3 frame", up()); s.sendall(frame(2, b"x", rsv=3)); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("reserved opcode 3", up()); s.sendall(frame(3, b"x")); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("ping with 126 B payload (control > 125)", up()); s.sendall(frame(9, b"p" * 126)); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("fragmented ping (FIN=0 control)", up()); s.sendall(frame(9, b"p", fin=False)); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("close with 1-byte payload", up()); s.sendall(frame(8, b"\x03")); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("close 1000 with non-UTF-8 reason", up()); s.sendall(frame(8, b"\x03\xe8\xff\xfe")); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("text frame, invalid UTF-8 split across frames", up()); s.sendall(frame(1, b"\xe2\x82", fin=False) + frame(0, b"\x28")); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("continuation without a start", up()); s.sendall(frame(0, b"x")); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {('close', close_code(r[2])) if r and r[0]==8 else r}", flush=True)
s, rest = show("non-minimal length (5 B as 64-bit length)", up()); s.sendall(bytes([0x82, 0x80 | 127]) + struct.pack("!Q", 5) + b"\0\0\0\0hello"); r = read_frame(s, rest, 3)
print(f"{'':<48} -> {(r[0], r[2][:8]) if r else r}", flush=True)
show("head exactly 16,384 B", up(raw=(lambda h: h[:-2] + "X-Pad: " + "a" * (16384 - len(h) - 9) + "\r\n\r\n")(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key()}\r\nSec-WebSocket-Version: 13\r\n\r\n")))
show("head 16,385 B", up(raw=(lambda h: h[:-2] + "X-Pad: " + "a" * (16385 - len(h) - 9) + "\r\n\r\n")(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key()}\r\nSec-WebSocket-Version: 13\r\n\r\n")))
show("128 header lines", up("".join(f"X-{i}: y\r\n" for i in range(123))))
show("129+ header lines", up("".join(f"X-{i}: y\r\n" for i in range(130))))
show("header line with bare LF endings", up(raw=f"GET / HTTP/1.1\nHost: x\nUpgrade: websocket\nConnection: Upgrade\nSec-WebSocket-Key: {key()}\nSec-WebSocket-Version: 13\n\n\r\n\r\n"))
show("obs-fold continuation line", up("X-Fold: a\r\n b\r\n"))
show("NUL in a header value", up("X-Nul: a\x00b\r\n"))
show("two Upgrade headers", up("Upgrade: h2c\r\n"))
show("Connection: keep-alive, Upgrade", up(raw=f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\nSec-WebSocket-Key: {key()}\r\nSec-WebSocket-Version: 13\r\n\r\n"))
show("Transfer-Encoding: chunked + body", up("Transfer-Encoding: chunked\r\n"))
show("Content-Length: 10 body", up("Content-Length: 10\r\n"))
show("absolute-form target", up(first="GET http://evil.example/x HTTP/1.1"))
show("path with CRLF-ish %0d%0a", up(path="/a%0d%0aX-Injected:%20y"))
show("path 8 KiB", up(path="/" + "p" * 8000))
show("HTTP/1.2", up(first="GET / HTTP/1.2"))
show("HTTP/2.0 in request line", up(first="GET / HTTP/2.0"))
show("lower-case method get", up(first="get / HTTP/1.1"))
show("Sec-WebSocket-Protocol with 1000 tokens", up("Sec-WebSocket-Protocol: " + ", ".join(f"p{i}" for i in range(1000)) + "\r\n"))
print("host alive:", p.poll() is None, status(p.pid), flush=True)
kill(p)
