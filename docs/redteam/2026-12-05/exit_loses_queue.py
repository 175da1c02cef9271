#!/usr/bin/env python3
"""T4: a guest that wrote (send returned ok / check-write granted) and then returned:
does the peer get what the host had queued, and the close/FIN (the documented linger)?
The peer pauses PAUSE s before it reads (a slow but honest reader).
usage: exit_loses_queue.py ws|ws-close|tcp PAUSE (ws-close: the baseline, the guest closes and waits for the close to finish) [HOST]   (HOST: rust (default) | node)"""
import sys, os, time, subprocess, socket, struct, base64, hashlib, threading, re
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
kind, pause = sys.argv[1], float(sys.argv[2]); host = sys.argv[3] if len(sys.argv) > 3 else "rust"
ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(4); port = ls.getsockname()[1]
result = {}
def peer():
    c, _ = ls.accept()
    if os.environ.get("RCVBUF"): c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, int(os.environ["RCVBUF"]))
    if kind.startswith("ws"):
        buf = b""
        while b"\r\n\r\n" not in buf: buf += c.recv(4096)
        key = re.search(rb"(?i)sec-websocket-key: *(\S+)", buf).group(1)
        acc = base64.b64encode(hashlib.sha1(key + b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11").digest())
        c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: " + acc + b"\r\n\r\n")
    time.sleep(pause)
    t = time.time(); c.settimeout(8)
    if kind.startswith("ws"):
        r = wsraw.Reader(c, b""); n = 0; close = None
        try:
            while True:
                op, fin, p = r.read()
                if op == 2: n += 1
                elif op == 8: close = struct.unpack("!H", p[:2])[0] if len(p) >= 2 else "no code"; break
        except Exception as e: close = repr(e)
        result["got"] = f"{n} messages, then {close}"
    else:
        n = 0; end = None
        try:
            while True:
                d = c.recv(1 << 16)
                if not d: end = "FIN"; break
                n += len(d)
        except Exception as e: end = repr(e)
        result["got"] = f"{n} bytes, then {end}"
    result["t"] = time.time() - t
th = threading.Thread(target=peer); th.start()
if kind in ("ws", "ws-close"): args = ["ws-stuck", f"ws://127.0.0.1:{port}/", "close" if kind == "ws-close" else "drop", "16384"]
else: args = ["tcp-stuck", f"127.0.0.1:{port}", str(64 << 20)]
if host == "rust":
    cmd = ["/tmp/rt17/bin/tether", "run", "/tmp/rt17/bin/probe.wasm", "--allow", f"127.0.0.1:{port}", "--", *args]
else:
    cmd = ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run",
           "/tmp/rt17/bin/probe.wasm", "--allow", f"127.0.0.1:{port}", "--", *args]
t0 = time.time()
out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
print(f"{host} {kind} pause={pause}s: guest: {out.stdout.strip()} (process ended {time.time()-t0:.2f}s after start, rc {out.returncode})")
th.join()
print(f"  peer read: {result['got']}")
