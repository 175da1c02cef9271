#!/usr/bin/env python3
"""T8: a JMUX tunnel (side A: pipe listener + tcp-listen forward; side B: dials the pipe, opens targets).
A target sends TOTAL bytes; the forward's client reads slowly. Side B dies (SIGKILL) mid-transfer.
What does the client see: a clean FIN (indistinguishable from the end of the data) or a reset?
usage: jmux_pipe_dies.py TOTAL_MIB [kill|term]"""
import atexit, sys, os, time, subprocess, socket, threading, signal
sys.path.insert(0, os.path.dirname(__file__))
from common import *
TOTAL = int(sys.argv[1]) << 20; how = sys.argv[2] if len(sys.argv) > 2 else "kill"
# target: sends TOTAL bytes then closes
ts = socket.socket(); ts.bind(("127.0.0.1", 0)); ts.listen(4); tport = ts.getsockname()[1]
def target():
    c, _ = ts.accept(); sent = 0; blk = b"d" * 65536
    try:
        while sent < TOTAL: sent += c.send(blk[:TOTAL - sent])
    except OSError: pass
    c.close()
threading.Thread(target=target, daemon=True).start()
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
pa, pl = free_port(), free_port()
ea, eb = "/tmp/rt17/logs/jmuxA.err", "/tmp/rt17/logs/jmuxB.err"
A = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp-listen://127.0.0.1:{pa}", f"tcp-listen://127.0.0.1:{pl}/127.0.0.1:{tport}"], stdout=subprocess.DEVNULL, stderr=open(ea, "w"))
wait_line(ea, r"pipe listening", 10)
atexit.register(lambda: (A.kill(), B.kill()))
B = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp://127.0.0.1:{pa}", "--allow-all"], stdout=subprocess.DEVNULL, stderr=open(eb, "w"))
wait_line(ea, r"listener on", 10); time.sleep(0.2)
c = socket.create_connection(("127.0.0.1", pl)); c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 16384)
got = 0; t0 = time.time(); killed_at = None; end = None
c.settimeout(10)
try:
    while True:
        d = c.recv(4096)
        if not d: end = "FIN (clean EOF)"; break
        got += len(d)
        if how != "none" and killed_at is None and got >= 1 << 20:
            killed_at = got
            (B.kill() if how == "kill" else B.send_signal(signal.SIGTERM))
        time.sleep(0.0005)  # slow reader: ~8 MB/s at most
except Exception as e: end = repr(e)
print(f"side B {how}ed after the client had {killed_at} bytes; client then read {got} of {TOTAL} bytes in {time.time()-t0:.2f}s, then {end}")
time.sleep(0.5)
print("side A alive:", A.poll() is None, "| A stderr:", open(ea).read().strip().replace("\n", " | ")[-300:])
A.kill(); B.kill()
