"""CPU and throughput of one tether jmux session per case, 1 channel to a streaming target,
the peer reading the pipe at RATE MiB/s in RECV-byte reads. Case 'idle': channel to a silent target.
usage: t2_spin.py SECS RATE RECV case... (case = idle | <maxp> | <maxp>:<nchan>)"""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
secs, rate, recvsz = float(sys.argv[1]), float(sys.argv[2]) * 2**20, int(sys.argv[3])
src = Targets("source"); idle = Targets("idle")
for case in sys.argv[4:]:
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t2_{case}.log")
    try:
        s = connect(port, 1 << 16); r = Reader(s)
        if case == "idle":
            maxp, n, tg = 4096, 1, idle
        else:
            maxp, n = (int(x) for x in (case.split(":") + ["1"])[:2]); tg = src
        for i in range(n):
            s.sendall(OPEN(i, f"tcp://127.0.0.1:{tg.port}", 0x7fffffff, maxp))
        r.until_opened(n)
        time.sleep(0.3)
        c0 = cpu(tpid); t0 = time.time(); got = 0; b0 = r.total
        while time.time() - t0 < secs:
            el = time.time() - t0
            if rate and got > rate * el:
                time.sleep(min(0.002, got / rate - el)); continue
            k = r.recv(recvsz, timeout=0.2); got += k or 0
        el = time.time() - t0; c1 = cpu(tpid)
        print(json.dumps({"case": case, "peer_rate": rate / 2**20, "recv": recvsz, "MiB_s": round(got / el / 2**20, 3),
                          "cpu_pct": round(100 * (c1 - c0) / el, 1), "cpu_ms_per_MiB": round(1000 * (c1 - c0) / max(got / 2**20, 1e-6), 1),
                          "rss_MiB": rss(tpid)}), flush=True)
    finally:
        stop(p)
