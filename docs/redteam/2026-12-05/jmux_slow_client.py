#!/usr/bin/env python3
"""T13: a JMUX tcp-listen forward (side A) to a target behind side B that sends TOTAL MiB; the forward's
client reads 4 KiB every SLEEP ms with a RCVBUF-byte receive buffer. Logs bytes per second, so stalls show.
usage: jmux_slow_client.py TOTAL_MIB SLEEP_MS RCVBUF SECONDS"""
import atexit, sys, os, time, subprocess, socket, threading
sys.path.insert(0, os.path.dirname(__file__))
from common import *
TOTAL = int(sys.argv[1]) << 20; SLEEP = float(sys.argv[2]) / 1000; RCV = int(sys.argv[3]); SECS = float(sys.argv[4])
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
ea, eb = "/tmp/rt17/logs/slowA.err", "/tmp/rt17/logs/slowB.err"
A = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp-listen://127.0.0.1:{pa}", f"tcp-listen://127.0.0.1:{pl}/127.0.0.1:{tport}"], stdout=subprocess.DEVNULL, stderr=open(ea, "w"))
wait_line(ea, r"pipe listening", 10)
B = subprocess.Popen(["/tmp/rt17/bin/tether", "jmux", f"tcp://127.0.0.1:{pa}", "--allow-all"], stdout=subprocess.DEVNULL, stderr=open(eb, "w"))
atexit.register(lambda: (A.kill(), B.kill()))
wait_line(ea, r"listener on", 10); time.sleep(0.2)
c = socket.create_connection(("127.0.0.1", pl))
if RCV: c.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, RCV)
c.settimeout(0.5); got = 0; t0 = time.time(); last = t0; lastgot = 0; per = []; end = None
while time.time() - t0 < SECS:
    try:
        d = c.recv(4096)
        if not d: end = "FIN"; break
        got += len(d)
    except socket.timeout: pass
    if SLEEP: time.sleep(SLEEP)
    if time.time() - last >= 1:
        per.append((got - lastgot) >> 10); lastgot = got; last = time.time()
        if len(per) == 3 and os.environ.get("SS"):
            lp = c.getsockname()[1]
            print(subprocess.run(["ss", "-tinm", f"( sport = :{pl} or dport = :{pl} or sport = :{pa} or dport = :{pa} or dport = :{tport} or sport = :{tport} )"], capture_output=True, text=True).stdout, flush=True)
print(f"read {got} of {TOTAL} in {time.time()-t0:.1f}s ({end}); KiB per second: {per}")
print(f"cpu A {cpu(A.pid):.2f}s B {cpu(B.pid):.2f}s")
