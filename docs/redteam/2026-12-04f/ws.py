import socket, os, struct, time, sys, threading, base64, selectors
def frame(op, payload=b'', fin=True):
    b0 = (0x80 if fin else 0) | op
    n = len(payload); m = os.urandom(4)
    if n < 126: h = struct.pack('!BB', b0, 0x80 | n)
    elif n < 65536: h = struct.pack('!BBH', b0, 0x80 | 126, n)
    else: h = struct.pack('!BBQ', b0, 0x80 | 127, n)
    return h + m + bytes(c ^ m[i & 3] for i, c in enumerate(payload))
def connect(port, host='127.0.0.1'):
    s = socket.create_connection((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    k = base64.b64encode(os.urandom(16)).decode()
    s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {k}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    buf = b''
    while b'\r\n\r\n' not in buf:
        d = s.recv(4096)
        if not d: raise Exception('closed in handshake: %r' % buf)
        buf += d
    head, rest = buf.split(b'\r\n\r\n', 1)
    if b' 101 ' not in head.split(b'\r\n')[0]: raise Exception(head[:80])
    return s, rest
class Parser:
    def __init__(self, rest=b''): self.buf = bytearray(rest)
    def feed(self, d): self.buf += d
    def frames(self):
        out = []
        while True:
            b = self.buf
            if len(b) < 2: break
            op = b[0] & 15; n = b[1] & 127; off = 2
            if n == 126:
                if len(b) < 4: break
                n = struct.unpack('!H', b[2:4])[0]; off = 4
            elif n == 127:
                if len(b) < 10: break
                n = struct.unpack('!Q', b[2:10])[0]; off = 10
            if len(b) < off + n: break
            out.append((op, bytes(b[off:off+n]))); del b[:off+n]
        return out
class Reader(threading.Thread):
    """Reads frames in background; records (time, op, payload)."""
    def __init__(self, s, rest):
        super().__init__(daemon=True); self.s = s; self.p = Parser(rest); self.log = []; self.closed = None; self.counts = {}
        self.start()
    def run(self):
        try:
            while True:
                d = self.s.recv(65536)
                if not d: break
                self.p.feed(d)
                for op, pl in self.p.frames():
                    self.counts[op] = self.counts.get(op, 0) + 1
                    if op != 0xA: self.log.append((time.monotonic(), op, pl))
                    if op == 8 and self.closed is None:
                        self.closed = (time.monotonic(), struct.unpack('!H', pl[:2])[0] if len(pl) >= 2 else None, pl[2:])
        except OSError: pass
        if self.closed is None: self.closed = (time.monotonic(), 'EOF', b'')
