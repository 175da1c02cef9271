"""Does a bidirectional bulk transfer through one JMUX channel ever stall
because a WINDOW ADJUST stays queued behind a full sender (see
jmux_stranded_answers.py)? The peer sends only within the credit the guest
grants, reads every echo, and reports any gap of more than 2 s without
progress. A stall ends only when the peer sends something (we send nothing).
Usage: timeout 120 nice -n 19 python3 jmux_bulk_stall.py [MiB] [rounds] [window]
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt3")
from rt import kill
from jm import start_jmux, OPEN, DATA, Reader, target

MIB = int(sys.argv[1]) if len(sys.argv) > 1 else 64
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 3
OURWIN = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20
echo = target("echo")
for rnd in range(ROUNDS):
    p, s, out = start_jmux()
    r = Reader(s)
    s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}", window=OURWIN, maxp=4096))
    t, body = r.next(5); assert t == 101, t
    gid, window = struct.unpack("!II", body[4:12])
    st = {"credit": window, "echoed": 0, "last": time.time(), "stall": 0.0, "adjusts": 0}
    cv = threading.Condition()
    total = MIB << 20
    from jm import WADJ
    def rd():
        since = 0
        while st["echoed"] < total:
            m = r.next(30)
            if m is None: return
            t, b = m
            with cv:
                if t == 103:
                    st["credit"] += struct.unpack("!I", b[4:8])[0]; st["adjusts"] += 1; cv.notify()
                elif t == 104:
                    st["echoed"] += len(b) - 4; since += len(b) - 4
                    if since >= 32768:
                        s.sendall(WADJ(gid, since)); since = 0   # give the guest back its credit
                st["last"] = time.time()
    th = threading.Thread(target=rd, daemon=True); th.start()
    sent = 0; t0 = time.time(); chunk = b"q" * 4088
    while sent < total:
        with cv:
            while st["credit"] < len(chunk):
                if not cv.wait(2):
                    gap = time.time() - st["last"]
                    print(f"  round {rnd}: no credit and no message for {gap:.1f} s; sent {sent>>10} KiB, echoed {st['echoed']>>10} KiB, credit {st['credit']}")
                    if gap > 6: break
            if st["credit"] < len(chunk): break
            st["credit"] -= len(chunk)
        s.sendall(DATA(gid, chunk)); sent += len(chunk)
    th.join(15)
    el = time.time() - t0
    print(f"round {rnd}: sent {sent>>20} MiB, echoed {st['echoed']>>20} MiB in {el:.2f} s, {st['adjusts']} adjusts; {'STALLED' if st['echoed'] < total else 'ok'}", flush=True)
    kill(p)
