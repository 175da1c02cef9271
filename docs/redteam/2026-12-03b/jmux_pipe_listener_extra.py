"""After the pipe peer is accepted, what happens to more connections to the
`tether jmux tcp-listen://` pipe address (and ws-listen://)? Count the
process's descriptors while K extra clients connect and sit idle.
Usage: timeout 60 nice -n 19 python3 jmux_pipe_listener_extra.py
"""
import sys, socket, time, subprocess, resource
sys.path.insert(0, "/work/rt3")
from rt import TETHER, status, kill, drain_output
from jm import free_port
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
for scheme in ["tcp-listen", "ws-listen"]:
    port = free_port()
    p = subprocess.Popen([TETHER, "jmux", f"{scheme}://127.0.0.1:{port}", "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = drain_output(p)
    time.sleep(0.7)
    first = socket.create_connection(("127.0.0.1", port))
    if scheme == "ws-listen":
        first.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
        print(" first:", first.recv(200).split(b"\r\n")[0])
    time.sleep(0.5)
    base = status(p.pid)
    extra = []
    for i in range(2000):
        try:
            extra.append(socket.create_connection(("127.0.0.1", port), timeout=2))
        except OSError as e:
            print(" connect", i, e); break
    time.sleep(2)
    st = status(p.pid)
    alive = 0
    for s in extra:
        s.setblocking(False)
        try:
            d = s.recv(10)
            if d == b"": continue
            alive += 1
        except BlockingIOError:
            alive += 1
        except OSError:
            pass
    print(f"{scheme}: fds {base['fds']} -> {st['fds']} with {len(extra)} extra clients; {alive} still open on the client side; log lines {len(out)}; tail {b''.join(out[-2:])!r}")
    for s in extra: s.close()
    first.close(); kill(p)
