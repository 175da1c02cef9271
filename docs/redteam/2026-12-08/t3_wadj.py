"""WINDOW ADJUST abuse, one tether process per case, 1 channel to a streaming target (maxp 4096).
Cases: idle (baseline: channel to a silent target) | never (window 64 KiB, no WADJ, pipe read)
| one (window 1, WADJ(1) per DATA received) | honest (window 64 KiB, WADJ(n) per n received)
| flood1 (window 0, then 200,000 WADJ(1) in one go, pipe read) | overflow (0xffffffff x 1000)
| unknown (200,000 WADJ to unknown ids) | zero_window (window 0, no WADJ, never anything)."""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
secs = float(sys.argv[1])
src = Targets("source"); idle = Targets("idle")
for case in sys.argv[2:]:
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t3_{case}.log")
    try:
        s = connect(port, 1 << 18); r = Reader(s)
        win = {"never": 65536, "one": 1, "honest": 65536, "flood1": 0, "overflow": 0x7fffffff,
               "unknown": 65536, "zero_window": 0, "idle": 65536}[case]
        s.sendall(OPEN(0, f"tcp://127.0.0.1:{(idle if case == 'idle' else src).port}", win, 4096))
        r.until_opened(1); gid = r.opened[0]
        time.sleep(0.3)
        c0 = cpu(tpid); t0 = time.time(); rss0 = rss(tpid); extra = {}
        if case == "flood1":
            s.sendall(WADJ(gid, 1) * 200000)
        if case == "overflow":
            s.sendall(WADJ(gid, 0xffffffff) * 1000)
        if case == "unknown":
            s.sendall(b"".join(WADJ(1000 + (i % 50000), 4096) for i in range(200000)))
        last = 0
        while time.time() - t0 < secs:
            k = r.recv(1 << 16, timeout=0.2)
            got = r.per.get(0, 0) + r.per.get(gid, 0)
            if case == "one" and got > last:
                s.sendall(WADJ(gid, 1) * (got - last)); last = got
            if case == "honest" and got - last >= 4096:
                s.sendall(WADJ(gid, got - last)); last = got
        el = time.time() - t0; c1 = cpu(tpid)
        got = r.per.get(gid, 0)
        print(json.dumps({"case": case, "data_bytes": got, "data_msgs": r.types.get(104, 0), "KiB_s": round(got / el / 1024, 1),
                          "cpu_pct": round(100 * (c1 - c0) / el, 1), "rss_MiB": [rss0, rss(tpid)],
                          "types": r.types, "alive": p.poll() is None}), flush=True)
    finally:
        stop(p)
