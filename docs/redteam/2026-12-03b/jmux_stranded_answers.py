"""Finding: answers beyond the JMUX sender's 64 KiB stay queued until the peer
sends more input. The peer sends a burst of M OPENs, all refused (by the
guest's --allow filter: an ordinary, non-abusive case), then waits; we count
the OPEN FAILUREs that arrive within 5 s, then send one harmless message
(WINDOW ADJUST for an unknown id) and count again.
Usage: timeout 60 nice -n 19 python3 jmux_stranded_answers.py [M]
"""
import sys, socket, struct, time, threading, os
sys.path.insert(0, "/work/rt3")
from rt import kill
from jm import start_jmux, OPEN, WADJ

M = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
p, s, out = start_jmux()
s.settimeout(None)
counts = {}; nbytes = [0]; buf = bytearray(); last = [time.time()]
def reader():
    global buf
    while True:
        c = s.recv(1 << 20)
        if not c: break
        buf += c
        while len(buf) >= 4:
            t, n, f = struct.unpack("!BHB", buf[:4])
            if len(buf) < n: break
            counts[t] = counts.get(t, 0) + 1; nbytes[0] += n
            del buf[:n]
        last[0] = time.time()
threading.Thread(target=reader, daemon=True).start()
s.sendall(b"".join(OPEN(i, "tcp://127.0.0.2:8080") for i in range(M)))
time.sleep(5)
print(f"{M} OPENs to a target outside --allow: {counts.get(102,0)} OPEN FAILUREs ({nbytes[0]} bytes) after 5 s; {M-counts.get(102,0)} unanswered")
for k in range(3):
    s.sendall(WADJ(10**6, 1)); time.sleep(1)
    print(f"after {k+1} more input message(s): {counts.get(102,0)} answered")
kill(p)
