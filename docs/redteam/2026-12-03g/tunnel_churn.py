"""Bounded linger as a lever: an ordinary SOCKS5 client of side A opens connections through the
tunnel to a target that reads and never closes ("hold"), and closes each one as soon as the
CONNECT reply arrives, at RATE connections/s. Each such channel lingers on side B for up to 5 s
(LINGER_TIMEOUT) and counts against --max-channels (1024) meanwhile. A legitimate SOCKS5 client
(another source address) connects to an echo target every 50 ms. Prints its success rate.
Usage: timeout 200 nice -n 19 python3 tunnel_churn.py RATE [DUR]   (HOST=node for Node)

Added on 2026-12-04 for the fix's figures (defaults as before): side A gets the extra arguments in
$A_ARGS (e.g. "--half-close-timeout-ms 0 --max-channels-per-source 1024" for the old behaviour), and
the last check waits $WAIT s (default 6) after the attack stops."""
import sys, os, time, socket, subprocess, threading, struct, resource, collections
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import kill, status, drain_output
from jm import jmux_argv, free_port, HOSTK
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
RATE = float(sys.argv[1]); DUR = float(sys.argv[2]) if len(sys.argv) > 2 else 10
def target(kind):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(4096)
    held = []
    def serve(c):
        try:
            if kind == "source":
                blob = b"s" * 65536
                while True: c.sendall(blob)
            while (d := c.recv(65536)):
                if kind == "echo": c.sendall(d)
            if kind == "hold": held.append(c); return   # saw EOF, never closes
        except OSError: pass
    def acc():
        while True:
            c, _ = ls.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start(); return ls.getsockname()[1], held
E, _ = target("echo"); TK = os.environ.get("TARGET", "hold"); H, held = target(TK)
pipe, sp = free_port(), free_port()
def wait_port(port):
    for _ in range(150):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); return
        except OSError: time.sleep(0.1)
def pre(): resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
B = subprocess.Popen(jmux_argv(f"ws-listen://127.0.0.1:{pipe}", "--allow", "127.0.0.1:*"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre); bout = drain_output(B); wait_port(pipe)
A_ARGS = os.environ.get("A_ARGS", "").split(); WAIT = float(os.environ.get("WAIT", "6"))
A = subprocess.Popen(jmux_argv(f"ws://127.0.0.1:{pipe}", f"socks5-listen://127.0.0.1:{sp}", *A_ARGS), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre); aout = drain_output(A); wait_port(sp); time.sleep(1)
def socks(src, port, timeout=3):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(timeout); s.connect(("127.0.0.1", sp))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.sendall(b"\x05\x01\x00")
    if s.recv(2) != b"\x05\x00": s.close(); return None, "greeting"
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", port)); r = s.recv(10)
    if len(r) < 2: s.close(); return None, "closed"
    if r[1] != 0: s.close(); return None, f"rep={r[1]}"
    return s, "ok"
def legit(dur):
    c = collections.Counter(); end = time.time() + dur
    while time.time() < end:
        try:
            s, why = socks("127.0.0.2", E)
            if s:
                s.sendall(b"ping"); why = "ok" if s.recv(4) == b"ping" else "no echo"; s.close()
        except OSError as e: why = type(e).__name__
        c[why] += 1; time.sleep(0.05)
    return dict(c)
stop = [False]; made = collections.Counter()
def attacker():
    t0 = time.time(); n = 0
    while not stop[0]:
        if n >= (time.time() - t0) * RATE: time.sleep(0.001); continue
        n += 1
        try:
            s, why = socks("127.0.0.1", H, timeout=2); made[why] += 1
            if s: s.close()
        except OSError as e: made[type(e).__name__] += 1
print(f"# host={HOSTK} RATE={RATE}/s to a {TK} target, DUR={DUR}, A_ARGS={A_ARGS}", flush=True)
print("baseline legit:", legit(3), flush=True)
th = threading.Thread(target=attacker, daemon=True); th.start(); time.sleep(2)
c0 = status(B.pid)["cpu_s"]; t0 = time.time()
print(f"legit during the churn ({DUR:.0f} s):", legit(DUR), flush=True)
print(f"attacker connections: {dict(made)}; B CPU {(status(B.pid)['cpu_s']-c0)/(time.time()-t0)*100:.0f}%, B {status(B.pid)}, A fds {status(A.pid)['fds']}; hold target saw EOF on {len(held)}", flush=True)
stop[0] = True; th.join(); time.sleep(WAIT)
print(f"legit {WAIT:.0f} s after the churn stopped:", legit(3), flush=True)
print("B log:", b"".join(bout[-2:]).decode(errors="replace")[-300:])
kill(A); kill(B)
