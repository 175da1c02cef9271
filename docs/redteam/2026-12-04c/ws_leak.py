"""Connections per source: end connections from one source in many ways, then check the source can still
open its full bound (B upgraded WebSocket connections held at once; the B+1-th gets 503) and TCP too.
Usage: timeout 110 python3 ws_leak.py [BIN]"""
import sys, os, time, socket, struct, re, subprocess, threading, resource
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
os.environ.setdefault("TETHER", "/work/rt10/tether")
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
import rt
BIN = sys.argv[1] if len(sys.argv) > 1 else "/work/rt10/tether"
B = 8
SRC = "127.0.0.21"
p = subprocess.Popen([BIN, "run", "/work/rt10/echo.wasm", "--listen", "127.0.0.1:*", "--max-connections-per-source", str(B),
                      "--handshake-timeout-ms", "1000", "--max-handshakes-per-listener", "4", "--max-handshakes-per-source", "3",
                      "--linger-timeout-ms", "1000", "--", "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
ws = tcp = None
while ws is None or tcp is None:
    l = p.stdout.readline().decode()
    m = re.search(r"listening (for TCP )?on 127\.0\.0\.1:(\d+)", l)
    if m:
        if m.group(1): tcp = int(m.group(2))
        else: ws = int(m.group(2))
out = rt.drain_output(p)

def sock(port, src=SRC):
    s = socket.create_connection(("127.0.0.1", port), timeout=5, source_address=(src, 0)); return s
def rst(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close()

def capacity(src=SRC):
    """Upgraded WS connections this source can hold at once (tries B+2), then closes them."""
    held = []; why = ""
    for _ in range(B + 2):
        try:
            s, head, rest = rt.ws_connect(ws, source=src); held.append(s)
        except Exception as e:
            why = str(e)[:60]; break
    n = len(held)
    for s in held: s.close()
    time.sleep(0.3)
    return n, why

def tcp_capacity(src=SRC):
    held = []
    for _ in range(B + 2):
        s = sock(tcp, src)
        s.sendall(b"hi"); s.settimeout(1.0)
        try:
            d = s.recv(10)
        except OSError as e:
            d = b""
        if d: held.append(s)
        else: s.close(); break
    n = len(held)
    for s in held: s.close()
    time.sleep(0.3)
    return n

REQ = lambda: (f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()
ways = {}
def way(name):
    def d(f): ways[name] = f; return f
    return d

@way("handshake timeout (silent, 1.2 s)")
def _():
    ss = [sock(ws) for _ in range(3)]; time.sleep(1.5); [s.close() for s in ss]
@way("400 bad request")
def _():
    for _ in range(20):
        s = sock(ws); s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"); s.recv(100); s.close()
@way("431 head too long")
def _():
    for _ in range(10):
        s = sock(ws)
        try: s.sendall(b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\n\r\n"); s.recv(100)
        except OSError: pass
        s.close()
@way("bare LF 400")
def _():
    for _ in range(10):
        s = sock(ws); s.sendall(b"GET / HTTP/1.1\nHost: x\n\n"); 
        try: s.recv(100)
        except OSError: pass
        s.close()
@way("RST mid head")
def _():
    for _ in range(20):
        s = sock(ws); s.sendall(b"GET / HTTP/1.1\r\nHost:"); time.sleep(0.01); rst(s)
@way("RST right after full head (mid upgrade)")
def _():
    for _ in range(40):
        s = sock(ws); s.sendall(REQ()); rst(s)
@way("FIN right after full head")
def _():
    for _ in range(40):
        s = sock(ws); s.sendall(REQ()); s.shutdown(socket.SHUT_WR); s.close()
@way("evicted silent handshakes (other source connects)")
def _():
    ss = [sock(ws) for _ in range(3)]; time.sleep(1.1)
    others = []
    for i in range(6):
        try: others.append(rt.ws_connect(ws, source="127.0.0.22")[0])
        except Exception: pass
    time.sleep(0.2); [s.close() for s in ss + others]
@way("503 handshakes-per-source (5 silent at once)")
def _():
    ss = [sock(ws) for _ in range(6)]; time.sleep(0.2); [rst(s) for s in ss]
@way("upgraded then RST")
def _():
    for _ in range(20):
        s = rt.ws_connect(ws, source=SRC)[0]; rst(s)
@way("upgraded then FIN, no close frame")
def _():
    for _ in range(20):
        s = rt.ws_connect(ws, source=SRC)[0]; s.shutdown(socket.SHUT_WR); s.close()
@way("upgraded, close frame, no read")
def _():
    for _ in range(20):
        s = rt.ws_connect(ws, source=SRC)[0]; s.sendall(rt.frame(8, struct.pack("!H", 1000))); s.close()
@way("upgraded, message never read back (peer not reading, 256 KiB)")
def _():
    ss = []
    for _ in range(6):
        s = rt.ws_connect(ws, source=SRC)[0]
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        try:
            s.settimeout(0.5)
            for _ in range(4): s.sendall(rt.frame(2, b"z" * 65536))
        except OSError: pass
        ss.append(s)
    time.sleep(0.5); [rst(s) for s in ss]
@way("refused past the bound (B+20 at once, held, then closed)")
def _():
    held = []
    for _ in range(B + 20):
        try: held.append(rt.ws_connect(ws, source=SRC)[0])
        except Exception: pass
    [s.close() for s in held]
@way("TCP: FIN / RST / hold 20 each")
def _():
    for i in range(20):
        s = sock(tcp); s.sendall(b"x")
        if i % 2: rst(s)
        else: s.close()
@way("TCP: connect and RST without data (possibly in accept backlog)")
def _():
    for _ in range(100):
        s = sock(tcp); rst(s)
@way("WS: connect and RST without data x100")
def _():
    for _ in range(100):
        s = sock(ws); rst(s)

print(f"# {BIN} bound {B} from {SRC}; ws {ws} tcp {tcp}", flush=True)
print("baseline:", capacity(), "tcp", tcp_capacity(), flush=True)
for name, f in ways.items():
    t0 = time.time()
    try: f()
    except Exception as e: print("  (way raised)", repr(e)[:80])
    time.sleep(1.5)  # linger 1 s
    print(f"after {name}: ws capacity {capacity()} tcp capacity {tcp_capacity()}", flush=True)
print("status", rt.status(p.pid))
print("log tail:", b"".join(out[-5:]).decode(errors="replace")[-800:])
p.terminate(); p.wait(5)
