"""Echo guest (server), N hostile WebSocket peers, each in one of these modes:
  after-close   sends a close frame (1000), then keeps sending 64 KiB binary frames and pings, never reads
  no-answer     makes the host close (a 2 KiB message over --max-message-bytes 1024 -> 1009), never
                answers the close and never reads, keeps sending data frames
  ping-noread   sends 125-byte pings as fast as it can and never reads (pongs owed)
  close-spam    sends close frames with bad codes (0, 999, 1004, 1005, 1006, 1015, 2999, 5000, 65535),
                one per connection, then a second close and data; reconnects (churn)
Measured over DUR s: host RSS/fds/CPU, bytes the peers managed to write, when the host ended each
connection, and a live stream's round trip.
Usage: timeout 300 nice -n 19 python3 ws_close_abuse.py MODE N [DUR]
"""
import sys, os, socket, time, threading, resource, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output, close_code

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
MODE = sys.argv[1]; N = int(sys.argv[2]); DUR = float(sys.argv[3]) if len(sys.argv) > 3 else 15
p, port = start_echo(extra=["--max-message-bytes", "1024"], nofile=20000)
out = drain_output(p)

def rtt_series(n=200):
    try:
        s, _, rest = ws_connect(port)
    except Exception as e:
        return f"connect failed {e!r}"
    xs = []
    for _ in range(n):
        t0 = time.perf_counter(); s.sendall(frame(2, b"x" * 32))
        r = read_frame(s, rest, timeout=10)
        if r is None: return "no echo"
        rest = r[3]
        xs.append((time.perf_counter() - t0) * 1e6)
    s.close(); xs.sort()
    return f"p50 {xs[len(xs)//2]:.0f} us p99 {xs[int(len(xs)*.99)]:.0f} us"

print(f"# mode={MODE} N={N} DUR={DUR}", flush=True)
print("before:", status(p.pid), rtt_series(), flush=True)
wrote = [0]; ended = []; stop = [False]; bad = {}
t_start = time.time()
def peer(i):
    try:
        if MODE == "close-spam":
            codes = [0, 999, 1004, 1005, 1006, 1015, 2999, 5000, 65535]
            k = 0
            while not stop[0]:
                c = codes[k % len(codes)]; k += 1
                s, _, rest = ws_connect(port, timeout=10)
                s.sendall(frame(8, struct.pack("!H", c) + b"bye") + frame(8, struct.pack("!H", 1000)) + frame(2, b"z" * 1000))
                r = read_frame(s, rest, timeout=10)
                got = close_code(r[2])[0] if r and r[0] == 8 else ("none" if r is None else r[0])
                bad[(c, got)] = bad.get((c, got), 0) + 1
                s.close()
            return
        s, _, rest = ws_connect(port, timeout=10)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        if MODE == "after-close":
            s.sendall(frame(8, struct.pack("!H", 1000)))
            blob = frame(2, b"a" * 65536) + frame(9, b"p" * 125)
        elif MODE == "no-answer":
            s.sendall(frame(2, b"o" * 2048))
            blob = frame(2, b"b" * 1000)
        else:
            blob = frame(9, b"p" * 125) * 64
        s.settimeout(2)
        while not stop[0]:
            try:
                s.sendall(blob); wrote[0] += len(blob)
            except socket.timeout:
                continue
    except OSError as e:
        ended.append((time.time() - t_start, type(e).__name__))

ths = [threading.Thread(target=peer, args=(i,), daemon=True) for i in range(N)]
c0 = status(p.pid)["cpu_s"]
for t in ths: t.start()
t0 = time.time()
while time.time() - t0 < DUR:
    time.sleep(3)
    st = status(p.pid); dt = time.time() - t0
    print(f"  t={dt:.0f}s peers ended {len(ended)} (at {sorted(e[0] for e in ended)[:1]}..{sorted(e[0] for e in ended)[-1:]} s), wrote {wrote[0]/1e6:.0f} MB, "
          f"host CPU {(st['cpu_s']-c0)/dt*100:.0f}%, rss {st['rss_mib']} MiB fds {st['fds']}; live {rtt_series(100)}", flush=True)
stop[0] = True
time.sleep(1)
if bad: print("close-spam answers (sent code, answered code): count", bad)
kinds = {}
for _, k in ended: kinds[k] = kinds.get(k, 0) + 1
print("how peers ended:", kinds)
print("after:", status(p.pid), rtt_series(), "alive", p.poll() is None, flush=True)
print("log tail:", b"".join(out[-4:]).decode(errors="replace")[-600:])
kill(p)
