"""Host bound (--max-connections) count leaks: the echo guest (WebSocket + TCP listener) with
--max-connections M; each way of ending a connection is done ROUNDS times, then M fresh connections
must all be served and the (M+1)th refused. Prints per way: ok/LEAK and what the probe got.
usage: TETHER=... G=... timeout 170 python3 leak.py M ROUNDS"""
import os, sys, socket, struct, time, re, collections
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
import rt
from jm import free_port
M, ROUNDS = int(sys.argv[1]), int(sys.argv[2])
tport = free_port(); mport = free_port()
p, port = rt.start_echo(extra=["--max-connections", str(M), "--handshake-timeout-ms", "800", "--metrics", f"127.0.0.1:{mport}",
                               "--max-connections-per-source", "3", "--max-handshakes-per-listener", "2"],
                        guest_args=["server", "127.0.0.1:0", "0", "--tcp", f"127.0.0.1:{tport}"])
out = rt.drain_output(p); time.sleep(0.5)
SRC = lambda i: f"127.0.2.{i % 200 + 1}"

def metrics():
    s = socket.create_connection(("127.0.0.1", mport), timeout=2); s.sendall(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    b = b""
    while (c := s.recv(65536)): b += c
    return {l.split()[0]: l.split()[1] for l in b.decode().splitlines() if l.startswith("tether_connection_refusals")}

def rst(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close()

def raw(src, prt=None):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(3); s.connect(("127.0.0.1", prt or port)); return s

def drain(s):
    try:
        while s.recv(65536): pass
    except OSError: pass
    s.close()

def probe():
    """M upgrades from distinct sources must succeed; the next must be refused (503)."""
    held, got = [], collections.Counter()
    for i in range(M + 1):
        try:
            s, _, _ = rt.ws_connect(port, timeout=2, source=f"127.0.3.{i+1}"); held.append(s); got["101"] += 1
        except Exception as e:
            got["503" if "503" in str(e) else type(e).__name__ + ":" + str(e)[:40]] += 1
    for s in held: s.close()
    time.sleep(0.4)
    return dict(got)

def way(name, fn):
    for r in range(ROUNDS):
        fn(r)
    time.sleep(1.0)
    g = probe()
    ok = g.get("101") == M and g.get("503") == 1
    print(f"{'ok  ' if ok else 'LEAK'} {name:55s} probe {g}", flush=True)

REQ = lambda: (f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
               f"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n").encode()

def batch(k, f):
    def run(r):
        ss = [f(SRC(r * k + j)) for j in range(k)]
        for s in ss:
            if s: drain(s)
    return run

def silent(src): return raw(src)                     # server closes at the handshake timeout
def bad400(src): s = raw(src); s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n"); return s
def big431(src):
    s = raw(src)
    try: s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX-A: " + b"a" * 70000 + b"\r\n\r\n")
    except OSError: pass
    return s
def rst_mid(src): s = raw(src); s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\n"); time.sleep(0.01); rst(s); return None
def rst_now(src): s = raw(src); rst(s); return None
def up_close(src): s, _, _ = rt.ws_connect(port, source=src); s.close(); return None
def up_rst(src): s, _, _ = rt.ws_connect(port, source=src); rst(s); return None
def up_fin(src): s, _, _ = rt.ws_connect(port, source=src); s.shutdown(socket.SHUT_WR); return s
def up_wsclose(src):
    s, _, _ = rt.ws_connect(port, source=src); s.sendall(rt.frame(8, struct.pack("!H", 1000))); return s
def up_badframe(src): s, _, _ = rt.ws_connect(port, source=src); s.sendall(b"\x8f\x80\0\0\0\0"); return s  # bad opcode
def tcp_echo(src):
    s = raw(src, tport); s.sendall(b"hi"); s.recv(2); s.close(); return None
def tcp_rst(src): s = raw(src, tport); rst(s); return None
def tcp_fin(src): s = raw(src, tport); s.shutdown(socket.SHUT_WR); return s

def over_bound(r):
    held = []
    for i in range(M):
        try: held.append(rt.ws_connect(port, timeout=2, source=SRC(i))[0])
        except Exception: pass
    for i in range(10):   # refused by the host bound: WebSocket and TCP
        try: rt.ws_connect(port, timeout=2, source=SRC(50 + i))
        except Exception: pass
        try: drain(raw(SRC(60 + i), tport))
        except OSError: pass
    for s in held: s.close()

def evict(r):
    a, b = raw(SRC(r*3)), raw(SRC(r*3+1)); time.sleep(1.2)
    try: c, _, _ = rt.ws_connect(port, timeout=2, source=SRC(r*3+2)); c.close()
    except Exception as e: print("  evict: new client", e)
    drain(a); drain(b)

def per_source(r):
    held = []
    for i in range(3): held.append(rt.ws_connect(port, timeout=2, source="127.0.4.1")[0])
    for i in range(10):
        try: rt.ws_connect(port, timeout=2, source="127.0.4.1")
        except Exception: pass
        try: drain(raw("127.0.4.1", tport))
        except OSError: pass
    for s in held: s.close()
    time.sleep(0.5)

print(f"# {rt.TETHER} max_connections={M} rounds={ROUNDS}")
print("initial", probe())
k = max(1, min(3, M - 1))
for name, f in [("handshake timeout (silent after connect)", batch(k, silent)), ("400 (no Upgrade)", batch(k, bad400)),
                ("431 / oversized head", batch(k, big431)), ("RST mid-head", batch(k, rst_mid)), ("RST right after connect", batch(k, rst_now)),
                ("upgrade then FIN close", batch(k, up_close)), ("upgrade then RST", batch(k, up_rst)), ("upgrade then half-close (SHUT_WR)", batch(k, up_fin)),
                ("upgrade then WS close frame", batch(k, up_wsclose)), ("upgrade then protocol error frame", batch(k, up_badframe)),
                ("TCP echo then close", batch(k, tcp_echo)), ("TCP RST at once", batch(k, tcp_rst)), ("TCP half-close", batch(k, tcp_fin)),
                ("over the host bound (WS 503 + TCP close)", over_bound), ("per-source refusals (WS + TCP)", per_source), ("handshake evicted for a new client", evict)]:
    way(name, f)
print("metrics", metrics())
print("host", rt.status(p.pid))
print("log tail:", b"".join(out[-5:]).decode(errors="replace"))
rt.kill(p)
