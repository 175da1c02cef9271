"""Scale of ACTIVE streams: a live stream's round trip and the host's CPU per
message while N busy streams each carry a trickle (aggregate rate R msg/s,
round robin), against N=0 (no load) and N=1 (the same aggregate rate R on one
stream) in the same run.

Usage: timeout 600 nice -n 19 python3 scale_active.py TARGET [R] [N...]
TARGET: p2 | p2-pollall | p3 | node | p2-tcp | p3-tcp | jmux
"""
import sys, os, socket, time, struct, subprocess, resource, re, select, base64, signal, multiprocessing as mp
sys.path.insert(0, "/work/rt6")
from rt import status, kill, ws_connect, frame, drain_output
from jm import free_port

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
B = "/work/rt6/bin"
TETHER = B + "/tether"
NODE = "/work/main/target/peers/node/bin/node"
TARGET = sys.argv[1]
R = int(sys.argv[2]) if len(sys.argv) > 2 else 1000
NS = [int(a) for a in sys.argv[3:]] or [0, 1, 100, 1000, 3000]
MSG = 32
K = 1500
WINDOW = float(os.environ.get("WINDOW", "4"))

def pre():
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))

procs = []
def start(args, pat):
    p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
    procs.append(p)
    t0 = time.time()
    while time.time() - t0 < 30:
        line = p.stdout.readline()
        if not line:
            break
        m = re.search(pat, line)
        if m:
            drain_output(p)
            return p, int(m.group(1))
    raise RuntimeError(f"no match for {pat!r}: {line!r}")

def echo_target():
    """A plain TCP echo target (thread per connection, for JMUX)."""
    import threading
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(4096)
    def serve(c):
        c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            while True:
                d = c.recv(65536)
                if not d: break
                c.sendall(d)
        except OSError:
            pass
    def acc():
        while True:
            c, _ = ls.accept()
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]

def echo_target_proc():
    """Echo target in its own process (epoll), so it does not share our GIL."""
    q = mp.Queue()
    def run(q):
        import selectors
        sel = selectors.DefaultSelector()
        ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        ls.bind(("127.0.0.1", 0)); ls.listen(4096); ls.setblocking(False)
        sel.register(ls, selectors.EVENT_READ)
        q.put(ls.getsockname()[1])
        while True:
            for k, _ in sel.select():
                if k.fileobj is ls:
                    try:
                        c, _ = ls.accept()
                    except OSError:
                        continue
                    c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    c.setblocking(False)
                    sel.register(c, selectors.EVENT_READ)
                else:
                    c = k.fileobj
                    try:
                        d = c.recv(65536)
                    except OSError:
                        d = b""
                    if not d:
                        sel.unregister(c); c.close(); continue
                    c.setblocking(True); c.sendall(d); c.setblocking(False)
    p = mp.Process(target=run, args=(q,), daemon=True)
    p.start()
    return p, q.get()

kind = "ws"
tcp_port = None
if TARGET in ("p2", "p2-pollall", "p3", "node", "p2-tcp", "p3-tcp"):
    wasm = "echo-p3.wasm" if TARGET.startswith("p3") else "echo.wasm"
    gargs = ["server", "127.0.0.1:0"]
    if TARGET == "p2-pollall":
        gargs += ["poll-all"]
    if TARGET.endswith("-tcp"):
        tcp_port = free_port(); gargs += ["--tcp", f"127.0.0.1:{tcp_port}"]; kind = "tcp"
    if TARGET == "node":
        args = [NODE, "--experimental-wasm-jspi", "/work/rt6/node/bin/tether-node.mjs", "run", f"{B}/{wasm}",
                "--listen", "127.0.0.1:*", "--cache", "/work/rt6/node-cache", "--", *gargs]
    else:
        args = [TETHER, "run", f"{B}/{wasm}", "--listen", "127.0.0.1:*", "--", *gargs]
    hostp, port = start(args, rb"listening on 127\.0\.0\.1:(\d+)")
    pids = [hostp.pid]
    if kind == "tcp":
        port = tcp_port
        time.sleep(0.3)
elif TARGET == "jmux":
    kind = "tcp"
    tp_proc, tport = echo_target_proc()
    pipe = free_port(); lport = free_port()
    srv = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{pipe}", "--allow", "127.0.0.1:*"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
    procs.append(srv); drain_output(srv)
    time.sleep(1.0)
    cli = subprocess.Popen([TETHER, "jmux", f"ws://127.0.0.1:{pipe}/", f"tcp-listen://127.0.0.1:{lport}/127.0.0.1:{tport}"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
    procs.append(cli); drain_output(cli)
    port = lport
    for _ in range(100):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError:
            time.sleep(0.1)
    pids = [srv.pid, cli.pid]
else:
    raise SystemExit("bad target")

def cpu():
    return sum(status(p)["cpu_s"] for p in pids)

def connect_one():
    if kind == "ws":
        s, _, rest = ws_connect(port)
        return s
    s = socket.create_connection(("127.0.0.1", port))
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    return s

def loader(n, rate, ready_q, count, stop):
    """Busy streams, own process: N connections, R msg/s round robin."""
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    conns = []
    for i in range(n):
        for attempt in range(20):
            try:
                conns.append(connect_one()); break
            except Exception:
                time.sleep(0.05)
    out = frame(2, b"b" * MSG) if kind == "ws" else b"b" * MSG
    echo_len = MSG + 2 if kind == "ws" else MSG
    ep = select.epoll()
    fdmap = {}
    for c in conns:
        c.setblocking(False)
        ep.register(c.fileno(), select.EPOLLIN)
        fdmap[c.fileno()] = c
    # prime: one round on each
    ready_q.put(len(conns))
    if not conns:
        stop.wait(); return
    i = 0; got = 0; t0 = time.perf_counter(); sent = 0
    while not stop.is_set():
        now = time.perf_counter()
        due = int((now - t0) * rate) - sent
        for _ in range(min(due, 200)):
            try:
                conns[i].send(out)
            except (BlockingIOError, OSError):
                pass
            i = (i + 1) % len(conns); sent += 1
        for fd, ev in ep.poll(0.001):
            try:
                d = fdmap[fd].recv(65536)
                got += len(d)
            except (BlockingIOError, OSError):
                pass
        count.value = got // echo_len

def recv_exact(s, n):
    b = b""
    while len(b) < n:
        c = s.recv(n - len(b))
        if not c: raise RuntimeError("closed")
        b += c
    return b

def live_rt(s, k, pace=None):
    xs = []
    if kind == "ws":
        f, n = frame(2, b"x" * MSG), MSG + 2
    else:
        f, n = b"y" * MSG, MSG
    end = time.perf_counter() + pace if pace else None
    nxt = time.perf_counter()
    while (end is None and len(xs) < k) or (end is not None and time.perf_counter() < end):
        if end is not None:
            nxt += 0.001
            d = nxt - time.perf_counter()
            if d > 0: time.sleep(d)
        t = time.perf_counter(); s.sendall(f); recv_exact(s, n); xs.append((time.perf_counter() - t) * 1e6)
    live_rt.n = len(xs)
    xs.sort()
    return xs[len(xs) // 2], xs[int(len(xs) * .9)], xs[int(len(xs) * .99)]

try:
    live = connect_one()
    live_rt(live, 300)
    print(f"# target={TARGET} R={R} msg/s aggregate, {MSG} B messages, live round trips paced 1/ms for {WINDOW} s", flush=True)
    print(f"{'N busy':>7} {'p50 us':>7} {'p90 us':>7} {'p99 us':>7} {'busy msg/s':>10} {'host cpu%':>9} {'cpu us/msg':>10} {'rss MiB':>7}", flush=True)
    for n in NS:
        stop = mp.Event(); q = mp.Queue(); count = mp.Value("q", 0)
        lp = None
        if n > 0:
            lp = mp.Process(target=loader, args=(n, R, q, count, stop), daemon=True)
            lp.start()
            opened = q.get(timeout=120)
            if opened != n:
                print(f"# only {opened} of {n} opened", flush=True)
        time.sleep(2.0)
        c0 = cpu(); m0 = count.value; t0 = time.perf_counter()
        p50, p90, p99 = live_rt(live, K, pace=WINDOW)
        dt = time.perf_counter() - t0; c1 = cpu(); m1 = count.value
        msgs = (m1 - m0) + live_rt.n
        rss = sum(status(p)["rss_mib"] for p in pids)
        print(f"{n:>7} {p50:>7.0f} {p90:>7.0f} {p99:>7.0f} {(m1-m0)/dt:>10.0f} {(c1-c0)/dt*100:>9.1f} {(c1-c0)/msgs*1e6:>10.1f} {rss:>7}", flush=True)
        stop.set()
        if lp:
            lp.join(10)
            if lp.is_alive(): lp.kill()
        time.sleep(1.0)
finally:
    for p in procs:
        kill(p)
    for c in mp.active_children():
        c.kill()
