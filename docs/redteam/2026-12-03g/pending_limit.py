"""Echo guest server (WASM env: echo.wasm or echo-p3.wasm) under --readiness-set-entries LIMIT:
C idle WebSocket clients connect (each holds one pending receive wait / readiness registration).
Then a legitimate client tries to connect and echo. Prints whether the guest survived.
Usage: timeout 120 nice -n 19 python3 pending_limit.py LIMIT C"""
import sys, os, time, socket
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import start_echo, status, kill, ws_connect, frame, read_frame, drain_output
LIMIT, C = int(sys.argv[1]), int(sys.argv[2])
from jm import HOSTK, NODE, NODE_HOST, NODE_CACHE, free_port
import subprocess
if HOSTK == "rust":
    p, port = start_echo(extra=["--readiness-set-entries", str(LIMIT)], nofile=20000)
else:
    port = free_port()
    p = subprocess.Popen([NODE, "--experimental-wasm-jspi", NODE_HOST, "run", "/work/rt8/bin/" + os.environ.get("WASM", "echo.wasm"), "--listen", "127.0.0.1:*",
                          "--cache", NODE_CACHE, "--readiness-set-entries", str(LIMIT), "--", "server", f"127.0.0.1:{port}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        try: socket.create_connection(("127.0.0.1", port), timeout=1).close(); break
        except OSError: time.sleep(0.1)
out = drain_output(p)
def legit():
    try:
        s, _, rest = ws_connect(port, timeout=3)
        t0 = time.perf_counter(); s.sendall(frame(2, b"hello"))
        r = read_frame(s, rest, timeout=3); s.close()
        return f"echo {r[2] if r else None!r} in {(time.perf_counter()-t0)*1e6:.0f} us"
    except Exception as e:
        return f"FAILED: {type(e).__name__}: {e}"
print(f"# host={HOSTK} {os.environ.get('WASM','echo.wasm')} --readiness-set-entries {LIMIT}, {C} idle clients", flush=True)
print("before:", legit(), status(p.pid), flush=True)
held = []; errs = {}
for i in range(C):
    try:
        s, _, _ = ws_connect(port, timeout=3); held.append(s)
    except Exception as e:
        k = f"{type(e).__name__}: {str(e)[:60]}"; errs[k] = errs.get(k, 0) + 1
    if p.poll() is not None:
        print(f"guest exited after {i+1} clients, code {p.returncode}", flush=True); break
time.sleep(0.5)
print(f"{len(held)} idle clients connected, errors {errs}; guest alive: {p.poll() is None}", flush=True)
# do the held clients still echo?
ok = 0
for s in held[:5] + held[-5:]:
    try:
        s.sendall(frame(2, b"x")); r = read_frame(s, timeout=2); ok += bool(r and r[0] == 2)
    except Exception:
        pass
print(f"echo on 10 of the held clients (5 first, 5 last): {ok}/10", flush=True)
print("legit after:", legit(), "alive:", p.poll() is None, flush=True)
for s in held: s.close()
time.sleep(1)
print("legit after the idle ones left:", legit(), "alive:", p.poll() is None, flush=True)
print("log:", b"".join(out[-6:]).decode(errors="replace"), flush=True)
kill(p)
