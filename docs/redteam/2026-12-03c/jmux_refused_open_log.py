"""Log lines per refused JMUX OPEN: a pipe peer sends N OPENs to a target outside
--allow (each refused with OPEN FAILURE) and reads the answers; count tether's
stderr lines/bytes and CPU. Compare: N messages for unknown channels (rate-limited
to 1 line / 10 s since 2026-12-03b).
Usage: timeout 120 nice -n 19 python3 jmux_refused_open_log.py [N]"""
import sys, struct, time, threading
sys.path.insert(0, "/work/rt4")
from rt import status, kill
from jm import OPEN, CLOSE, Reader, free_port
import subprocess, socket, os
from rt import TETHER
def start_jmux():
    port = free_port(); f = open("/work/rt4/refused_log.stderr", "wb")
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"], stdout=f, stderr=f)
    for _ in range(100):
        try:
            s = socket.create_connection(("127.0.0.1", port)); return p, s, None
        except OSError: time.sleep(0.1)
def loglines():
    b = open("/work/rt4/refused_log.stderr", "rb").read().splitlines(True); return b

N = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
for kind in ("unknown-channel CLOSE", "refused OPEN"):
    p, s, out = start_jmux()   # --allow 127.0.0.1:*
    r = Reader(s)
    got = [0]
    def rd():
        while True:
            m = r.next(10)
            if m is None: return
            got[0] += 1
    threading.Thread(target=rd, daemon=True).start()
    time.sleep(0.3)
    l0 = len(loglines()); c0 = status(p.pid)["cpu_s"]; t0 = time.time()
    B = 1000
    for i in range(0, N, B):
        if kind == "refused OPEN":
            s.sendall(b"".join(OPEN(i + j, "tcp://10.9.9.9:80") for j in range(B)))
        else:
            s.sendall(b"".join(CLOSE(0x7fff0000 + i + j) for j in range(B)))
    time.sleep(3)
    lines = loglines()[l0:]
    print(f"{kind:22s} x{N}: answers {got[0]}, log lines {len(lines)}, log bytes {sum(map(len, lines))}, tether CPU {status(p.pid)['cpu_s'] - c0:.2f} s; sample: {lines[:1]}", flush=True)
    kill(p)
