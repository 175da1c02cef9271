"""OPENs whose URL is as long as a JMUX message allows (65521 bytes): denied, invalid,
unresolvable. Does the answer fit, is the session kept, and with the peer not reading?"""
import sys, struct, time
from jm import *
EPORT = target("echo")
p, s, out = start_jmux()
r = Reader(s)
m = open_echo(s, r, 0, EPORT); gid = struct.unpack("!I", m[1][4:8])[0]
L = 65535 - 4 - 10
urls = {"denied": b"tcp://" + b"a" * (L - 6 - 3) + b":80",
        "invalid": b"x" * L,
        "badport": b"tcp://127.0.0.1:" + b"9" * (L - 16),
        "ipv6ish": b"tcp://" + b":" * (L - 6)}
cid = 10
for k, u in urls.items():
    assert len(u) == L, (k, len(u))
    s.sendall(OPEN(cid, u))
    ans, got = r.until(lambda m: m[0] in (101, 102) and struct.unpack("!I", m[1][:4])[0] == cid, 5)
    print(k, "answer:", None if not ans else (ans[0], len(ans[1])), "alive", p.poll() is None, flush=True)
    cid += 1
# flood of long denied OPENs while not reading: 2000 x 64 KB = 128 MB
t0 = time.time(); st0 = status(p.pid)
sent = 0
s.settimeout(0.5)
try:
    for i in range(2000):
        s.sendall(OPEN(1000 + i, urls["denied"])); sent += 1
except Exception as e:
    print("send stopped after", sent, repr(e))
st1 = status(p.pid)
print("not reading, sent", sent, "OPENs in", round(time.time() - t0, 1), "s:", st0, "->", st1, flush=True)
# now read everything
n = 0; t1 = time.time()
s.settimeout(None)
while True:
    mm = r.next(2)
    if mm is None or mm == "EOF": break
    if mm[0] == 102: n += 1
    if n and n % 500 == 0:
        pass
print("answers read:", n, "in", round(time.time() - t1, 1), "s; status", status(p.pid) if p.poll() is None else "exited")
print("log:", [l.decode(errors='replace')[:150] for l in out][-5:])
kill(p)
