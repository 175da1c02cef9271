"""Node host: 1,000 streams failed by a framing error (1002); each peer answers the close like an honest client.
Counts clean closes (close frame 1002 received, then EOF not RST), host fds/RSS/CPU before and after."""
import sys, time, socket, struct
sys.path.insert(0, "/tmp/rt16")
from rt import start, ws_connect, frame, status, kill, read_frame, close_code
N = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
p, port = start(sys.argv[2] if len(sys.argv) > 2 else "node"); time.sleep(1)
st0 = status(p.pid); clean = rst = noclose = 0; codes = {}
for i in range(N):
    s, _, rest = ws_connect(port)
    s.sendall(frame(3, b""))
    f = read_frame(s, rest, timeout=3)
    if not f or f[0] != 8: noclose += 1; s.close(); continue
    c, _ = close_code(f[2]); codes[c] = codes.get(c, 0) + 1
    try: s.sendall(frame(8, struct.pack("!H", c)))
    except OSError: pass
    s.settimeout(3)
    try:
        x = s.recv(100)
        clean += (x == b"")
    except ConnectionResetError: rst += 1
    except socket.timeout: noclose += 1
    s.close()
time.sleep(6)
st1 = status(p.pid)
print(f"{N} failures: close codes {codes}, clean FIN {clean}, RST {rst}, no close {noclose}; host {st0} -> {st1}", flush=True)
kill(p)
