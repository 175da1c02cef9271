"""Shared by this round's scripts: the snapshot's binaries, a legitimate SOCKS5 client, a target whose
connects hang."""
import os, sys, time, socket, collections
os.environ.setdefault("TETHER", "/work/rt10/tether")
os.environ["G"] = "/work/rt10"; os.environ["JMUX_WASM"] = "/work/rt10/jmux.wasm"
sys.path.insert(0, "/work/main/docs/redteam/2026-12-04")
from t9 import socks, echo_ok  # noqa: E402


def legit(sp, echo_port, n=20):
    """n SOCKS5 channels from 127.0.0.9 through the listener at sp to an echo target: outcome counts
    ("ok": opened and 4 bytes echoed, "rep=1": SOCKS5 general failure)."""
    c = collections.Counter()
    for _ in range(n):
        try:
            s, why = socks("127.0.0.9", sp, echo_port)
            if s:
                why = "ok" if echo_ok(s) else "no echo"; s.close()
        except OSError as e:
            why = type(e).__name__
        c[why] += 1; time.sleep(0.02)
    return dict(c)


def blackhole():
    """A listener whose accept queue is full, so connects to it hang (SYNs dropped): (its port, sockets
    to keep)."""
    bh = socket.socket(); bh.bind(("127.0.0.1", 0)); bh.listen(0)
    fill = [socket.socket() for _ in range(2)]
    for f in fill:
        f.setblocking(False)
        try: f.connect(("127.0.0.1", bh.getsockname()[1]))
        except BlockingIOError: pass
    return bh.getsockname()[1], [bh, *fill]
