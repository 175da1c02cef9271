"""DATA past the guest's advertised window on one channel (target never reads, tiny rcvbuf):
does the guest end only that channel or the whole session?"""
import struct, time, socket, threading
from jm import *
EPORT = target("echo")
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
ls.bind(("127.0.0.1", 0)); ls.listen(8); SINK = ls.getsockname()[1]
held = []
threading.Thread(target=lambda: [held.append(ls.accept()) for _ in range(8)], daemon=True).start()
p, s, out = start_jmux()
r = Reader(s)
m = open_echo(s, r, 0, EPORT); gid = struct.unpack("!I", m[1][4:8])[0]
s.sendall(OPEN(9, f"tcp://127.0.0.1:{SINK}"))
ans, _ = r.until(lambda m: m[0] == 101 and struct.unpack("!I", m[1][:4])[0] == 9)
g9 = struct.unpack("!I", ans[1][4:8])[0]; win = struct.unpack("!I", ans[1][8:12])[0]
print("sink channel window", win)
sent = 0; blob = DATA(g9, b"B" * 60000)
s.settimeout(2)
try:
    while sent < win + 4 * 2**20:
        s.sendall(blob); sent += 60000
        # swallow any WINDOW ADJUSTs so we know the true credit
except Exception as e: print("send stopped", repr(e))
time.sleep(1)
s.settimeout(3)
try:
    s.sendall(DATA(gid, b"ctrl-after"))
except Exception as e: print("ctrl send failed", e)
got = r.until(lambda m: m[0] == 104 and struct.unpack("!I", m[1][:4])[0] == 0, 3)
print("sent", sent, "bytes on the sink channel; ctrl echo:", got[0] is not None, "| alive", p.poll() is None)
adj = sum(struct.unpack("!I", x[1][4:8])[0] for x in got[1] if x != "EOF" and x[0] == 103)
print("window adjusts granted during", adj, "| last msgs", [x if x == "EOF" else x[0] for x in got[1][-5:]])
print("log:", [l.decode(errors='replace')[:200] for l in out if b"listening" not in l][-4:])
kill(p)
