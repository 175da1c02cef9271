"""Does the per-source channel count leak? Side A: socks5 + http + tcp listeners, --max-channels-per-source 8,
--half-close-timeout-ms 1000 (both sides). From 127.0.0.1, batches of channels that end in different ways; after
each batch (and a wait past the 5 s linger) the source must still get exactly 8 channels at once (9th refused).

Usage: timeout 170 nice -n 19 python3 cap_leak.py [REPS]"""
import sys, os, time, socket, struct, collections, threading
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from t9 import *

REPS = int(sys.argv[1]) if len(sys.argv) > 1 else 60
targs = ["--half-close-timeout-ms", "1000"]
echo, silent, closed = Target("echo"), Target("silent"), Target("closed")
# a target whose accept queue is full: connects hang
hang = socket.socket(); hang.bind(("127.0.0.1", 0)); hang.listen(0)
fill = [socket.socket() for _ in range(4)]
for f in fill:
    f.setblocking(False)
    try: f.connect(("127.0.0.1", hang.getsockname()[1]))
    except BlockingIOError: pass
T = Tunnel(a_args=targs + ["--max-channels-per-source", "8"], b_args=targs, listeners=("socks5", "http", "tcp"), tcp_target=echo.port)
SP, HP, LP = T.ports["socks5"], T.ports["http"], T.ports["tcp"]


def socks_to(ip, port, src="127.0.0.1"):
    s = socket.socket(); s.bind((src, 0)); s.settimeout(5); s.connect(("127.0.0.1", SP))
    s.sendall(b"\x05\x01\x00"); s.recv(2)
    s.sendall(b"\x05\x01\x00\x01" + socket.inet_aton(ip) + struct.pack("!H", port))
    return s


def capacity():
    held, c = [], collections.Counter()
    for _ in range(9):
        s, why = socks("127.0.0.1", SP, echo.port); c[why] += 1
        if s: held.append(s)
    for s in held: s.close()
    return dict(c)


def rst(s):
    s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0)); s.close()


def batch(name, fn, n=REPS, wait=6.5):
    c = collections.Counter(); t0 = time.time()
    for i in range(n):
        try:
            c[fn(i)] += 1
        except OSError as e:
            c[type(e).__name__] += 1
    time.sleep(wait)
    cap = capacity()
    print(f"{name:<44} x{n}: {dict(c)}; then capacity: {cap}", flush=True)
    return cap


def f_notallowed(i):
    s = socks_to("127.0.0.2", echo.port); r = s.recv(10); s.close(); return f"rep={r[1] if len(r) > 1 else '?'}"
def f_refused(i):
    s = socks_to("127.0.0.1", closed.port); r = s.recv(10); s.close(); return f"rep={r[1] if len(r) > 1 else '?'}"
def f_rst(i):
    s, why = socks("127.0.0.1", SP, echo.port)
    if s: echo_ok(s); rst(s)
    return why
def f_rst_at_once(i):
    s = socks_to("127.0.0.1", echo.port); rst(s); return "sent+rst"
def f_close(i):
    s, why = socks("127.0.0.1", SP, echo.port)
    if s: echo_ok(s); s.close()
    return why
def f_hang_leave(i):
    s = socks_to("127.0.0.1", hang.getsockname()[1]); time.sleep(0.01); s.close(); return "left"
def f_hc(i):
    s, why = socks("127.0.0.1", SP, silent.port)
    if s: s.shutdown(socket.SHUT_WR); hc_held.append(s)
    return why
def f_http(i):
    s, why = http_connect("127.0.0.1", HP, echo.port)
    if s: echo_ok(s); s.close()
    return why
def f_plain(i):
    s, _ = http_plain("127.0.0.1", HP, echo.port)
    try: s.recv(100)
    except OSError: pass
    s.close(); return "plain"
def f_plain_rst(i):
    s, _ = http_plain("127.0.0.1", HP, echo.port); rst(s); return "plain+rst"
def f_tcp(i):
    s, _ = tcpl("127.0.0.1", LP); ok = echo_ok(s); s.close(); return "echo" if ok else "no echo"
def f_tcp_rst(i):
    s, _ = tcpl("127.0.0.1", LP); rst(s); return "rst"
def f_over(i):
    hs = []
    for _ in range(12):
        s, why = socks("127.0.0.1", SP, echo.port)
        if s: hs.append(s)
    for s in hs: s.close()
    return f"held {len(hs)} of 12"


hc_held = []
print("# cap 8 per source; baseline capacity:", capacity(), flush=True)
batch("peer refuses (not allowed)", f_notallowed)
batch("peer refuses (connection refused)", f_refused)
batch("echo, then client RST", f_rst)
batch("request then RST before the reply", f_rst_at_once)
batch("echo, then close", f_close)
batch("target hangs, client leaves before answer", f_hang_leave, n=20, wait=13)
batch("half-closed to silent target (timeout)", f_hc, n=8, wait=4)
batch("HTTP CONNECT, echo, close", f_http)
batch("HTTP plain GET, close", f_plain)
batch("HTTP plain GET, RST", f_plain_rst)
batch("tcp-listen echo, close", f_tcp)
batch("tcp-listen, RST at once", f_tcp_rst)
batch("12 at once (4 refused by the cap)", f_over, n=10)
for s in hc_held: s.close()
print("A:", status(T.A.pid), "B:", status(T.B.pid))
T.close()
