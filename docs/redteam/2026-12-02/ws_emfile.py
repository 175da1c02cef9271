"""T3: the echo server guest under RLIMIT_NOFILE=N; M peers connect (M > N). Does the host refuse cleanly
(no accept spin), keep serving the connections it holds, and recover once peers leave?"""
import sys, time
sys.path.insert(0, "/work/redteam")
from rt import *
N = int(sys.argv[1]) if len(sys.argv) > 1 else 64
M = int(sys.argv[2]) if len(sys.argv) > 2 else 120
p, port = start_echo(nofile=N)
out = drain_output(p)
try:
    time.sleep(0.5); b = status(p.pid); print("baseline", b)
    first, _, _ = ws_connect(port)
    held, failed = [], 0
    raw = []
    for i in range(M):
        try:
            s, _, _ = ws_connect(port, timeout=1); held.append(s)
        except Exception as e:
            failed += 1
            if failed <= 2: print("connect", i, "failed:", repr(e)[:120])
    print(f"upgraded {len(held)} of {M}, failed {failed}")
    a0 = status(p.pid); time.sleep(5); a1 = status(p.pid)
    print(f"over the limit for 5 s: host cpu {a1['cpu_s']-a0['cpu_s']:.2f} s, {a1}")
    t0 = time.time(); first.sendall(frame(2, b"still?")); r = read_frame(first, timeout=5)
    print("held client echo:", r and r[2], f"{(time.time()-t0)*1000:.1f} ms")
    for s in held: s.close()
    time.sleep(2)
    try:
        s, _, _ = ws_connect(port); s.sendall(frame(2, b"new")); r = read_frame(s)
        print("after release, new client echo:", r and r[2])
    except Exception as e:
        print("after release, new client FAILED:", e)
    print("end", status(p.pid))
finally:
    kill(p)
    lines = b"".join(out).decode(errors="replace").splitlines()
    warn = [l for l in lines if "accept failed" in l]
    print(f"log: {len(warn)} 'accept failed' lines in total ({len(lines)} lines); first: {warn[0][:120] if warn else None}")
