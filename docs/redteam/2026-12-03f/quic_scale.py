"""QUIC echo guest, server listen mode: a live QUIC connection's round trip
(measured by a quic-echo client guest, rtt:K:32) and the server's CPU while
N other WebSocket connections are open on the same server.
MODE idle: the N connections send nothing. MODE garbage: each sends one
binary message of 64 random bytes (a garbage datagram) after connecting.
MODE trickle: the N connections together send R garbage datagrams/s.

Usage: timeout 300 nice -n 19 python3 quic_scale.py MODE [N...]
"""
import sys, os, socket, time, subprocess, resource, re, threading, select
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import status, kill, ws_connect, frame, drain_output

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
B = os.environ.get("B", "/work/rt7/bin"); TETHER = B + "/tether"; Q = "/work/rt6/q"
MODE = sys.argv[1]
NS = [int(a) for a in sys.argv[2:]] or [0, 100, 1000]
R = int(os.environ.get("R", "500"))
K = int(os.environ.get("K", "2000"))
cert = open(f"{Q}/leaf.hex").read().strip(); key = open(f"{Q}/key.hex").read().strip(); ca = open(f"{Q}/ca.hex").read().strip()

def pre():
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))

HOSTK = os.environ.get("HOST", "rust")
NODE = "/work/main/target/peers/node/bin/node"
srv_host = [TETHER, "run", f"{B}/quic-echo.wasm", "--listen", "127.0.0.1:*"] if HOSTK == "rust" else \
    [NODE, "--experimental-wasm-jspi", "/work/rt7/node/bin/tether-node.mjs", "run", f"{B}/quic-echo.wasm",
     "--listen", "127.0.0.1:*", "--cache", "/work/rt7/node-cache", *os.environ.get("HOSTFLAGS", "").split()]
srv = subprocess.Popen([*srv_host, "--",
                        "server", "listen", "127.0.0.1:0", "--cert", cert, "--key", key, *os.environ.get("EXTRA", "").split()],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
port = None
try:
    for _ in range(200):
        line = srv.stdout.readline()
        m = re.search(rb"listening 127\.0\.0\.1:(\d+)", line)
        if m:
            port = int(m.group(1)); break
    out = drain_output(srv)

    def client_rtt():
        c0 = status(srv.pid)["cpu_s"]; t0 = time.time()
        r = subprocess.run([TETHER, "run", f"{B}/quic-echo.wasm", "--allow", f"127.0.0.1:{port}", "--",
                            "client", f"ws://127.0.0.1:{port}/", "--ca", ca, f"rtt:{K}:32"],
                           capture_output=True, timeout=120)
        dt = time.time() - t0; c1 = status(srv.pid)["cpu_s"]
        xs = None; hs = None
        for l in r.stdout.decode().splitlines():
            if l.startswith("rtt "):
                xs = sorted(int(v) / 1000 for v in l.split()[2:])
            if l.startswith("handshake "):
                hs = int(l.split()[1]) / 1e6
        if not xs:
            raise RuntimeError(r.stdout[-500:] + r.stderr[-500:])
        xs = xs[50:] if len(xs) > 100 else xs  # drop warm-up
        xs.sort()
        return hs, xs[len(xs)//2], xs[int(len(xs)*.9)], xs[int(len(xs)*.99)], (c1 - c0), dt

    conns = []
    stop = threading.Event()
    def trickle():
        f = frame(2, os.urandom(64)); i = 0; t0 = time.perf_counter(); sent = 0
        while not stop.is_set():
            due = int((time.perf_counter() - t0) * R) - sent
            for _ in range(min(due, 100)):
                if conns:
                    try: conns[i % len(conns)].send(f)
                    except OSError: pass
                    i += 1
                sent += 1
            # drain whatever comes back
            if conns:
                rl, _, _ = select.select(conns[:500], [], [], 0.002)
                for s in rl:
                    try: s.recv(65536)
                    except OSError: pass
            else:
                time.sleep(0.002)
    print(f"# host={HOSTK} quic-echo server listen, mode={MODE} (R={R}/s if trickle), client rtt:{K}:32 (us)", flush=True)
    print(f"{'N other':>7} {'hs ms':>6} {'p50 us':>7} {'p90 us':>7} {'p99 us':>7} {'srv cpu s':>9} {'cpu us/RT':>9} {'wall s':>6} {'rss':>5}", flush=True)
    th = None
    for n in NS:
        while len(conns) < n:
            s, _, _ = ws_connect(port)
            if MODE == "garbage":
                s.sendall(frame(2, os.urandom(64)))
            s.setblocking(False)
            conns.append(s)
        if MODE == "trickle" and th is None and n > 0:
            th = threading.Thread(target=trickle, daemon=True); th.start()
        time.sleep(1.5)
        hs, p50, p90, p99, cpu, dt = client_rtt()
        print(f"{n:>7} {hs:>6.1f} {p50:>7.0f} {p90:>7.0f} {p99:>7.0f} {cpu:>9.2f} {cpu/K*1e6:>9.0f} {dt:>6.1f} {status(srv.pid)['rss_mib']:>5}", flush=True)
    stop.set()
    tail = b"".join(out[-20:])
    print("# server output tail:", tail[-600:].decode(errors="replace"))
finally:
    kill(srv)
