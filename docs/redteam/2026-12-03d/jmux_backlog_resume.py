"""Stall check: the pipe peer stops reading, sends B MiB of OPENs the guest refuses
(each answered: max_control_backlog 256 KiB pauses input), reads again after
HOLD s. Records when answers arrive after resuming (gaps), and the live channel's
echo. PIPE=ws (ws-listen://, one binary message) or tcp (tcp-listen://, a byte stream).
Usage: PIPE=ws|tcp timeout 120 nice -n 19 python3 jmux_backlog_resume.py [B_mib] [HOLD_s]
"""
import sys, socket, struct, time, subprocess, os, base64, threading
sys.path.insert(0, "/work/rt5")
from rt import TETHER, status, kill, drain_output, frame
from jm import OPEN, DATA, free_port, target
B = float(sys.argv[1]) if len(sys.argv) > 1 else 8; HOLD = float(sys.argv[2]) if len(sys.argv) > 2 else 5
PIPE = os.environ.get("PIPE", "ws")
echo = target("echo"); port = free_port()
p = subprocess.Popen([TETHER, "jmux", f"{PIPE}-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
for _ in range(100):
    try: s = socket.create_connection(("127.0.0.1", port)); break
    except OSError: time.sleep(0.1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
buf = b""
if PIPE == "ws":
    s.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: "
              + base64.b64encode(os.urandom(16)) + b"\r\nSec-WebSocket-Version: 13\r\n\r\n")
    while b"\r\n\r\n" not in buf: buf += s.recv(4096)
    head, buf = buf.split(b"\r\n\r\n", 1); assert b" 101 " in head
    wrap = lambda j: frame(2, j)
else:
    wrap = lambda j: j
paused = threading.Event(); arrivals = []; lock = threading.Lock(); echoes = []
def reader():
    global buf
    jb = b""
    while True:
        if paused.is_set(): time.sleep(0.01); continue
        try: c = s.recv(1 << 20)
        except OSError: return
        if not c: return
        if PIPE == "ws":
            buf += c
            while len(buf) >= 2:
                n = buf[1] & 0x7f; off = 2
                if n == 126:
                    if len(buf) < 4: break
                    n = struct.unpack("!H", buf[2:4])[0]; off = 4
                elif n == 127:
                    if len(buf) < 10: break
                    n = struct.unpack("!Q", buf[2:10])[0]; off = 10
                if len(buf) < off + n: break
                if buf[0] & 0xf in (0, 2): jb += buf[off:off + n]
                buf = buf[off + n:]
        else: jb += c
        now = time.time()
        while len(jb) >= 4:
            t, n, _ = struct.unpack("!BHB", jb[:4])
            if len(jb) < n: break
            with lock:
                if t == 102: arrivals.append(now)
                elif t in (101, 104): echoes.append((t, jb[4:n], now))
            jb = jb[n:]
threading.Thread(target=reader, daemon=True).start()
s.sendall(wrap(OPEN(0, f"tcp://127.0.0.1:{echo}")))
while not echoes: time.sleep(0.01)
gid = struct.unpack("!I", echoes[0][1][4:8])[0]
def echo_rt():
    n0 = len(echoes); t0 = time.time(); s.sendall(wrap(DATA(gid, b"z" * 32)))
    while len(echoes) == n0 and time.time() - t0 < 60: time.sleep(0.002)
    return time.time() - t0 if len(echoes) > n0 else None
print("baseline echo", round(echo_rt() * 1e3, 2), "ms", status(p.pid), flush=True)
N = int(B * (1 << 20)) // 35
blob = b"".join(OPEN(10 + i, "tcp://10.1.2.3:9") for i in range(N))
paused.set()
tsend = time.time()
snd = threading.Thread(target=lambda: s.sendall(wrap(blob)), daemon=True); snd.start()
time.sleep(HOLD)
print(f"paused {HOLD}s: answers {len(arrivals)} of {N}", status(p.pid), flush=True)
c0 = status(p.pid)["cpu_s"]; tres = time.time(); paused.clear()
snd.join(60); print(f'sender finished {time.time()-tres:.2f}s after resume', flush=True)
e = echo_rt()
while len(arrivals) < N and time.time() - tres < 60: time.sleep(0.05)
with lock: a = sorted(x for x in arrivals if x >= tres)
gaps = sorted(((a[i+1] - a[i]), a[i] - tres) for i in range(len(a) - 1))[-3:]
print(f"after resume: echo {e if e is None else round(e, 3)} s; all {len(arrivals)}/{N} answers by {a[-1]-tres if a else 0:.2f} s; "
      f"largest gaps between answers (gap s, at s): {[(round(g,2), round(t,2)) for g,t in gaps]}; tether alive {p.poll() is None}", flush=True)
print("final", status(p.pid) if p.poll() is None else f"EXITED {p.poll()}", "log lines", len(out)); print(b"".join(out[-5:]).decode(errors="replace"))
kill(p)
