"""JMUX guest at and past --max-channels (default 1024), hostile pipe peer.

One `tether jmux tcp-listen://PIPE tcp-listen://L/127.0.0.1:ECHO socks5-listen://S --allow 127.0.0.1:*`.
We are the raw JMUX peer on PIPE. Channel 0 goes to an echo target (the live channel).
Then we fill the other 1,023 places with channels of kind KIND:
  hold     target accepts, reads and discards, never sends, never closes (even on FIN)
  silent   target accepts and never reads, never closes (SO_RCVBUF small)
  pending  target's accept queue is full (connects hang until connect_timeout, 10 s)
  source   target streams without end; we grant a 4 KiB window and never WINDOW_ADJUST
  sink     target never reads; we fill the window the guest grants with DATA
  echo     target echoes and closes on EOF (control)
Then: 1 live round-trip series (1 open vs 1024 open), OPENs past the limit,
local clients on L and S while at the limit, CLOSE/re-OPEN churn, recovery after CLOSE-all.

Usage: timeout 300 nice -n 19 python3 jmux_limit.py KIND [N_FILL]
"""
import sys, os, socket, struct, time, threading, resource, select
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rt import status, kill, drain_output, TETHER
from jm import OPEN, WADJ, DATA, EOF, CLOSE, free_port, msg, jmux_argv, HOSTK
import subprocess

resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
KIND = sys.argv[1] if len(sys.argv) > 1 else "hold"
NFILL = int(sys.argv[2]) if len(sys.argv) > 2 else 1023

# ---------- targets
def listener(backlog=4096):
    ls = socket.socket(); ls.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    ls.bind(("127.0.0.1", 0)); ls.listen(backlog); return ls

held = []
def target(kind):
    if kind == "pending":
        ls = listener(0)
        f = socket.create_connection(("127.0.0.1", ls.getsockname()[1])); held.append(f)
        held.append(ls)
        return ls.getsockname()[1]
    ls = listener()
    if kind == "silent":
        ls.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    counts = {"accepted": 0, "eof": 0}
    def serve(c):
        try:
            if kind == "echo":
                while True:
                    d = c.recv(65536)
                    if not d: break
                    c.sendall(d)
                counts["eof"] += 1
                c.close()
            elif kind == "hold":
                while True:
                    d = c.recv(65536)
                    if not d: break
                counts["eof"] += 1
                held.append(c)  # saw FIN, keep it open for ever
                time.sleep(3600)
            elif kind == "source":
                blob = b"s" * 65536
                while True: c.sendall(blob)
            else:  # silent, sink
                held.append(c); time.sleep(3600)
        except OSError:
            pass
    def acc():
        while True:
            c, _ = ls.accept(); counts["accepted"] += 1
            threading.Thread(target=serve, args=(c,), daemon=True).start()
    threading.Thread(target=acc, daemon=True).start()
    held.append(ls)
    return ls.getsockname()[1], counts

echo_port, echo_counts = target("echo")
if KIND == "pending":
    fill_port, fill_counts = target("pending"), {"accepted": 0, "eof": 0}
elif KIND == "sink":
    fill_port, fill_counts = target("silent")
else:
    fill_port, fill_counts = target(KIND)

# ---------- the jmux process
pipe_port, l_port, s_port = free_port(), free_port(), free_port()
args = jmux_argv(f"tcp-listen://127.0.0.1:{pipe_port}", f"tcp-listen://127.0.0.1:{l_port}/127.0.0.1:{echo_port}",
        f"socks5-listen://127.0.0.1:{s_port}", "--allow", "127.0.0.1:*")
def pre(): resource.setrlimit(resource.RLIMIT_NOFILE, (20000, 20000))
p = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=pre)
out = drain_output(p)
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", pipe_port), timeout=1); break
    except OSError:
        time.sleep(0.1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

# ---------- peer state
buf = b""
ours = {}        # our sender id -> guest id (after OPEN SUCCESS)
fails = {}       # our sender id -> (reason, text, t)
opened_at = {}   # our sender id -> t
sent_at = {}
data_in = {}     # guest channel id -> bytes
closed_by_guest = set()
guest_opens = [] # (guest sender id, url, t)
other = {}
echo_bytes = [0]
GUEST_OPEN_POLICY = ["success"]
guest_chan_of_local = {}
local_of_mine = {}

def handle(t, body):
    now = time.perf_counter()
    if t == 101:
        rid, sid = struct.unpack("!II", body[:8]); ours[rid] = sid; opened_at[rid] = now
    elif t == 102:
        rid, reason = struct.unpack("!II", body[:8]); fails[rid] = (reason, body[8:].decode(errors="replace"), now)
    elif t == 104:
        rid = struct.unpack("!I", body[:4])[0]; data_in[rid] = data_in.get(rid, 0) + len(body) - 4
        if rid in local_of_mine:
            s.sendall(DATA(local_of_mine[rid], body[4:]))
    elif t == 106:
        rid = struct.unpack("!I", body[:4])[0]; closed_by_guest.add(rid)
        if rid in local_of_mine:
            s.sendall(CLOSE(local_of_mine.pop(rid)))
    elif t == 105:
        rid = struct.unpack("!I", body[:4])[0]
        if rid in local_of_mine:
            s.sendall(EOF(local_of_mine[rid]))
    elif t == 100:
        sid, win, mp = struct.unpack("!IIH", body[:10]); url = body[10:].decode(errors="replace")
        guest_opens.append((sid, url, now))
        if GUEST_OPEN_POLICY[0] == "success":
            myid = 900000 + len(guest_opens)
            s.sendall(msg(101, struct.pack("!IIIH", sid, myid, 1 << 20, 4096)))
            guest_chan_of_local[sid] = myid; local_of_mine[myid] = sid
        else:
            s.sendall(msg(102, struct.pack("!II", sid, 1) + b"peer refuses"))
    else:
        other[t] = other.get(t, 0) + 1

def rready(socks, timeout):
    P = select.poll()
    m = {}
    for x in socks:
        P.register(x, select.POLLIN | select.POLLHUP | select.POLLERR); m[x.fileno()] = x
    return [m[fd] for fd, _ in P.poll(timeout * 1000)]

def pump(timeout):
    """Read and dispatch what is available within timeout. Returns #messages."""
    global buf
    s.settimeout(timeout); n = 0
    try:
        c = s.recv(1 << 20)
    except (socket.timeout, BlockingIOError):
        s.settimeout(30)
        return 0
    s.settimeout(30)
    if not c:
        raise RuntimeError("pipe closed by guest")
    buf += c
    while len(buf) >= 4:
        t, L, _ = struct.unpack("!BHB", buf[:4])
        if len(buf) < L: break
        body, buf = buf[4:L], buf[L:]
        handle(t, body); n += 1
    return n

def wait(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        if pred(): return True
        pump(0.05)
    return pred()

def rtts(gid, n):
    xs = []
    pl = b"x" * 32
    for _ in range(n):
        want = data_in.get(gid, 0) + 32
        t0 = time.perf_counter()
        s.sendall(DATA(gid, pl))
        while data_in.get(gid, 0) < want:
            if not pump(5) and data_in.get(gid, 0) < want and time.perf_counter() - t0 > 5:
                raise RuntimeError("no echo")
        xs.append((time.perf_counter() - t0) * 1e6)
    # keep the guest's credit towards us topped up
    s.sendall(WADJ(gid, n * 32))
    xs.sort()
    return xs[len(xs) // 2], xs[int(len(xs) * .99)]

def measure(label, gid, n=1000):
    st0 = status(p.pid); c0 = st0["cpu_s"]; t0 = time.time()
    time.sleep(2); pump(0.01)
    idle = (status(p.pid)["cpu_s"] - c0) / (time.time() - t0) * 100
    c0 = status(p.pid)["cpu_s"]
    p50, p99 = rtts(gid, n)
    cpu = (status(p.pid)["cpu_s"] - c0) / n * 1e6
    st = status(p.pid)
    print(f"[{label}] live RT p50 {p50:.0f} us p99 {p99:.0f} us, CPU/RT {cpu:.0f} us, idle CPU {idle:.1f}%, rss {st['rss_mib']} MiB fds {st['fds']} thr {st['threads']}", flush=True)
    return p50, cpu

def local_client_tcp():
    """A client of listener L: time until it sees an echo or a close."""
    t0 = time.perf_counter()
    c = socket.create_connection(("127.0.0.1", l_port), timeout=5)
    c.sendall(b"hello")
    got = b""; res = None
    end = time.time() + 5
    while time.time() < end:
        rl = rready([c, s], 0.1)
        if s in rl: pump(0)
        if c not in rl: continue
        try:
            d = c.recv(100)
            if not d: res = "closed"; break
            got += d
            if got == b"hello": res = "echoed"; break
        except socket.timeout:
            continue
        except ConnectionResetError:
            res = "reset"; break
    dt = (time.perf_counter() - t0) * 1000
    c.close()
    return res or f"no answer after 5 s (guest OPENs seen {len(guest_opens)})", dt

def local_client_socks():
    t0 = time.perf_counter()
    c = socket.create_connection(("127.0.0.1", s_port), timeout=5)
    c.sendall(b"\x05\x01\x00")
    got = b""; sent_req = False; res = None
    end = time.time() + 5
    while time.time() < end:
        rl = rready([c, s], 0.1)
        if s in rl: pump(0)
        if c not in rl: continue
        try:
            d = c.recv(100)
            if not d: res = f"closed after {got.hex()}"; break
            got += d
            if len(got) >= 2 and not sent_req:
                c.sendall(b"\x05\x01\x00\x01" + socket.inet_aton("127.0.0.1") + struct.pack("!H", echo_port)); sent_req = True
            if len(got) >= 12:
                res = f"reply {got[2:4].hex()} (rep={got[3]})"; break
        except socket.timeout:
            continue
        except ConnectionResetError:
            res = "reset"; break
    dt = (time.perf_counter() - t0) * 1000
    c.close()
    return res or f"no answer after 5 s ({got.hex()})", dt

print(f"# KIND={KIND} fill={NFILL} tether={TETHER}", flush=True)
print("start", status(p.pid), flush=True)
s.sendall(OPEN(0, f"tcp://127.0.0.1:{echo_port}"))
assert wait(lambda: 0 in ours, 5), fails
gid = ours[0]
rtts(gid, 200)
measure("1 open", gid)
r = local_client_tcp(); print(f"local TCP client on L, 1 open: {r[0]} in {r[1]:.1f} ms", flush=True)
r = local_client_socks(); print(f"local SOCKS5 client, 1 open: {r[0]} in {r[1]:.1f} ms", flush=True)
wait(lambda: False, 0.5)

# fill
win = 4096 if KIND == "source" else 1 << 20
t0 = time.perf_counter()
ids = list(range(1, NFILL + 1))
s.sendall(b"".join(OPEN(i, f"tcp://127.0.0.1:{fill_port}", window=win) for i in ids))
ok = wait(lambda: all(i in ours or i in fails for i in ids), 20 if KIND != "pending" else 3)
dt = time.perf_counter() - t0
print(f"fill: {sum(i in ours for i in ids)} opened, {sum(i in fails for i in ids)} refused, {sum(i not in ours and i not in fails for i in ids)} unanswered, in {dt:.2f} s; target accepted {fill_counts['accepted']}", flush=True)
if KIND == "sink":
    # fill every window the guest granted us (1 MiB each until the 64 MiB budget, then >= 8 KiB)
    chunk = b"z" * 4000
    sent = 0
    for i in ids:
        if i in ours:
            frames = [DATA(ours[i], chunk) for _ in range(2)]  # 8 KB per channel at least
            s.sendall(b"".join(frames)); sent += 8000
    # then push more on the first 60 channels (their 1 MiB windows)
    for i in ids[:60]:
        if i in ours:
            s.sendall(b"".join(DATA(ours[i], chunk) for _ in range(250))); sent += 1_000_000
    print(f"sink: sent {sent/1e6:.1f} MB of DATA", flush=True)
    wait(lambda: False, 2)
print("at limit", status(p.pid), flush=True)
measure(f"{1+NFILL} open ({KIND})", gid)

# past the limit
M = 300
base = 100000
t0 = time.perf_counter()
s.sendall(b"".join(OPEN(base + i, f"tcp://127.0.0.1:{echo_port}") for i in range(M)))
wait(lambda: all((base + i) in ours or (base + i) in fails for i in range(M)), 10)
ans = [fails[base + i][2] - t0 for i in range(M) if (base + i) in fails]
reasons = {}
for i in range(M):
    if (base + i) in fails:
        k = (fails[base + i][0], fails[base + i][1]); reasons[k] = reasons.get(k, 0) + 1
print(f"past limit: {M} OPENs -> {len(ans)} OPEN FAILURE, {sum((base+i) in ours for i in range(M))} OPEN SUCCESS, "
      f"last answer after {max(ans)*1000 if ans else -1:.1f} ms; reasons {reasons}", flush=True)
r = local_client_tcp(); print(f"local TCP client on L, at limit: {r[0]} in {r[1]:.1f} ms", flush=True)
r = local_client_socks(); print(f"local SOCKS5 client, at limit: {r[0]} in {r[1]:.1f} ms", flush=True)
# past-limit flood while measuring live RT
st0 = status(p.pid)
flood = b"".join(OPEN(base + M + i, f"tcp://127.0.0.1:{echo_port}") for i in range(5000))
c0 = status(p.pid)["cpu_s"]; t0 = time.perf_counter()
s.sendall(flood)
wait(lambda: sum(1 for i in range(5000) if (base + M + i) in fails) >= 5000, 20)
dt = time.perf_counter() - t0
print(f"past limit flood: 5000 OPENs answered {sum(1 for i in range(5000) if (base+M+i) in fails)} in {dt:.2f} s, guest CPU {status(p.pid)['cpu_s']-c0:.2f} s", flush=True)
measure("at limit after flood", gid, 500)

# churn: CLOSE one fill channel, re-OPEN the same sender id, repeat
if KIND not in ("pending",):
    acc = 0; ref = 0; t0 = time.perf_counter()
    fails_before = dict(fails)
    for k in range(200):
        i = ids[k % len(ids)]
        if i not in ours: continue
        g = ours.pop(i); fails.pop(i, None); closed_by_guest.discard(i)
        s.sendall(CLOSE(g))
        wait(lambda: i in closed_by_guest, 2)
        s.sendall(OPEN(i, f"tcp://127.0.0.1:{fill_port}", window=win))
        wait(lambda: i in ours or i in fails, 3)
        if i in ours: acc += 1
        elif i in fails: ref += 1
    print(f"churn CLOSE+re-OPEN same id x200: {acc} re-opened, {ref} refused ({set(v[1] for k, v in fails.items() if k in ids)}), {time.perf_counter()-t0:.2f} s", flush=True)

# recovery: CLOSE every channel but the live one, then try new OPENs to echo
for i in ids:
    if i in ours:
        s.sendall(CLOSE(ours[i]))
t_close = time.perf_counter()
wait(lambda: False, 1)
for after in (1, 5, 12):
    while time.perf_counter() - t_close < after:
        pump(0.1)
    b2 = 200000 + after * 1000
    s.sendall(b"".join(OPEN(b2 + i, f"tcp://127.0.0.1:{echo_port}") for i in range(100)))
    wait(lambda: all((b2 + i) in ours or (b2 + i) in fails for i in range(100)), 5)
    n_ok = sum((b2 + i) in ours for i in range(100))
    print(f"recovery {after:>2} s after CLOSE-all: 100 new OPENs -> {n_ok} opened; fill target saw EOF on {fill_counts['eof']}; {status(p.pid)}", flush=True)
    for i in range(100):
        if (b2 + i) in ours:
            s.sendall(CLOSE(ours[b2 + i]))
r = local_client_tcp(); print(f"local TCP client on L, after recovery: {r[0]} in {r[1]:.1f} ms", flush=True)
measure("after recovery", gid, 500)
print("alive:", p.poll() is None, "log lines:", len(out))
print("log tail:", b"".join(out[-6:]).decode(errors="replace")[-1500:])
kill(p)
