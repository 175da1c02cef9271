"""Log forging through a JMUX OPEN's host name: the guest logs refused OPENs with the
target as the peer sent it. Newlines / CR / ANSI escapes in the host part.
Runs `tether jmux` with --allow 127.0.0.1:* (guest filter refuses) and with
--allow-all (the host's dial refuses or fails). stderr to a file.
Usage: timeout 60 nice -n 19 python3 jmux_log_forge.py
"""
import sys, socket, time, subprocess
sys.path.insert(0, "/work/rt5")
from rt import TETHER, kill
from jm import OPEN, Reader, free_port
URLS = ["tcp://x\njmux: pipe accepted from 203.0.113.9:4444\nzz:9",
        "tcp://x\rtether: SIGTERM: shutting down\n.y:9",
        "tcp://a\x1b[2J\x1b[31mRED\x1b[0m.b:9",
        "tcp://a\x00b:9",
        "tcp://a b\tc:9"]
for rules in (["--allow", "127.0.0.1:*"], ["--allow-all"]):
    port = free_port(); path = "/work/rt5/out/logforge.log"; log = open(path, "wb")
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", *rules], stdout=log, stderr=log)
    for _ in range(100):
        try: s = socket.create_connection(("127.0.0.1", port)); break
        except OSError: time.sleep(0.1)
    r = Reader(s)
    for i, u in enumerate(URLS): s.sendall(OPEN(10 + i, u))
    ans = []
    while len(ans) < len(URLS):
        m = r.next(15)
        if m is None: break
        if m[0] in (101, 102): ans.append(m[1][8:].decode(errors="replace")[:90])
    time.sleep(0.5); kill(p); log.close()
    print("== rules", rules, "answers:", ans)
    for l in open(path, "rb").read().split(b"\n"): print("   ", repr(l)[:170])
