"""Idle TCP clients of the echo guest's `--tcp` listener until wasmtime's store-wide handle cap
(100,000 live component handles a store, `DEFAULT_MAX_COMPONENT_HANDLES` in wasmtime 48) is reached:
each accepted TCP connection is three handles (byte-stream, input-stream, output-stream), so the
33,334th accept traps the guest, and every connection it held ends.

The host's own bound, `max_connections`, is three quarters of the descriptor limit, at most 65,536.
With PRLIMIT=1 the server runs under `prlimit --nofile=100000` (systemd's default hard limit is
524,288), so that max_connections (three quarters of it, at most 65,536) lets 33,334 through with every
host limit at its default; this needs CAP_SYS_RESOURCE. Without it (this machine: hard limit 20,000,
max_connections 15,000) the run stays below the cap, as a baseline.

usage: [WASM=echo.wasm|echo-p3.wasm] [KIND=tcp|ws] [PRLIMIT=1] tcp_handles.py [TARGET]
       (TARGET connections, default 34000, from 127.0.0.2-4)"""
import sys, os, time, socket, select, resource, re, urllib.request
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import *

TARGET = int(sys.argv[1]) if len(sys.argv) > 1 else 34000
WASM = os.environ.get("WASM", "echo.wasm")
KIND = os.environ.get("KIND", "tcp")           # tcp: TCP clients; ws: WebSocket clients
PRL = ["prlimit", "--nofile=100000:100000"] if os.environ.get("PRLIMIT") else []
if PRL: resource.setrlimit(resource.RLIMIT_NOFILE, (110000, 110000))
fh = open(os.path.join(OUT, f"handles_{WASM.split('.')[0]}_{KIND}_{TARGET}.txt"), "w")
p = Proc([*PRL, TETHER, "run", f"{BIN}/{WASM}", "--listen", "127.0.0.1:*",
          "--metrics", "127.0.0.1:0", "--", "server", "127.0.0.1:0", "0", "--tcp", "127.0.0.1:0"])
mport = int(p.wait_line(r"metrics on http://127\.0\.0\.1:(\d+)").group(1))
wport = int(p.wait_line(r"echo(?:-p3)?: listening on 127\.0\.0\.1:(\d+)").group(1))
tport = int(p.wait_line(r"echo(?:-p3)?: listening for TCP on 127\.0\.0\.1:(\d+)").group(1))


def accepted():
    try:
        t = urllib.request.urlopen(f"http://127.0.0.1:{mport}/metrics", timeout=5).read().decode()
    except Exception as e:
        return f"scrape failed: {e}"
    m = re.search(r'tether_connections_open\{interface="%s",direction="inbound"\} (\d+)' % ("websocket" if KIND == "ws" else "tcp"), t)
    return int(m.group(1)) if m else "?"


victim = WS(wport)


def victim_ok():
    try:
        victim.send(b"still there?")
        for _ in range(50):
            ms = victim.recv_all(0.1)
            if ms: return "echo ok" if ms[0] == b"still there?" else f"got {ms[0]!r}"
        return "no echo in 5 s"
    except Exception as e:
        return f"victim failed: {e!r}"


log(fh, f"target {TARGET}; tether pid {p.pid}: {p.status()}; victim WebSocket: {victim_ok()}")
socks = []
t0 = time.time(); next_report = 1000
while len(socks) < TARGET and p.alive():
    batch = []
    for _ in range(min(500, TARGET - len(socks))):
        s = socket.socket(); s.setblocking(False)
        s.bind((f"127.0.0.{2 + len(socks) % 3}", 0))
        try: s.connect(("127.0.0.1", tport if KIND == "tcp" else wport))
        except BlockingIOError: pass
        batch.append(s)
    if KIND == "ws":
        # complete each upgrade (the 101 is not read: the clients stay idle after it)
        select.select([], batch, [], 5)
        for s in batch:
            try: s.send(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                        b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n")
            except OSError: pass
    socks += batch
    # let the guest take them (the accept backlog is 64)
    for _ in range(200):
        a = accepted()
        if not isinstance(a, int) or a >= len(socks) - 64 or not p.alive(): break
        time.sleep(0.02)
    if len(socks) >= next_report or not p.alive():
        next_report += 3000 if len(socks) < 30000 else 500
        log(fh, f"  t={time.time()-t0:5.1f}s connections {len(socks):>6} accepted {accepted()} tether {p.status()} victim: {victim_ok()}")
time.sleep(1)
log(fh, f"end: connections {len(socks)} accepted {accepted() if p.alive() else '-'} tether {p.status()} victim: {victim_ok()}")
eof = 0
for s in socks[:2000]:
    try:
        s.setblocking(True); s.settimeout(0.01)
        if s.recv(1) == b"": eof += 1
    except (socket.timeout, BlockingIOError): pass
    except OSError: eof += 1
log(fh, f"of the first 2,000 TCP clients, {eof} saw their connection end")
log(fh, "tether output tail:", [l[:240] for l in p.out[-6:]])
for s in socks: s.close()
p.kill()
