"""Per-channel progress behind a slow/bursty pipe reader, mixed max packet sizes.
usage: t1_starve.py TAG N MAXP_SPEC RATE_MiBs RECV SECS [RCVBUF] [BURST]
MAXP_SPEC: e.g. "65535" (all) or "65535,512" (alternating)."""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
tag, n, spec, rate, recvsz, secs = sys.argv[1], int(sys.argv[2]), sys.argv[3], float(sys.argv[4]) * 2**20, int(sys.argv[5]), float(sys.argv[6])
rcvbuf = int(sys.argv[7]) if len(sys.argv) > 7 else 1 << 16
burst = sys.argv[8] if len(sys.argv) > 8 else ""   # "on_s,off_s"
maxps = [int(x) for x in spec.split(",")]
tg = Targets("source")
p, tpid, port = start_tether(log=f"/tmp/rt18/out/t1_{tag}.log")
try:
    s = connect(port, rcvbuf)
    r = Reader(s)
    for i in range(n):
        s.sendall(OPEN(i, f"tcp://127.0.0.1:{tg.port}", 0x7fffffff, maxps[i % len(maxps)]))
    r.until_opened(n)
    assert len(r.opened) == n, (len(r.opened), r.failed)
    c0 = cpu(tpid); t0 = time.time(); got = 0
    snaps = []; last = time.time(); prev = dict(r.per)
    on, off = (float(x) for x in burst.split(",")) if burst else (0, 0)
    while True:
        now = time.time(); el = now - t0
        if el >= secs: break
        if burst and (el % (on + off)) >= on:
            time.sleep(0.005); continue
        if rate and got > rate * el:
            time.sleep(min(0.002, got / rate - el)); continue
        k = r.recv(recvsz, timeout=1)
        if k: got += k
        if now - last >= secs / 6:
            cur = dict(r.per)
            d = [cur.get(i, 0) - prev.get(i, 0) for i in range(n)]
            snaps.append({"t": round(el, 1), "zero": sum(1 for x in d if x == 0),
                          "groups": {str(m): sum(d[i] for i in range(n) if maxps[i % len(maxps)] == m) for m in maxps}})
            prev = cur; last = now
    el = time.time() - t0; c1 = cpu(tpid)
    tot = [r.per.get(i, 0) for i in range(n)]
    out = {"tag": tag, "n": n, "maxp": spec, "rate": rate / 2**20, "recv": recvsz, "burst": burst,
           "MiB_s": round(got / el / 2**20, 2), "cpu_s": round(c1 - c0, 2), "cpu_pct": round(100 * (c1 - c0) / el, 1),
           "rss_MiB": rss(tpid), "zero_total": sum(1 for x in tot if x == 0),
           "per_group_MiB": {str(m): round(sum(tot[i] for i in range(n) if maxps[i % len(maxps)] == m) / 2**20, 2) for m in maxps},
           "per_ch_KiB": [x // 1024 for x in tot], "min_ch_KiB": min(tot) // 1024, "max_ch_KiB": max(tot) // 1024, "snaps": snaps, "types": r.types}
    ph2 = float(os.environ.get("PHASE2", "0"))
    if ph2:
        before = dict(r.per); t2 = time.time()
        while time.time() - t2 < ph2:
            r.recv(1 << 20, timeout=1)
        d2 = [r.per.get(i, 0) - before.get(i, 0) for i in range(n)]
        out["phase2_fast_zero"] = sum(1 for x in d2 if x == 0)
        out["phase2_fast_MiB"] = round(sum(d2) / 2**20, 1)
        # back to slow for as long again
        before = dict(r.per); t3 = time.time(); g3 = 0
        while time.time() - t3 < ph2 * 2:
            el3 = time.time() - t3
            if g3 > rate * el3: time.sleep(0.002); continue
            k = r.recv(recvsz, timeout=1); g3 += k or 0
        d3 = [r.per.get(i, 0) - before.get(i, 0) for i in range(n)]
        out["phase3_slow_zero"] = sum(1 for x in d3 if x == 0)
        out["phase3_zero_ids"] = [i for i in range(n) if d3[i] == 0][:70]
    print(json.dumps(out)); sys.stdout.flush()
finally:
    stop(p)
