#!/usr/bin/env python3
"""T10: the echo guest fails (memory limit: --max-memory-mib M and a WebSocket message larger than M) while a TCP
peer is mid-echo. A WebSocket peer learns it (1011); what does the TCP peer see?
usage: guest_fail_tcp.py MAX_MEMORY_MIB MSG_MIB TCP_SEND_KIB [rust|node]"""
import sys, os, time, subprocess, socket, struct
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
mr, mib, tk = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
err = "/tmp/rt17/logs/guest_fail.err"
host = sys.argv[4] if len(sys.argv) > 4 else "rust"
pre = ["/tmp/rt17/bin/tether", "run"] if host == "rust" else ["/work/main/target/peers/node/bin/node", "--experimental-wasm-jspi", "/work/main/node/bin/tether-node.mjs", "run"]
p = subprocess.Popen(pre + ["/tmp/rt17/bin/echo.wasm", "--listen", "127.0.0.1:*", "--max-memory-mib", mr, "--",
                      "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(err, "w"))
ws = int(wait_line(err, r"listening on 127.0.0.1:(\d+)", 30).group(1)); tcp = int(wait_line(err, r"TCP on 127.0.0.1:(\d+)", 30).group(1))
# TCP peer: sends TCP_SEND_KIB (no FIN), reads 64 KiB of echo, then pauses
t = socket.create_connection(("127.0.0.1", tcp)); t.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
t.setblocking(False); sent = 0; t0 = time.time()
while sent < tk << 10 and time.time() - t0 < 3:
    try: sent += t.send(b"e" * 65536)
    except BlockingIOError: time.sleep(0.01)
t.setblocking(True); t.settimeout(5); got = 0
while got < 65536: got += len(t.recv(65536))
time.sleep(0.5)
# idle WS peer
w2, r2 = wsraw.connect("127.0.0.1", ws)
# WS peer whose big message makes the guest run away
w, rest = wsraw.connect("127.0.0.1", ws)
try: w.sendall(wsraw.frame(2, b"m" * (mib << 20)))
except OSError as e: print("big send:", e)
t1 = time.time()
while p.poll() is None and time.time() - t1 < 20: time.sleep(0.05)
print(f"{host}: tether exited rc={p.poll()} {time.time()-t1:.2f}s after the big message; stderr: {open(err).read().strip().splitlines()[-1][:160]}")
print("  idle WS peer:", wsraw.Reader(w2, r2).until_close(3))
end = None
try:
    while True:
        d = t.recv(65536)
        if not d: end = "clean FIN"; break
        got += len(d)
except Exception as e: end = repr(e)
print(f"  TCP peer: sent {sent} bytes (no FIN), got {got} echoed, then {end}")

if p.poll() is None: p.kill()
