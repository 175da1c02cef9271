"""Control for jmux_ws_pipe_abuse.py: the same M MiB of 8-byte JMUX CLOSEs for
unknown ids, sent over a `tcp-listen://` pipe (read 64 KiB at a time, 512 KiB a turn).
Usage: timeout 120 nice -n 19 python3 jmux_tcp_pipe_same_bytes.py [M_mib] [count]"""
import sys, struct, time
sys.path.insert(0, "/work/rt4")
from rt import status, kill
from jm import start_jmux, OPEN, DATA, CLOSE, Reader, target
M = int(sys.argv[1]) if len(sys.argv) > 1 else 32
N = int(sys.argv[2]) if len(sys.argv) > 2 else 3
echo = target("echo")
p, s, out = start_jmux(["--allow", "127.0.0.1:*"])
r = Reader(s)
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo}")); t, b = r.next(5); gid = struct.unpack("!I", b[4:8])[0]
print("start:", status(p.pid))
for i in range(N):
    blob = CLOSE(0x7fff0000) * (M * (1 << 20) // 8)
    c0 = status(p.pid)["cpu_s"]; t0 = time.time()
    s.sendall(blob); s.sendall(DATA(gid, b"y" * 32))
    while True:
        m = r.next(60)
        if m is None: print("no echo"); break
        if m[0] == 104: break
    st = status(p.pid)
    print(f"tcp pipe, {M} MiB of CLOSEs #{i+1}: echo behind it after {time.time()-t0:.2f} s; CPU {st['cpu_s']-c0:.2f} s; RSS {st['rss_mib']} MiB HWM {st['hwm_mib']} MiB", flush=True)
print("alive:", p.poll() is None)
kill(p)
