"""A1d: the header checks still hold with control frames interleaved (max_message_bytes 4 MiB here):
3.9 MiB of fragments with a pong after each 60 KiB, then a continuation declaring 1 MiB (past 4 MiB): 1009
before its payload? Also: a 126-byte pong, a continuation with no message, a new binary inside a message."""
import sys, time
sys.path.insert(0, "/work/rt2")
from rt import *
p, port = start_echo(extra=["--max-message-bytes", str(4 << 20)]); out = drain_output(p)
def case(name, data):
    s, _, _ = ws_connect(port); t0 = time.time(); s.sendall(data)
    f = read_frame(s, timeout=3)
    print(f"{name:44} -> {('close %s' % close_code(f[2])[0]) if f and f[0] == 8 else f and ('op%d' % f[0])} in {(time.time()-t0)*1000:.0f} ms", flush=True)
    s.close()
try:
    frag = b"\x00" * (60 << 10); pong = frame(10, b"")
    body = frame(2, frag, fin=False) + pong + b"".join(frame(0, frag, fin=False) + pong for _ in range(65))
    case("66 x 60 KiB + pongs, then cont. declaring 1 MiB", body + frame(0, length=1 << 20, fin=False))
    case("pong of 126 bytes (header only)", frame(10, length=126))
    case("continuation with no message (header only)", frame(0, length=1 << 20, fin=False))
    case("binary inside a fragmented one (header only)", frame(2, b"a", fin=False) + pong + frame(2, length=1 << 20))
finally:
    kill(p)
