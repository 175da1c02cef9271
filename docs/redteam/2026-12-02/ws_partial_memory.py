"""T1: K peers each hold an unfinished fragmented message of X MiB (no FIN) on one echo server guest.
Measures host RSS. Question: is a peer's unfinished message bounded by --inbound-buffer-bytes (1 MiB),
or only by --max-message-bytes (64 MiB) per connection, with no bound on connections?"""
import sys, time
sys.path.insert(0, "/work/redteam")
from rt import *

K = int(sys.argv[1]) if len(sys.argv) > 1 else 6
X = int(sys.argv[2]) if len(sys.argv) > 2 else 48  # MiB
mode = sys.argv[3] if len(sys.argv) > 3 else "frag"   # frag | oneframe
p, port = start_echo()
out = drain_output(p)
try:
    time.sleep(0.5)
    print("baseline", status(p.pid))
    socks = []
    chunk = b"\x00" * (1 << 20)
    for i in range(K):
        s, _, _ = ws_connect(port)
        if mode == "frag":
            s.sendall(frame(2, b"", fin=False))
            for _ in range(X):
                s.sendall(frame(0, chunk, fin=False))
        else:  # one frame declaring X MiB + 1 byte, send X MiB of it
            s.sendall(frame(2, length=X * (1 << 20) + 1))
            for _ in range(X):
                s.sendall(chunk)
        socks.append(s)
        time.sleep(0.3)
        print(f"after conn {i+1}: {status(p.pid)}", flush=True)
    time.sleep(1)
    print("held", status(p.pid))
    # another client still served?
    s, _, _ = ws_connect(port)
    t0 = time.time()
    s.sendall(frame(2, b"hello"))
    r = read_frame(s)
    print("other client echo:", r and r[2], f"{(time.time()-t0)*1000:.1f} ms")
    for s in socks:
        s.close()
    time.sleep(1.5)
    print("after close", status(p.pid))
finally:
    kill(p)
    print("guest output:", b"".join(out)[-500:])
