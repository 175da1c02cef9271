"""Finding: every wake-up of the JMUX guest costs O(target connects in flight),
and a hostile pipe peer decides how many (up to --max-channels = 1024).

A raw JMUX peer on `tether jmux tcp-listen://` opens one channel to an echo
target and measures 32 B round trips on it; then it sends N OPENs to a
loopback listener whose accept queue is full (listen(0), never accepts), so
each connect hangs in SYN retransmits until the host's 10 s connect timeout,
and measures the same round trips again while those N connects are in flight.
Usage: timeout 120 nice -n 19 python3 jmux_pending_connects_scale.py pending|idle [N...]
(idle: the N channels go to the echo target and stay open, idle: the control run)
"""
import sys, socket, struct, time
sys.path.insert(0, "/work/rt3")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, Reader, target

def rtts(s, r, gid, n):
    out = []
    payload = b"x" * 32
    for _ in range(n):
        t = time.perf_counter()
        s.sendall(DATA(gid, payload))
        got = 0
        while got < 32:
            m = r.next(5)
            if m is None: raise RuntimeError("no echo")
            t_, body = m
            if t_ == 104:
                got += len(body) - 4
        out.append((time.perf_counter() - t) * 1e6)
    out.sort()
    return out[len(out)//2], out[int(len(out)*0.99)]

MODE = sys.argv[1] if len(sys.argv) > 1 else "pending"
def main():
    Ns = [int(a) for a in sys.argv[2:]] or [0, 250, 1000]
    echo = target("echo")
    bh = socket.socket(); bh.bind(("127.0.0.1", 0)); bh.listen(0); bh_port = bh.getsockname()[1]
    fill = socket.create_connection(("127.0.0.1", bh_port))  # fills the accept queue
    IDLE_TARGET = bh_port if MODE == "pending" else echo
    p, s, out = start_jmux()
    r = Reader(s)
    s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}"))
    t, body = r.next(5)
    assert t == 101, (t, body)
    gid = struct.unpack("!I", body[4:8])[0]
    rtts(s, r, gid, 200)  # warm up
    next_id = 1
    print(f"{'N pending':>10} {'p50 us':>9} {'p99 us':>9} {'guest CPU ms per RT':>20} {'idle CPU % (2 s)':>17}")
    for n in Ns:
        if n:
            s.sendall(b"".join(OPEN(next_id + i, f"tcp://127.0.0.1:{IDLE_TARGET}") for i in range(n)))
            next_id += n
            time.sleep(0.5)
        c0 = status(p.pid)["cpu_s"]; t0 = time.time()
        time.sleep(2)
        idle = (status(p.pid)["cpu_s"] - c0) / (time.time() - t0) * 100
        c0 = status(p.pid)["cpu_s"]
        K = 1000
        p50, p99 = rtts(s, r, gid, K)
        cpu = (status(p.pid)["cpu_s"] - c0) / K * 1000
        print(f"{n:>10} {p50:>9.0f} {p99:>9.0f} {cpu:>20.3f} {idle:>17.1f}", flush=True)
        # let the pending connects time out (host connect_timeout 10 s) and be refused
        deadline = time.time() + 14
        while time.time() < deadline:
            m = r.next(0.5)
    st = status(p.pid)
    print("final", st)
    kill(p)
    print("guest log lines:", len(out), b"".join(out[-3:]).decode(errors="replace"))

main()
