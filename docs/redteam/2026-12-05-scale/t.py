"""Slow JMUX peer (from 2026-12-04h jmpeer.py): opens N channels to a streaming target,
reads the pipe at RATE MiB/s in RECV-byte reads; prints tether user/sys CPU per MiB,
context switches per MiB, and (PERF=stat|record) runs perf on tether during the phase."""
import socket, struct, sys, time, os, json, subprocess, resource, glob
RECV = int(os.environ.get("RECV", 16384))
PERF = os.environ.get("PERF", "")
TETHER = os.environ.get("TETHER", "/tmp/sc2/bin/tether")
def msg(t, body): return struct.pack("!BHB", t, 4 + len(body), 0) + body
def OPEN(cid, url, window, maxp): return msg(100, struct.pack("!IIH", cid, window, maxp) + url.encode())
def free_port():
    s = socket.socket(); s.bind(("127.0.0.1", 0)); p = s.getsockname()[1]; s.close(); return p
def cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    t = os.sysconf("SC_CLK_TCK"); return int(f[11]) / t, int(f[12]) / t
def ctx(pid):
    v = nv = 0
    for st in glob.glob(f"/proc/{pid}/task/*/status"):
        try:
            for l in open(st):
                if l.startswith("voluntary_ctxt_switches"): v += int(l.split()[1])
                elif l.startswith("nonvoluntary_ctxt_switches"): nv += int(l.split()[1])
        except OSError: pass
    return v, nv
def run(n, src, rate, secs, tag):
    port = free_port()
    env = dict(os.environ)
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"],
                         stdout=subprocess.DEVNULL, stderr=open(f"/tmp/sc2/exp/jmux_{n}.log", "wb"), env=env)
    perf = None
    try:
        for _ in range(100):
            try:
                s = socket.create_connection(("127.0.0.1", port), timeout=1); break
            except OSError: time.sleep(0.1)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 18)
        for i in range(n):
            s.sendall(OPEN(i, f"tcp://127.0.0.1:{src}", 0x7fffffff, 16384))
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
        out = {"n": n, "recv": RECV, "rate": rate / 2**20}
        out["cpu_setup_ms"] = round(1000 * sum(cpu(p.pid)), 0)
        out["rss_setup_MiB"] = [int(l.split()[1]) // 1024 for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0]
        PH = os.environ.get("PHASES")
        phases = [(f"w{i}", float(PH.split("x")[1])) for i in range(int(PH.split("x")[0]))] if PH else [("warm", float(os.environ.get("WARM", "1"))), ("meas", secs)]
        for phase, secs_ in phases:
            if phase == os.environ.get("PERF_PHASE", "meas") and PERF:
                if PERF == "stat":
                    perf = subprocess.Popen(["perf", "stat", "-x,", "-o", f"/tmp/sc2/exp/stat_{tag}.txt", "-e",
                        os.environ.get("PERF_EVENTS", "") + "raw_syscalls:sys_enter,syscalls:sys_enter_epoll_wait,syscalls:sys_enter_read,syscalls:sys_enter_write,syscalls:sys_enter_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_enter_futex,syscalls:sys_enter_writev,syscalls:sys_enter_readv,syscalls:sys_enter_epoll_ctl",
                        "-p", str(p.pid), "--", "sleep", str(secs_)], stderr=subprocess.DEVNULL)
                else:
                    perf = subprocess.Popen(["perf", "record", "-F", "4000", "-g", "-p", str(p.pid), "-o",
                        f"/tmp/sc2/exp/perf_{tag}.data", "--", "sleep", str(secs_)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            got = 0; c0 = cpu(p.pid); x0 = ctx(p.pid); t0 = time.time()
            while True:
                now = time.time()
                if now - t0 >= secs_: break
                if rate and got > rate * (now - t0):
                    time.sleep(min(0.002, got / rate - (now - t0))); continue
                got += len(s.recv(RECV))
            el = time.time() - t0; c1 = cpu(p.pid); x1 = ctx(p.pid)
            mib = max(got / 2**20, 1e-9)
            rss = [int(l.split()[1]) // 1024 for l in open(f"/proc/{p.pid}/status") if l.startswith("VmRSS")][0]
            if phase.startswith("w") and PH:
                out[phase] = [rss, round(got / el / 2**20, 1), round(1000 * (c1[0] + c1[1] - c0[0] - c0[1]) / mib, 2)]
            if phase == "meas":
                out.update({"MiB_s": round(got / el / 2**20, 2),
                    "usr_ms_MiB": round(1000 * (c1[0] - c0[0]) / mib, 2),
                    "sys_ms_MiB": round(1000 * (c1[1] - c0[1]) / mib, 2),
                    "cpu_ms_MiB": round(1000 * (c1[0] + c1[1] - c0[0] - c0[1]) / mib, 2),
                    "cpu_pct": round(100 * (c1[0] + c1[1] - c0[0] - c0[1]) / el, 1),
                    "vcsw_per_MiB": round((x1[0] - x0[0]) / mib), "nvcsw_per_MiB": round((x1[1] - x0[1]) / mib)})
        if perf: perf.wait(timeout=30)
        return out
    finally:
        p.kill(); p.wait()
if __name__ == "__main__":
    resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
    src = int(sys.argv[1]); ns = [int(x) for x in sys.argv[2].split(",")]; reps = int(sys.argv[3])
    rate = float(sys.argv[4]) * 2**20; secs = float(sys.argv[5]) if len(sys.argv) > 5 else 5.0
    for r in range(reps):
        for n in ns:
            print(json.dumps(run(n, src, rate, secs, f"{n}_{r}")), flush=True)
