"""Host CPU per refused WebSocket connect (503: source at max_connections_per_source), against connects that
close at once with no data (a handshake that ends Closed) and full upgrade+close, 10k each.
Usage: timeout 110 python3 cpu503.py [N]"""
import sys, os, time, socket, struct, re, subprocess, resource, threading
sys.path.insert(0, "/work/main/docs/redteam/2026-12-03g")
resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
import rt
N = int(sys.argv[1]) if len(sys.argv) > 1 else 10000
p = subprocess.Popen(["/work/rt10/tether", "run", "/work/rt10/echo.wasm", "--listen", "127.0.0.1:*", "--max-connections-per-source", "1",
                      "--", "server", "127.0.0.1:0"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
ws = None
while ws is None:
    m = re.search(r"listening on 127\.0\.0\.1:(\d+)", p.stdout.readline().decode())
    if m: ws = int(m.group(1))
out = rt.drain_output(p)
hold = rt.ws_connect(ws, source="127.0.0.31")[0]

def run(src, what, n, threads=4):
    got = {}
    lock = threading.Lock()
    def w(k):
        for i in range(k):
            s = socket.socket(); s.bind((src, 0))
            s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            try:
                s.connect(("127.0.0.1", ws))
                if what == "recv":
                    s.settimeout(5); d = s.recv(64)[:12]
                elif what == "upgrade":
                    s.close(); s = rt.ws_connect(ws, source=src)[0]; d = b"101"
                else:
                    d = b"closed at once"
            except OSError as e:
                d = type(e).__name__.encode()
            s.close()
            with lock: got[d] = got.get(d, 0) + 1
    c0 = rt.status(p.pid)["cpu_s"]; t0 = time.time()
    ts = [threading.Thread(target=w, args=(n // threads,)) for _ in range(threads)]
    [t.start() for t in ts]; [t.join() for t in ts]
    time.sleep(0.5)
    c1 = rt.status(p.pid)["cpu_s"]; dt = time.time() - t0
    print(f"{what:8} from {src}: {n} in {dt:.1f} s ({n/dt:.0f}/s), host CPU {c1-c0:.2f} s = {(c1-c0)/n*1e6:.0f} us each; answers {got}", flush=True)

print("# /work/rt10/tether, bound 1; 127.0.0.31 holds one upgraded connection", flush=True)
run("127.0.0.31", "recv", N)       # refused: 503
run("127.0.0.32", "close", N)      # counted, not full: accept, handshake task, closed by the client at once
run("127.0.0.33", "upgrade", N // 5, threads=1)  # full upgrade then close (one at a time, bound 1)
print("status", rt.status(p.pid))
p.terminate(); p.wait(5)
