"""Echo guest (server): P peers each send a message that never ends, made of
zero-length (or 1-byte) continuation frames. Zero-length fragments add nothing
to max_message_bytes nor to max_assembling_bytes. Is there anything that bounds
them (memory, CPU), and what does a live stream see meanwhile?
Usage: timeout 300 nice -n 19 python3 ws_frag0.py P MILLION_FRAMES_PER_PEER [FRAGLEN]
"""
import sys, os, socket, time, threading, resource
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
P = int(sys.argv[1]); M = float(sys.argv[2]); FL = int(sys.argv[3]) if len(sys.argv) > 3 else 0
p, port = start_echo()
out = drain_output(p)

def rtt_series(n=300):
    s, _, rest = ws_connect(port)
    xs = []
    for _ in range(n):
        t0 = time.perf_counter(); s.sendall(frame(2, b"x" * 32))
        r = read_frame(s, rest, timeout=10)
        if r is None: return "no echo"
        rest = r[3]
        xs.append((time.perf_counter() - t0) * 1e6)
    s.close(); xs.sort()
    return f"p50 {xs[len(xs)//2]:.0f} us p99 {xs[int(len(xs)*.99)]:.0f} us"

print(f"# {P} peers x {M}M continuation frames of {FL} B, echo guest", flush=True)
st = status(p.pid); print("before:", st, rtt_series(), flush=True)
peers = [ws_connect(port)[0] for _ in range(P)]
for s in peers:
    s.sendall(frame(2, b"", fin=False))
one = frame(0, b"y" * FL, fin=False)
batch = one * 100000
total = int(M * 1e6)
sent = [0] * P
stop = [False]
def feed(i):
    s = peers[i]; s.settimeout(30)
    try:
        while sent[i] < total and not stop[0]:
            s.sendall(batch); sent[i] += 100000
    except OSError as e:
        print(f"peer {i} stopped after {sent[i]/1e6:.1f}M frames: {e!r}", flush=True)
ths = [threading.Thread(target=feed, args=(i,), daemon=True) for i in range(P)]
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
for t in ths: t.start()
while any(t.is_alive() for t in ths):
    time.sleep(3)
    st = status(p.pid); dt = time.time() - t0
    print(f"  t={dt:.0f}s frames sent {sum(sent)/1e6:.1f}M ({sum(sent)*len(one)/1e6:.0f} MB), host CPU {(st['cpu_s']-c0)/dt*100:.0f}%, rss {st['rss_mib']} MiB hwm {st['hwm_mib']}; live {rtt_series(100)}", flush=True)
    if dt > 200: stop[0] = True
dt = time.time() - t0; st = status(p.pid)
print(f"done: {sum(sent)/1e6:.1f}M frames in {dt:.1f} s, host CPU {st['cpu_s']-c0:.1f} s = {(st['cpu_s']-c0)/max(sum(sent),1)*1e9:.0f} ns/frame, rss {st['rss_mib']} MiB hwm {st['hwm_mib']}", flush=True)
# finish the messages: does the echo come back (and how big)?
for s in peers[:1]:
    s.sendall(frame(0, b"END", fin=True))
    r = read_frame(s, b"", timeout=20)
    print("first peer's message echoed:", None if r is None else (r[0], len(r[2])), flush=True)
print("after:", status(p.pid), rtt_series(), flush=True)
for s in peers: s.close()
time.sleep(2)
print("after peers left:", status(p.pid), "alive", p.poll() is None)
kill(p)
