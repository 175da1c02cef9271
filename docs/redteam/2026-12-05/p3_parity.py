#!/usr/bin/env python3
"""T2: the same hostile WebSocket inputs against the p2 echo guest and the p3 echo guest.
usage: p3_parity.py   (needs /tmp/rt17/bin/tether, echo.wasm, echo-p3.wasm)"""
import sys, os, time, subprocess, signal, socket, threading
sys.path.insert(0, os.path.dirname(__file__))
from common import *
import wsraw
def start(guest, extra=()):
    err = f"/tmp/rt17/logs/parity_{os.path.basename(guest)}.err"
    p = subprocess.Popen(["/tmp/rt17/bin/tether", "run", guest, "--listen", "127.0.0.1:*", *extra, "--",
                          "server", "127.0.0.1:0", "--tcp", "127.0.0.1:0"], stdout=subprocess.DEVNULL, stderr=open(err, "w"))
    m = wait_line(err, r"listening on 127.0.0.1:(\d+)"); ws = int(m.group(1))
    m = wait_line(err, r"listening for TCP on 127.0.0.1:(\d+)"); tcp = int(m.group(1))
    return p, ws, tcp
def ping_flood(port):
    s, rest = wsraw.connect("127.0.0.1", port); r = wsraw.Reader(s, rest)
    ping = wsraw.frame(9) * 1000; s.setblocking(False); t = time.time(); sent = 0
    while time.time() - t < 6:
        try: sent += s.send(ping)
        except BlockingIOError: time.sleep(0.001)
        except OSError: break
    s.setblocking(True)
    # drain pongs looking for the close
    return r.until_close(5), sent
def frag_flood(port, n):
    s, rest = wsraw.connect("127.0.0.1", port); r = wsraw.Reader(s, rest)
    data = wsraw.frame(2, b"", fin=False) + wsraw.frame(0, b"", fin=False) * (n - 1)
    try: s.sendall(data)
    except OSError: pass
    return r.until_close(5)
def big_then_echo(port, size):
    s, rest = wsraw.connect("127.0.0.1", port); r = wsraw.Reader(s, rest)
    s.sendall(wsraw.frame(2, b"x" * size)); t = time.time()
    s.settimeout(10)
    op, fin, p = r.read()
    return op, len(p), time.time() - t
def bad_utf8(port):
    s, rest = wsraw.connect("127.0.0.1", port); r = wsraw.Reader(s, rest)
    s.sendall(wsraw.frame(1, b"\xff\xfe")); return r.until_close(5)
def too_big(port):
    s, rest = wsraw.connect("127.0.0.1", port); r = wsraw.Reader(s, rest)
    s.sendall(wsraw.frame(2, b"", fin=False)[:2] ); # partial
    s.sendall(b"\x00\x00\x00\x00")  # mask of the empty first frame
    s.sendall(b"\x00\xff" + (1 << 30).to_bytes(8, "big") + b"\x00"*4)
    return r.until_close(5)
for guest in ["/tmp/rt17/bin/echo.wasm", "/tmp/rt17/bin/echo-p3.wasm"]:
    p, ws, tcp = start(guest, ["--max-message-bytes", str(16 << 20)])
    c0 = cpu(p.pid)
    print(os.path.basename(guest))
    print("  big 8 MiB echo:", big_then_echo(ws, 8 << 20))
    print("  16,385 empty fragments:", frag_flood(ws, 16385))
    print("  16,384 empty fragments then final:", end=" ")
    s, rest = wsraw.connect("127.0.0.1", ws); r = wsraw.Reader(s, rest)
    s.sendall(wsraw.frame(2, b"", fin=False) + wsraw.frame(0, b"", fin=False) * 16382 + wsraw.frame(0, b"ok", fin=True)); s.settimeout(5)
    print(r.read()[::2])
    print("  bad utf8 text:", bad_utf8(ws))
    print("  2^30 continuation (max 16 MiB):", too_big(ws))
    (res, sent) = ping_flood(ws)
    print(f"  ping flood: close={res} bytes sent={sent}")
    print(f"  host cpu {cpu(p.pid)-c0:.2f}s rss {rss_mib(p.pid):.0f} MiB")
    p.send_signal(signal.SIGKILL); p.wait()
