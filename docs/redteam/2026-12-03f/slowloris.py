"""Slowloris against handshake places: an attacker keeps A connections that
never finish their handshake (re-opening each one the server closes); a
legitimate client tries every 100 ms for DUR s. Prints how many legitimate
attempts succeeded and their p50 time.
Usage: slowloris.py ws|jmux  (env TETHER, A, DUR; LEGIT_SRC: the legitimate
client's source address, e.g. 127.0.0.2, default the kernel's choice)"""
import sys, os, time, socket, struct, subprocess, selectors, resource, threading, base64, statistics
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
T = os.environ.get("TETHER", "/work/main/target/release/tether")
G = os.environ.get("G", "/work/main/target/guests/wasm32-wasip2/release")
KIND = sys.argv[1]
A = int(os.environ.get("A", "1100" if KIND == "ws" else "300"))
DUR = float(os.environ.get("DUR", "12"))
procs = []
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def wait_port(port):
    for _ in range(200):
        if f":{port} " in subprocess.run(["ss", "-ltn"], capture_output=True, text=True).stdout: return
        time.sleep(0.05)
    raise RuntimeError(f"port {port} never listened")
def echo_target():
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(256)
    def serve(c):
        while (d := c.recv(65536)): c.sendall(d)
    def acc():
        while True:
            c, _ = ls.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]
if KIND == "ws":
    port = free_port()
    procs.append(subprocess.Popen([T, "run", f"{G}/echo.wasm", "--listen", "127.0.0.1:*", "--", "server", f"127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(port); first = b"GET / HTTP/1.1\r\nX-Slow: "
else:
    pipe, port = free_port(), free_port()
    procs.append(subprocess.Popen([T, "jmux", f"ws-listen://127.0.0.1:{pipe}", "--allow", "127.0.0.1:*"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(pipe)
    procs.append(subprocess.Popen([T, "jmux", f"ws://127.0.0.1:{pipe}", f"socks5-listen://127.0.0.1:{port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    wait_port(port); first = b"\x05"
    tport = echo_target()
stop = False
opened = [0]
def attacker():
    sel = selectors.DefaultSelector()
    def one():
        s = socket.socket(); s.setblocking(False)
        try: s.connect(("127.0.0.1", port))
        except BlockingIOError: pass
        sel.register(s, selectors.EVENT_WRITE); opened[0] += 1
    for _ in range(A): one()
    while not stop:
        for k, ev in sel.select(0.05):
            s = k.fileobj
            if ev & selectors.EVENT_WRITE:
                try: s.send(first)
                except OSError: pass
                sel.modify(s, selectors.EVENT_READ)
            else:
                try: d = s.recv(4096)
                except OSError: d = b""
                if not d:
                    sel.unregister(s); s.close(); one()
th = threading.Thread(target=attacker, daemon=True); th.start()
time.sleep(2.0)
def legit():
    t0 = time.perf_counter()
    src = os.environ.get("LEGIT_SRC")
    s = socket.create_connection(("127.0.0.1", port), timeout=3, source_address=(src, 0) if src else None)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    try:
        if KIND == "ws":
            key = base64.b64encode(os.urandom(16)).decode()
            s.sendall(f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
            buf = b""
            while b"\r\n\r\n" not in buf:
                c = s.recv(4096)
                if not c: return None
                buf += c
            if b" 101 " not in buf.split(b"\r\n")[0]: return None
            s.sendall(b"\x82\x84\0\0\0\0ping")
            r = s.recv(64)
            return time.perf_counter() - t0 if r.endswith(b"ping") else None
        s.sendall(b"\x05\x01\x00"); 
        if s.recv(2) != b"\x05\x00": return None
        s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", tport))
        r = s.recv(10)
        if len(r) < 2 or r[1] != 0: return None
        s.sendall(b"ping"); r = s.recv(4)
        return time.perf_counter() - t0 if r == b"ping" else None
    except OSError:
        return None
    finally:
        s.close()
ok, tries = [], 0
end = time.time() + DUR
while time.time() < end:
    tries += 1
    try: r = legit()
    except OSError: r = None
    if r is not None: ok.append(r)
    time.sleep(0.1)
stop = True
p50 = statistics.median(ok) * 1000 if ok else float("nan")
print(f"{KIND} A={A} legit ok {len(ok)}/{tries} p50 {p50:.1f} ms; attacker connections opened {opened[0]}")
for p in procs: p.kill()
