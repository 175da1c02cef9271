"""Head-of-line blocking of JMUX OPENs behind MAX_CONNECTS_IN_FLIGHT (64) and
behind max_dns_lookups_per_guest (16).

A raw JMUX peer on `tether jmux tcp-listen://` (standing in for any client of
a socks5-listen:// / http-listen:// / tcp-listen:// forward on the far side:
every client's OPEN goes through the one pipe) sends N "attack" OPENs, then
one legitimate OPEN to a live echo target, and times that OPEN's answer.

MODE syn: attack OPENs go to a loopback listener whose accept queue is full
          (SYNs dropped: each connect hangs until the 10 s connect timeout).
MODE dns: attack OPENs go to distinct names behind a resolver that never
          answers (tether jmux runs in a private mount namespace whose
          /etc/resolv.conf names 127.0.0.1:53, a UDP socket that never answers;
          needs root). The legit OPEN is to `localhost` (answered from
          /etc/hosts, no DNS) and to 127.0.0.1 (no lookup at all).

Usage: timeout 200 nice -n 19 python3 jmux_connect_hol.py syn|dns N...
"""
import sys, socket, struct, time, subprocess, threading
sys.path.insert(0, "/work/rt4")
from rt import TETHER, status, kill, drain_output
from jm import OPEN, CLOSE, Reader, free_port, target

MODE = sys.argv[1]
Ns = [int(a) for a in sys.argv[2:]] or [0, 64, 192]

echo = target("echo")
bh = socket.socket(); bh.bind(("127.0.0.1", 0)); bh.listen(0); bh_port = bh.getsockname()[1]
fill = socket.create_connection(("127.0.0.1", bh_port))

port = free_port()
if MODE == "dns":
    open("/work/rt4/resolv.blackhole.conf", "w").write("nameserver 127.0.0.1\noptions timeout:5 attempts:2\n")
    dns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); dns.bind(("127.0.0.1", 53))
    q = [0]
    def sink():
        while True:
            dns.recvfrom(4096); q[0] += 1
    threading.Thread(target=sink, daemon=True).start()
    cmd = (f"mount --bind /work/rt4/resolv.blackhole.conf /etc/resolv.conf && "
           f"exec {TETHER} jmux tcp-listen://127.0.0.1:{port} --allow-all")
    p = subprocess.Popen(["unshare", "-m", "--propagation", "private", "sh", "-c", cmd],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
else:
    p = subprocess.Popen([TETHER, "jmux", f"tcp-listen://127.0.0.1:{port}", "--allow-all"],
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
out = drain_output(p)
for _ in range(100):
    try:
        s = socket.create_connection(("127.0.0.1", port)); break
    except OSError:
        time.sleep(0.1)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
r = Reader(s)
answers = {}
lock = threading.Condition()
def reader():
    while True:
        m = r.next(300)
        if m is None: return
        t, b = m
        if t in (101, 102):
            cid = struct.unpack("!I", b[:4])[0]
            with lock:
                answers[cid] = (t, time.time(), b[8:].decode(errors="replace")[:70] if t == 102 else "")
                lock.notify_all()
threading.Thread(target=reader, daemon=True).start()

def wait_answer(cid, t0, limit=90):
    with lock:
        while cid not in answers and time.time() - t0 < limit:
            lock.wait(0.5)
        if cid not in answers:
            return f"no answer in {limit} s"
        t, at, why = answers[cid]
    return f"{'SUCCESS' if t == 101 else 'FAILURE ' + why} after {at - t0:.2f} s"

nid = 1000
legit = 1
for n in Ns:
    if n:
        if MODE == "syn":
            s.sendall(b"".join(OPEN(nid + i, f"tcp://127.0.0.1:{bh_port}") for i in range(n)))
        else:
            s.sendall(b"".join(OPEN(nid + i, f"tcp://n{nid + i}.blackhole.test:80") for i in range(n)))
        nid += n
        time.sleep(0.3)
    res = []
    t0 = time.time()
    if MODE == "dns":
        s.sendall(OPEN(legit, f"tcp://localhost:{echo}")); a = legit; legit += 1
        s.sendall(OPEN(legit, f"tcp://127.0.0.1:{echo}")); b = legit; legit += 1
        res.append(("localhost", wait_answer(a, t0)))
        res.append(("127.0.0.1", wait_answer(b, t0)))
    else:
        s.sendall(OPEN(legit, f"tcp://127.0.0.1:{echo}")); a = legit; legit += 1
        res.append(("127.0.0.1", wait_answer(a, t0)))
    st = status(p.pid if MODE == "syn" else int(open(f"/proc/{p.pid}/task/{p.pid}/children").read().split()[0]) if False else p.pid)
    print(f"attack OPENs queued before it: {n:5d}; legit OPEN " + "; ".join(f"{k}: {v}" for k, v in res), flush=True)
    # let the attack drain before the next size
    with lock:
        pend = [c for c in range(nid - n, nid) if c not in answers]
    t1 = time.time()
    while pend and time.time() - t1 < 120:
        time.sleep(1)
        with lock:
            pend = [c for c in pend if c not in answers]
    print(f"   attack OPENs all answered {time.time() - t0:.1f} s after the legit OPEN was sent ({len(pend)} left)", flush=True)
kill(p)
