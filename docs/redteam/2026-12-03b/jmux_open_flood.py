"""OPEN flood past the channel cap, with L channels live: cost per refused OPEN
(the duplicate-id check in Session::on_open scans every channel).
Also reuses live ids (refused as duplicates). Reads all answers.
Usage: timeout 120 nice -n 19 python3 jmux_open_flood.py
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, Reader, target

def run(L, M=100000, dup=False):
    echo = target("echo")
    p, s, out = start_jmux()
    r = Reader(s)
    if L:
        s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{echo}") for i in range(L)))
        ok = 0
        while ok < L:
            m = r.next(10)
            if m is None: break
            if m[0] == 101: ok += 1
    answers = {"n": 0}
    def reader():
        while answers["n"] < M:
            m = r.next(10)
            if m is None: break
            if m[0] == 102: answers["n"] += 1
    th = threading.Thread(target=reader, daemon=True); th.start()
    c0 = status(p.pid)["cpu_s"]; t0 = time.time()
    base = 0 if dup else 100000
    for k in range(0, M, 5000):
        s.sendall(b"".join(OPEN(base + ((k + i) % max(L,1) if dup else k + i), "tcp://127.0.0.1:1") for i in range(5000)))
    th.join(60)
    el = time.time() - t0; cpu = status(p.pid)["cpu_s"] - c0
    st = status(p.pid)
    print(f"L={L:5} dup={dup!s:5} {M} OPENs refused={answers['n']} in {el:.2f} s, CPU {cpu:.2f} s = {cpu/M*1e6:.1f} us/OPEN, rss {st['rss_mib']} MiB")
    kill(p)

run(0)
run(1024)
run(1024, dup=True)
