"""A raw JMUX peer (tcp-listen pipe) that OPENs channels to a silent target, sends EOF and never CLOSE.
The guest has --half-close-timeout-ms 1000 --max-channels 16. What is freed at the timeout?

Usage: timeout 60 nice -n 19 python3 raw_peer_eof.py"""
import sys, os, time, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from t9 import Target, status
from jm import start_jmux, OPEN, EOF, CLOSE, Reader
from rt import kill

tg = Target("silent"); echo = Target("echo")
p, s, out = start_jmux(["--half-close-timeout-ms", "1000", "--max-channels", "16"])
r = Reader(s)
seen = {"succ": {}, "fail": {}, "close": set(), "eof": set()}
def pump(t=0.3):
    end = time.time() + t
    while time.time() < end:
        m = r.next(0.1)
        if not m: continue
        k, b = m
        if k == 101: rid, sid = struct.unpack("!II", b[:8]); seen["succ"][rid] = sid
        elif k == 102: rid, reason = struct.unpack("!II", b[:8]); seen["fail"][rid] = reason
        elif k == 106: seen["close"].add(struct.unpack("!I", b[:4])[0])
        elif k == 105: seen["eof"].add(struct.unpack("!I", b[:4])[0])
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{tg.port}") for i in range(16)))
pump(2)
print(f"16 OPENs: {len(seen['succ'])} OPEN SUCCESS, {len(seen['fail'])} FAILURE; target accepted {tg.accepted}", flush=True)
s.sendall(b"".join(EOF(seen["succ"][i]) for i in seen["succ"]))
t0 = time.time(); pump(4)
print(f"EOF sent on each, never CLOSE; after {time.time()-t0:.1f} s: CLOSE from the guest on {len(seen['close'])}; target saw FIN on {tg.eof}", flush=True)
print(f"guest fds {status(p.pid)['fds']}; target sockets the proxy closed (probe): {tg.probe_closed()} of {len(tg.held)}", flush=True)
seen["succ2"] = {}
before = dict(seen["succ"]); seen["succ"] = {}; seen["fail"] = {}
s.sendall(b"".join(OPEN(100 + i, f"tcp://127.0.0.1:{echo.port}") for i in range(4)))
pump(2)
print(f"4 new OPENs while the 16 wait for our CLOSE: {len(seen['succ'])} SUCCESS, {len(seen['fail'])} FAILURE", flush=True)
time.sleep(10); pump(0.5)
print(f"10 s later: guest fds {status(p.pid)['fds']}", flush=True)
s.sendall(b"".join(CLOSE(before[i]) for i in before))
pump(1.5); seen["succ"] = {}; seen["fail"] = {}
s.sendall(b"".join(OPEN(200 + i, f"tcp://127.0.0.1:{echo.port}") for i in range(4)))
pump(2)
print(f"after our CLOSEs: 4 new OPENs: {len(seen['succ'])} SUCCESS, {len(seen['fail'])} FAILURE; guest fds {status(p.pid)['fds']}", flush=True)
print("log:", b"".join(out[-4:]).decode(errors="replace")[-600:])
kill(p)
