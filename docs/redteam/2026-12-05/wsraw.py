"""Raw WebSocket client helpers (no library): handshake, masked frames, reading frames."""
import socket, os, struct, base64, time
def connect(host, port, path="/", src=None, timeout=5):
    s = socket.socket()
    if src: s.bind((src, 0))
    s.settimeout(timeout); s.connect((host, port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    key = base64.b64encode(os.urandom(16)).decode()
    s.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    buf = b""
    while b"\r\n\r\n" not in buf:
        d = s.recv(4096)
        if not d: raise ConnectionError("closed during handshake: %r" % buf)
        buf += d
    head, rest = buf.split(b"\r\n\r\n", 1)
    if b" 101 " not in head.split(b"\r\n")[0]:
        raise ConnectionError(head.split(b"\r\n")[0].decode())
    return s, rest
def frame(op, payload=b"", fin=True, mask=True):
    b0 = (0x80 if fin else 0) | op
    n = len(payload)
    if n < 126: hdr = struct.pack("!BB", b0, (0x80 if mask else 0) | n)
    elif n < 65536: hdr = struct.pack("!BBH", b0, (0x80 if mask else 0) | 126, n)
    else: hdr = struct.pack("!BBQ", b0, (0x80 if mask else 0) | 127, n)
    if not mask: return hdr + payload
    k = b"\x00\x00\x00\x00"  # zero mask key: payload unchanged
    return hdr + k + payload
class Reader:
    def __init__(self, s, rest=b""): self.s, self.buf = s, rest
    def _need(self, n):
        while len(self.buf) < n:
            d = self.s.recv(1 << 20)
            if not d: raise EOFError(f'EOF with {len(self.buf)} bytes of a partial frame')
            self.buf += d
    def read(self):
        self._need(2); b0, b1 = self.buf[0], self.buf[1]; n = b1 & 0x7f; off = 2
        if n == 126: self._need(4); n = struct.unpack("!H", self.buf[2:4])[0]; off = 4
        elif n == 127: self._need(10); n = struct.unpack("!Q", self.buf[2:10])[0]; off = 10
        if b1 & 0x80:
            self._need(off + 4); key = self.buf[off:off+4]; off += 4
        else: key = None
        self._need(off + n); p = self.buf[off:off+n]; self.buf = self.buf[off+n:]
        if key and key != b"\0\0\0\0":
            p = bytes(b ^ key[i % 4] for i, b in enumerate(p)) if n < 200 else p
        return b0 & 0x0f, bool(b0 & 0x80), p
    def until_close(self, timeout=10):
        self.s.settimeout(timeout); t = time.time()
        try:
            while True:
                op, fin, p = self.read()
                if op == 8:
                    code = struct.unpack("!H", p[:2])[0] if len(p) >= 2 else None
                    return code, p[2:].decode(errors="replace"), time.time() - t
        except (EOFError, ConnectionError, OSError) as e:
            return None, repr(e), time.time() - t
