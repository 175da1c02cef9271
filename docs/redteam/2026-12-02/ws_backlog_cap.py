"""T1d: how many never-accepted peers can hold an unfinished message? Guest: probe ws-serve-hold
(accepts one). K peers try to upgrade (1 s timeout) and each sends a 4 MiB unfinished message."""
import sys, time, subprocess
sys.path.insert(0, "/work/redteam")
from rt import *
from jm import free_port
K = int(sys.argv[1]) if len(sys.argv) > 1 else 80
port = free_port()
p = subprocess.Popen([TETHER, "run", f"{G}/probe.wasm", "--listen", "127.0.0.1:*", "--", "ws-serve-hold", f"127.0.0.1:{port}", "0"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
try:
    for _ in range(50):
        try: first, _, _ = ws_connect(port); break
        except OSError: time.sleep(0.1)
    time.sleep(0.3); b = status(p.pid)
    mib = b"\x00" * (1 << 20); up, fail, held = 0, 0, []
    for i in range(K):
        try:
            s, _, _ = ws_connect(port, timeout=1)
        except Exception as e:
            fail += 1; continue
        up += 1; s.settimeout(3)
        s.sendall(frame(2, b"", fin=False) + b"".join(frame(0, mib, fin=False) for _ in range(4)))
        held.append(s)
    time.sleep(1); a = status(p.pid)
    print(f"{K} peers: {up} upgraded, {fail} not; rss +{a['rss_mib']-b['rss_mib']} MiB ({(a['rss_mib']-b['rss_mib'])/max(up,1):.1f} MiB per upgraded peer)")
finally:
    kill(p)
