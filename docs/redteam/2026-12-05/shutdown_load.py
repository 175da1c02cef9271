#!/usr/bin/env python3
"""T3: SIGTERM to an echo server whose peers never read (WS and TCP) and one that trickles.
usage: shutdown_load.py GUEST N   (GUEST = echo.wasm | echo-p3.wasm under /tmp/rt17/bin)"""
import sys, os, time, subprocess, signal, socket
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
guest, N = sys.argv[1], int(sys.argv[2])
err = f"/tmp/rt17/logs/shutdown_{guest}_{N}.err"
p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", f"/tmp/rt17/bin/{guest}", "--listen", "127.0.0.1:*", "--",
                      "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(err, "w"))
ws = int(wait_line(err, r"listening on 127.0.0.1:(\d+)").group(1))
tcp = int(wait_line(err, r"listening for TCP on 127.0.0.1:(\d+)").group(1))
socks = []
msg = wsraw.frame(2, b"z" * 65536)
for i in range(N):
    s, _ = wsraw.connect("127.0.0.1", ws); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.setblocking(False)
    try:
        for _ in range(200): s.send(msg)
    except BlockingIOError: pass
    socks.append(s)
for i in range(N):
    s = socket.create_connection(("127.0.0.1", tcp)); s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096); s.setblocking(False)
    try:
        for _ in range(200): s.send(b"y" * 65536)
    except BlockingIOError: pass
    socks.append(s)
time.sleep(2)
print(f"{guest} N={N}: before SIGTERM rss={rss_mib(p.pid):.0f}MiB fds={fds(p.pid)} cpu={cpu(p.pid):.2f}s")
t0 = time.time(); p.send_signal(signal.SIGTERM)
while p.poll() is None and time.time() - t0 < 30: time.sleep(0.05)
print(f"  exit {p.poll()} after {time.time()-t0:.2f}s")
print("  stderr:", open(err).read().strip().replace("\n", " | ")[-600:])
for s in socks: s.close()
if p.poll() is None: p.kill()
