"""A1: a control frame between fragments resets the stream's max_assembling_bytes count.
K peers each send an unfinished fragmented binary message of M MiB in F-KiB fragments (under the 64 KiB
allowance); with CTRL=pong (or ping) a control frame follows every fragment, with CTRL=none nothing.
Expected (README limits table): past max_assembling_bytes (default 256 MiB) + 64 KiB/stream the reading
stream gets 1013. Measures host RSS/HWM and whether each peer got a close frame.
usage: ws_ctrl_reset.py K M F CTRL [extra tether args...]"""
import sys, time, select
sys.path.insert(0, "/work/rt2")
from rt import *
K, M, F, CTRL = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
extra = sys.argv[5:]
p, port = start_echo(extra=extra, wasm=os.environ.get("WASM", "echo.wasm"))
out = drain_output(p)
def closed_code(s):
    r, _, _ = select.select([s], [], [], 0)
    if not r: return None
    f = read_frame(s, timeout=0.5)
    if f is None: return "eof"
    return close_code(f[2])[0] if f[0] == 8 else f"op{f[0]}"
try:
    time.sleep(0.3); b = status(p.pid); print("baseline", b, flush=True)
    frag = b"\x00" * (F << 10); n = (M << 20) // len(frag)
    ctrl = {"pong": frame(10, b""), "ping": frame(9, b""), "none": b""}[CTRL]
    held = []
    t0 = time.time()
    for i in range(K):
        s, _, _ = ws_connect(port); s.settimeout(10)
        s.sendall(frame(2, frag, fin=False) + ctrl)
        err = None
        try:
            for j in range(n - 1):
                s.sendall(frame(0, frag, fin=False) + ctrl)
        except OSError as e:
            err = repr(e)
        time.sleep(0.3)
        a = status(p.pid)
        print(f"peer {i}: sent {n*len(frag)>>20} MiB {('err '+err) if err else ''} close={closed_code(s)} rss {a['rss_mib']} hwm {a['hwm_mib']} MiB", flush=True)
        held.append(s)
    time.sleep(1); a = status(p.pid)
    print(f"{K} peers x {M} MiB ({CTRL}): rss {b['rss_mib']} -> {a['rss_mib']} MiB (+{a['rss_mib']-b['rss_mib']}), hwm {a['hwm_mib']} MiB, cpu {a['cpu_s']:.2f}s, {time.time()-t0:.1f}s", flush=True)
    print("closes:", [closed_code(s) for s in held])
    c, _, _ = ws_connect(port); c.sendall(frame(2, b"hi")); r = read_frame(c); print("other client echo:", r and r[2])
    for s in held: s.close()
    time.sleep(1); print("after close", status(p.pid))
finally:
    kill(p)
    print("log tail:", b"".join(out).decode(errors="replace").splitlines()[-3:])
