"""Hostile input grab bag against one tether jmux session each:
 data_after_eof / data_after_close: does the target receive bytes the peer sent after its EOF / CLOSE?
 reuse: CLOSE then at once OPEN with the same sender id, 500 rounds: leaks / wrong routing?
 open_flood: 2,000 OPENs (half to a closed port) without reading the pipe for 5 s: CPU, RSS, then all answered?
 halfclose: 500 channels to silent targets, peer EOF on all, never CLOSE: CPU/RSS over 5 s.
 oversize: DATA over our max packet (4096) but within window; window_exceeded: DATA past window."""
import sys, time, json
sys.path.insert(0, "/tmp/rt18")
from jpeer import *

class Rec(Targets):
    pass
got = {}
def rec_kind(i): return "rec"
ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1); ls.bind(("127.0.0.1", 0)); ls.listen(2048)
REC = ls.getsockname()[1]; recv_bytes = {"n": 0, "conns": 0, "eof": 0}
def rec_acc():
    while True:
        c, _ = ls.accept(); recv_bytes["conns"] += 1
        def serve(c):
            while True:
                try: d = c.recv(65536)
                except OSError: return
                if not d: recv_bytes["eof"] += 1; return
                recv_bytes["n"] += len(d)
        threading.Thread(target=serve, args=(c,), daemon=True).start()
threading.Thread(target=rec_acc, daemon=True).start()
closed_port = free_port()
idle = Targets("idle")

def session(tag):
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t7_{tag}.log")
    s = connect(port, 1 << 18); return p, tpid, s, Reader(s)

def drain(r, secs):
    t0 = time.time()
    while time.time() - t0 < secs:
        try: r.recv(1 << 20, timeout=0.1)
        except EOFError: return "pipe closed"
    return "open"

for case in sys.argv[1:]:
    p, tpid, s, r = session(case)
    out = {"case": case}
    try:
        if case in ("data_after_eof", "data_after_close"):
            recv_bytes["n"] = 0
            s.sendall(OPEN(0, f"tcp://127.0.0.1:{REC}", 1 << 20, 4096)); r.until_opened(1); g = r.opened[0]
            s.sendall(DATA(g, b"a" * 100) + (EOF(g) if case == "data_after_eof" else CLOSE(g)) + DATA(g, b"b" * 1000) + EOF(g) + CLOSE(g) + DATA(g, b"c" * 1000))
            out["pipe"] = drain(r, 1.5); out["target_got"] = recv_bytes["n"]; out["types"] = dict(r.types)
        elif case == "reuse":
            recv_bytes["n"] = 0; c0 = cpu(tpid); wrong = 0
            for k in range(500):
                s.sendall(OPEN(7, f"tcp://127.0.0.1:{REC}", 1 << 20, 4096))
                t0 = time.time()
                while 7 not in r.opened and time.time() - t0 < 3: r.recv(timeout=0.5)
                g = r.opened.pop(7, None)
                if g is None: out["stuck_at"] = k; out["failed"] = str(r.failed.get(7)); break
                s.sendall(DATA(g, b"z" * 10) + CLOSE(g))
            out["pipe"] = drain(r, 1.5); out["target_bytes"] = recv_bytes["n"]; out["types"] = dict(r.types)
            out["cpu_s"] = round(cpu(tpid) - c0, 2); out["rss_MiB"] = rss(tpid)
            # now can we still open 1000 (leak of ids in use?)
            for i in range(1000): s.sendall(OPEN(10000 + i, f"tcp://127.0.0.1:{idle.port}", 1 << 16, 4096))
            r.until_opened(len(r.opened) + 1000, timeout=20)
            out["after_1000_opens_ok"] = sum(1 for k in r.opened if k >= 10000); out["fails"] = len(r.failed)
        elif case == "open_flood":
            rss0 = rss(tpid); c0 = cpu(tpid)
            s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{REC if i % 2 else closed_port}", 1 << 20, 4096) for i in range(2000)))
            time.sleep(5)
            out["cpu_5s_unread"] = round(cpu(tpid) - c0, 2); out["rss_MiB"] = [rss0, rss(tpid)]
            t0 = time.time()
            while len(r.opened) + len(r.failed) < 2000 and time.time() - t0 < 20: r.recv(1 << 20, timeout=0.5)
            out["answered"] = [len(r.opened), len(r.failed)]; out["reasons"] = sorted({str(v[1][:40]) for v in r.failed.values()})[:4]
        elif case == "halfclose":
            rss0 = rss(tpid)
            for i in range(500): s.sendall(OPEN(i, f"tcp://127.0.0.1:{idle.port}", 1 << 20, 4096))
            r.until_opened(500)
            for i in range(500): s.sendall(EOF(r.opened[i]))
            c0 = cpu(tpid); drain(r, 5)
            out["cpu_5s"] = round(cpu(tpid) - c0, 2); out["rss_MiB"] = [rss0, rss(tpid)]; out["types"] = dict(r.types)
        elif case == "oversize":
            recv_bytes["n"] = 0
            s.sendall(OPEN(0, f"tcp://127.0.0.1:{REC}", 1 << 20, 4096)); r.until_opened(1); g = r.opened[0]
            s.sendall(DATA(g, b"o" * 65000) * 10)
            out["pipe"] = drain(r, 1.5); out["target_got"] = recv_bytes["n"]
        elif case == "window_exceeded":
            s.sendall(OPEN(0, f"tcp://127.0.0.1:{REC}", 1 << 20, 4096)); r.until_opened(1); g = r.opened[0]
            win = r.opened and None
            s.sendall(DATA(g, b"w" * 60000) * 40)
            out["pipe"] = drain(r, 2); out["types"] = dict(r.types)
        out["alive"] = p.poll() is None
        print(json.dumps(out), flush=True)
    finally:
        stop(p)
