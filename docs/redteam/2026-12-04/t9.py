"""Round 9 helpers: a two-sided `tether jmux` tunnel (B: ws-listen pipe that dials targets; A: ws pipe with
socks5/http/tcp listeners), loopback targets, SOCKS5 / HTTP CONNECT / plain HTTP / tcp-listen clients."""
import sys, os, time, socket, subprocess, threading, struct, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The eighth round's helpers (rt.py, jm.py), with this round's snapshot as
# their defaults.
sys.path.insert(1, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-03g"))
os.environ.setdefault("TETHER", "/work/rt9/bin/tether")
os.environ.setdefault("G", "/work/rt9/bin")
os.environ.setdefault("JMUX_WASM", "/work/rt9/bin/jmux.wasm")
from rt import kill, status, drain_output, TETHER
from jm import free_port

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))


def pre():
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))


def wait_port(port, host="127.0.0.1"):
    for _ in range(150):
        try:
            socket.create_connection((host, port), timeout=1).close(); return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} never listened")


class Target:
    """kind: echo | silent (accept, read and discard, never send, never close, not even on FIN)
    | trickle (after the client's FIN, 1 byte every `period` s) | bulk (after FIN: `size` bytes, then close)
    | closed (nothing listens)."""
    def __init__(self, kind, period=1.0, size=4 << 20, host="127.0.0.1"):
        self.kind, self.period, self.size = kind, period, size
        self.accepted = 0; self.eof = 0; self.peer_closed = 0; self.held = []
        ls = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind((host, 0))
        if kind == "closed":
            self.port = ls.getsockname()[1]; ls.close(); return
        ls.listen(4096); self.ls = ls; self.port = ls.getsockname()[1]
        threading.Thread(target=self._acc, daemon=True).start()

    def probe_closed(self):
        """At the end only: how many held sockets the proxy closed (a send to a closed socket gets RST)."""
        n = 0
        for c in self.held:
            try:
                c.setblocking(False)
                c.send(b"x"); time.sleep(0.05); c.send(b"x"); c.send(b"x")
            except BlockingIOError:
                pass   # full send buffer: the peer is there and not reading
            except OSError:
                n += 1
        return n

    def _acc(self):
        while True:
            c, _ = self.ls.accept(); self.accepted += 1
            threading.Thread(target=self._serve, args=(c,), daemon=True).start()

    def _serve(self, c):
        self.held.append(c)
        try:
            if self.kind == "echo":
                while (d := c.recv(65536)):
                    c.sendall(d)
                self.eof += 1; c.close(); return
            while (d := c.recv(65536)):
                pass
            self.eof += 1
            if self.kind == "silent":
                # never closes: wait to see whether the proxy drops the socket (recv would have said EOF
                # already; we detect the drop by a send failing)
                while True:
                    time.sleep(0.5)
                    try:
                        c.send(b"")
                    except OSError:
                        self.peer_closed += 1; return
            elif self.kind == "trickle":
                while True:
                    time.sleep(self.period); c.sendall(b"t")
            elif self.kind == "bulk":
                blob = b"b" * 65536; left = self.size
                while left > 0:
                    n = c.send(blob[:min(left, 65536)]); left -= n
                c.close()
        except OSError:
            self.peer_closed += 1


class Tunnel:
    def __init__(self, a_args=(), b_args=(), listeners=("socks5", "http"), tcp_target=None, a_host="127.0.0.1"):
        self.pipe = free_port()
        self.B = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{self.pipe}", "--allow", "127.0.0.1:*", *b_args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
        self.bout = drain_output(self.B); wait_port(self.pipe)
        largs = []; self.ports = {}
        h = f"[{a_host}]" if ":" in a_host else a_host
        for l in listeners:
            p = free_port(); self.ports[l] = p
            if l == "tcp":
                largs.append(f"tcp-listen://{h}:{p}/127.0.0.1:{tcp_target}")
            else:
                largs.append(f"{l}-listen://{h}:{p}")
        self.A = subprocess.Popen([TETHER, "jmux", f"ws://127.0.0.1:{self.pipe}", *largs, *a_args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
        self.aout = drain_output(self.A)
        for l in listeners:
            wait_port(self.ports[l], a_host)
        time.sleep(0.5)

    def log(self, side="A", n=6):
        out = self.aout if side == "A" else self.bout
        return b"".join(out[-n:]).decode(errors="replace")

    def close(self):
        kill(self.A); kill(self.B)


def _sock(src, host, port, timeout):
    fam = socket.AF_INET6 if ":" in host else socket.AF_INET
    s = socket.socket(fam); s.settimeout(timeout)
    if src:
        s.bind((src, 0))
    s.connect((host, port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s


def socks(src, sport, tport, timeout=5, host="127.0.0.1"):
    """SOCKS5 CONNECT to 127.0.0.1:tport. Returns (socket or None, why)."""
    s = _sock(src, host, sport, timeout)
    try:
        s.sendall(b"\x05\x01\x00")
        if s.recv(2) != b"\x05\x00":
            s.close(); return None, "greeting"
        s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", tport))
        r = b""
        while len(r) < 10:
            c = s.recv(10 - len(r))
            if not c: break
            r += c
    except OSError as e:
        s.close(); return None, type(e).__name__
    if len(r) < 2:
        s.close(); return None, "closed"
    if r[1] != 0:
        s.close(); return None, f"rep={r[1]}"
    return s, "ok"


def http_connect(src, hport, tport, timeout=5, host="127.0.0.1"):
    s = _sock(src, host, hport, timeout)
    try:
        s.sendall(f"CONNECT 127.0.0.1:{tport} HTTP/1.1\r\nHost: 127.0.0.1:{tport}\r\n\r\n".encode())
        r = b""
        while b"\r\n\r\n" not in r:
            c = s.recv(4096)
            if not c: break
            r += c
    except OSError as e:
        s.close(); return None, type(e).__name__
    line = r.split(b"\r\n", 1)[0].decode(errors="replace")
    if " 200" not in line:
        s.close(); return None, line or "closed"
    return s, "ok"


def http_plain(src, hport, tport, timeout=5, host="127.0.0.1", send_head=True):
    """A plain proxy request (absolute URI); returns the socket after the head went (the answer is the origin's)."""
    s = _sock(src, host, hport, timeout)
    if send_head:
        s.sendall(f"GET http://127.0.0.1:{tport}/ HTTP/1.1\r\nHost: 127.0.0.1:{tport}\r\n\r\n".encode())
    return s, "sent"


def tcpl(src, lport, timeout=5, host="127.0.0.1"):
    return _sock(src, host, lport, timeout), "ok"


def echo_ok(s, payload=b"ping", timeout=5):
    try:
        s.settimeout(timeout); s.sendall(payload)
        got = b""
        while len(got) < len(payload):
            c = s.recv(len(payload) - len(got))
            if not c: return False
            got += c
        return got == payload
    except OSError:
        return False


def alive(s, wait=0.05):
    """Whether the socket is still open (no EOF/RST pending)."""
    s.setblocking(False)
    try:
        d = s.recv(1, socket.MSG_PEEK)
        return len(d) > 0
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        s.setblocking(True)
