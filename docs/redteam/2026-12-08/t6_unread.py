"""One channel, peer's max packet MAXP, streaming target; the peer reads PRE bytes of the pipe and then
never reads again (SO_RCVBUF 4 KiB). tether CPU over SECS against the same with maxp 4096 and an idle session."""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
secs = float(sys.argv[1])
src = Targets("source"); idle = Targets("idle")
for case in sys.argv[2:]:
    maxp, pre = (int(x) for x in case.split(":"))
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t6_{case}.log")
    try:
        s = connect(port, 4096); r = Reader(s)
        tg = idle if pre < 0 else src
        s.sendall(OPEN(0, f"tcp://127.0.0.1:{tg.port}", 0x7fffffff, maxp))
        r.until_opened(1)
        while r.total < pre:
            r.recv(min(4096, pre - r.total), timeout=1)
        time.sleep(1)
        # CPU over SECS, and per 3 s when SECS >= 6 (the 30 s series of the report).
        samples = []
        c0 = cpu(tpid); t0 = time.time()
        for _ in range(int(secs // 3) if secs >= 6 else 0):
            c1 = cpu(tpid); time.sleep(3); samples.append(round(100 * (cpu(tpid) - c1) / 3))
        time.sleep(max(0.0, secs - (time.time() - t0))); el = time.time() - t0
        print(json.dumps({"maxp": maxp, "pre_read": pre, "cpu_pct": round(100 * (cpu(tpid) - c0) / el, 1), "cpu_pct_per_3s": samples, "rss_MiB": rss(tpid)}), flush=True)
    finally:
        stop(p)
