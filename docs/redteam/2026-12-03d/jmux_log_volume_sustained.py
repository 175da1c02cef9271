"""Sustained log volume through refused OPENs with ~65 KB target URLs, for SECS seconds
(one OPEN every 100 ms), versus the same rate of short refused OPENs. stderr to a file.
Usage: timeout 120 nice -n 19 python3 jmux_log_volume_sustained.py [SECS]
"""
import sys, socket, time, subprocess, threading
sys.path.insert(0, "/work/rt5")
from rt import TETHER, kill
from jm import OPEN, Reader, free_port
SECS = float(sys.argv[1]) if len(sys.argv) > 1 else 31
def run(label, url):
    port = free_port(); path = f"/work/rt5/out/logsus_{label}.log"; log = open(path, "wb")
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"], stdout=log, stderr=log)
    for _ in range(100):
        try: s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.1)
    r = Reader(s); threading.Thread(target=lambda: [None for _ in iter(lambda: r.next(60), None)], daemon=True).start()
    t0 = time.time(); i = 0; sent = 0
    while time.time() - t0 < SECS:
        m = OPEN(10 + i, url); s.sendall(m); sent += len(m); i += 1; time.sleep(0.1)
    time.sleep(0.5); kill(p); log.close()
    d = open(path, "rb").read()
    print(f"{label:10s} {i} OPENs in {SECS:.0f} s ({sent} B sent): log {d.count(10)} lines, {len(d)} B = {len(d)/SECS/1024:.1f} KiB/s", flush=True)
run("short", "tcp://10.1.2.3:9")
run("long", "tcp://" + ("a" * 63 + ".") * 1015 + "b:9")
