"""A10: log lines of `tether jmux ... http-listen://` per client that connects and closes at once (K clients)."""
import sys, time, subprocess
sys.path.insert(0, "/work/rt2")
from jm import *
K = int(sys.argv[1])
pp, hp = free_port(), free_port()
srv = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{pp}", "--allow", "127.0.0.1:1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
so = drain_output(srv); time.sleep(1)
cli = subprocess.Popen([TETHER, "jmux", f"tcp://127.0.0.1:{pp}", f"http-listen://127.0.0.1:{hp}"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
co = drain_output(cli)
for _ in range(100):
    try: socket.create_connection(("127.0.0.1", hp), timeout=1).close(); break
    except OSError: time.sleep(0.1)
try:
    n0 = len(co); a0 = status(cli.pid); t0 = time.time()
    for i in range(K):
        s = socket.create_connection(("127.0.0.1", hp)); s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close()
    time.sleep(1); a1 = status(cli.pid)
    lines = b"".join(co[n0:]).decode(errors="replace").splitlines()
    import collections
    print(f"{K} connect+RST in {time.time()-t0:.1f}s: {len(lines)} log lines, cpu {a1['cpu_s']-a0['cpu_s']:.2f}s; {collections.Counter(l[:60] for l in lines).most_common(3)}")
finally:
    kill(cli); kill(srv)
