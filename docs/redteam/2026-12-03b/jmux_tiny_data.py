"""Many tiny DATA messages (1-byte payloads, 9 bytes each) on one channel to a
discarding target, against the same bytes in 4088-byte DATA: guest CPU per MB
and bytes per second reaching the target. Window handled (we honour adjusts).
Usage: timeout 120 nice -n 19 python3 jmux_tiny_data.py
"""
import sys, socket, struct, time, threading
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, Reader

def sink():
    ls = socket.socket(); ls.bind(("127.0.0.1", 0)); ls.listen(8)
    got = [0]
    def acc():
        while True:
            c, _ = ls.accept()
            def rd(c=c):
                while True:
                    d = c.recv(1 << 20)
                    if not d: return
                    got[0] += len(d)
            threading.Thread(target=rd, daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    return ls.getsockname()[1], got

def run(payload, total):
    port, got = sink()
    p, s, out = start_jmux()
    r = Reader(s)
    s.sendall(OPEN(0, f"tcp://127.0.0.1:{port}"))
    t, body = r.next(5); assert t == 101
    gid, window = struct.unpack("!II", body[4:12])
    credit = [window]; lock = threading.Condition()
    def adj():
        while True:
            m = r.next(30)
            if m is None: return
            if m[0] == 103:
                with lock: credit[0] += struct.unpack("!I", m[1][4:8])[0]; lock.notify()
    threading.Thread(target=adj, daemon=True).start()
    msg = DATA(gid, b"z" * payload)
    batch = max(1, 65536 // len(msg))
    c0 = status(p.pid)["cpu_s"]; t0 = time.time(); sent = 0
    while sent < total:
        n = batch * payload
        with lock:
            while credit[0] < n: lock.wait(5)
            credit[0] -= n
        s.sendall(msg * batch); sent += n
    while got[0] < total and time.time() - t0 < 60: time.sleep(0.05)
    el = time.time() - t0; cpu = status(p.pid)["cpu_s"] - c0
    print(f"payload {payload:5} B: {total/1e6:.1f} MB in {el:.2f} s ({total/el/1e6:.2f} MB/s), guest process CPU {cpu:.2f} s = {cpu/(total/1e6):.3f} s/MB, target got {got[0]}, rss {status(p.pid)['rss_mib']} MiB")
    kill(p)

run(4088, 64 << 20)
run(1, 2 << 20)
