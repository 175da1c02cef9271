"""Two JMUX guests, as deployed: A (`tether jmux ws://B socks5-listen://SA`) and
B (`tether jmux ws-listen://B --allow 127.0.0.1:*`). No access to the pipe is needed:
an ordinary SOCKS5 client of A is the attacker. It opens N channels through the tunnel to
a target of kind KIND and then closes its client sockets. B keeps each target socket until
the target closes ("lingering").
  hold    the target reads and throws away, never closes (many servers: a client FIN
          is not a reason to stop, e.g. a server with long-lived pushes)
  source  the target streams without end (a long download)
Afterwards, for DUR s, a legitimate SOCKS5 client of A tries to reach an echo target once a second
and does 50 round trips; B's and A's CPU are sampled.
Usage: timeout 300 nice -n 19 python3 jmux_tunnel_linger.py KIND N [DUR]
"""
import sys, os, socket, struct, time, threading, resource, subprocess, re
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import status, kill, drain_output, TETHER
from jm import free_port

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
KIND = sys.argv[1]; N = int(sys.argv[2]); DUR = float(sys.argv[3]) if len(sys.argv) > 3 else 20
held = []; sent = [0]; eofs = [0]
def tgt(kind):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(4096); held.append(ls)
    def serve(c):
        try:
            if kind == "echo":
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
                c.close()
            elif kind == "hold":
                while c.recv(65536): pass
                eofs[0] += 1; held.append(c); time.sleep(3600)
            else:
                blob = b"s" * 65536
                while True: sent[0] += c.send(blob)
        except OSError:
            pass
    def acc():
        while True:
            c, _ = ls.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]
echo_port = tgt("echo"); bad_port = tgt(KIND)
pb, sa = free_port(), free_port()
def pre(): resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
B = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{pb}", "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
outB = drain_output(B); time.sleep(0.5)
A = subprocess.Popen([TETHER, "jmux", f"ws://127.0.0.1:{pb}/", f"socks5-listen://127.0.0.1:{sa}", "--allow", "127.0.0.1:*"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
outA = drain_output(A); time.sleep(1)

def socks(port, timeout=5):
    c = socket.create_connection(("127.0.0.1", sa), timeout=timeout)
    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    c.sendall(b"\x05\x01\x00" + b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", port))
    r = b""
    while len(r) < 12:
        d = c.recv(64)
        if not d: break
        r += d
    return c, (r[3] if len(r) >= 4 else None)

def legit():
    t0 = time.perf_counter()
    try:
        c, rep = socks(echo_port)
    except OSError as e:
        return f"connect error {e!r}"
    if rep != 0:
        c.close(); return f"refused rep={rep} in {(time.perf_counter()-t0)*1000:.1f} ms"
    xs = []
    c.settimeout(2)
    try:
        for _ in range(50):
            t1 = time.perf_counter(); c.sendall(b"x" * 32); got = 0
            while got < 32:
                d = c.recv(64)
                if not d: raise OSError("closed")
                got += len(d)
            xs.append((time.perf_counter() - t1) * 1e6)
    except OSError as e:
        c.close(); return f"opened, then {e!r} after {len(xs)} RTs"
    c.close(); xs.sort()
    return f"ok, RT p50 {xs[25]:.0f} us p90 {xs[45]:.0f} us"

def cpu(): return status(B.pid)["cpu_s"], status(A.pid)["cpu_s"]
print(f"# KIND={KIND} N={N}: attacker = SOCKS5 client of A", flush=True)
print("baseline legit:", legit(), "| B", status(B.pid), flush=True)
atk = []; reps = {}
for i in range(N):
    try:
        c, rep = socks(bad_port)
    except OSError as e:
        rep = repr(e); c = None
    reps[rep] = reps.get(rep, 0) + 1
    if c: atk.append(c)
print(f"attacker opened {N}: SOCKS replies {reps}", flush=True)
time.sleep(1)
print("legit with attacker's channels open:", legit(), flush=True)
for c in atk: c.close()
t_close = time.time()
print(f"attacker closed its {len(atk)} client sockets", flush=True)
b0, a0 = cpu(); s0 = sent[0]; tp = time.time()
while time.time() - t_close < DUR:
    time.sleep(max(0, 1 - (time.time() - tp) % 1))
    if int(time.time() - t_close) % 5 == 0 or time.time() - t_close < 2:
        b1, a1 = cpu(); dt = time.time() - tp
        print(f"  t+{time.time()-t_close:4.1f}s legit: {legit()}; B CPU {(b1-b0)/dt*100:.0f}% A CPU {(a1-a0)/dt*100:.0f}%, "
              f"target sent {(sent[0]-s0)/dt/1e6:.0f} MB/s since close, target saw EOF {eofs[0]}; B fds {status(B.pid)['fds']} A fds {status(A.pid)['fds']}", flush=True)
        b0, a0, s0, tp = b1, a1, sent[0], time.time()
    else:
        time.sleep(0.5)
print("alive A", A.poll() is None, "B", B.poll() is None)
print("B log tail:", b"".join(outB[-4:]).decode(errors="replace")[-800:])
print("A log tail:", b"".join(outA[-4:]).decode(errors="replace")[-800:])
kill(A); kill(B)
