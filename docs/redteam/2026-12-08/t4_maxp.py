"""Max packet size edge values on a peer's OPEN (guest dials a streaming target), fast pipe read 4 s.
Then the same through OPEN SUCCESS: a guest listener's client streams, the peer answers the guest's OPEN."""
import sys, time, json, threading
sys.path.insert(0, "/tmp/rt18")
from jpeer import *
src = Targets("source")
secs = 4
for maxp in [0, 1, 8, 9, 10, 12, 4096, 65535]:
    p, tpid, port = start_tether(log=f"/tmp/rt18/out/t4_{maxp}.log")
    try:
        s = connect(port, 1 << 18); r = Reader(s)
        s.sendall(OPEN(0, f"tcp://127.0.0.1:{src.port}", 0x7fffffff, maxp))
        r.until_opened(1, timeout=5)
        c0 = cpu(tpid); t0 = time.time()
        while time.time() - t0 < secs:
            r.recv(1 << 20, timeout=0.2)
        el = time.time() - t0
        gid = r.opened.get(0)
        print(json.dumps({"path": "OPEN", "maxp": maxp, "opened": gid is not None, "failed": str(r.failed.get(0)),
                          "MiB_s": round(r.per.get(gid, 0) / el / 2**20, 2), "msgs": r.types.get(104, 0),
                          "cpu_pct": round(100 * (cpu(tpid) - c0) / el, 1), "alive": p.poll() is None}), flush=True)
    finally:
        stop(p)
# OPEN SUCCESS path: guest listener
for maxp in [8, 9, 4096, 65535]:
    lp = free_port()
    p, tpid, port = start_tether(extra=(f"tcp-listen://127.0.0.1:{lp}/127.0.0.1:9",), log=f"/tmp/rt18/out/t4_os_{maxp}.log")
    try:
        s = connect(port, 1 << 18); r = Reader(s)
        for _ in range(100):
            if subprocess.run(["ss", "-ltnH", f"sport = :{lp}"], capture_output=True, text=True).stdout.strip(): break
            time.sleep(0.05)
        cl = socket.create_connection(("127.0.0.1", lp))
        def pump():
            blob = b"c" * 65536
            try:
                while True: cl.sendall(blob)
            except OSError: pass
        threading.Thread(target=pump, daemon=True).start()
        # wait for guest OPEN (type 100)
        t0 = time.time(); opened = None
        while time.time() - t0 < 5 and opened is None:
            s.settimeout(1); c = s.recv(65536)
            if c[:1] == b"\x64":
                sid = struct.unpack("!I", c[4:8])[0]; opened = sid
        s.sendall(OPEN_OK(opened, 77, 0x7fffffff, maxp))
        r = Reader(s); c0 = cpu(tpid); t0 = time.time()
        while time.time() - t0 < secs:
            r.recv(1 << 20, timeout=0.2)
        el = time.time() - t0
        print(json.dumps({"path": "OPEN_SUCCESS", "maxp": maxp, "MiB_s": round(r.per.get(77, 0) / el / 2**20, 2),
                          "msgs": r.types, "cpu_pct": round(100 * (cpu(tpid) - c0) / el, 1), "alive": p.poll() is None}), flush=True)
        cl.close()
    finally:
        stop(p)
