"""A8: what one accepted echo connection can make the host hold, at default limits: one complete 63 MiB
message echoed (the frame buffers stay), then an unfinished 63 MiB message with a pong after each 60 KiB
fragment (not charged to max_assembling_bytes). usage: ws_worst_per_connection.py K"""
import sys, time
sys.path.insert(0, "/work/rt2")
from rt import *
K = int(sys.argv[1])
p, port = start_echo(); out = drain_output(p)
try:
    time.sleep(0.3); b = status(p.pid); print("baseline", b, flush=True)
    big = frame(2, b"\x01" * (63 << 20)); frag = b"\x00" * (60 << 10); pong = frame(10, b"")
    held = []
    for i in range(K):
        s, _, _ = ws_connect(port); s.sendall(big); r = read_frame(s, timeout=30)
        s.sendall(frame(2, frag, fin=False) + pong + b"".join(frame(0, frag, fin=False) + pong for _ in range(1074)))
        time.sleep(0.5); a = status(p.pid)
        print(f"peer {i}: echo {len(r[2]) >> 20} MiB, then 63 MiB unfinished: rss {a['rss_mib']} MiB", flush=True)
        held.append(s)
    a = status(p.pid)
    print(f"{K} connections: rss {b['rss_mib']} -> {a['rss_mib']} MiB (+{a['rss_mib']-b['rss_mib']}, {(a['rss_mib']-b['rss_mib'])/K:.0f} MiB each); README bound per stream: 64 KiB + inbound 1 MiB (+ the shared 256 MiB budget)")
    for s in held: s.close()
    time.sleep(1); print("after close", status(p.pid))
finally:
    kill(p)
