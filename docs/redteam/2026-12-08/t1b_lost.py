"""Are the starved channels lost (never woken) or out-competed? 64 channels (maxp 4096) to streaming
targets, pipe read at 4 MiB/s in 16 KiB reads for 6 s; then the peer CLOSEs every channel that got
bytes, and reads on (slow, then fast): does anyone else get served?"""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
n = int(sys.argv[1]) if len(sys.argv) > 1 else 64
maxp = int(sys.argv[2]) if len(sys.argv) > 2 else 4096
tg = Targets("source")
p, tpid, port = start_tether(log="/tmp/rt18/out/t1b.log")
def slow(r, secs, rate=4 << 20, k=16384):
    t0 = time.time(); got = 0
    while time.time() - t0 < secs:
        if got > rate * (time.time() - t0): time.sleep(0.002); continue
        got += r.recv(k, timeout=0.2) or 0
    return got
try:
    s = connect(port, 1 << 16); r = Reader(s)
    for i in range(n):
        s.sendall(OPEN(i, f"tcp://127.0.0.1:{tg.port}", 0x7fffffff, maxp))
    r.until_opened(n)
    slow(r, 6)
    served = [i for i in range(n) if r.per.get(i, 0) > 0]
    print("phase1 served", len(served), served, flush=True)
    for i in served:
        s.sendall(CLOSE(r.opened[i]))
    before = dict(r.per); c0 = cpu(tpid)
    got = slow(r, 6)
    d = {i: r.per.get(i, 0) - before.get(i, 0) for i in range(n) if i not in served}
    print("phase2 (served ones closed) slow read: MiB", round(got / 2**20, 2), "others served", sum(1 for v in d.values() if v > 0),
          "of", len(d), "cpu_s", round(cpu(tpid) - c0, 2), "types", r.types, flush=True)
    before = dict(r.per); t0 = time.time()
    while time.time() - t0 < 3: r.recv(1 << 20, timeout=0.2)
    d = {i: r.per.get(i, 0) - before.get(i, 0) for i in range(n) if i not in served}
    print("phase3 fast read: others served", sum(1 for v in d.values() if v > 0), "of", len(d), "MiB", round(sum(d.values()) / 2**20, 1), flush=True)
finally:
    stop(p)
