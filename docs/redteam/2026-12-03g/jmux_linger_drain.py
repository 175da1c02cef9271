"""After the peer's CLOSE, the JMUX guest keeps a channel's target socket and reads it
until the target closes ("lingering", release_if_gone). What does a target that keeps
sending after our CLOSE cost?

A raw JMUX peer on `tether jmux tcp-listen://` opens channel 0 to an echo target (live
channel), then N channels to a `source` target (sends 64 KiB blocks without end, never
closes). It CLOSEs the N channels at once and then, for DUR seconds, measures:
  - the live channel's 32 B round trips (1 s timeout each: count of timeouts),
  - the tether process's CPU,
  - bytes the source targets managed to send after the CLOSEs (what the guest read and threw away),
  - RSS, fds; whether new OPENs are accepted (the N channels still count).
Usage: timeout 300 nice -n 19 python3 jmux_linger_drain.py N [DUR]
"""
import sys, os, socket, struct, time, threading, resource, select, subprocess
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import status, kill, drain_output, TETHER
from jm import OPEN, WADJ, DATA, CLOSE, free_port, jmux_argv, HOSTK

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
N = int(sys.argv[1]) if len(sys.argv) > 1 else 100
DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 10
RATE = int(os.environ.get("RATE", "0"))  # bytes/s per source connection, 0 = as fast as it can

sent = [0]
def tgt(kind):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(4096)
    def serve(c):
        try:
            if kind == "echo":
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
            else:
                blob = b"s" * 65536
                while True:
                    n = c.send(blob); sent[0] += n
                    if RATE: time.sleep(n / RATE)
        except OSError:
            pass
    def acc():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1], ls

echo_port, _l1 = tgt("echo")
src_port, _l2 = tgt("source")
pipe_port = free_port()
def pre(): resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
p = subprocess.Popen(jmux_argv(f"tcp-listen://127.0.0.1:{pipe_port}", "--allow", "127.0.0.1:*"),
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
out = drain_output(p)
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", pipe_port), timeout=1); break
    except OSError:
        time.sleep(0.1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""; ours = {}; fails = {}; data_in = {}
def pump(timeout):
    global buf
    s.settimeout(timeout)
    try:
        c = s.recv(1 << 20)
    except (socket.timeout, BlockingIOError):
        return 0
    finally:
        s.settimeout(30)
    if not c: raise RuntimeError("pipe closed")
    buf += c; n = 0
    while len(buf) >= 4:
        t, L, _ = struct.unpack("!BHB", buf[:4])
        if len(buf) < L: break
        body, buf = buf[4:L], buf[L:]; n += 1
        if t == 101:
            rid, sid = struct.unpack("!II", body[:8]); ours[rid] = sid
        elif t == 102:
            rid = struct.unpack("!I", body[:4])[0]; fails[rid] = body[8:]
        elif t == 104:
            rid = struct.unpack("!I", body[:4])[0]; data_in[rid] = data_in.get(rid, 0) + len(body) - 4
    return n
def wait(pred, t):
    end = time.time() + t
    while time.time() < end and not pred(): pump(0.05)
    return pred()

def rtts(gid, dur, tmo=1.0):
    xs = []; tos = 0; end = time.time() + dur
    while time.time() < end:
        want = data_in.get(gid, 0) + 32; t0 = time.perf_counter()
        s.sendall(DATA(gid, b"x" * 32))
        while data_in.get(gid, 0) < want and time.perf_counter() - t0 < tmo:
            pump(0.05)
        if data_in.get(gid, 0) < want:
            tos += 1
            wait(lambda: data_in.get(gid, 0) >= want, 30)
        xs.append((time.perf_counter() - t0) * 1e6)
        s.sendall(WADJ(gid, 32))
        time.sleep(0.002)
    xs.sort()
    return len(xs), xs[len(xs)//2], xs[int(len(xs)*.99)], xs[-1], tos

def phase(label, gid, dur):
    c0 = status(p.pid)["cpu_s"]; b0 = sent[0]; t0 = time.time()
    n, p50, p99, mx, tos = rtts(gid, dur)
    dt = time.time() - t0; st = status(p.pid)
    print(f"[{label}] {n} RTs p50 {p50:.0f} us p99 {p99:.0f} us max {mx/1000:.0f} ms, >1 s: {tos}; "
          f"tether CPU {(st['cpu_s']-c0)/dt*100:.0f}%; source sent {(sent[0]-b0)/dt/1e6:.1f} MB/s; rss {st['rss_mib']} MiB fds {st['fds']}", flush=True)

print(f"# N={N} DUR={DUR} RATE={RATE or 'max'}", flush=True)
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo_port}"))
assert wait(lambda: 0 in ours, 5)
gid = ours[0]
phase("baseline, 1 channel", gid, 3)
ids = list(range(1, N + 1))
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{src_port}", window=65536) for i in ids))
wait(lambda: all(i in ours for i in ids), 20)
wait(lambda: False, 1)
for k in range(int(os.environ.get("STALL_PHASES", "1"))):
    phase(f"{N} source channels open, window used up, not adjusted (#{k})", gid, 3)
s.sendall(b"".join(CLOSE(ours[i]) for i in ids))
t_close = time.time()
phase(f"0-{DUR:.0f} s after CLOSE of the {N}", gid, DUR)
s.sendall(b"".join(OPEN(5000 + i, f"tcp://127.0.0.1:{echo_port}") for i in range(10)))
wait(lambda: all(5000 + i in ours or 5000 + i in fails for i in range(10)), 5)
print(f"10 new OPENs after {time.time()-t_close:.0f} s: {sum(5000+i in ours for i in range(10))} opened; fails {set(fails.values())}", flush=True)
phase(f"{DUR:.0f}-{2*DUR:.0f} s after CLOSE", gid, DUR)
print("alive:", p.poll() is None, "log:", b"".join(out[-3:]).decode(errors="replace")[-600:])
kill(p)
