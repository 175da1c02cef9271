#!/usr/bin/env python3
"""T3b: what a peer that is reading (slowly or not at all for a moment) gets on SIGTERM:
its queued echoes and a 1001 close, or a cut connection?
usage: shutdown_lost.py GUEST [WS_MESSAGES]  (echo.wasm | echo-p3.wasm; default 40 x 64 KiB)"""
import sys, os, time, subprocess, signal, socket, struct
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
guest = sys.argv[1]
err = f"/tmp/rt17/logs/shutdown_lost_{guest}.err"
p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", f"/tmp/rt17/bin/{guest}", "--listen", "127.0.0.1:*", "--",
                      "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(err, "w"))
ws = int(wait_line(err, r"listening on 127.0.0.1:(\d+)").group(1))
tcp = int(wait_line(err, r"listening for TCP on 127.0.0.1:(\d+)").group(1))
# idle peer: nothing queued
idle, irest = wsraw.connect("127.0.0.1", ws)
# paused WS peer: 40 x 64 KiB sent, small receive buffer, reads nothing until after SIGTERM
paused, prest = wsraw.connect("127.0.0.1", ws); paused.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
SENT = int(sys.argv[2]) if len(sys.argv) > 2 else 40
for i in range(SENT): paused.sendall(wsraw.frame(2, struct.pack("!I", i) + b"p" * 65532))
# paused TCP peer: 2 MiB sent, reads nothing until after SIGTERM
tp = socket.create_connection(("127.0.0.1", tcp)); tp.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8192)
tp.setblocking(False); tsent = 0
t = time.time()
while time.time() - t < 1.0:
    try: tsent += tp.send(b"t" * 65536)
    except BlockingIOError: time.sleep(0.01)
tp.setblocking(True)
time.sleep(1.0)
t0 = time.time(); p.send_signal(signal.SIGTERM)
while p.poll() is None and time.time() - t0 < 30: time.sleep(0.01)
print(f"{guest}: exit {p.poll()} {time.time()-t0:.2f}s after SIGTERM")
print("  idle peer:", wsraw.Reader(idle, irest).until_close(3))
r = wsraw.Reader(paused, prest); paused.settimeout(3); got = 0; close = None
try:
    while True:
        op, fin, pl = r.read()
        if op == 2: got += 1
        elif op == 8: close = struct.unpack("!H", pl[:2])[0] if len(pl) >= 2 else "no code"; break
except Exception as e: close = repr(e)
print(f"  paused WS peer: {got} of {SENT} echoes, then {close}")
tp.settimeout(3); tg = 0; end = None
try:
    while True:
        d = tp.recv(1 << 16)
        if not d: end = "FIN"; break
        tg += len(d)
except Exception as e: end = repr(e)
print(f"  paused TCP peer: {tg} of {tsent} bytes echoed, then {end}")
