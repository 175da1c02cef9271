"""Collateral damage of one 65535-packet channel: N channels at maxp 4096 stream to the peer
(pipe read as fast as possible), plus echo round trips on a 4096 channel; with and without one
extra streaming channel whose peer advertised maxp 65535."""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
src = Targets("source"); echo = Targets("echo")
secs = float(sys.argv[1]) if len(sys.argv) > 1 else 6
for big in [None, 4096, 65535]:
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t5_{big}.log")
    try:
        s = connect(port, 1 << 18); r = Reader(s)
        n = 8
        for i in range(n):
            s.sendall(OPEN(i, f"tcp://127.0.0.1:{src.port}", 0x7fffffff, 4096))
        s.sendall(OPEN(100, f"tcp://127.0.0.1:{echo.port}", 0x7fffffff, 4096))
        if big:
            s.sendall(OPEN(200, f"tcp://127.0.0.1:{src.port}", 0x7fffffff, big))
        r.until_opened(n + 1 + (1 if big else 0))
        eid = r.opened[100]
        c0 = cpu(tpid); t0 = time.time(); b0 = {i: r.per.get(r.opened[i], 0) for i in range(n)}
        rtts = []; pending = None
        while time.time() - t0 < secs:
            if pending is None:
                e0 = r.per.get(100, 0); s.sendall(DATA(eid, b"x" * 64)); pending = (time.time(), e0)
            r.recv(1 << 20, timeout=0.2)
            if pending and r.per.get(100, 0) >= pending[1] + 64:
                rtts.append(time.time() - pending[0]); pending = None
        el = time.time() - t0
        small = sum(r.per.get(r.opened[i], 0) - b0[i] for i in range(n))
        rtts.sort()
        print(json.dumps({"extra_channel_maxp": big, "small_channels_MiB_s": round(small / el / 2**20, 1),
                          "big_MiB_s": round(r.per.get(200, 0) / el / 2**20, 2),
                          "echo_rtts": len(rtts), "rtt_p50_ms": round(1000 * rtts[len(rtts) // 2], 2) if rtts else None,
                          "rtt_max_ms": round(1000 * rtts[-1], 1) if rtts else None,
                          "cpu_pct": round(100 * (cpu(tpid) - c0) / el, 1)}), flush=True)
    finally:
        stop(p)
