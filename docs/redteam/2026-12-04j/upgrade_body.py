"""Rust host: an upgrade request with Content-Length or Transfer-Encoding gets no answer: how long is the place held?"""
import sys, os, socket, time
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
HOST = sys.argv[1] if len(sys.argv) > 1 else "rust"
p, port = start(HOST); out = drain_output(p)
base = "GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
for name, req in [("CL 5 + body", base + "Content-Length: 5\r\n\r\nhello"), ("CL 0", base + "Content-Length: 0\r\n\r\n"),
                  ("TE chunked", base + "Transfer-Encoding: chunked\r\n\r\n0\r\n\r\n"), ("CL 5 no body", base + "Content-Length: 5\r\n\r\n")]:
    s = socket.create_connection(("127.0.0.1", port), timeout=15); t = time.time()
    s.sendall(req.encode()); buf = b""
    try:
        while True:
            c = s.recv(4096)
            if not c: break
            buf += c
            if b"\r\n\r\n" in buf: break
    except socket.timeout: pass
    print(f"{HOST} {name:14} after {time.time()-t:5.2f}s: {buf[:120]!r}", flush=True)
    s.close()
print([l.decode(errors='replace').strip()[:200] for l in out[-6:]])
kill(p)
