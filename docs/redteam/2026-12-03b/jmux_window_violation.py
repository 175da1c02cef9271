"""DATA beyond the granted window (and a WINDOW ADJUST overflow first) with
100 channels open: does the session end cleanly, freeing every target socket?
Usage: timeout 60 nice -n 19 python3 jmux_window_violation.py
"""
import sys, socket, struct, time
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, WADJ, Reader, target
echo = target("echo")
def sink():
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    ls.bind(("127.0.0.1", 0)); ls.listen(256); held = []
    import threading
    def acc():
        while True: held.append(ls.accept()[0])
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1]
echo = sink()
p, s, out = start_jmux()
r = Reader(s)
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{echo}", window=1 << 20) for i in range(100)))
ids = []
while len(ids) < 100:
    t, b = r.next(5)
    if t == 101: ids.append(struct.unpack("!II", b[4:12]))
print("100 open:", status(p.pid))
gid, win = ids[0]
s.sendall(WADJ(gid, 0xFFFFFFFF) * 3)
chunk = b"v" * 4088
n = (8 << 20) // 4088
s.sendall(DATA(gid, chunk) * n)   # past the window
time.sleep(2)
print("exit code:", p.poll(), "| log:", b"".join(out[-3:]).decode(errors="replace").strip())
if p.poll() is None: print("after:", status(p.pid))
kill(p)
