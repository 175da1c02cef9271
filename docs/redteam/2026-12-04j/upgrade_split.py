"""Bytes after the head sent 30 ms later (a separate segment, before the 101 is read): 400 or upgraded and read as a frame?"""
import sys, time, socket
sys.path.insert(0, "/tmp/rt16")
from rt import start, frame, read_frame, kill
for host in ("rust", "node"):
    p, port = start(host); time.sleep(0.5)
    s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n"
              b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nContent-Length: 0\r\n\r\n")
    time.sleep(0.03); s.sendall(frame(2, b"smuggled"))
    buf = b""; s.settimeout(2)
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    head, rest = buf.split(b"\r\n\r\n", 1)
    f = read_frame(s, rest, timeout=2)
    print(host, head.split(b"\r\n")[0], "-> then echoed:", f[2] if f else None, flush=True)
    s.close(); kill(p)
