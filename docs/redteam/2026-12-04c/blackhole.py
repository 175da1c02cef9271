"""JMUX fair share vs channels whose OPEN is never answered in time: K sources x N SOCKS5 clients to a target
whose connects hang (a listener with a full accept queue: SYNs dropped) until side B's connect timeout (10 s).
Such channels are neither quiet nor idle (Session::quiet_since: phase != Open), so they cannot be given up.
Each attacker socket is held, and reopened as soon as its SOCKS5 reply comes (the refusal at B's connect timeout). A legitimate client on 127.0.0.9 (echo target)
tries 20 channels at several times. Usage: timeout 110 python3 blackhole.py N SRC1 [SRC2 ...]"""
import sys, os, time, collections, threading, socket, struct, selectors
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rt3  # noqa: E402  (the snapshot's binaries)
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *

N, SRCS = int(sys.argv[1]), sys.argv[2:]
A_ARGS = os.environ.get("A_ARGS", "--max-channels-per-source 256").split()
echo = Target("echo")
BH, _blackhole = rt3.blackhole()
time.sleep(0.3)
T = Tunnel(a_args=A_ARGS, listeners=("socks5",))
SP = T.ports["socks5"]
REQ = b"\x05\x01\x00" + b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", BH)

def legit(n=20):
    return rt3.legit(SP, echo.port, n)

sel = selectors.DefaultSelector(); lock = threading.Lock(); stats = collections.Counter(); stop = False
def open_one(src):
    s = socket.socket(); s.bind((src, 0)); s.setblocking(True); s.settimeout(2)
    try:
        s.connect(("127.0.0.1", SP)); s.sendall(REQ); assert s.recv(2) == b"\x05\x00"
    except OSError:
        s.close(); stats["connect failed"] += 1; return
    s.setblocking(False)
    with lock: sel.register(s, selectors.EVENT_READ, src)
def pump():
    while not stop:
        with lock: ev = sel.select(0.05) if sel.get_map() else []
        for key, _ in ev:
            s, src = key.fileobj, key.data
            try: d = s.recv(64)
            except OSError: d = b""
            with lock: sel.unregister(s)
            s.close()
            stats["reply " + (d[2:4].hex() if len(d) >= 4 else "closed")] += 1
            if not stop: open_one(src)   # at once again
        if not ev: time.sleep(0.01)

print(f"# {os.environ['TETHER']} blackhole target N={N} sources={SRCS} A_ARGS={A_ARGS}", flush=True)
print("baseline legit:", legit(), flush=True)
t0 = time.time()
for src in SRCS:
    for _ in range(N): open_one(src)
print(f"attackers opened {len(sel.get_map())} in {time.time()-t0:.1f} s", flush=True)
threading.Thread(target=pump, daemon=True).start()
for at in (3, 9, 15, 25, 40):
    while time.time() - t0 < at: time.sleep(0.1)
    print(f"t={at:>2} s legit: {legit()} attacker refusals so far {dict(stats)}", flush=True)
print("A:", status(T.A.pid), "B:", status(T.B.pid))
print("A log tail:", T.log("A", 4)[-500:])
print("B log tail:", T.log("B", 4)[-500:])
stop = True
T.close()
