"""G1/G2: host memory a guest spends outside its linear memory (limit --max-memory-mib, 256 MiB).
G1 `sets`: N readiness sets, each filled to the limit (65,536) with one listener under new keys.
G1b `sets2 NL:NS`: NL listeners, NS sets each filled to the limit round robin over them.
G2 `sendmany`: one send-many call with N empty binary messages (12 guest bytes each).
Guest: /work/redteam/hguest (built from src/main.rs). Reports host RSS/HWM while the guest holds."""
import sys, time, subprocess, socket, threading
sys.path.insert(0, "/work/redteam")
from rt import *
W = "/work/redteam/hguest/target/wasm32-wasip2/release/hguest.wasm"
mode, n = sys.argv[1], sys.argv[2]
extra = sys.argv[3:]
if mode == "sets2":
    nl, ns = n.split(":")
    args = [TETHER, "run", W, "--listen", "127.0.0.1:*", *extra, "--", "sets2", "127.0.0.1:0", nl, "0", ns, "4000"]
elif mode == "sets":
    args = [TETHER, "run", W, "--listen", "127.0.0.1:*", *extra, "--", "sets", "127.0.0.1:0", n, "4000"]
else:
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4); P = ls.getsockname()[1]
    def srv():  # minimal WebSocket server: answer the upgrade, then read and discard
        import base64, hashlib
        c, _ = ls.accept(); h = b""
        while b"\r\n\r\n" not in h: h += c.recv(4096)
        key = [l.split(b":", 1)[1].strip() for l in h.split(b"\r\n") if l.lower().startswith(b"sec-websocket-key")][0]
        acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
        try:
            while c.recv(1 << 20): pass
        except OSError: pass
    threading.Thread(target=srv, daemon=True).start()
    args = [TETHER, "run", W, "--allow", f"127.0.0.1:{P}", *extra, "--", "sendmany", f"ws://127.0.0.1:{P}/", n, "3000"]
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
try:
    peak, t0 = {}, time.time()
    while p.poll() is None and time.time() - t0 < 60:
        try: st = status(p.pid)
        except Exception: break
        peak = st
        time.sleep(0.2)
    print(f"{mode} {n} {extra}: last {peak} after {time.time()-t0:.1f} s")
finally:
    kill(p)
    print("guest:", " | ".join(b"".join(out).decode(errors='replace').strip().splitlines()[-4:])[:400])
