"""Credit edges. mode zero: N channels OPENed with window 0 (or never adjusted) to endless
senders: does the guest read targets it cannot forward (memory/CPU)?  mode tiny: one channel
with max packet 9 to an endless sender, peer grants 1 MiB windows as fast as it reads:
CPU per MiB delivered against max packet 4096, and a control channel's round trip meanwhile."""
import sys, struct, time, socket, threading
from jm import *
mode = sys.argv[1]
SRC = target("source"); EPORT = target("echo")
p, s, out = start_jmux()
r = Reader(s)
m = open_echo(s, r, 0, EPORT); gid = struct.unpack("!I", m[1][4:8])[0]

def ctrl_rtts(n=50):
    ts = []
    for i in range(n):
        t = time.perf_counter(); s.sendall(DATA(gid, b"ping%04d" % i))
        while True:
            mm = r.next(5)
            if mm in (None, "EOF"): return ts
            if mm[0] == 104 and struct.unpack("!I", mm[1][:4])[0] == 0: break
        ts.append((time.perf_counter() - t) * 1e6)
    ts.sort(); return ts

if mode == "zero":
    N = int(sys.argv[2]); win = int(sys.argv[3]) if len(sys.argv) > 3 else 0
    st0 = status(p.pid)
    for i in range(N): s.sendall(OPEN(10 + i, f"tcp://127.0.0.1:{SRC}", window=win))
    t0 = time.time(); data = 0; succ = 0
    while time.time() - t0 < 10:
        mm = r.next(0.5)
        if mm in (None, "EOF"): continue
        if mm[0] == 101: succ += 1
        if mm[0] == 104: data += len(mm[1]) - 4
    st1 = status(p.pid)
    rt = ctrl_rtts()
    print(f"zero-window N={N} win={win}: opened {succ}, data got {data} B in 10 s; {st0} -> {st1}; ctrl p50 {rt[len(rt)//2]:.0f} us" if rt else "no ctrl", flush=True)
else:
    maxp = int(sys.argv[2]); secs = float(sys.argv[3])
    rt0 = ctrl_rtts()
    s.sendall(OPEN(5, f"tcp://127.0.0.1:{SRC}", window=1 << 20, maxp=maxp))
    st0 = status(p.pid); t0 = time.time(); got = 0; since = 0; msgs = 0
    rts = []
    g5 = None
    while time.time() - t0 < secs:
        mm = r.next(1)
        if mm in (None, "EOF"): break
        if mm[0] == 101: g5 = struct.unpack("!I", mm[1][4:8])[0]
        if mm[0] == 104 and struct.unpack("!I", mm[1][:4])[0] == 5:
            n = len(mm[1]) - 4; got += n; since += n; msgs += 1
            if since >= 256 * 1024:
                s.sendall(WADJ(g5, since)); since = 0
    st1 = status(p.pid)
    rt1 = ctrl_rtts(20) if False else []
    cpu = st1["cpu_s"] - st0["cpu_s"]
    print(f"maxp={maxp}: {got/2**20:.2f} MiB in {msgs} DATA in {secs}s, guest process CPU {cpu:.2f}s = {cpu*1000/max(got/2**20,1e-9):.1f} ms/MiB, "
          f"{cpu*1e6/max(msgs,1):.2f} us/msg; rss {st1['rss_mib']} MiB; ctrl idle p50 {rt0[len(rt0)//2]:.0f} us", flush=True)
kill(p)
