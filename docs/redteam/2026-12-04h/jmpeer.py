"""Slow JMUX peer: opens N channels to a streaming target, then reads the pipe
at RATE bytes/s (0 = as fast as possible) for SECS; prints tether CPU per MiB."""
import socket, struct, sys, time, os, json, subprocess, resource
RECV = int(os.environ.get("RECV", 1 << 18))
TETHER = "/tmp/rt13/tether"
def msg(t, body): return struct.pack("!BHB", t, 4 + len(body), 0) + body
def OPEN(cid, url, window, maxp): return msg(100, struct.pack("!IIH", cid, window, maxp) + url.encode())
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
def run(n, src, phases, maxp=16384):
    port = free_port()
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"],
                         stdout=subprocess.DEVNULL, stderr=open(f"/tmp/rt13/exp/jmux_{n}.log", "wb"))
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1); break
            except OSError: time.sleep(0.1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
        for i in range(n):
            s.sendall(OPEN(i, f"tcp://127.0.0.1:{src}", 0x7fffffff, maxp))
        # read until N OPEN SUCCESS seen (data may interleave)
        buf = b""; ok = 0; s.settimeout(20)
        while ok < n:
            c = s.recv(1 << 20)
            if not c: raise RuntimeError("pipe closed")
            buf += c
            while len(buf) >= 4:
                t, ln, _ = struct.unpack("!BHB", buf[:4])
                if len(buf) < ln: break
                if t == 101: ok += 1
                elif t == 102: raise RuntimeError("open failed")
                buf = buf[ln:]
        out = {"n": n}
        for name, rate, secs in phases:
            got = 0; c0 = cpu(p.pid); t0 = time.time()
            while True:
                now = time.time()
                if now - t0 >= secs: break
                if rate and got > rate * (now - t0):
                    time.sleep(min(0.002, got / rate - (now - t0))); continue
                got += len(s.recv(RECV))
            el = time.time() - t0; dc = cpu(p.pid) - c0
            out[name] = {"MiB_s": round(got / el / 2**20, 1), "cpu_pct": round(100 * dc / el, 1),
                         "cpu_ms_per_MiB": round(1000 * dc / max(got / 2**20, 1e-9), 2)}
        return out
    finally:
        p.kill(); p.wait()
if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    src = int(sys.argv[1]); ns = [int(x) for x in sys.argv[2].split(",")]; reps = int(sys.argv[3])
    rate = float(sys.argv[4]) * 2**20 if len(sys.argv) > 4 else 8 * 2**20
    phases = [("slow", rate, 5.0)] + ([("fast", 0, 4.0)] if os.environ.get("FAST") else [])
    for r in range(reps):
        for n in ns:
            print(json.dumps(run(n, src, phases)), flush=True)
