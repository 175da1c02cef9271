"""Rust/Node host, echo guest: host CPU per wire byte for the cheapest framing the fragment rule allows
vs plain one-frame messages. Modes: plain | fine16 (fragments of 16 bytes) | front (one big first frame, then
empty continuation frames up to the allowance: 1024 + size/16) | edge (exactly the allowance, then one more).
usage: frag_cpu.py HOST MODE MSGS MSGBYTES"""
import sys, time, socket, threading
sys.path.insert(0, "/tmp/rt16")
from rt import start, ws_connect, frame, status, kill, read_frame, close_code
host, mode, msgs, size = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
p, port = start(host); time.sleep(0.5)
s, _, rest = ws_connect(port)
got = [0, None]
def drain():
    s2 = s; buf = rest
    while True:
        try: c = s2.recv(1 << 20)
        except OSError: break
        if not c: break
        got[0] += len(c)
        if b"\x88" in c[:2]: got[1] = c[:40]
th = threading.Thread(target=drain, daemon=True); th.start()
def message():
    pl = b"\x00" * size
    if mode == "plain": return frame(2, pl)
    if mode == "fine16":
        parts = [frame(2, pl[:16], fin=False)] + [frame(0, pl[i:i+16], fin=False) for i in range(16, size - 16, 16)]
        return b"".join(parts) + frame(0, pl[size-16:], fin=True)
    if mode in ("front", "edge"):
        allow = 1024 + size // 16          # frames allowed, the first one is not counted as a continuation? try both
        n = allow - 1 if mode == "front" else allow + 1
        return frame(2, pl, fin=False) + frame(0, b"", fin=False) * (n - 1) + frame(0, b"", fin=True)
m = message(); wire = len(m) * msgs
c0 = status(p.pid)["cpu_s"]; t0 = time.time()
for _ in range(msgs): s.sendall(m)
deadline = time.time() + 40
while got[0] < size * msgs * 0.999 and time.time() < deadline and got[1] is None: time.sleep(0.05)
c1 = status(p.pid)["cpu_s"]
print(f"{host} {mode}: {msgs} x {size} B, wire {wire/1e6:.1f} MB ({wire/(size*msgs):.2f} per payload byte), echoed {got[0]/1e6:.1f} MB, "
      f"host cpu {c1-c0:.2f} s = {(c1-c0)*1e9/wire:.2f} ns/wire byte, {(c1-c0)*1e9/(size*msgs):.2f} ns/payload byte, {time.time()-t0:.1f} s"
      + (f" CLOSE {got[1]!r}" if got[1] else ""), flush=True)
s.close(); kill(p)
