"""Sustained version of jmux_refused_hold_slots.py: one far-side client streams
OPENs to a target outside --allow (chunks of 100, as fast as the pipe takes them),
another sends a legit OPEN to a live echo every 20 ms (and CLOSEs it on success);
both share the pipe (message boundaries kept). Counts the legit OPENs' outcomes.
Phase 1 without the attack (baseline), phase 2 with it. tcp-listen pipe.
Usage: timeout 90 nice -n 19 python3 jmux_refused_stream.py [SECS]
"""
import sys, socket, struct, time, threading, collections
sys.path.insert(0, "/work/rt5")
from rt import kill, status
from jm import start_jmux, OPEN, CLOSE, Reader, target
SECS = float(sys.argv[1]) if len(sys.argv) > 1 else 8
echo = target("echo")
p, s, out = start_jmux(); r = Reader(s)
wl = threading.Lock(); legit = {}; res = collections.Counter(); lat = []; stop = threading.Event(); closes = []
def send(b):
    with wl: s.sendall(b)
def reader():
    while True:
        m = r.next(30)
        if m is None: return
        if m[0] in (101, 102):
            cid = struct.unpack("!I", m[1][:4])[0]
            if cid in legit:
                lat.append(time.time() - legit.pop(cid))
                if m[0] == 101: res["SUCCESS"] += 1; closes.append(struct.unpack("!I", m[1][4:8])[0])
                else: res["FAILURE " + m[1][8:40].decode(errors="replace")] += 1
threading.Thread(target=reader, daemon=True).start()
nid = [1 << 20]
def attack():
    while not stop.is_set():
        b = b"".join(OPEN(nid[0] + i, "tcp://10.1.2.3:9") for i in range(100)); nid[0] += 100
        send(b)
def phase(label, with_attack):
    res.clear(); lat.clear(); stop.clear()
    if with_attack: th = threading.Thread(target=attack, daemon=True); th.start()
    c0 = status(p.pid)["cpu_s"]; t0 = time.time(); k = 0
    while time.time() - t0 < SECS:
        cid = 1 + (k % 100000); k += 1
        cl = b"".join(CLOSE(closes.pop()) for _ in range(len(closes)))
        legit[cid] = time.time(); send(cl + OPEN(cid, f"tcp://127.0.0.1:{echo}")); time.sleep(0.02)
    stop.set(); time.sleep(1.5)
    lat.sort()
    print(f"{label:18s} legit OPENs {k}: {dict(res)} unanswered {len(legit)}; p50 {lat[len(lat)//2]*1e3 if lat else 0:.1f} ms; "
          f"tether CPU {status(p.pid)['cpu_s']-c0:.1f}s; log lines {len(out)}", flush=True)
    legit.clear()
phase("baseline", False)
phase("with attack", True)
kill(p)
