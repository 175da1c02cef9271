"""Giant mixed WebSocket messages on `tether jmux ws-listen://` (max_pending_events
pause + 64 KiB PIPE_SLICE). A raw WS pipe peer keeps one live echo channel and
a reader thread (answers always read). Cases, each followed by an echo on the
live channel (stall check) and RSS/CPU:
 mix   : one M MiB binary message repeating [OPEN new id -> target outside --allow (refused
         by the guest), OPEN new id -> live echo (opens; peer CLOSEs later), CLOSE unknown id x8]
 pingmid: a 4 MiB binary message (unknown-id CLOSEs) split into 64 KiB fragments with
         P pings (125 B) between each fragment, pongs not read until the end
 dataeach: a message of N DATA messages for the live channel (within its window) -> all echoed?
 text  : a text frame mid-stream (session error expected: clean close, not a crash)
Usage: timeout 240 nice -n 19 python3 jmux_ws_pipe_mixed.py [M_mib]
"""
import sys, socket, struct, time, subprocess, os, base64, threading
sys.path.insert(0, "/work/rt5")
from rt import TETHER, status, kill, drain_output, frame
from jm import OPEN, DATA, CLOSE, free_port, target
M = int(sys.argv[1]) if len(sys.argv) > 1 else 16
echo = target("echo")
port = free_port()
p = subprocess.Popen([TETHER, "jmux", f"ws-listen://127.0.0.1:{port}", "--allow", "127.0.0.1:*"],
                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
for _ in range(100):
    if any(b"pipe listening" in l for l in out): break
    time.sleep(0.1)
s = socket.create_connection(("127.0.0.1", port)); s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
key = base64.b64encode(os.urandom(16)).decode()
s.sendall((f"GET / HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
           f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
buf = b""
while b"\r\n\r\n" not in buf: buf += s.recv(4096)
head, buf = buf.split(b"\r\n\r\n", 1); assert b" 101 " in head
lock = threading.Condition(); msgs = []; stats = {"pong": 0, "close": None, "eof": False, "bytes": 0}
paused = threading.Event()
def reader():
    global buf
    jb = b""
    while True:
        if paused.is_set(): time.sleep(0.05); continue
        try: c = s.recv(1 << 20)
        except OSError: c = b""
        if not c:
            with lock: stats["eof"] = True; lock.notify_all()
            return
        buf += c; stats["bytes"] += len(c)
        while len(buf) >= 2:
            b0, b1 = buf[0], buf[1]; n = b1 & 0x7f; off = 2
            if n == 126:
                if len(buf) < 4: break
                n = struct.unpack("!H", buf[2:4])[0]; off = 4
            elif n == 127:
                if len(buf) < 10: break
                n = struct.unpack("!Q", buf[2:10])[0]; off = 10
            if len(buf) < off + n: break
            op, pl = b0 & 0xf, buf[off:off + n]; buf = buf[off + n:]
            if op in (0, 2): jb += pl
            elif op == 10: stats["pong"] += 1
            elif op == 8:
                with lock: stats["close"] = (pl[:2].hex(), pl[2:80]); lock.notify_all()
        while len(jb) >= 4:
            t, n, _ = struct.unpack("!BHB", jb[:4])
            if len(jb) < n: break
            with lock: msgs.append((t, jb[4:n], time.time())); lock.notify_all()
            jb = jb[n:]
threading.Thread(target=reader, daemon=True).start()
def send(j): s.sendall(frame(2, j))
def wait(pred, limit=30):
    t0 = time.time()
    with lock:
        while time.time() - t0 < limit:
            for m in msgs:
                if pred(m): return m
            if stats["eof"]: return None
            lock.wait(0.2)
    return None
send(OPEN(0, f"tcp://127.0.0.1:{echo}"))
m = wait(lambda m: m[0] == 101 and struct.unpack("!I", m[1][:4])[0] == 0)
gid = struct.unpack("!I", m[1][4:8])[0]
tag = [0]
def echo_rt(limit=60):
    tag[0] += 1; t = f"E{tag[0]:06d}".encode() * 4
    with lock: msgs.clear()
    t0 = time.time(); send(DATA(gid, t))
    # echo may come back in pieces; accept first DATA containing the start of the tag
    r = wait(lambda m: m[0] == 104 and t[:7] in m[1], limit)
    return (time.time() - t0) if r else None
def rts(n=200):
    xs = [echo_rt() for _ in range(n)]; xs = sorted(x * 1e6 for x in xs if x is not None)
    return xs[len(xs)//2], xs[int(len(xs)*.99)], n - len(xs)
def line(label, extra=""):
    st = status(p.pid)
    print(f"{label:40s} rss {st['rss_mib']} MiB hwm {st['hwm_mib']} MiB cpu {st['cpu_s']:.2f}s fds {st['fds']} thr {st['threads']} log {len(out)} {extra}", flush=True)
p50, p99, lost = rts(); line("baseline", f"RT p50 {p50:.0f} us p99 {p99:.0f} us")
def bigmsg(blob, label):
    c0 = status(p.pid)["cpu_s"]; t0 = time.time()
    s.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, len(blob)) + b"\0\0\0\0"); s.sendall(blob)
    ts = time.time() - t0
    e = echo_rt(120)
    line(label, f"sent {ts:.2f}s; echo behind it after {'NONE' if e is None else f'{time.time()-t0:.2f}s'}; cpu {status(p.pid)['cpu_s']-c0:.2f}s")
# mix: refused OPENs + accepted OPENs (limit to ~900 so we stay under max-channels) + unknown CLOSEs
nid = [100]
def mixunit(k):
    parts = []
    parts.append(OPEN(nid[0], "tcp://10.1.2.3:9")); nid[0] += 1        # outside --allow: refused
    if k < 900: parts.append(OPEN(nid[0], f"tcp://127.0.0.1:{echo}")); nid[0] += 1
    parts += [CLOSE(0x7fff0000)] * 8
    return b"".join(parts)
unit_n = (M << 20) // (35 + 64)
blob = b"".join(mixunit(k) for k in range(unit_n))
bigmsg(blob, f"mix {len(blob)>>20} MiB ({unit_n} refused OPENs, 900 ok)")
time.sleep(1)
with lock:
    ok = [m for m in msgs if m[0] == 101]; fail = [m for m in msgs if m[0] == 102]
print(f"   answers so far: {len(ok)} SUCCESS, {len(fail)} FAILURE", flush=True)
import collections
okset = set(range(101, 101 + 2 * 900, 2))
why = collections.Counter(m[1][8:70].decode(errors="replace") for m in fail if struct.unpack("!I", m[1][:4])[0] in okset)
print("   FAILURE reasons for the OPENs to the live echo target:", dict(why), flush=True)
if os.environ.get("MIXONLY"): kill(p); sys.exit(0)
# close the 900 opened channels
with lock: okids = [struct.unpack("!I", m[1][4:8])[0] for m in msgs if m[0] == 101 and struct.unpack("!I", m[1][:4])[0] != 0]
send(b"".join(CLOSE(i) for i in okids))
time.sleep(1)
p50, p99, lost = rts(); line("after mix", f"RT p50 {p50:.0f} us p99 {p99:.0f} us lost {lost}")
# paused reader: peer stops reading its answers while sending a mix (control backlog pause), then resumes
paused.set()
blob2 = b"".join(OPEN(200000 + i, "tcp://10.1.2.3:9") for i in range((8 << 20) // 35))
t0 = time.time()
th = threading.Thread(target=lambda: (s.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, len(blob2)) + b"\0\0\0\0"), s.sendall(blob2)), daemon=True); th.start()
th.join(5)
print(f"   8 MiB of refused OPENs, reader paused: sender done after 5 s? {not th.is_alive()}", flush=True)
line("while paused")
paused.clear(); th.join(60)
e = echo_rt(120); line("resumed reading", f"sender done {not th.is_alive()} at {time.time()-t0:.1f}s; echo {'NONE' if e is None else f'{e:.2f}s'}")
# DATA messages for the live channel inside one big message (64 KiB window-safe: 4000 x 100 B = 400 KB < 1 MiB)
with lock: msgs.clear()
blob3 = b"".join(DATA(gid, b"d" * 100) for _ in range(4000))
c0 = time.time(); s.sendall(struct.pack("!BBQ", 0x82, 0x80 | 127, len(blob3)) + b"\0\0\0\0" + blob3)
def total():
    with lock: return sum(len(m[1]) - 4 for m in msgs if m[0] == 104)
while total() < 400000 and time.time() - c0 < 30: time.sleep(0.1)
line("4000 DATA in one message", f"echoed {total()} of 400000 B in {time.time()-c0:.2f}s")
# ping flood mid-message
P = int(os.environ.get("PINGS", "200"))
frag = CLOSE(0x7fff0000) * 8192  # 64 KiB
parts = []
for i in range(64):
    parts.append(frame(2 if i == 0 else 0, frag, fin=(i == 63)))
    parts += [frame(9, b"p" * 125)] * P
t0 = time.time(); pong0 = stats["pong"]
s.sendall(b"".join(parts))
e = echo_rt(120)
time.sleep(1)
line(f"4 MiB in 64 frags + {P} pings between each", f"echo {'NONE' if e is None else f'{time.time()-t0:.2f}s'} pongs {stats['pong']-pong0}/{64*P}")
# close frame mid-fragmented message
s.sendall(frame(2, CLOSE(0x7fff0000), fin=False) + frame(8, struct.pack("!H", 1000) + b"bye"))
time.sleep(2)
print("close mid-message: host close frame", stats["close"], "eof", stats["eof"], "tether alive", p.poll() is None, flush=True)
print("log:", [l.decode(errors="replace").strip()[:140] for l in out[-8:]], f"({len(out)} lines)")
kill(p)
